"""A planner whose cluster is behind: one fire per advance, the rest summarised (pure), and
the pacing that decides when it is behind and how many tasks it advances."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from easyjob.core.pacing import MIN_MISSES, QUIET, Fates, Pace
from easyjob.core.planner import plan_behind
from easyjob.core.states import Misfire, RunStatus
from tests.unit.test_planner import EVERY_SECOND, T0, statuses, task

HALF = timedelta(milliseconds=500)


def _s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def test_a_late_task_writes_its_latest_due_fire_carrying_the_gap() -> None:
    """The fires passed over are recorded on the fire's own row (``missed_from``,
    ``missed_count``): one row per advance, not a summary row beside it."""
    now = T0 + _s(10.2)  # fires T0..T0+10 due; T0+11 is 0.8 s away
    advance, more = plan_behind(task(T0), EVERY_SECOND, now, HALF)
    (fire,) = advance.fires
    assert statuses(advance.fires) == ["P"] and not more
    assert (fire.fire_time, fire.missed_from, fire.missed_count) == (T0 + _s(10), T0, 10)
    assert fire.last_fire_time is None
    assert fire.gap == (T0, 10)
    assert fire.error_msg is not None and "missed 10 fires" in fire.error_msg
    assert advance.next_start_time == T0 + _s(11)


def test_a_due_fire_whose_successor_comes_within_the_margin_gives_way_to_it() -> None:
    now = T0 + _s(10.7)  # the latest due fire (T0+10) has 0.3 s left before T0+11 is due
    advance, _ = plan_behind(task(T0), EVERY_SECOND, now, HALF)
    (fire,) = advance.fires
    assert (fire.status, fire.fire_time) == (RunStatus.PENDING, T0 + _s(11))
    assert (fire.missed_from, fire.missed_count) == (T0, 11)
    assert fire.error_msg is not None and "not started before a later fire" in fire.error_msg
    assert advance.next_start_time == T0 + _s(12)


def test_a_sharded_task_keeps_a_summary_row_beside_its_fire() -> None:
    """A sharded fire is several rows: the gap stays one summary row of its own."""
    now = T0 + _s(10.2)
    advance, _ = plan_behind(replace(task(T0), shards=3), EVERY_SECOND, now, HALF)
    summary, fire = advance.fires
    assert statuses(advance.fires) == ["M", "P"]
    assert (summary.fire_time, summary.last_fire_time, summary.missed_count) == (
        T0,
        T0 + _s(9),
        10,
    )
    assert fire.missed_from is None and fire.gap is None


def test_a_gap_too_long_to_count_is_carried_uncounted() -> None:
    now = T0 + _s(20_000.2)  # more fires than the cap of 5,000
    advance, _ = plan_behind(task(T0), EVERY_SECOND, now, HALF)
    (fire,) = advance.fires
    assert (fire.fire_time, fire.missed_from, fire.missed_count) == (T0 + _s(20_000), T0, None)
    assert fire.error_msg is not None and "too many to count" in fire.error_msg


def test_an_on_time_task_writes_one_fire_and_nothing_ahead() -> None:
    advance, _ = plan_behind(task(T0 + _s(1)), EVERY_SECOND, T0 + _s(0.7), HALF)
    assert [(f.status, f.fire_time) for f in advance.fires] == [(RunStatus.PENDING, T0 + _s(1))]
    assert advance.next_start_time == T0 + _s(2)


def test_one_due_fire_with_time_left_is_written_as_it_is() -> None:
    advance, _ = plan_behind(task(T0), EVERY_SECOND, T0 + _s(0.2), HALF)
    assert statuses(advance.fires) == ["P"] and advance.fires[0].fire_time == T0


def test_skip_past_its_grace_runs_the_next_fire_only_if_it_comes_within_the_margin() -> None:
    hourly = replace(task(T0, Misfire.SKIP, grace_ms=1000), cron_expr="0 0 * * * *")
    schedule = hourly.schedule
    assert schedule is not None
    advance, _ = plan_behind(hourly, schedule, T0 + _s(5), HALF)  # 5 s late, grace 1 s
    assert statuses(advance.fires) == ["M"]  # the next fire is an hour away
    assert advance.next_start_time == T0 + _s(3600)


def test_catch_up_still_writes_every_late_fire_but_nothing_ahead() -> None:
    advance, _ = plan_behind(task(T0, Misfire.CATCH_UP), EVERY_SECOND, T0 + _s(3.2), HALF)
    assert [f.fire_time for f in advance.fires] == [T0 + _s(i) for i in range(4)]
    assert statuses(advance.fires) == ["P"] * 4


def test_max_runs_still_bounds_the_fires() -> None:
    capped = replace(task(T0), max_runs=3, fire_count=3)
    advance, _ = plan_behind(capped, EVERY_SECOND, T0 + _s(5.2), HALF)
    assert statuses(advance.fires) == ["M"] and advance.next_start_time is None


class _Ledger:
    """A pace told a cluster's running counts of runs missed and run as each round's fates,
    as its planner reads them (the runs ended since the round began); the node's own runs
    are the cluster's here."""

    def __init__(self, pace: Pace) -> None:
        self.pace = pace
        self._missed = self._ran = 0

    def allowance(self, now: datetime, missed: int, ran: int = 0) -> int | None:
        fates = None
        if self.pace.round_start(now) is not None:
            fates = Fates(ran=ran - self._ran, missed=missed - self._missed)
            self._missed, self._ran = missed, ran
        return self.pace.allowance(now, fates, ran)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pace, name)


def _pace() -> Any:
    return _Ledger(Pace(timedelta(seconds=1), batch=200))


def test_a_planner_whose_fires_are_missed_becomes_behind_and_halves_its_rate() -> None:
    pace = _pace()
    assert pace.allowance(T0, 0) is None
    pace.planned(100, held_back=False)  # one poll: 1,000 fires written ahead
    assert pace.allowance(T0 + _s(1), 0) is None
    assert pace.allowance(T0 + _s(2), 600) == 100  # 600 of them missed: behind, at batch/2
    assert pace.behind and pace.episodes == 1
    pace.planned(100, held_back=True)
    assert pace.allowance(T0 + _s(2), 600) == 0  # used up...
    assert pace.allowance(T0 + _s(2.5), 600) == 50  # ...and half a poll refills half
    pace.planned(50, held_back=True)
    pace.allowance(T0 + _s(3), 700)  # 100 more missed in the next poll: loss again, but
    assert pace.rate == 100  # those were written before the cut: one cut per two polls
    pace.allowance(T0 + _s(4), 800)
    assert pace.rate == 50


def test_a_behind_planner_speeds_up_without_loss_and_leaves_once_nothing_is_held_back() -> None:
    pace = _pace()
    pace.planned(100, held_back=False)  # wrote fires ahead
    pace.allowance(T0, 0)
    pace.allowance(T0 + _s(1), 500)
    assert pace.behind
    rates = []
    for i in range(2, 2 + QUIET):  # polls without loss, every due task planned
        pace.planned(10, held_back=False)
        pace.allowance(T0 + _s(i), 500, 1000 * i)  # running 1,000 a poll
        rates.append(pace.rate)
    assert rates == sorted(rates) and rates[0] > 100
    assert not pace.behind


def test_a_planner_becomes_behind_at_what_its_node_ran_before_the_loss_if_more() -> None:
    """A node that ran 225 a poll, then a poll of a stall (the machine paused: its fires
    superseded, 30 runs): it is behind at 225 a poll, not at half the batch (100), which
    left 125 due tasks a poll losing their fires while it could run them."""
    pace = _pace()
    assert pace.allowance(T0, 0, 0) is None
    for i in range(1, 4):
        pace.planned(100, held_back=False)
        assert pace.allowance(T0 + _s(i), 0, 225 * i) is None
    pace.planned(100, held_back=False)
    assert pace.allowance(T0 + _s(4), 900, 3 * 225 + 30) == 225  # the stall: loss
    assert pace.behind and pace.rate == 225


def test_a_behind_planner_advances_an_eighth_of_its_rate_at_least_and_is_told_when() -> None:
    """Its allowance accrues continuously, and a saturated node wakes its planner at every
    eighth of its workers freed: each step advanced the few tasks accrued since the last,
    rounds of about 8 on 4 SQLite nodes x 6,000 tasks, where a round's fixed cost is most of
    a run's. Now a step advances nothing until an eighth of the rate has accrued, and the
    planner is told how long that takes (docs/performance.md)."""
    pace = _pace()
    pace.planned(100, held_back=False)
    assert pace.refill_s() is None  # not behind: no rounds
    pace.allowance(T0, 0)
    assert pace.allowance(T0 + _s(1), 500) == 100  # behind at 100 a poll
    pace.planned(100, held_back=True)
    assert pace.refill_s() == pytest.approx(0.125)  # a round is 12.5, a poll 1 s
    assert pace.allowance(T0 + _s(1.1), 500) == 0  # 10 accrued: not a round yet
    assert pace.refill_s() == pytest.approx(0.025)
    assert pace.allowance(T0 + _s(1.13), 500) == 13
    pace.planned(13, held_back=True)
    assert pace.allowance(T0 + _s(1.13), 500) == 0


def test_a_behind_planner_writes_at_most_twice_what_its_node_runs() -> None:
    pace = _pace()
    pace.planned(100, held_back=False)
    pace.allowance(T0, 0)
    pace.allowance(T0 + _s(1), 500)
    assert pace.rate == 100
    pace.allowance(T0 + _s(2), 500, 20)  # ran 20 in that poll: 2 x 20 + MIN_MISSES
    assert pace.rate == 2 * 20 + MIN_MISSES


def test_a_cut_never_goes_below_what_the_node_ran() -> None:
    """The fires written ahead before a planner was behind are missed for several polls:
    halving on each would leave a node that runs 80 a poll writing a handful."""
    pace = _pace()
    pace.planned(100, held_back=False)
    pace.allowance(T0, 0)
    pace.allowance(T0 + _s(1), 500, 0)  # behind at 100
    pace.allowance(T0 + _s(2), 1000, 80)  # loss, no cut yet (one per two polls)
    pace.allowance(T0 + _s(3), 1500, 160)  # loss: cut to what it ran, not to 50
    assert pace.rate == 80


def test_a_held_back_poll_keeps_a_planner_behind() -> None:
    pace = _pace()
    pace.planned(100, held_back=False)
    pace.allowance(T0, 0)
    pace.allowance(T0 + _s(1), 500)
    for i in range(2, 2 + 3 * QUIET):
        pace.planned(10, held_back=True)
        pace.allowance(T0 + _s(i), 500)
    assert pace.behind


def test_loss_is_the_share_of_the_runs_the_cluster_dealt_with_not_of_what_it_wrote() -> None:
    """Every node's loader misses runs of every planner's fires (its home runs), so a
    planner that wrote few fires is not cut for the cluster's misses while they are a small
    share of what the cluster dealt with; a large share is loss whatever it wrote."""
    pace = _pace()
    pace.allowance(T0, 0, 0)
    pace.planned(5, held_back=False)  # wrote 5 fires; the cluster ran 900 and missed 50
    assert pace.allowance(T0 + _s(1), 50, 900) is None and not pace.behind
    pace.planned(5, held_back=False)  # ran 100 and missed 200: two thirds missed
    # behind, at what the node ran in the poll before (900), more than half the batch
    assert pace.allowance(T0 + _s(2), 250, 1000) == 900 and pace.behind


def test_a_few_misses_a_poll_are_not_loss() -> None:
    """A serial task slower than its period misses a fire each period by itself."""
    pace = _pace()
    for i in range(10):
        pace.planned(1, held_back=False)
        assert pace.allowance(T0 + _s(i), i * (MIN_MISSES - 1)) is None
    assert not pace.behind


def test_a_planner_settles_after_its_first_quiet_polls_and_again_after_being_behind() -> None:
    """Fires are written ahead only once the pace knows the cluster keeps up: QUIET polls
    without loss from the start, or leaving behind (which takes as many)."""
    pace = _pace()
    pace.allowance(T0, 0)
    settled = []
    for i in range(1, QUIET + 1):
        pace.planned(10, held_back=False)
        pace.allowance(T0 + _s(i), 0, 10 * i)
        settled.append(pace.settled)
    assert settled == [False] * (QUIET - 1) + [True]
    pace.planned(0, held_back=False)
    pace.allowance(T0 + _s(QUIET + 1), 600)  # loss: behind, writing nothing ahead
    assert pace.behind and not pace.settled
    for i in range(QUIET + 2, 2 * QUIET + 2):
        pace.planned(10, held_back=False)
        pace.allowance(T0 + _s(i), 600, 1000 * i)
    assert not pace.behind and pace.settled


def test_a_round_closes_a_poll_after_the_last_once_its_fates_are_told() -> None:
    """The planner reads the cluster's fates only when a round closes: a poll after the
    last closed (the first opens at the first step); a round told no fates stays open."""
    pace = Pace(timedelta(seconds=1), batch=200)
    assert pace.round_start(T0) is None
    assert pace.allowance(T0) is None  # opens the first round
    pace.planned(100, held_back=False)
    assert pace.round_start(T0 + _s(0.5)) is None
    assert pace.round_start(T0 + _s(1)) == T0
    pace.allowance(T0 + _s(1), None)  # not read: still open
    assert pace.round_start(T0 + _s(1.2)) == T0
    assert pace.allowance(T0 + _s(1.2), Fates(ran=100, missed=600)) == 100
    assert pace.behind and pace.round_start(T0 + _s(1.5)) is None
    assert pace.round_start(T0 + _s(2.2)) == T0 + _s(1.2)


def test_a_planner_that_writes_nothing_reads_no_fates() -> None:
    """Two rounds after its last write, a planner that is not behind asks for no fates (an
    idle node reads nothing); its rounds close as rounds without loss."""
    pace = Pace(timedelta(seconds=1), batch=200)
    pace.allowance(T0)
    pace.planned(10, held_back=False)
    assert pace.round_start(T0 + _s(1)) == T0  # wrote in this round
    pace.allowance(T0 + _s(1), Fates(ran=10, missed=0))
    assert pace.round_start(T0 + _s(2)) == T0 + _s(1)  # wrote in the round before
    pace.allowance(T0 + _s(2), Fates(ran=10, missed=0))
    for i in range(3, 3 + QUIET):
        assert pace.round_start(T0 + _s(i)) is None
        assert pace.allowance(T0 + _s(i), None) is None
    assert pace.settled
    pace.planned(10, held_back=False)
    assert pace.round_start(T0 + _s(3 + QUIET)) == T0 + _s(2 + QUIET)  # one poll, not more


def test_pacing_refuses_a_bad_poll_or_batch() -> None:
    with pytest.raises(ValueError, match="positive poll and batch"):
        Pace(timedelta(0), 200)
