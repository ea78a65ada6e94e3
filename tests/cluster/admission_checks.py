"""What the admission tests check in a task's history rows (pure: rows in, problems out).

Each check returns a list of problems, one line each naming the fire, the run, how late and
which node, so that a failing test says what went wrong without a rerun.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from croniter import croniter

from easyjob.core.records import HistoryRow
from easyjob.core.states import RunStatus, Trigger

#: The schedule of every cron task of tests/cluster/admission_jobs.py.
CRON = "* * * * * *"
FINAL = (RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.MISSED, RunStatus.SKIPPED)


def hms(at: datetime) -> str:
    """A database time as the tests print it: ``12:00:03.120``."""
    return at.strftime("%H:%M:%S.%f")[:-3]


def fires_between(start: datetime, end: datetime) -> list[datetime]:
    """The fires of :data:`CRON` in [start, end], computed with croniter, not with easyjob."""
    itr = croniter(CRON, start - timedelta(microseconds=1), second_at_beginning=True)
    found = []
    while (fire := itr.get_next(datetime)) <= end:
        found.append(fire.astimezone(UTC))
    return found


def next_fire(fire: datetime) -> datetime:
    """The fire of :data:`CRON` after *fire*."""
    later: datetime = croniter(CRON, fire, second_at_beginning=True).get_next(datetime)
    return later.astimezone(UTC)


def latest_due(at: datetime) -> datetime:
    """The latest fire of :data:`CRON` at or before *at*."""
    return fires_between(at - timedelta(seconds=1), at)[-1]


def _covers(row: HistoryRow, fire: datetime) -> bool:
    """*row* is about *fire*: its own fire, a fire of a MISSED summary row's range, or of the
    gap the row carries."""
    if row.status == RunStatus.MISSED or row.missed_from is not None:
        return row.records(fire)
    return row.fire_time == fire


def unsettled(runs: Sequence[HistoryRow], fires: Sequence[datetime]) -> list[datetime]:
    """The *fires* that no row in a final state is about yet."""
    final = [r for r in runs if r.status in FINAL]
    return [f for f in fires if not any(_covers(r, f) for r in final)]


def describe(row: HistoryRow) -> str:
    """One run row, as a failure message shows it."""
    what = f"run {row.id} {row.status}"
    if row.triggered_by != Trigger.CRON:
        what += f" ({row.triggered_by}, attempt {row.attempt})"
    if row.node_id or row.target_node:
        what += f" node={row.node_id} target={row.target_node}"
    if row.last_fire_time not in (None, row.fire_time):
        what += f" fires {hms(row.fire_time)}..{hms(row.last_fire_time)}"
    if row.missed_from is not None:
        what += f" after a gap from {hms(row.missed_from)} ({row.missed_count} missed)"
    if row.error_msg:
        what += f" {row.error_msg!r}"
    return what


def not_once(runs: Sequence[HistoryRow], fires: Sequence[datetime]) -> list[str]:
    """Each of *fires* that did not end as exactly one SUCCESS row, with its rows."""
    problems = []
    for fire in fires:
        rows = [r for r in runs if _covers(r, fire)]
        successes = [r for r in rows if r.status == RunStatus.SUCCESS]
        if len(successes) == 1 and len(rows) == 1:
            continue
        shown = "; ".join(describe(r) for r in rows) or "no row at all"
        problems.append(f"fire {hms(fire)}: {len(successes)} SUCCESS: {shown}")
    return problems


def lateness(runs: Sequence[HistoryRow]) -> list[tuple[float, HistoryRow]]:
    """(start_time - fire_time in seconds, run) of every started run, latest first."""
    late = [((r.start_time - r.fire_time).total_seconds(), r) for r in runs if r.start_time]
    return sorted(late, key=lambda pair: -pair[0])


def p99(values: Sequence[float]) -> float:
    """The 99th percentile by nearest rank (the largest value below 100 values)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def reruns_of_started(runs: Sequence[HistoryRow]) -> set[int]:
    """Ids of recovery attempts whose previous attempt had started: the fire's function
    may have run, so the contract re-runs it (at-least-once), however late."""
    started = {(r.task_id, r.fire_time, r.shard, r.attempt) for r in runs if r.start_time}
    return {
        r.id
        for r in runs
        if r.triggered_by == Trigger.RECOVERY
        and (r.task_id, r.fire_time, r.shard, r.attempt - 1) in started
    }


def stale_starts(runs: Sequence[HistoryRow], tolerance: timedelta) -> list[str]:
    """Started cron runs (and recoveries of runs that never started) whose task's next fire
    after theirs was already due, by the schedule, more than *tolerance* before they started:
    under ``fire_once`` and ``skip`` such a run must never start."""
    exempt = reruns_of_started(runs)
    problems = []
    for run in sorted((r for r in runs if r.start_time), key=lambda r: r.fire_time):
        assert run.start_time is not None
        due_next = next_fire(run.fire_time)
        if run.id in exempt or run.triggered_by not in (Trigger.CRON, Trigger.RECOVERY):
            continue
        if run.start_time < due_next + tolerance:
            continue
        behind = len(fires_between(due_next, run.start_time))
        late = (run.start_time - run.fire_time).total_seconds()
        problems.append(
            f"fire {hms(run.fire_time)} started at {hms(run.start_time)} on {run.node_id}, "
            f"{late:.2f} s late, when {behind} later fire(s) of its task were already due "
            f"(the next at {hms(due_next)}): {describe(run)}"
        )
    return problems


def once_right_after(
    runs: Sequence[HistoryRow], back: datetime, bound: timedelta, what: str
) -> list[str]:
    """After an outage that ended at *back* (database time): the first run to start is the
    latest fire due at its start, it starts within *bound* of *back*, and no older fire starts
    after it."""
    after = sorted((r for r in runs if r.start_time and r.start_time >= back), key=_started)
    if not after:
        return [f"no run started after {what} at {hms(back)}"]
    first = after[0]
    assert first.start_time is not None
    problems = []
    wait = first.start_time - back
    if wait > bound:
        problems.append(
            f"the first run after {what} at {hms(back)} started {wait.total_seconds():.2f} s "
            f"later (bound {bound.total_seconds():.2f} s): {describe(first)}"
        )
    if first.fire_time != (latest := latest_due(first.start_time)):
        fate = "; ".join(describe(r) for r in runs if _covers(r, latest)) or "no row"
        problems.append(
            f"the first run after {what} was fire {hms(first.fire_time)}, started at "
            f"{hms(first.start_time)}, not the latest due fire {hms(latest)} ({fate}): "
            f"{describe(first)}"
        )
    for older in (r for r in after[1:] if r.fire_time < first.fire_time):
        problems.append(
            f"after {what}, older fire {hms(older.fire_time)} also started, at "
            f"{hms(older.start_time or back)} on {older.node_id}: {describe(older)}"
        )
    return problems


def _started(run: HistoryRow) -> datetime:
    assert run.start_time is not None
    return run.start_time
