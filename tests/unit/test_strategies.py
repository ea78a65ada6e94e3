"""Strategies: deterministic ranking over live nodes, no starvation, no whole-batch grabs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from easyjob.core.records import Candidate
from easyjob.core.strategies import (
    ClusterView,
    DefaultStrategy,
    IdHashStrategy,
    LeastCountStrategy,
    ReadScope,
    Share,
    WeightStrategy,
    has_room_to_spare,
    late_for_turn,
    load_strategy,
    needs,
    overdue,
    read_scope,
    steal_delay,
    steal_turn,
)
from easyjob.errors import UnknownStrategyError
from easyjob.node.loader import _spread, _spread_by_priority

T0 = datetime(2030, 1, 1, tzinfo=UTC)
LIVE = ["a", "b", "c"]


def candidates(n: int, tasks: int | None = None) -> list[Candidate]:
    return [
        Candidate(
            id=i,
            task_id=i % (tasks or n),
            version=0,
            fire_time=T0 + timedelta(seconds=i // (tasks or n)),
            due_time=T0,
        )
        for i in range(n)
    ]


def owners(strategy: object, batch: list[Candidate], **view: object) -> dict[int, str]:
    result = {}
    for me in LIVE:
        for c in strategy.select(batch, ClusterView(me=me, live=LIVE, **view)):  # type: ignore[attr-defined]
            assert c.id not in result, "two nodes chose the same run"
            result[c.id] = me
    return result


def test_id_hash_partitions_tasks_and_keeps_them_sticky() -> None:
    batch = candidates(300, tasks=30)
    chosen = owners(IdHashStrategy(), batch)
    assert len(chosen) == 300  # every run has exactly one owner: nothing starves
    per_task = {}
    for c in batch:
        per_task.setdefault(c.task_id, set()).add(chosen[c.id])
    assert all(len(nodes) == 1 for nodes in per_task.values())
    assert set(chosen.values()) == set(LIVE)


def test_id_hash_splits_a_small_catalogue_evenly() -> None:
    """Six tasks over three nodes: two each (a hash of the id split them 2/3/1)."""
    batch = candidates(6, tasks=6)
    assert sorted(Counter(owners(IdHashStrategy(), batch).values()).values()) == [2, 2, 2]
    shards = [replace(c, task_id=7, shard=i) for i, c in enumerate(candidates(3, tasks=3))]
    assert sorted(owners(IdHashStrategy(), shards).values()) == sorted(LIVE)  # one shard each


def test_dead_nodes_hold_no_rank() -> None:
    batch = candidates(60, tasks=60)
    view = ClusterView(me="d", live=LIVE)
    assert IdHashStrategy().select(batch, view) == []
    assert WeightStrategy().select(batch, view) == []
    assert LeastCountStrategy().select(batch, view) == []
    assert len(owners(IdHashStrategy(), batch)) == 60  # the three live nodes cover it all


def test_weight_shares_follow_weights() -> None:
    batch = candidates(6000, tasks=50)
    chosen = owners(WeightStrategy(), batch, weights={"a": 1, "b": 2, "c": 3})
    counts = Counter(chosen.values())
    assert len(chosen) == 6000
    for node, weight in {"a": 1, "b": 2, "c": 3}.items():
        assert abs(counts[node] / 6000 - weight / 6) < 0.03, counts


def test_least_count_deals_a_batch_instead_of_handing_it_over() -> None:
    batch = candidates(9)
    chosen = owners(LeastCountStrategy(), batch, held={"a": 0, "b": 3, "c": 0})
    counts = Counter(chosen.values())
    assert counts == {"a": 4, "b": 1, "c": 4}  # a and c fill up to b's 3, then all share
    assert len(chosen) == 9


def test_default_takes_everything() -> None:
    batch = candidates(5)
    assert DefaultStrategy().select(batch, ClusterView(me="x", live=[])) == batch


@pytest.mark.parametrize(
    ("me", "steal_by", "chosen"),
    [
        ("a", None, [0, 3, 6]),  # no room to spare: home runs only (id mod 3 = rank)
        ("b", None, [1, 4, 7]),
        ("c", None, [2, 5, 8]),
        ("b", T0 - timedelta(milliseconds=1), [1, 4, 7]),  # none late enough to steal
        # room to spare, all late by one steal delay (1 s): its own and those it is the
        # first thief of (b: 0, 5, 6; c: 1, 3, 7; a: 2, 4, 8: each run one node's)
        ("b", T0, [0, 1, 4, 5, 6, 7]),
        ("c", T0, [1, 2, 3, 5, 7, 8]),
        ("a", T0, [0, 2, 3, 4, 6, 8]),
        # late by one and a half steal delays (0.5 s each): the second thief's turn too: any
        ("b", T0 + timedelta(seconds=0.5), list(range(9))),
        ("x", T0, []),  # not a live node: none, even late ones
    ],
)
def test_default_takes_its_home_runs_and_steals_only_late_ones_with_room_to_spare(
    me: str, steal_by: datetime | None, chosen: list[int]
) -> None:
    batch = candidates(9)  # all due at T0
    view = ClusterView(me=me, live=LIVE, now=T0 + timedelta(seconds=1), steal_by=steal_by)
    assert [c.id for c in DefaultStrategy().select(batch, view)] == chosen


@pytest.mark.parametrize("nodes", [2, 3, 4, 5])
def test_each_late_run_has_one_thief_per_turn_and_first_thieves_rotate(nodes: int) -> None:
    for run_id in range(60):
        turns = sorted(steal_turn(run_id, rank, nodes) for rank in range(nodes))
        assert turns == list(range(nodes)), (run_id, turns)  # home 0, then 1 .. nodes - 1
        assert steal_turn(run_id, run_id % nodes, nodes) == 0
    for home in range(nodes):  # one node's runs: its first thieves are the others, evenly
        runs = [r for r in range(home, 60 * nodes, nodes)]
        first = Counter(
            rank for r in runs for rank in range(nodes) if steal_turn(r, rank, nodes) == 1
        )
        assert set(first) == set(range(nodes)) - {home}
        assert set(first.values()) == {len(runs) // (nodes - 1)}


@pytest.mark.parametrize(
    ("turn", "nodes", "late_us"),
    [
        (1, 2, 500_000),  # two nodes: one thief, at the steal delay
        (1, 3, 500_000),
        (2, 3, 750_000),
        (1, 4, 500_000),  # the first of three thieves at the steal delay, the others
        (2, 4, 666_667),  # spread over the next delay
        (3, 4, 833_333),
    ],
)
def test_thieves_take_turns_within_two_steal_delays(turn: int, nodes: int, late_us: int) -> None:
    delay = timedelta(milliseconds=500)
    late = late_for_turn(turn, nodes, delay)
    assert late == timedelta(microseconds=late_us) and late < 2 * delay


def test_default_ranks_home_among_the_nodes_that_declare_the_task() -> None:
    batch = candidates(6, tasks=2)  # task 0: ids 0, 2, 4; task 1: ids 1, 3, 5
    declaring = {0: ["a", "b", "c"], 1: ["b", "c"]}  # "a" lacks task 1's code
    picked = {
        me: [
            c.id
            for c in DefaultStrategy().select(
                batch,
                ClusterView(
                    me=me,
                    live=LIVE,
                    now=T0,
                    declaring=lambda c: declaring[c.task_id],
                    uniform=False,
                ),
            )
        ]
        for me in LIVE
    }
    # task 0's runs by id mod 3 over a, b, c; task 1's (odd ids) by id mod 2 over b, c:
    # "a" is never dealt a run of task 1
    assert picked == {"a": [0], "b": [4], "c": [1, 2, 3, 5]}


@pytest.mark.parametrize(
    ("me", "live", "uniform", "share"),
    [
        ("b", ["a", "b", "c"], True, Share(3, 1)),
        ("a", ["a", "b"], True, Share(2, 0)),
        ("a", ["a"], True, None),  # alone: every run is its own, no filter
        ("x", ["a", "b"], True, None),  # not live (yet): read everything, take overdue
        ("b", ["a", "b", "c"], False, None),  # catalogs differ: home is per task
    ],
)
def test_default_pushes_its_home_filter_down_only_where_it_is_exact(
    me: str, live: list[str], uniform: bool, share: Share | None
) -> None:
    view = ClusterView(me=me, live=live, now=T0, uniform=uniform)
    assert DefaultStrategy().share(view) == share


@pytest.mark.parametrize("strategy", [DefaultStrategy(), IdHashStrategy()])
def test_a_share_is_exactly_what_its_strategy_takes_of_runs_on_time(strategy: object) -> None:
    """The pending read's SQL filter (the share) hides no run the strategy would take, and
    reads none it would not, while runs are on time (nothing to steal, nothing overdue)."""
    batch = [replace(c, shard=c.id % 2) for c in candidates(40, tasks=7)]
    for me in LIVE:
        view = ClusterView(me=me, live=LIVE, now=T0)
        share = strategy.share(view)  # type: ignore[attr-defined]
        assert share is not None
        taken = strategy.select(batch, view)  # type: ignore[attr-defined]
        assert [c for c in batch if share.holds(c)] == taken


def test_a_share_holds_the_home_runs_of_one_rank() -> None:
    batch = candidates(12, tasks=4)  # task i % 4, run ids 0-11
    assert [c.id for c in batch if Share(4, 1).holds(c)] == [1, 5, 9]  # by run id
    sharded = [replace(c, task_id=5, shard=c.id % 3) for c in batch[:3]]
    by_task = Share(3, 2, by_task=True)  # (task id + shard) mod 3: task 5's shard 0
    assert [c.shard for c in sharded if by_task.holds(c)] == [0]
    assert [c.id for c in batch if by_task.holds(c)] == [2, 6, 10]
    with pytest.raises(ValueError, match=r"rank must be in \[0, 4\), got 4"):
        Share(4, 4)


@pytest.mark.parametrize(
    ("strategy", "steal_by", "scope"),
    [
        # no room to spare: home runs and the overdue (grace 1 s) only
        (DefaultStrategy(), None, ReadScope(Share(3, 0), T0 - timedelta(seconds=1))),
        # room to spare: home runs and those late by the steal delay (later than overdue)
        (
            DefaultStrategy(),
            T0 - timedelta(milliseconds=500),
            ReadScope(Share(3, 0), T0 - timedelta(milliseconds=500)),
        ),
        # a steal delay longer than the grace: the overdue ones are read all the same
        (
            DefaultStrategy(),
            T0 - timedelta(seconds=5),
            ReadScope(Share(3, 0), T0 - timedelta(seconds=1)),
        ),
        # id_hash reads its tasks' runs and the overdue, and never what it could steal
        (IdHashStrategy(), None, ReadScope(Share(3, 0, True), T0 - timedelta(seconds=1))),
        (
            IdHashStrategy(),
            T0 - timedelta(milliseconds=500),
            ReadScope(Share(3, 0, True), T0 - timedelta(seconds=1)),
        ),
        # the other strategies deal every run in Python: they read every due run
        (WeightStrategy(), None, ReadScope(None, None)),
        (LeastCountStrategy(), None, ReadScope(None, None)),
    ],
)
def test_read_scope_is_the_home_share_plus_what_may_be_stolen_or_is_overdue(
    strategy: object, steal_by: datetime | None, scope: ReadScope
) -> None:
    view = ClusterView(me="a", live=LIVE, now=T0, steal_by=steal_by)
    assert read_scope(strategy, view, timedelta(seconds=1)) == scope  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("home_due", "room", "spare"),
    [
        ([], 10, True),  # nothing of its own due: room to spare
        ([0.2, 0.0, -0.3], 10, True),  # its own on time or a little late: to spare
        ([0.2, -0.5], 10, False),  # one of its own late by the steal delay: behind
        ([0.2] * 10, 10, False),  # its own fill its room
    ],
)
def test_a_node_has_room_to_spare_only_when_its_own_runs_leave_room_and_are_on_time(
    home_due: list[float], room: int, spare: bool
) -> None:
    home = [
        replace(c, due_time=T0 + timedelta(seconds=s))
        for c, s in zip(candidates(len(home_due)), home_due, strict=True)
    ]
    assert has_room_to_spare(home, room, T0, poll=1.0) is spare  # steal delay 0.5 s


@pytest.mark.parametrize(
    ("poll", "delay"), [(0.1, 0.25), (0.5, 0.25), (1.0, 0.5), (3.0, 1.5), (10.0, 2.0)]
)
def test_the_steal_delay_is_half_a_poll_within_bounds(poll: float, delay: float) -> None:
    assert steal_delay(poll) == timedelta(seconds=delay)


def test_overdue_runs_are_anyones() -> None:
    batch = candidates(3)
    assert overdue(batch, T0 + timedelta(seconds=2), timedelta(seconds=1)) == batch
    assert overdue(batch, T0 + timedelta(seconds=1), timedelta(seconds=1)) == []


def test_load_strategy_by_name_and_by_path() -> None:
    assert isinstance(load_strategy("id_hash"), IdHashStrategy)
    assert isinstance(load_strategy("easyjob.core.strategies:WeightStrategy"), WeightStrategy)
    with pytest.raises(UnknownStrategyError, match="unknown strategy 'fastest': use one of"):
        load_strategy("fastest")
    with pytest.raises(UnknownStrategyError, match=r"unknown strategy 'nope\.mod:X': No module"):
        load_strategy("nope.mod:X")
    with pytest.raises(UnknownStrategyError, match="has no select"):
        load_strategy("easyjob.clock:SystemClock")


class WantsGossip:
    needs = frozenset({"held", "gossip"})

    def select(self, candidates: Sequence[Candidate], view: ClusterView) -> list[Candidate]:
        return list(candidates)


def test_strategies_declare_what_of_the_cluster_they_read() -> None:
    assert needs(load_strategy("least_count")) == {"held"}
    for name in ("default", "id_hash", "weight"):
        assert needs(load_strategy(name)) == frozenset(), name
    with pytest.raises(
        UnknownStrategyError,
        match=r"^strategy 'tests\.unit\.test_strategies:WantsGossip': unknown need 'gossip' in "
        r"needs: a strategy may need 'held'$",
    ):
        load_strategy(f"{__name__}:WantsGossip")

    class NeedsText(WantsGossip):
        needs = "held"  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"^needs must be a set of 'held', got 'held'$"):
        needs(NeedsText())


def test_nodes_offered_more_than_they_can_take_start_at_their_own_offsets() -> None:
    batch = candidates(12)
    live = ["a", "b", "c"]
    taken = [_spread(batch, 4, live, me) for me in live]
    assert sorted(c.id for part in taken for c in part) == [c.id for c in batch]  # disjoint
    assert all(c.id % 3 == rank for rank, part in enumerate(taken) for c in part)  # home runs
    # a node with room for more takes the others' runs too, from its own offset
    assert len({c.id for c in _spread(batch, 6, live, "b")}) == 6
    assert _spread(batch, 20, live, "b") == batch  # all fit: all of them
    assert _spread(batch, 4, live, "x") == batch[:4]  # not yet live: from the start


def test_offered_more_than_they_can_take_nodes_take_the_higher_priorities_first() -> None:
    batch = candidates(12)
    urgent = {2, 7, 11}
    batch = [replace(c, priority=5) if c.id in urgent else c for c in batch]
    live = ["a", "b", "c"]
    now = batch[-1].due_time
    for me in live:
        taken = _spread_by_priority(batch, 4, live, me, now)
        assert len(taken) == 4 and urgent <= {c.id for c in taken}  # the high tier first
    # the high tier larger than the room: spread over it, nodes mostly taking different ones
    taken = [c.id for me in live for c in _spread_by_priority(batch, 1, live, me, now)]
    assert set(taken) <= urgent and len(set(taken)) >= 2
    # equal priorities: exactly as before
    plain = candidates(12)
    assert _spread_by_priority(plain, 4, live, "b", now) == _spread(plain, 4, live, "b")
