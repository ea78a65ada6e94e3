"""The admission rule (easyjob.core.admission), table-driven: every policy against every
situation a run can be in when a component asks whether it may start."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from easyjob.core.admission import (
    Catalog,
    RunFacts,
    Verdict,
    admit,
    declares,
    facts_of,
    fire_verdict,
    on_busy,
    planner_owner,
    schedule_of,
    start_deadline,
)
from easyjob.core.records import Candidate
from easyjob.core.states import Misfire, Overlap, Trigger

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
