"""The admission rule (easyjob.core.admission), table-driven: every policy against every
situation a run can be in when a component asks whether it may start."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from easyjob.core.admission import (
    AGING_STEP,
    Catalog,
    Decision,
    JoinFacts,
    RunFacts,
    Verdict,
    admit,
    declares,
    effective_priority,
    exclusive,
    facts_of,
    fire_verdict,
    held_back,
    held_reason,
    join,
    on_busy,
    outranked,
    overtakes,
    planner_owner,
    priority_tiers,
    run_limit,
    schedule_of,
    start_deadline,
    start_order,
    starts_when_written,
    superseded_reason,
    waits_for_a_worker,
)
from easyjob.core.records import Advance, Candidate, PlannedFire, Run, TaskRow
from easyjob.core.states import Misfire, Overlap, RunStatus, Trigger
from tests.unit.test_planner import task as planner_task

T0 = datetime(2030, 1, 1, tzinfo=UTC)
EVERY_10S = schedule_of(("*/10 * * * * *", "UTC", None, None, None, None))
GRACE = timedelta(seconds=5)
S = timedelta(seconds=1)


def run(
    fire: float,
    policy: Misfire,
    trigger: Trigger = Trigger.CRON,
    *,
    due: float | None = None,
    scheduled: bool = True,
) -> RunFacts:
    return RunFacts(
        fire_time=T0 + fire * S,
        due_time=T0 + (fire if due is None else due) * S,
        triggered_by=trigger,
        misfire=policy,
        grace=GRACE,
        schedule=EVERY_10S if scheduled else None,
    )


ONCE, SKIP, ALL = Misfire.FIRE_ONCE, Misfire.SKIP, Misfire.CATCH_UP
START, WAIT, MISS = Verdict.START, Verdict.WAIT, Verdict.MISS

# (what, the run, now in seconds after T0, the verdict)
TABLE = [
    # on time: every policy starts it
    ("on time, fire_once", run(0, ONCE), 0.5, START),
    ("on time, skip", run(0, SKIP), 0.5, START),
    ("on time, catch_up", run(0, ALL), 0.5, START),
    # late, within the grace, successor not due: starts
    ("late within grace, fire_once", run(0, ONCE), 4, START),
    ("late within grace, skip", run(0, SKIP), 4, START),
    # late past the grace, successor not due: fire_once runs once, skip misses
    ("past grace, fire_once", run(0, ONCE), 7, START),
    ("past grace, skip", run(0, SKIP), 7, MISS),
    ("past grace, catch_up", run(0, ALL), 7, START),
    # its successor (the fire at 10 s) is due: superseded, whatever the grace
    ("successor due, fire_once", run(0, ONCE), 10, MISS),
    ("successor due, skip", run(0, SKIP), 10, MISS),
    ("successor due, catch_up", run(0, ALL), 10, START),
    ("after an outage, fire_once", run(0, ONCE), 1200, MISS),
    ("the latest due fire after an outage", run(1190, ONCE), 1199, START),
    # retries and recoveries of a scheduled fire are that fire: superseded alike
    ("retry, successor due", run(0, ONCE, Trigger.RETRY, due=9), 10.5, MISS),
    ("retry, successor not due", run(0, ONCE, Trigger.RETRY, due=2), 3, START),
    ("recovery, successor due", run(0, ONCE, Trigger.RECOVERY, due=11), 11, MISS),
    ("recovery, successor not due", run(0, ONCE, Trigger.RECOVERY, due=5), 5, START),
    # a retry of a run whose fire time is not on the schedule (a trigger's) is not superseded
    ("retry of a manual run", run(3, ONCE, Trigger.RETRY), 25, START),
    ("retry of a manual run, skip, past grace", run(3, SKIP, Trigger.RETRY), 25, MISS),
    # a manual run is never missed: it was asked for (and waits out a pause)
    ("manual, hours late, fire_once", run(3, ONCE, Trigger.MANUAL), 7200, START),
    ("manual, hours late, skip", run(3, SKIP, Trigger.MANUAL), 7200, START),
    # a child is not superseded; past the grace only skip misses it
    ("child, successor of its fire due", run(0, ONCE, Trigger.PARENT), 30, START),
    ("child, skip, past grace", run(0, SKIP, Trigger.PARENT), 30, MISS),
    ("child, skip, within grace", run(0, SKIP, Trigger.PARENT, due=28), 30, START),
    # a task with no schedule (manual-only) cannot be superseded
    ("no schedule, fire_once", run(0, ONCE, scheduled=False), 100, START),
    ("no schedule, skip, past grace", run(0, SKIP, scheduled=False), 100, MISS),
    # not due yet: wait (the loader comes back at due - lead)
    ("not due yet", run(20, ONCE), 10, WAIT),
]


@pytest.mark.parametrize(("what", "facts", "now", "verdict"), TABLE, ids=[t[0] for t in TABLE])
def test_admission_table(what: str, facts: RunFacts, now: float, verdict: Verdict) -> None:
    decision = admit(facts, T0 + now * S)
    assert decision.verdict == verdict, f"{what}: {decision}"
    if verdict == MISS:
        assert decision.reason and decision.reason.startswith("missed: ")
        assert f"(policy {facts.misfire.value})" in decision.reason


# (what, the run, now in seconds after T0, whether it may be claimed ahead of older runs)
OVERTAKES = [
    ("the latest due fire, fire_once", run(1190, ONCE), 1195, True),
    ("the latest due fire, skip", run(1190, SKIP), 1195, True),
    ("a fire due this instant", run(1190, ONCE), 1190, True),
    ("a fire not due yet", run(1190, ONCE), 1189.99, False),
    ("catch_up keeps its fires' order", run(1190, ALL), 1195, False),
    ("a trigger", run(1193, ONCE, Trigger.MANUAL), 1195, False),
    ("a child", run(1190, ONCE, Trigger.PARENT), 1195, False),
    ("a retry", run(1190, ONCE, Trigger.RETRY), 1195, False),
    ("a recovery", run(1190, ONCE, Trigger.RECOVERY), 1195, False),
    ("no schedule", run(1190, ONCE, scheduled=False), 1195, False),
]


@pytest.mark.parametrize(
    ("what", "facts", "now", "ahead"), OVERTAKES, ids=[t[0] for t in OVERTAKES]
)
def test_overtakes_table(what: str, facts: RunFacts, now: float, ahead: bool) -> None:
    assert overtakes(facts, T0 + now * S) is ahead, what


@pytest.mark.parametrize("policy", [ONCE, SKIP])
@pytest.mark.parametrize("trigger", [Trigger.CRON, Trigger.RETRY, Trigger.RECOVERY])
def test_a_run_that_overtakes_changes_no_older_fires_fate(
    policy: Misfire, trigger: Trigger
) -> None:
    """Whatever an overtaking fire starts ahead of is missed by the misfire rule anyway: every
    older fire of its schedule, and every retry or recovery of one, due at any time before
    it, at every moment from its due time on."""
    latest = run(1190, policy)
    for now in (1190, 1190.5, 1195, 1199.99):
        assert overtakes(latest, T0 + now * S)
        for fire in range(0, 1190, 10):
            older = run(fire, policy, trigger, due=fire + 3)
            assert admit(older, T0 + now * S).verdict == MISS, (fire, now)


def test_a_superseded_run_says_so_and_a_late_one_names_its_lateness() -> None:
    superseded = admit(run(0, ONCE), T0 + 10 * S)
    assert superseded.reason == (
        "missed: not started before a later fire of the task was due (policy fire_once)"
    )
    late = admit(run(0, SKIP), T0 + 7 * S)
    assert late.reason == (
        "missed: would have started 7.0s late, past its misfire grace of 5s (policy skip)"
    )


def test_waiting_names_when_to_come_back_and_the_lead_lets_it_be_claimed_early() -> None:
    lead = timedelta(milliseconds=50)
    waiting = admit(run(20, ONCE), T0 + 10 * S, lead=lead)
    assert waiting.verdict == WAIT and waiting.until == T0 + 20 * S - lead
    assert admit(run(20, ONCE), T0 + 20 * S - lead, lead=lead).verdict == START


@pytest.mark.parametrize("policy", [ONCE, SKIP, ALL])
def test_a_run_of_a_task_this_node_does_not_declare_is_left_to_another(policy: Misfire) -> None:
    assert admit(run(0, policy), T0, declared_here=False).verdict == Verdict.ELSEWHERE
    # ...unless the rule misses it anyway: no node must run it
    if policy != ALL:
        assert admit(run(0, policy), T0 + 10 * S, declared_here=False).verdict == MISS


@pytest.mark.parametrize(
    ("overlap", "verdict"), [(Overlap.SERIAL, Verdict.WAIT), (Overlap.SKIP, Verdict.SKIP)]
)
def test_a_busy_task_holds_a_serial_run_and_skips_a_skip_run(
    overlap: Overlap, verdict: Verdict
) -> None:
    decision = on_busy(overlap)
    assert decision.verdict == verdict
    if verdict == Verdict.SKIP:
        assert decision.reason == "skipped: the previous run is still running"


# the planner's view of the fires it writes: (policy, fire, successor, now, missed?)
FIRES = [
    (ONCE, 0, 10, 5, False),  # on time
    (ONCE, 0, 10, 10, True),  # superseded
    (ONCE, 0, 10, 9, False),  # late past grace, but the latest: runs once
    (SKIP, 0, 10, 9, True),  # late past grace: skip misses it
    (SKIP, 0, 10, 4, False),
    (ALL, 0, 10, 30, False),  # catch_up writes every fire to run
    (ONCE, 0, None, 1000, False),  # the last fire of a bounded schedule
]


@pytest.mark.parametrize(("policy", "fire", "successor", "now", "missed"), FIRES)
def test_fire_verdict_is_the_same_rule_for_fires_being_written(
    policy: Misfire, fire: float, successor: float | None, now: float, missed: bool
) -> None:
    after = None if successor is None else T0 + successor * S
    verdict = fire_verdict(policy, GRACE, T0 + fire * S, after, T0 + now * S)
    assert (verdict is not None) == missed
    # and it agrees with admit for a cron run of that fire
    if successor is not None:
        assert (admit(run(fire, policy), T0 + now * S).verdict == MISS) == missed


# a planner behind (margin 2): (policy, fire, successor, now, missed?)
BEHIND = [
    (ONCE, 0, 10, 7, False),  # the successor is 3 away: the fire may still start
    (ONCE, 0, 10, 8, True),  # 2 away: superseded already, the successor runs instead
    (SKIP, 0, 5, 3.5, True),  # within its grace, but its successor is 1.5 away
    (ALL, 0, 10, 8, False),  # catch_up runs every fire
    (ONCE, 0, None, 1000, False),
]


@pytest.mark.parametrize(("policy", "fire", "successor", "now", "missed"), BEHIND)
def test_a_planner_behind_supersedes_a_fire_whose_successor_comes_within_its_margin(
    policy: Misfire, fire: float, successor: float | None, now: float, missed: bool
) -> None:
    after = None if successor is None else T0 + successor * S
    verdict = fire_verdict(policy, GRACE, T0 + fire * S, after, T0 + now * S, margin=2 * S)
    assert (verdict is not None) == missed


CODE = Catalog({"a": "app.jobs:a", "b": "app.jobs:b"}, frozenset({"app.jobs:report"}))


@pytest.mark.parametrize(
    ("name", "func", "origin", "expected"),
    [
        ("a", "app.jobs:a", "code", True),
        ("a", "app.jobs:other", "code", False),  # same name, other function: not this code
        ("c", "app.jobs:c", "code", False),  # not declared here
        ("nightly", "app.jobs:report", "runtime", True),  # added at run time, @runnable
        ("nightly", "app.jobs:a", "runtime", False),  # its function is not @runnable here
        ("a", "app.jobs:report", "runtime", False),  # a runtime task may not shadow code
    ],
)
def test_declares(name: str, func: str, origin: str, expected: bool) -> None:
    assert declares(CODE, name, func, origin) is expected
    assert declares(None, name, func, origin)  # a node of an earlier release: every task


def test_a_catalog_round_trips_and_its_digest_ignores_order() -> None:
    same = Catalog({"b": "app.jobs:b", "a": "app.jobs:a"}, frozenset({"app.jobs:report"}))
    assert same.digest == CODE.digest and len(CODE.digest) <= 64
    assert Catalog.from_body(CODE.body()) == CODE
    assert Catalog({"a": "app.jobs:a"}).digest != CODE.digest


@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 2500])
def test_a_catalog_s_body_and_digest_are_those_of_its_whole_json_made_at_once(size: int) -> None:
    """The body and the digest are made in parts (the digest's temporaries made whole held
    156 B per task of a node's memory): they are, byte for byte, those of the catalog's
    whole JSON text (what every release stored and hashed), whatever the number of parts."""
    tasks = {f"job-\u00e9-{i:05d}": f"app.jobs:f{i}" for i in reversed(range(size))}
    catalog = Catalog(tasks, frozenset({"app.jobs:report", "app.jobs:a"}))
    whole = json.dumps(
        {"tasks": dict(sorted(tasks.items())), "runnable": sorted(catalog.runnable)},
        separators=(",", ":"),
    )
    assert catalog.body() == whole
    assert catalog.digest == hashlib.sha256(whole.encode()).hexdigest()[:40]
    assert Catalog.from_body(catalog.body()) == catalog


def test_the_planner_owner_is_one_of_the_declaring_nodes() -> None:
    assert planner_owner(7, []) is None
    assert planner_owner(7, ["n1"]) == "n1"
    owners = {planner_owner(i, ["n1", "n2", "n3"]) for i in range(30)}
    assert owners == {"n1", "n2", "n3"}


def test_a_run_whose_task_row_holds_a_broken_schedule_is_judged_by_its_grace() -> None:
    broken = Candidate(1, 1, 0, T0, T0, cron_expr="garbage", misfire=SKIP, misfire_grace_ms=5000)
    facts = facts_of(broken)  # no exception: an edited row must not stop the loader
    assert facts.schedule is None
    assert admit(facts, T0 + 10 * S).verdict == MISS  # past the grace, skip
    assert admit(facts_of(replace(broken, misfire=ONCE)), T0 + 10 * S).verdict == START


@pytest.mark.parametrize(("what", "facts", "now", "verdict"), TABLE, ids=[t[0] for t in TABLE])
def test_the_start_deadline_is_when_the_rule_starts_missing_the_run(
    what: str, facts: RunFacts, now: float, verdict: Verdict
) -> None:
    """The deadline a start write is checked against in the database agrees with the rule:
    a run is missed at *now* exactly when its deadline has come."""
    deadline = start_deadline(facts)
    at = T0 + now * S
    missed = admit(facts, at).verdict == MISS
    assert missed == (deadline is not None and at >= deadline), f"{what}: deadline {deadline}"


#: The join of a child of parents 1, 2, 3 for one fire time: what is known -> what is written.
JOINS = [
    ("none ended yet", JoinFacts((1, 2, 3)), Verdict.WAIT),
    ("one of three succeeded", JoinFacts((1, 2, 3), frozenset({1})), Verdict.WAIT),
    ("two of three succeeded", JoinFacts((1, 2, 3), frozenset({1, 3})), Verdict.WAIT),
    ("the last one succeeds", JoinFacts((1, 2, 3), frozenset({1, 2, 3})), Verdict.START),
    ("a parent fails first", JoinFacts((1, 2, 3), failed=70), Verdict.SKIP),
    ("a parent fails last", JoinFacts((1, 2, 3), frozenset({1, 2}), failed=70), Verdict.SKIP),
    ("made already (race lost)", JoinFacts((1, 2, 3), frozenset({1, 2, 3}), made=True), None),
    ("skipped already, a late success", JoinFacts((1, 2), frozenset({2}), made=True), None),
    ("made already, a late failure", JoinFacts((1, 2), frozenset({1, 2}), 9, True), None),
]


@pytest.mark.parametrize(("what", "facts", "verdict"), JOINS, ids=[j[0] for j in JOINS])
def test_join_table(what: str, facts: JoinFacts, verdict: Verdict | None) -> None:
    decision = join(facts)
    assert (decision.verdict if decision is not None else None) == verdict, what


def test_a_join_names_the_failed_parent_run_and_the_parents_it_waits_for() -> None:
    skipped = join(JoinFacts((1, 2), frozenset({1}), failed=70))
    assert skipped is not None and skipped.reason == "parent run 70 failed"
    waiting = join(JoinFacts((1, 2, 3), frozenset({2})))
    assert waiting is not None and waiting.reason == "waits for parent task(s) 1, 3"


# -- max_running: the limit of RUNNING runs, and what a run at the limit does ---------------

SER, SKP, ALW = Overlap.SERIAL, Overlap.SKIP, Overlap.ALLOW

# (overlap, max_running, the limit)
LIMITS = [
    (SER, None, 1),  # serial is max_running=1
    (SKP, None, 1),
    (ALW, None, None),  # allow: no limit
    (SER, 3, 3),  # max_running sets it, whatever the overlap
    (SKP, 2, 2),
    (ALW, 2, 2),
    (ALW, 1, 1),
]


@pytest.mark.parametrize(("overlap", "max_running", "limit"), LIMITS)
def test_the_limit_is_max_running_else_what_the_overlap_says(
    overlap: Overlap, max_running: int | None, limit: int | None
) -> None:
    assert run_limit(overlap, max_running) == limit
    assert exclusive(overlap, max_running) == (limit is not None)


# (overlap, max_running, the verdict at the limit, its reason)
AT_LIMIT = [
    (SER, None, Verdict.WAIT, "waits for the previous run to end"),
    (SKP, None, Verdict.SKIP, "skipped: the previous run is still running"),
    (SER, 2, Verdict.WAIT, "waits: 2 run(s) of its task are running (max_running 2)"),
    (ALW, 3, Verdict.WAIT, "waits: 3 run(s) of its task are running (max_running 3)"),
    (SKP, 2, Verdict.SKIP, "skipped: 2 run(s) of its task are running (max_running 2)"),
]


@pytest.mark.parametrize(("overlap", "max_running", "verdict", "reason"), AT_LIMIT)
def test_at_its_limit_a_run_waits_unless_its_overlap_is_skip(
    overlap: Overlap, max_running: int | None, verdict: Verdict, reason: str
) -> None:
    assert on_busy(overlap, max_running) == Decision(verdict, reason)


def test_a_run_missed_while_it_waited_for_its_limit_says_both() -> None:
    missed = superseded_reason(ONCE)
    assert held_reason(missed, SER, None) == missed  # as before max_running existed
    assert held_reason(missed, ALW, 2) == (
        f"{missed}; it waits: 2 run(s) of its task are running (max_running 2)"
    )


def slot(run_id: int, fire: float = 0, shards: int = 1) -> tuple[int, datetime, int]:
    return (run_id, T0 + fire * S, shards)


# (what, limit, running, asking in order, the ids held back)
HELD = [
    ("free: starts", 1, [], [slot(1)], set()),
    ("serial, one running: waits", 1, [slot(9)], [slot(1)], {1}),
    ("limit 2, one running: one more", 2, [slot(9)], [slot(1), slot(2)], {2}),
    ("limit 2, two running: none", 2, [slot(8), slot(9)], [slot(1)], {1}),
    ("limit 3, none running: the first three", 3, [], [slot(i) for i in range(1, 6)], {4, 5}),
    ("its own row RUNNING (a lost reply) is not counted", 1, [slot(1)], [slot(1)], set()),
    ("a shard joins its fire", 1, [slot(9, 5, 3)], [slot(1, 5, 3)], set()),
    ("a shard of another fire waits", 1, [slot(9, 5, 3)], [slot(1, 6, 3)], {1}),
    ("shards of one fire count once", 2, [slot(8, 5, 3), slot(9, 5, 3)], [slot(1)], set()),
    ("a whole fire's shards start together", 1, [], [slot(1, 5, 2), slot(2, 5, 2)], set()),
    ("the limit over fires, not rows", 2, [slot(9)], [slot(1, 5, 2), slot(2, 6, 2)], {2}),
]


@pytest.mark.parametrize(
    ("what", "limit", "running", "asking", "held"), HELD, ids=[h[0] for h in HELD]
)
def test_held_back_counts_the_running_runs_against_the_limit(
    what: str,
    limit: int,
    running: list[tuple[int, datetime, int]],
    asking: list[tuple[int, datetime, int]],
    held: set[int],
) -> None:
    assert held_back(limit, running, asking) == held


# -- priority: which of more due runs than a node can start go first -------------------------


def cand(run_id: int, due: float, priority: int = 0) -> Candidate:
    return Candidate(
        id=run_id,
        task_id=run_id,
        version=0,
        fire_time=T0 + due * S,
        due_time=T0 + due * S,
        priority=priority,
    )


STEP = AGING_STEP.total_seconds()

# (what, priority, due, now, the effective priority)
EFFECTIVE = [
    ("not due yet: its priority", 5, 10, 0, 5),
    ("just due", 5, 0, 0, 5),
    ("due less than a step", 5, 0, STEP - 1, 5),
    ("due one step", 5, 0, STEP, 6),
    ("due ten steps", -3, 0, 10 * STEP, 7),
]


@pytest.mark.parametrize(
    ("what", "priority", "due", "now", "level"), EFFECTIVE, ids=[e[0] for e in EFFECTIVE]
)
def test_the_effective_priority_grows_by_one_per_aging_step_due(
    what: str, priority: int, due: float, now: float, level: int
) -> None:
    assert effective_priority(priority, T0 + due * S, T0 + now * S) == level


# (what, runs, now, the ids in start order)
ORDERS = [
    ("equal priorities keep due order", [cand(2, 5), cand(1, 3), cand(3, 4)], 6, [1, 3, 2]),
    ("higher priority first", [cand(1, 0), cand(2, 1, 5), cand(3, 2, 1)], 3, [2, 3, 1]),
    ("ties of due time by id", [cand(4, 0, 1), cand(3, 0, 1)], 0, [3, 4]),
    # a low run aged past a fresh high one goes first: no starvation
    ("aged low beats a fresh high", [cand(1, 0, 0), cand(2, 60, 5)], 60, [1, 2]),
    ("not aged enough yet", [cand(1, 0, 0), cand(2, 40, 5)], 40, [2, 1]),
    # equal effective priority: the older first
    ("aged to a tie: older first", [cand(2, 50, 5), cand(1, 0, 0)], 50, [1, 2]),
]


@pytest.mark.parametrize(("what", "runs", "now", "order"), ORDERS, ids=[o[0] for o in ORDERS])
def test_start_order(what: str, runs: list[Candidate], now: float, order: list[int]) -> None:
    assert [c.id for c in start_order(runs, T0 + now * S)] == order


def test_priority_tiers_group_equal_effective_priorities_highest_first() -> None:
    runs = [cand(1, 0, 0), cand(2, 0, 3), cand(3, 1, 3), cand(4, 0, 1)]
    assert [[c.id for c in tier] for tier in priority_tiers(runs, T0 + S)] == [[2, 3], [4], [1]]


def test_a_low_run_waits_at_most_the_aging_bound_behind_a_stream_of_high_ones() -> None:
    """A node with one worker starts one run per second; a fresh priority-5 run comes due
    every second. The priority-0 run due at 0 starts once it has aged 5 steps: no later."""
    waiting = [cand(1, 0, 0)]
    started: dict[int, float] = {}
    for second in range(200):
        waiting.append(cand(100 + second, second, 5))
        first = start_order(waiting, T0 + second * S)[0]
        waiting.remove(first)
        started[first.id] = second
    assert started[1] <= 5 * STEP + 1


def held(run_id: int, due: float, priority: int = 0) -> Run:
    c = cand(run_id, due, priority)
    return Run(
        id=c.id,
        version=1,
        status=RunStatus.CLAIMED,
        node_id="n",
        task_id=c.task_id,
        task_name="t",
        func="m:t",
        kwargs={},
        fire_time=c.fire_time,
        due_time=c.due_time,
        attempt=1,
        triggered_by=Trigger.CRON,
        pid=None,
        overlap=Overlap.ALLOW,
        retries=0,
        retry_delay_ms=0,
        timeout_ms=None,
        misfire=ONCE,
        misfire_grace_ms=5000,
        priority=priority,
    )


# (what, waiting here, pending, now, the (waiting id, pending id) swaps)
SWAPS = [
    (
        "a higher pending run takes the worst place",
        [held(1, 0), held(2, 1)],
        [cand(9, 2, 5)],
        2,
        [(2, 9)],
    ),
    (
        "two for two, best with worst",
        [held(1, 0), held(2, 1, 3)],
        [cand(8, 2, 4), cand(9, 2, 6)],
        2,
        [(1, 9), (2, 8)],
    ),
    ("equal priorities never swap, however old", [held(1, 100)], [cand(9, 0)], 100, []),
    ("a lower pending run does not", [held(1, 0, 5)], [cand(9, 0, 1)], 1, []),
    ("aging protects: an old low run keeps its place", [held(1, 0)], [cand(9, 60, 5)], 60, []),
    ("nothing waits: nothing to swap", [], [cand(9, 0, 5)], 1, []),
]


@pytest.mark.parametrize(
    ("what", "waiting", "pending", "now", "swaps"), SWAPS, ids=[w[0] for w in SWAPS]
)
def test_outranked_pairs_waiting_runs_with_pending_runs_of_higher_priority(
    what: str,
    waiting: list[Run],
    pending: list[Candidate],
    now: float,
    swaps: list[tuple[int, int]],
) -> None:
    pairs = outranked(waiting, pending, T0 + now * S)
    assert [(r.id, c.id) for r, c in pairs] == swaps


def _behind_task(overlap: Overlap, max_running: int | None = None) -> TaskRow:
    return replace(planner_task(T0), overlap=overlap, max_running=max_running)


def _advance(*fires: PlannedFire, shards: int = 1, broadcast: bool = False) -> Advance:
    return Advance(7, 3, T0 + 10 * S, fires, shards, broadcast)


ONE_DUE = _advance(PlannedFire(T0))
GAP_THEN_FIRE = _advance(PlannedFire(T0 - 5 * S, RunStatus.MISSED), PlannedFire(T0))
#: (what, advance, overlap, held here, first come, written started)
WRITTEN_STARTED = [
    ("one fire due now", ONE_DUE, Overlap.SERIAL, False, True, True),
    (
        "due within the claim lead",
        _advance(PlannedFire(T0 + S / 50)),
        Overlap.ALLOW,
        False,
        True,
        True,
    ),
    ("due after the horizon", _advance(PlannedFire(T0 + S)), Overlap.ALLOW, False, True, False),
    ("with its gap's summary row", GAP_THEN_FIRE, Overlap.ALLOW, False, True, True),
    (
        "two fires to run (catch_up)",
        _advance(PlannedFire(T0 - S), PlannedFire(T0)),
        Overlap.ALLOW,
        False,
        True,
        False,
    ),
    (
        "nothing to run",
        _advance(PlannedFire(T0, RunStatus.MISSED)),
        Overlap.ALLOW,
        False,
        True,
        False,
    ),
    ("a sharded fire", _advance(PlannedFire(T0), shards=3), Overlap.ALLOW, False, True, False),
    (
        "a broadcast fire",
        _advance(PlannedFire(T0), broadcast=True),
        Overlap.ALLOW,
        False,
        True,
        False,
    ),
    ("a serial task with a run here", ONE_DUE, Overlap.SERIAL, True, True, False),
    ("an allow task with a run here", ONE_DUE, Overlap.ALLOW, True, True, True),
    ("a strategy that picks each run's node", ONE_DUE, Overlap.ALLOW, False, False, False),
]


@pytest.mark.parametrize(
    ("what", "advance", "overlap", "held_here", "first", "started"),
    WRITTEN_STARTED,
    ids=[w[0] for w in WRITTEN_STARTED],
)
def test_which_fires_a_behind_planner_writes_started(
    what: str, advance: Advance, overlap: Overlap, held_here: bool, first: bool, started: bool
) -> None:
    by = T0 + S / 20  # the planner's horizon when behind
    task = _behind_task(overlap)
    assert starts_when_written(advance, task, by, first_come=first, held_here=held_here) == started
    if started:  # what waits_for_a_worker asks of the row is part of this rule
        assert waits_for_a_worker(task, by, first_come=first, held_here=held_here)


#: (what, the task's changes, held here, first come, left due without a plan)
WAITS_FOR_A_WORKER = [
    ("one run a fire, due", {}, False, True, True),
    ("an allow task with a run here", {"overlap": Overlap.ALLOW}, True, True, True),
    ("a serial task with a run here", {}, True, True, False),
    (
        "max_running with a run here",
        {"overlap": Overlap.ALLOW, "max_running": 2},
        True,
        True,
        False,
    ),
    ("due after the claim lead", {"next_start_time": T0 + S}, False, True, False),
    ("no next fire", {"next_start_time": None}, False, True, False),
    ("sharded", {"shards": 3}, False, True, False),
    ("broadcast", {"broadcast": True}, False, True, False),
    (
        "catch_up: its advance may write several fires",
        {"misfire": Misfire.CATCH_UP},
        False,
        True,
        False,
    ),
    ("a strategy that picks each run's node", {}, False, False, False),
]


@pytest.mark.parametrize(
    ("what", "changes", "held_here", "first", "waits"),
    WAITS_FOR_A_WORKER,
    ids=[w[0] for w in WAITS_FOR_A_WORKER],
)
def test_which_due_tasks_a_behind_planner_with_no_worker_left_does_not_plan(
    what: str, changes: dict[str, object], held_here: bool, first: bool, waits: bool
) -> None:
    by = T0 + S / 20  # the planner's horizon when behind
    task = replace(_behind_task(Overlap.SERIAL), **changes)  # type: ignore[arg-type]
    assert waits_for_a_worker(task, by, first_come=first, held_here=held_here) == waits


def test_a_task_limited_by_max_running_counts_as_limited_for_a_fire_written_started() -> None:
    task = _behind_task(Overlap.ALLOW, max_running=2)
    assert not starts_when_written(ONE_DUE, task, T0, first_come=True, held_here=True)
    assert starts_when_written(ONE_DUE, task, T0, first_come=True, held_here=False)
