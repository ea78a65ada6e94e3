"""Turning a due task into the fires it owes: the misfire policy lives here (pure).

A task's ``next_start_time`` is the first fire not yet written as a run row. When a loader
finds it due, it writes every fire up to its look-ahead horizon and moves
``next_start_time`` past them (one version-checked write: see ``TaskStore.advance``). A fire
due by now is *late* when it is older than the task's misfire grace (every node was down,
the task was paused, or ``next_start_time`` was moved back) or when a later fire of the
task is due too (the cluster fell a period behind: a fire whose successor is due is
*superseded*). What happens to late fires depends on the policy:

- ``fire_once`` (default): the latest due fire runs once, now; the others are MISSED.
- ``skip``: the same, except that the latest is MISSED too when it is past the grace; the
  schedule resumes with the next on-time fire.
- ``catch_up``: every late fire runs, oldest first, written in chunks of at most ``cap``
  fires per advance (one row per fire: that is what catching up costs).

Planning ahead: an advance of a task on time may write beyond the look-ahead, up to
*ahead* fires in all or until *until* (whichever comes first; every fire of the look-ahead
is written whatever *ahead* says), so that one version-checked write of the task row covers
many fires (a task's ``next_start_time`` is then its *planning cursor*, the first fire not
written, and lies ahead of its next fire). Not for a broadcast task: its fires are one run
per node running then, so a node that joins later would miss the fires written before it
did. Not for an advance that would finish the task (``max_runs`` or the schedule's end):
FINISHED keeps meaning that the task's last fire is within the look-ahead, and the fires a
pause or a schedule change forgets (see :mod:`easyjob.store.ahead`) can be planned again.

A late task's advance writes nothing ahead of *now*: its next fires are planned once the
fire it runs has started. So under ``fire_once`` and ``skip`` no run starts after a later
fire of its task was due:
a cluster offered more than it can run keeps its lateness near one period and records the
excess MISSED, instead of working an ever older backlog (the loader and the dispatcher
apply the same rule to runs already written: :mod:`easyjob.core.admission`, which decides
the fires this module misses too).

Planning behind (:func:`plan_behind`): a node whose cluster misses much of what is written
(see :mod:`easyjob.core.pacing`) writes one fire per advance, nothing ahead: the latest due
fire, or, when its successor is due within *margin* (it would be superseded before the
cluster's backlog let it start), that successor, due soon. So a fire the cluster cannot run
is never inserted and then marked MISSED.

Late fires are never dropped silently, and a gap costs O(1) rows whatever its length, in
fact none when a fire follows it (:func:`_carried`): the MISSED fires of one gap are
recorded on the row of the fire written after them, its *gap* (``missed_from`` the first,
``missed_count`` how many; schema version 7). A gap that no fire of the same advance
follows as one row (the policy misses the latest too, ``max_runs`` is reached, the next
fire is on a calendar's excluded day, or the task is sharded or broadcast: its fire is
several rows) is one MISSED *summary* row instead (``fire_time`` the first,
``last_fire_time`` the last, ``missed_count`` how many). Counting walks the schedule fire
by fire, so it stops at ``cap`` fires: a longer gap is found by jumping to its end and its
count is NULL ("more than cap, not counted"); planning it costs about two ``cap`` walks,
not one per fire.

Jitter and calendars (:func:`_jittered`, :func:`_excluding`): each PENDING fire of a task
with ``jitter_ms`` is due its jitter after its fire time
(:func:`~easyjob.core.admission.jitter_of`). A task with a calendar (``exclude=``) skips
the fires on the calendar's days in its time zone
(:func:`~easyjob.core.admission.excluded_until`): the fires of one excluded stretch are one
SKIPPED summary row (``missed_count``, ``last_fire_time``, counted up to ``cap`` like a
missed gap), written when the planner reaches the stretch's first fire; the planning cursor
then jumps past the stretch, so a long holiday is one row, not one per advance.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from easyjob.core.admission import SUPERSEDED, Days, excluded_until, fire_verdict, jitter_of
from easyjob.core.records import Advance, PlannedFire, PlanningRow
from easyjob.core.schedule import Schedule
from easyjob.core.states import Misfire, RunStatus

__all__ = ["plan_advance", "plan_behind"]

_EPS = timedelta(microseconds=1)


def plan_advance(
    task: PlanningRow,
    schedule: Schedule,
    now: datetime,
    horizon: datetime,
    *,
    cap: int = 5000,
    ahead: int = 1,
    until: datetime | None = None,
    excluded: Days | None = None,
) -> tuple[Advance, bool]:
    """The advance of *task* at database time *now* up to *horizon*, and whether fires beyond
    *cap* remain (the caller should plan again soon rather than wait for its next poll).

    When the task is on time, not broadcast, and *until* is later than *horizon*, the
    advance writes on past *horizon* until it holds *ahead* fires or reaches *until* (see
    the module docstring, "Planning ahead"), unless that would finish the task.

    A task with ``max_runs`` gets at most that many fires to run (PENDING rows, counted in
    its ``fire_count``) in all: the advance that writes the last one finishes the task.

    *excluded* holds the days of the task's calendar (None: no calendar, or none stored):
    its fires on those days are SKIPPED (see the module docstring)."""

    def plan(ahead_until: tuple[int, datetime] | None) -> tuple[Advance, bool]:
        advance, more = _plan(task, schedule, now, horizon, cap, ahead_until)
        if excluded:
            advance = _excluding(task, schedule, advance, excluded, cap)
        advance, more = _limited(task, advance, more)
        return _jittered(task, _carried(task, advance)), more

    if task.broadcast or until is None or until <= horizon or ahead <= 1:
        return plan(None)
    advance, more = plan((ahead, until))
    if advance.next_start_time is None:  # would finish the task: only the look-ahead
        return plan(None)
    return advance, more


def plan_behind(
    task: PlanningRow,
    schedule: Schedule,
    now: datetime,
    margin: timedelta,
    *,
    cap: int = 5000,
    excluded: Days | None = None,
) -> tuple[Advance, bool]:
    """The advance of *task* at database time *now* by a planner whose cluster is behind:
    one fire to run (see the module docstring, "Planning behind"), the fires before it the
    gap its row carries (a sharded task's: one MISSED summary row). A ``catch_up`` or
    broadcast task is planned as by :func:`plan_advance` up to ``now + margin``, nothing
    ahead (catching up writes every fire; a broadcast fire is one row per node). Jitter and
    *excluded* days apply as in :func:`plan_advance`: whether a fire is superseded is
    judged on due times, and a fire to run on an excluded day is SKIPPED with its stretch."""
    horizon = now + margin
    if task.misfire == Misfire.CATCH_UP or task.broadcast:
        return plan_advance(task, schedule, now, horizon, cap=cap, excluded=excluded)
    start = task.next_start_time
    if start is None:
        raise ValueError(f"task {task.name!r} has no next_start_time to advance from")
    if start > horizon:
        raise ValueError(f"task {task.name!r} is not due by {horizon.isoformat()}")
    grace = timedelta(milliseconds=task.misfire_grace_ms)
    due, counted = _late_fires(schedule, start, now, cap) if start <= now else ([start], True)
    missed, keep = _passed_over(task, schedule, due, now, margin)
    planned: list[PlannedFire] = []
    if missed:
        planned.append(_summary(task, missed, counted, grace, now - grace))
    if keep is not None:
        planned.append(PlannedFire(keep))
    after = schedule.next_after(max(keep, now) if keep is not None else now)
    advance = Advance(task.id, task.version, after, tuple(planned), task.shards)
    if excluded:
        advance = _excluding(task, schedule, advance, excluded, cap)
    advance, more = _limited(task, advance, False)
    return _jittered(task, _carried(task, advance)), more


def _carried(task: PlanningRow, advance: Advance) -> Advance:
    """*advance* with the gap's MISSED summary carried by the fire that follows it, when
    that fire is one PENDING row (not a sharded or broadcast task's): one row instead of
    two. The fire's ``error_msg`` then says why the gap was missed, for the ``missed``
    event; it is not stored (the row's ``error_msg`` is its own run's)."""
    match advance.fires:
        case (gap, fire) if (
            task.shards == 1
            and not task.broadcast
            and gap.status == RunStatus.MISSED
            and fire.status == RunStatus.PENDING
            and gap.last_fire_time is not None
            and gap.last_fire_time < fire.fire_time
        ):
            carried = replace(
                fire,
                missed_count=gap.missed_count,
                missed_from=gap.fire_time,
                error_msg=gap.error_msg,
            )
            return replace(advance, fires=(carried,))
    return advance


def _passed_over(
    task: PlanningRow, schedule: Schedule, due: list[datetime], now: datetime, margin: timedelta
) -> tuple[list[datetime], datetime | None]:
    """Of *due* (the fires due by *now*, or the one fire due within *margin*), the fires
    passed over and the one to run: the latest, or, while the admission rule misses it
    with *margin*, its successor when that comes within *margin* (else none)."""
    grace = timedelta(milliseconds=task.misfire_grace_ms)
    missed, keep = list(due[:-1]), due[-1]
    while keep <= now:
        successor = schedule.next_after(keep)
        due_at, successor_due = _due_times(task, schedule, keep)
        if fire_verdict(task.misfire, grace, due_at, successor_due, now, margin=margin) is None:
            break
        missed.append(keep)
        if successor is None or successor > now + margin:
            return missed, None
        keep = successor
    return missed, keep


def _limited(task: PlanningRow, advance: Advance, more: bool) -> tuple[Advance, bool]:
    if task.max_runs is None:
        return advance, more
    return _bounded(advance, task.max_runs - task.fire_count), more


def _bounded(advance: Advance, left: int) -> Advance:
    """*advance* with at most *left* PENDING fires; finished when they are the last."""
    kept: list[PlannedFire] = []
    for fire in advance.fires:
        if fire.status == RunStatus.PENDING:
            if left <= 0:
                break
            left -= 1
        kept.append(fire)
    if left <= 0:
        return Advance(advance.task_id, advance.version, None, tuple(kept))
    return advance


def _plan(
    task: PlanningRow,
    schedule: Schedule,
    now: datetime,
    horizon: datetime,
    cap: int,
    ahead: tuple[int, datetime] | None,
) -> tuple[Advance, bool]:
    start = task.next_start_time
    if start is None:
        raise ValueError(f"task {task.name!r} has no next_start_time to advance from")
    if start > now:
        return _in_chunks(task, schedule, start, horizon, cap, ahead)
    grace = timedelta(milliseconds=task.misfire_grace_ms)
    late_before = now - grace
    if task.misfire == Misfire.CATCH_UP:
        due = schedule.fires_between(start, now, limit=2)
        on_time = len(due) <= 1 and (not due or due[0] >= late_before)
        return _in_chunks(task, schedule, start, horizon, cap, ahead if on_time else None)
    due, counted = _late_fires(schedule, start, min(horizon, now), cap)
    if len(due) <= 1 and (not due or due[-1] >= late_before):
        # on time: nothing to decide
        return _in_chunks(task, schedule, start, horizon, cap, ahead)
    # a fire whose successor is due too is superseded; the latest due runs once unless the
    # admission rule misses it (skip, past the grace)
    keep: datetime | None = due[-1]
    missed = due[:-1]
    if fire_verdict(task.misfire, grace, *_due_times(task, schedule, due[-1]), now) is not None:
        keep, missed = None, due
    planned: list[PlannedFire] = []
    if missed:
        planned.append(_summary(task, missed, counted, grace, late_before))
    if keep is not None:
        planned.append(PlannedFire(keep))
    # nothing written ahead: the next fires come once this one has started (a task whose
    # due fire waits is not planned, see TaskStore.due), so a cluster that fell behind
    # writes no row for a fire it would only miss
    after = schedule.next_after(now)
    return Advance(task.id, task.version, after, tuple(planned), task.shards, task.broadcast), False


def _due_times(
    task: PlanningRow, schedule: Schedule, fire: datetime
) -> tuple[datetime, datetime | None]:
    """When *fire* and its successor are due (their fire times plus their jitter)."""
    successor = schedule.next_after(fire)
    if successor is not None:
        successor += jitter_of(task.id, successor, task.jitter_ms)
    return fire + jitter_of(task.id, fire, task.jitter_ms), successor


def _jittered(task: PlanningRow, advance: Advance) -> Advance:
    """*advance* with each PENDING fire due its jitter after its fire time."""
    if task.jitter_ms <= 0:
        return advance
    fires = tuple(
        replace(f, jitter=jitter_of(task.id, f.fire_time, task.jitter_ms))
        if f.status == RunStatus.PENDING
        else f
        for f in advance.fires
    )
    return replace(advance, fires=fires)


def _excluding(
    task: PlanningRow, schedule: Schedule, advance: Advance, days: Days, cap: int
) -> Advance:
    """*advance* with its PENDING fires on excluded *days* replaced by one SKIPPED row per
    excluded stretch; a stretch that goes on past the fires planned is recorded whole and
    the advance moves on to the first fire after it."""
    fires = list(advance.fires)
    out: list[PlannedFire] = []
    next_time = advance.next_start_time
    i = 0
    while i < len(fires):
        fire = fires[i]
        end = None
        if fire.status == RunStatus.PENDING:
            end = excluded_until(days, fire.fire_time, task.tz)
        if end is None:
            out.append(fire)
            i += 1
            continue
        j = i
        while j < len(fires) and fires[j].status == RunStatus.PENDING and fires[j].fire_time < end:
            j += 1
        gap, counted = [f.fire_time for f in fires[i:j]], True
        if j == len(fires) and next_time is not None and next_time < end:
            gap, counted = _late_fires(schedule, fire.fire_time, end - _EPS, cap)
            next_time = schedule.next_after(end - _EPS)
        out.append(_excluded_row(task, gap, counted))
        i = j
    if out == fires:
        return advance
    return replace(advance, next_start_time=next_time, fires=tuple(out))


def _excluded_row(task: PlanningRow, gap: list[datetime], counted: bool) -> PlannedFire:
    first, last = gap[0], gap[-1]
    if not counted:
        what = f"fires from {_iso(first)} to {_iso(last)} (too many to count)"
    elif len(gap) == 1:
        what = f"1 fire at {_iso(first)}"
    else:
        what = f"{len(gap)} fires from {_iso(first)} to {_iso(last)}"
    reason = f"skipped {what}: excluded by calendar {task.exclude_calendar!r} ({task.tz})"
    return PlannedFire(first, RunStatus.SKIPPED, reason, len(gap) if counted else None, last)


def _in_chunks(
    task: PlanningRow,
    schedule: Schedule,
    start: datetime,
    horizon: datetime,
    cap: int,
    ahead: tuple[int, datetime] | None,
) -> tuple[Advance, bool]:
    """Every fire from *start* to *horizon* as PENDING, at most *cap* of them; then, with
    *ahead* ``(count, until)``, the next fires up to *until* until there are *count*."""
    fires = schedule.fires_between(start, horizon, limit=cap + 1)
    more = len(fires) > cap
    if more:
        next_time: datetime | None = fires[cap]
        fires = fires[:cap]
    else:
        if ahead is not None and len(fires) < ahead[0]:
            count, until = ahead
            fires += schedule.fires_between(horizon + _EPS, until, limit=count - len(fires))
        next_time = schedule.next_after(max(horizon, fires[-1]) if fires else horizon)
    planned = tuple(PlannedFire(fire) for fire in fires)
    advance = Advance(task.id, task.version, next_time, planned, task.shards, task.broadcast)
    return advance, more


def _late_fires(
    schedule: Schedule, start: datetime, end: datetime, cap: int
) -> tuple[list[datetime], bool]:
    """The late fires in [*start*, *end*] and whether they were all counted. Counted: every
    one, when there are fewer than *cap*. Else the gap's first fire and its last one or two
    (found by walking back from *end* in growing windows)."""
    first = schedule.fires_between(start, end, limit=cap)
    if len(first) < cap:
        return first, True
    floor = first[-1]
    span = timedelta(seconds=1)
    while True:
        low = max(floor, end - span)
        found = schedule.fires_between(low, end, limit=cap)
        if len(found) == cap:  # too dense to reach the end in one walk: go on from there
            floor = found[-1]
            continue
        if len(found) >= 2 or low == floor:  # two: the last one may run, the other is missed
            return [first[0], *(found[-2:] or [floor])], False
        span *= 16


def _summary(
    task: PlanningRow,
    missed: list[datetime],
    counted: bool,
    grace: timedelta,
    late_before: datetime,
) -> PlannedFire:
    first, last = missed[0], missed[-1]
    if counted:
        what = "1 fire" if len(missed) == 1 else f"{len(missed)} fires from {_iso(first)}"
        what += f" to {_iso(last)}" if len(missed) > 1 else f" at {_iso(first)}"
    else:
        what = f"fires from {_iso(first)} to {_iso(last)} (too many to count)"
    if last < late_before:
        why = f"not started within its misfire grace of {grace.total_seconds():g}s"
    else:
        why = SUPERSEDED
    reason = f"missed {what}: {why} (policy {task.misfire.value})"
    count = len(missed) if counted else None
    return PlannedFire(first, RunStatus.MISSED, reason, count, last)


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")
