"""The checker itself, on synthetic ledgers and rows: it must catch what it claims to."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from easyjob.core.records import HistoryRow
from easyjob.core.states import RunStatus, Trigger
from tests.chaos.checker import Expectations, Observation, build, check
from tests.chaos.expected import Window, cron_fires
from tests.chaos.faults import Fault
from tests.chaos.ledger import Execution

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
WINDOW = Window(T0, T0 + timedelta(seconds=3))
FIRES = [T0 + timedelta(seconds=s) for s in (1, 2, 3)]
DEAD_S = 1.5


def ex(fire: datetime, node: str, run_id: int, attempt: int = 1, delay: float = 0.01) -> Execution:
    return Execution("tick-0", fire, node, attempt, run_id, fire.timestamp() + delay, True)


def row(
    run_id: int,
    fire: datetime,
    node: str,
    status: RunStatus = RunStatus.SUCCESS,
    attempt: int = 1,
    trigger: Trigger = Trigger.CRON,
    task: str = "tick-0",
    pid: int | None = None,
) -> HistoryRow:
    return HistoryRow(
        id=run_id,
        task_id=1,
        task_name=task,
        pid=pid,
        fire_time=fire,
        due_time=fire,
        node_id=node,
        status=status,
        triggered_by=trigger,
        attempt=attempt,
        claim_time=fire,
        start_time=fire,
        end_time=fire,
        error_msg=None,
        version=3,
        create_time=fire,
    )


def observe(
    executions: list[Execution],
    runs: list[HistoryRow] | None = None,
    faults: list[Fault] | None = None,
    **extra: object,
) -> Observation:
    clean = [row(i + 1, f, "a") for i, f in enumerate(FIRES)]
    return Observation(
        scenario="synthetic",
        db="none",
        window=WINDOW,
        expectations=Expectations(must=frozenset(("tick-0", f) for f in FIRES)),
        executions=executions,
        runs=clean if runs is None else runs,
        faults=faults or [],
        dead_threshold_s=DEAD_S,
        failover_bound_s=1.95,
        **extra,  # type: ignore[arg-type]
    )


CLEAN = [ex(f, "a", i + 1) for i, f in enumerate(FIRES)]


def test_a_clean_run_breaks_nothing() -> None:
    report = build(observe(CLEAN))
    assert (report.expected, report.run, report.missing, report.duplicated) == (3, 3, 0, 0)
    assert check(report) == []


def test_a_lost_fire_is_named() -> None:
    (broken,) = check(build(observe(CLEAN[:2])))
    assert broken.startswith("lost fires: 1 expected fires never ran")
    assert FIRES[2].isoformat() in broken


def test_a_duplicate_without_a_fault_is_a_violation() -> None:
    twice = [*CLEAN, ex(FIRES[1], "b", 9, attempt=1, delay=0.02)]
    report = build(observe(twice))
    assert (report.duplicated, report.duplicated_allowed) == (1, 0)
    (broken,) = check(report)
    assert broken.startswith("duplicates without a crash or long pause behind them: 1")


@pytest.mark.parametrize("kind", ["kill9", "crash"])  # crash: the job killed its process
def test_a_rerun_after_a_crash_of_the_holder_is_allowed(kind: str) -> None:
    killed_at = FIRES[1].timestamp() + 0.05
    rerun = [*CLEAN, ex(FIRES[1], "b", 9, attempt=2, delay=1.5)]
    runs = [
        row(1, FIRES[0], "a"),
        row(2, FIRES[1], "a", RunStatus.ABANDONED),
        row(9, FIRES[1], "b", attempt=2, trigger=Trigger.RECOVERY),
        row(3, FIRES[2], "a"),
    ]
    runs[2] = HistoryRow(**{**runs[2].__dict__, "create_time": FIRES[1] + timedelta(seconds=1.4)})
    report = build(observe(rerun, runs, [Fault(kind, "a", killed_at, killed_at)]))
    assert (report.duplicated, report.duplicated_allowed) == (1, 1)
    assert report.max_failover_s == pytest.approx(1.45, abs=0.01)
    assert check(report) == []


def test_a_pause_shorter_than_the_dead_threshold_allows_no_rerun() -> None:
    start = FIRES[1].timestamp()
    pause = Fault("sigstop", "a", start, start + DEAD_S / 2)
    rerun = [*CLEAN, ex(FIRES[1], "b", 9, attempt=2, delay=1.5)]
    report = build(observe(rerun, faults=[pause]))
    assert report.duplicated_allowed == 0
    assert any(b.startswith("duplicates without") for b in check(report))


def test_a_takeover_from_a_live_node_is_unexplained() -> None:
    runs = [
        row(1, FIRES[0], "a"),
        row(2, FIRES[1], "a", RunStatus.ABANDONED),
        row(9, FIRES[1], "b", attempt=2, trigger=Trigger.RECOVERY),
        row(3, FIRES[2], "a"),
    ]
    stall = Fault("db_stall", "db", FIRES[0].timestamp(), FIRES[1].timestamp() + 3)
    (broken,) = check(build(observe(CLEAN, runs, [stall])))
    assert broken.startswith("runs taken over from a node that was neither crashed nor paused")


def test_slow_failover_breaks_the_bound() -> None:
    killed_at = FIRES[1].timestamp()
    rerun = [*CLEAN, ex(FIRES[1], "b", 9, attempt=2, delay=5.0)]
    runs = [
        row(1, FIRES[0], "a"),
        row(2, FIRES[1], "a", RunStatus.ABANDONED),
        row(9, FIRES[1], "b", attempt=2, trigger=Trigger.RECOVERY),
        row(3, FIRES[2], "a"),
    ]
    (broken,) = check(build(observe(rerun, runs, [Fault("kill9", "a", killed_at, killed_at)])))
    assert broken.startswith("failover took 5.00s, over the documented bound 1.95s")


def test_a_fenced_holders_success_is_a_stale_write() -> None:
    runs = [
        row(1, FIRES[0], "a"),
        row(2, FIRES[1], "a"),  # the paused holder's outcome was accepted...
        row(9, FIRES[1], "b", attempt=2, trigger=Trigger.RECOVERY),  # ...after a takeover
        row(3, FIRES[2], "a"),
    ]
    report = build(observe(CLEAN, runs))
    assert report.stale_accepted == 2  # two SUCCESS rows, and a SUCCESS that was taken over
    assert check(report)[0].startswith("writes accepted from fenced holders: 2")


def test_a_success_recorded_under_another_node_is_stale() -> None:
    runs = [row(1, FIRES[0], "b"), row(2, FIRES[1], "a"), row(3, FIRES[2], "a")]
    report = build(observe(CLEAN, runs))
    assert report.stale_accepted == 1
    assert "SUCCESS as b#1, ran as run 1 attempt 1 on a" in report.examples["stale"][0]


def test_next_fire_going_backwards_is_caught() -> None:
    samples = {"tick-0": [(0.0, FIRES[1]), (0.2, FIRES[2]), (0.4, FIRES[0]), (0.6, None)]}
    (broken,) = check(build(observe(CLEAN, next_fire_samples=samples)))
    assert broken.startswith("next fire times went backwards 1 times")


def test_stuck_rows_and_dead_nodes_are_reported() -> None:
    broken = check(build(observe(CLEAN, stuck=["run 7 tick-0 CLAIMED on a"], died=["a: 1"])))
    assert broken == [
        "node processes died unexpectedly: ['a: 1']",
        "rows left stuck after the faults stopped: ['run 7 tick-0 CLAIMED on a']",
    ]


def test_a_child_without_a_successful_parent_or_twice_is_caught() -> None:
    parent = row(1, FIRES[0], "a", task="chain_a")
    failed = row(2, FIRES[1], "a", RunStatus.FAILED, task="chain_a")
    children = [
        row(10, FIRES[0], "a", task="chain_b", trigger=Trigger.PARENT, pid=1),
        row(11, FIRES[0], "b", task="chain_b", trigger=Trigger.PARENT, pid=1),
        row(12, FIRES[1], "a", task="chain_b", trigger=Trigger.PARENT, pid=2),
    ]
    obs = observe([], [parent, failed, *children])
    obs.expectations = Expectations(must=frozenset(), chains={"chain_b": "chain_a"})
    obs.executions = [Execution("chain_b", FIRES[0], "a", 1, 10, FIRES[0].timestamp(), True)]
    report = build(obs)
    assert report.expected == 1  # the child fire owed to the one parent success
    assert report.chain_violations == 2
    assert "chain_b: 2 runs for parent run 1" in report.examples["chain"]


def test_forbidden_fires_must_not_run() -> None:
    obs = observe(CLEAN)
    obs.expectations = Expectations(
        must=frozenset(("tick-0", f) for f in FIRES[1:]), never=frozenset({("tick-0", FIRES[0])})
    )
    (broken,) = check(build(obs))
    assert broken.startswith("fires ran that must not: 1")


def test_a_fire_neither_run_nor_recorded_was_dropped_silently() -> None:
    obs = observe(CLEAN[1:], runs=[row(2, FIRES[1], "a"), row(3, FIRES[2], "a")])
    obs.expectations = Expectations(
        must=frozenset(("tick-0", f) for f in FIRES[1:]), may=frozenset({("tick-0", FIRES[0])})
    )
    (broken,) = check(build(obs))
    assert broken.startswith("fires dropped silently (neither run nor a row): 1")
    obs.runs.append(row(1, FIRES[0], "a", RunStatus.MISSED))
    assert check(build(obs)) == []


def test_expected_fires_follow_the_contract_across_dst() -> None:
    spring = Window(datetime(2026, 3, 29, 0, 59, 50, tzinfo=UTC), T_SPRING_END)
    assert cron_fires("*/10 * 2 * * *", "Europe/Berlin", spring) == [
        datetime(2026, 3, 29, 1, 0, 0, tzinfo=UTC)  # the whole local hour 2 is one fire
    ]
    autumn = Window(datetime(2026, 10, 25, 0, 59, 30, tzinfo=UTC), T_AUTUMN_END)
    assert cron_fires("*/10 * 2 * * *", "Europe/Berlin", autumn) == [
        datetime(2026, 10, 25, 0, 59, 40, tzinfo=UTC),
        datetime(2026, 10, 25, 0, 59, 50, tzinfo=UTC),  # not again in the second pass
    ]
    assert len(cron_fires("* * * * * *", "UTC", WINDOW)) == 3  # start excluded, end included


T_SPRING_END = datetime(2026, 3, 29, 1, 0, 30, tzinfo=UTC)
T_AUTUMN_END = datetime(2026, 10, 25, 1, 0, 30, tzinfo=UTC)


def test_a_superseded_fire_is_not_lost_when_a_later_fire_of_its_task_ran() -> None:
    superseded = replace(
        row(1, FIRES[0], "a", RunStatus.MISSED),
        error_msg="missed: not started before a later fire of the task was due (policy fire_once)",
    )
    obs = observe(CLEAN[1:], runs=[superseded, *(row(i + 1, FIRES[i], "a") for i in (1, 2))])
    report = build(obs)
    assert (report.missing, report.superseded) == (0, 1)
    assert check(report) == []
    # ... but a fire MISSED for another reason, or with no later fire run, is lost
    graced = replace(superseded, error_msg="missed: not started within its misfire grace")
    assert build(observe(CLEAN[1:], runs=[graced])).missing == 1
    assert build(observe([], runs=[superseded])).missing == len(FIRES)
