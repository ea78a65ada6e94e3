"""Whether and where a run may start: the one admission rule (pure).

Every component that lets a run start, or decides that it never will, asks this module:
the planner when it writes fires (:func:`fire_verdict`) and, when it is behind, which of
them it writes already started on its own node (:func:`starts_when_written`), the loader
before it claims (:func:`admit`), the dispatcher before it starts a run it holds
(:func:`admit`) and when the database says the run's task is busy (:func:`on_busy`), the
strategies through the nodes that may run a task (:func:`declares`), and the planner's
split of the tasks between nodes (:func:`planner_owner`). No policy is computed anywhere
else.

The rules, given database time *now*:

Misfire (:func:`misfire`), for a run of a task with a schedule:

- A *scheduled* run (a cron or interval fire, or a retry or recovery of one) whose
  *successor* is due (the schedule's next fire after its fire time is at or before *now*)
  is MISSED under ``fire_once`` and ``skip``: it was superseded. The successor is computed
  from the schedule, not looked up as a row, so the rule holds whatever rows exist: after
  any outage each task runs once, its latest due fire.
- A run later than its task's misfire grace is MISSED under ``skip``; under ``fire_once``
  it runs once, now.
- ``catch_up`` runs every fire, oldest first.
- The latest due fire of a schedule under ``fire_once`` or ``skip`` may start before older
  runs of its task still PENDING and not read yet (:func:`overtakes`): every older fire of
  the schedule is superseded by it, so starting it first changes no run's fate. A node back
  from an outage starts each task's latest fire first and marks the fires written ahead
  before the outage MISSED after, instead of sweeping them all first.
- A *manual* run (a trigger) is never missed: it was asked for, and it waits out a pause.
  A *child* run (``parent=``) is missed only under ``skip``, past the grace.

Overlap and concurrency (:func:`run_limit`, :func:`held_back`, :func:`on_busy`): a task's
*limit* is how many of its runs may be RUNNING at once across the cluster: ``max_running``
when the task sets it, else 1 for ``serial`` and ``skip`` and none for ``allow``. The shards
of one fire count as one run (they run side by side). A run that finds its task at the
limit waits under ``serial`` and ``allow`` and is SKIPPED under ``skip``. A waiting run
stays subject to the misfire rule: it is MISSED when superseded (``fire_once``, ``skip``) or,
under ``skip``, past its grace, and waits on under ``catch_up`` and when triggered. (How
many are RUNNING is read under a lock of the task rows in the database, see
``RunStore.start_many``; this says what follows.)

Priority (:func:`effective_priority`, :func:`start_order`): when a node has more runs due
than it can start, it starts them in order of *effective* priority, highest first: the
run's priority (its task's, or the one its trigger gave) plus one for each
:data:`AGING_STEP` it has been due, ties by due time. Aging bounds every run's wait: one of
priority *p* due while runs of priority *q* > *p* keep coming is started at the latest once
it has waited ``(q - p) * AGING_STEP`` (then it is ahead of every fresher run of *q*), plus
the time the node takes to start the older ones ahead of it. Equal priorities keep the due
order, so a cluster that sets no priority runs exactly as before. A node that can claim no
more (its workers busy, due runs waiting for them) hands a waiting run back for a PENDING
one of higher priority (:func:`outranked`), so a high run due later is not stuck behind the
low runs a node claimed first.

Placement (:func:`declares`, :func:`admit`): a node runs only the tasks its code declares
(a :class:`Catalog`: name and function, and the functions it allows for tasks added at run
time). A run of a task this node's code does not declare is left to another node. Which
node of those that declare a task takes a run is the strategy's choice among *those* nodes
only (see :mod:`easyjob.core.strategies`); past the overdue grace any of them may.

Join (:func:`join`): a child of several parents gets one run per fire time, made when the
last of its parents succeeds for that fire time (a sharded parent: every shard), or one
SKIPPED row when a parent fails for good (after its retries); once either is written,
nothing more for that fire time. The store asks it under a lock on the child's task row.

Time: a run is never started before its due time; the loader claims it at most ``lead``
before, and waits otherwise (``WAIT`` with the time to come back).

Jitter (:func:`jitter_of`): a task with ``jitter=`` has each cron or interval fire due a
delay after its fire time, ``0 <= delay < jitter``, drawn from a hash of the task's id and
the fire time: every node that writes or reads the fire computes the same delay, and the
run's ``due_time`` is the fire time plus it (never earlier). Lateness and the misfire grace
are measured from that due time, so a run is never late because of its jitter; a fire is
superseded once its successor's *due* time has come.

Calendars (:func:`excluded_until`): a fire whose day, in its task's time zone, is one of
the days its calendar excludes is not run; the planner records the fires of one excluded
stretch as one SKIPPED row (:mod:`easyjob.core.planner`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from functools import cached_property, lru_cache
from typing import TypeVar
from zoneinfo import ZoneInfo

from easyjob.core.ids import dealt
from easyjob.core.records import ORIGIN_RUNTIME, Advance, Candidate, PlanningRow, Run
from easyjob.core.schedule import Schedule, build_schedule
from easyjob.core.states import Misfire, Overlap, RunStatus, Trigger

__all__ = [
    "AGING_STEP",
    "SUPERSEDED",
    "Catalog",
    "Days",
    "Decision",
    "JoinFacts",
    "RunFacts",
    "ScheduleKey",
    "Slot",
    "Verdict",
    "admit",
    "declares",
    "effective_priority",
    "excluded_until",
    "exclusive",
    "facts_of",
    "fire_verdict",
    "held_back",
    "held_reason",
    "jitter_of",
    "join",
    "misfire",
    "on_busy",
    "outranked",
    "overtakes",
    "planner_owner",
    "priority_tiers",
    "run_limit",
    "schedule_of",
    "start_deadline",
    "start_order",
    "starts_when_written",
    "superseded_reason",
    "waits_for_a_worker",
]

#: Why a superseded fire was MISSED.
SUPERSEDED = "not started before a later fire of the task was due"


class Verdict(StrEnum):
    START = "start"  # may start now (or at its due time, within the lead)
    WAIT = "wait"  # not yet: come back at ``Decision.until`` (or when the task is free)
    ELSEWHERE = "elsewhere"  # another node's to run
    MISS = "miss"  # ends MISSED, with the reason
    SKIP = "skip"  # ends SKIPPED, with the reason


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str | None = None
    until: datetime | None = None


START = Decision(Verdict.START)

#: A task's schedule as stored: (cron_expr, tz, every_ms, anchor_time, starts_at, ends_at).
ScheduleKey = tuple[str | None, str, int | None, datetime | None, datetime | None, datetime | None]


@lru_cache(maxsize=4096)
def schedule_of(key: ScheduleKey) -> Schedule | None:
    """The schedule a task row's columns describe (cached: a schedule is immutable and
    parsing a cron costs more than using it); None for a child or manual-only task."""
    return build_schedule(*key)


#: Tasks per part of a catalog's body as it is hashed (see :meth:`Catalog.digest`).
_BODY_PART = 1000


@dataclass(frozen=True)
class Catalog:
    """What a node's code declares: task name -> function, and the functions it allows
    (``@runnable``) for tasks added at run time. Stored once per distinct catalog, under
    its :attr:`digest`, and named by every node row that has it."""

    tasks: Mapping[str, str] = field(default_factory=dict)
    runnable: frozenset[str] = frozenset()

    @cached_property
    def digest(self) -> str:
        """The catalog's name: a hash of its :meth:`body` (made once: a node's catalog may
        name 100,000 tasks; the body itself is made again only when it must be stored),
        hashed part by part: made whole, it took 0.24 s of CPU for 100,000 tasks against
        0.10, and its temporaries raised the node's memory by 156 B a task (2026-11-29)."""
        digest = hashlib.sha256()
        for part in self._body_parts():
            digest.update(part.encode())
        return digest.hexdigest()[:40]

    def body(self) -> str:
        """The canonical JSON text stored for this catalog."""
        return "".join(self._body_parts())

    def _body_parts(self) -> Iterator[str]:
        """:meth:`body` in parts of :data:`_BODY_PART` tasks each: ``json.dumps`` of
        ``{"tasks": {...sorted...}, "runnable": [...sorted...]}``, compact."""
        names = sorted(self.tasks)
        yield '{"tasks":{'
        for start in range(0, len(names), _BODY_PART):
            part = {name: self.tasks[name] for name in names[start : start + _BODY_PART]}
            yield ("," if start else "") + json.dumps(part, separators=(",", ":"))[1:-1]
        yield '},"runnable":' + json.dumps(sorted(self.runnable), separators=(",", ":")) + "}"

    @classmethod
    def from_body(cls, text: str) -> Catalog:
        data = json.loads(text)
        return cls(dict(data.get("tasks", {})), frozenset(data.get("runnable", ())))


def declares(catalog: Catalog | None, name: str, func: str, origin: str) -> bool:
    """Whether a node with *catalog* may run task *name* calling *func*: its code declares
    that name with that function, or the task was added at run time under a name its code
    does not declare, for a function its code allows. A node that published no catalog (a
    node of an earlier release) is taken to declare every task, as it was then."""
    if catalog is None:
        return True
    if origin == ORIGIN_RUNTIME:
        return name not in catalog.tasks and func in catalog.runnable
    return catalog.tasks.get(name) == func


def planner_owner(task_id: int, declaring: Sequence[str], id_step: int = 1) -> str | None:
    """The node (of *declaring*, the live nodes that declare the task, sorted) that plans
    the task's fires: ``task id mod their number`` (the id's ordinal, ids *id_step* apart:
    :mod:`easyjob.core.ids`). None when no live node declares it."""
    if not declaring:
        return None
    return declaring[dealt(task_id, len(declaring), id_step)]


@dataclass(frozen=True)
class RunFacts:
    """What the rule needs of one run and its task."""

    fire_time: datetime
    due_time: datetime
    triggered_by: Trigger
    misfire: Misfire
    grace: timedelta
    overlap: Overlap = Overlap.SERIAL
    schedule: Schedule | None = None
    #: the task's id and ``jitter_ms``: the due time of its successor (see :func:`jitter_of`)
    task_id: int = 0
    jitter_ms: int = 0


def misfire(run: RunFacts, now: datetime) -> Decision | None:
    """MISS (with the reason) when the misfire policy says *run* must not start at *now*;
    None when it may (see the module docstring)."""
    if run.misfire == Misfire.CATCH_UP or run.triggered_by == Trigger.MANUAL:
        return None
    if run.fire_time < now and (successor := _successor(run)) is not None and successor <= now:
        return Decision(Verdict.MISS, superseded_reason(run.misfire))
    late = now - run.due_time
    if late <= run.grace or run.misfire == Misfire.FIRE_ONCE:
        return None
    return Decision(
        Verdict.MISS,
        f"missed: would have started {late.total_seconds():.1f}s late, past its misfire "
        f"grace of {run.grace.total_seconds():g}s (policy {run.misfire.value})",
    )


def overtakes(run: RunFacts, now: datetime) -> bool:
    """Whether *run* may be claimed before older PENDING runs of its task that have not been
    read (a backlog in due order: the fires written ahead before an outage, due before the
    present ones): a fire of its task's schedule (``cron``), due by *now*, under
    ``fire_once`` or ``skip``. Every older fire of that schedule (and retry or recovery of
    one) is superseded once it is due (:func:`misfire`; a jitter longer than the schedule's
    period aside), so starting it first changes no run's fate, only the moment the backlog
    is marked MISSED. A ``catch_up`` fire keeps due order (its task runs every fire, oldest
    first), and so do triggers, children, retries and recoveries. An older trigger or child
    of the same ``serial`` task, which is never superseded, may start after it."""
    return (
        run.triggered_by == Trigger.CRON
        and run.misfire != Misfire.CATCH_UP
        and run.schedule is not None
        and run.due_time <= now
    )


def _successor(run: RunFacts) -> datetime | None:
    """When the fire that supersedes *run* is due: the next fire of its schedule (plus its
    jitter), when *run* is a fire of that schedule (a cron or interval fire, or a retry or
    recovery of one; a trigger's time is not on the schedule, and a child is never
    superseded); else None."""
    if run.schedule is None or run.triggered_by in (Trigger.PARENT, Trigger.MANUAL):
        return None
    if run.triggered_by != Trigger.CRON and run.schedule.fires_between(
        run.fire_time, run.fire_time, limit=1
    ) != [run.fire_time]:
        return None
    successor = run.schedule.next_after(run.fire_time)
    if successor is None:
        return None
    return successor + jitter_of(run.task_id, successor, run.jitter_ms)


def start_deadline(run: RunFacts) -> datetime | None:
    """The instant from which :func:`misfire` misses *run*: the next fire of its schedule
    (a scheduled run, under ``fire_once`` or ``skip``) or, under ``skip``, the end of its
    grace; None when nothing would miss it. A start is written only before it, checked by
    the database when the write lands (a write retried through an outage must not start a
    run superseded meanwhile)."""
    if run.misfire == Misfire.CATCH_UP or run.triggered_by == Trigger.MANUAL:
        return None
    successor = _successor(run)
    ends = [] if successor is None else [successor]
    if run.misfire == Misfire.SKIP:
        ends.append(run.due_time + run.grace)
    return min(ends) if ends else None


def fire_verdict(
    policy: Misfire,
    grace: timedelta,
    fire: datetime,
    successor: datetime | None,
    now: datetime,
    *,
    margin: timedelta = timedelta(0),
) -> Decision | None:
    """:func:`misfire` for a fire the planner is about to write: MISS or None (run it).
    *fire* and *successor* are due times (a fire time plus its jitter).

    With *margin* (a planner whose cluster is behind, see :mod:`easyjob.core.pacing`), a
    fire whose successor is due within *margin* of *now* is superseded already: written
    now, it would wait behind the cluster's backlog and be missed before it started, so the
    successor is written in its place."""
    if successor is not None and successor <= now + margin and policy != Misfire.CATCH_UP:
        return Decision(Verdict.MISS, superseded_reason(policy))
    late = now - fire
    if policy != Misfire.SKIP or late <= grace:
        return None
    return Decision(
        Verdict.MISS,
        f"missed: not started within its misfire grace of {grace.total_seconds():g}s "
        f"(policy {policy.value})",
    )


def run_limit(overlap: Overlap, max_running: int | None = None) -> int | None:
    """How many runs of a task with *overlap* and *max_running* may be RUNNING at once
    across the cluster (the shards of one fire counting as one): *max_running* when given,
    else 1 for ``serial`` and ``skip`` (``serial`` is ``max_running=1``), and None (no
    limit) for ``allow``."""
    if max_running is not None:
        return max_running
    return None if overlap == Overlap.ALLOW else 1


def exclusive(overlap: Overlap, max_running: int | None = None) -> bool:
    """Whether runs of a task with *overlap* and *max_running* are limited (see
    :func:`run_limit`): a run must find a free place under its task's limit to start.
    Without *max_running*, ``serial`` and ``skip`` runs take turns (at most one RUNNING, the
    shards of one fire together); ``allow`` runs never wait for each other."""
    return run_limit(overlap, max_running) is not None


#: A RUNNING run, or one asking to start, as the limit counts it: (run id, fire time, shards).
Slot = tuple[int, datetime, int]


def held_back(limit: int, running: Sequence[Slot], asking: Sequence[Slot]) -> set[int]:
    """Of *asking* (runs of one task, in the order they are to start), the ids that may not
    start because *limit* runs of the task would then be RUNNING; *running* are the runs
    RUNNING now. The shards of one fire (``shards > 1``, the same fire time) count as one
    run: a shard whose fire already runs joins it. A run is never counted against itself
    (a start retried after its reply was lost finds its own row RUNNING)."""
    asked = {run_id for run_id, _, _ in asking}
    taken = {_unit(s) for s in running if s[0] not in asked}
    out: set[int] = set()
    for slot in asking:
        unit = _unit(slot)
        if unit in taken:
            continue
        if len(taken) >= limit:
            out.add(slot[0])
        else:
            taken.add(unit)
    return out


def _unit(slot: Slot) -> tuple[str, object]:
    """What one place under the limit holds: a fire (all its shards) or a single run."""
    run_id, fire_time, shards = slot
    return ("fire", fire_time) if shards > 1 else ("run", run_id)


def on_busy(overlap: Overlap, max_running: int | None = None) -> Decision:
    """What follows for a run whose task is at its limit (see the module docstring):
    ``skip`` is SKIPPED, ``serial`` and ``allow`` wait (an ``allow`` run may also be held
    back for another reason, such as its start deadline: it is asked again shortly)."""
    if max_running is None:
        if overlap == Overlap.SKIP:
            return Decision(Verdict.SKIP, "skipped: the previous run is still running")
        return Decision(Verdict.WAIT, "waits for the previous run to end")
    full = f"{max_running} run(s) of its task are running (max_running {max_running})"
    if overlap == Overlap.SKIP:
        return Decision(Verdict.SKIP, f"skipped: {full}")
    return Decision(Verdict.WAIT, f"waits: {full}")


def held_reason(missed: str, overlap: Overlap, max_running: int | None) -> str:
    """The ``error_msg`` of a run MISSED (for *missed*) while it waited for its task's limit
    set by *max_running*: the misfire reason, and why it had not started."""
    if max_running is None:
        return missed
    return f"{missed}; it {on_busy(overlap, max_running).reason}"


#: How long a due run waits for its effective priority to grow by one (see
#: :func:`effective_priority`).
AGING_STEP = timedelta(seconds=10)


def effective_priority(priority: int, due_time: datetime, now: datetime) -> int:
    """*priority* plus one for each whole :data:`AGING_STEP` the run has been due at *now*
    (nothing before it is due): what orders the runs a node cannot all start at once."""
    if now <= due_time:
        return priority
    return priority + (now - due_time) // AGING_STEP


_Ranked = TypeVar("_Ranked", Candidate, Run)


def start_order(runs: Sequence[_Ranked], now: datetime) -> list[_Ranked]:
    """*runs* in the order a node starts them when it cannot start them all at *now*:
    highest :func:`effective_priority` first, then earliest due, then by id. Runs of equal
    priority keep their due order."""
    return sorted(
        runs, key=lambda r: (-effective_priority(r.priority, r.due_time, now), r.due_time, r.id)
    )


def outranked(
    waiting: Sequence[Run], pending: Sequence[Candidate], now: datetime
) -> list[tuple[Run, Candidate]]:
    """For a node that can claim no more (its workers busy, runs due waiting for them):
    pairs of a run waiting here and a PENDING run that should take its place at *now*, the
    best pending run with the worst waiting one first. A pending run outranks a waiting
    one when both its priority and its :func:`effective_priority` are higher: a higher
    priority displaces, aging only protects (a run aged to the level of fresher runs of
    higher priority keeps its place), and runs of equal priority are never swapped (a
    cluster that sets no priority claims as before)."""
    best = start_order(pending, now)
    worst = list(reversed(start_order(waiting, now)))
    pairs: list[tuple[Run, Candidate]] = []
    for held, due in zip(worst, best, strict=False):
        if due.priority <= held.priority or effective_priority(
            due.priority, due.due_time, now
        ) <= effective_priority(held.priority, held.due_time, now):
            break
        pairs.append((held, due))
    return pairs


def priority_tiers(runs: Sequence[_Ranked], now: datetime) -> list[list[_Ranked]]:
    """*runs* in :func:`start_order`, cut into groups of equal effective priority (highest
    first): a node takes a whole group before any of the next."""
    tiers: list[list[_Ranked]] = []
    last: int | None = None
    for run in start_order(runs, now):
        level = effective_priority(run.priority, run.due_time, now)
        if level != last:
            tiers.append([])
            last = level
        tiers[-1].append(run)
    return tiers


def admit(
    run: RunFacts,
    now: datetime,
    *,
    declared_here: bool = True,
    lead: timedelta = timedelta(0),
) -> Decision:
    """Whether *run* may start on this node at database time *now*: MISS when the misfire
    policy says it never starts; ELSEWHERE when this node's code does not declare its task;
    WAIT until ``due_time - lead`` when it is not due yet; else START."""
    missed = misfire(run, now)
    if missed is not None:
        return missed
    if not declared_here:
        return Decision(Verdict.ELSEWHERE, "its task is not declared by this node's code")
    if run.due_time > now + lead:
        return Decision(Verdict.WAIT, until=run.due_time - lead)
    return START


def starts_when_written(
    advance: Advance, task: PlanningRow, by: datetime, *, first_come: bool, held_here: bool
) -> bool:
    """Whether a behind planner (see :mod:`easyjob.core.pacing`) may write the fire of
    *advance* (of *task*) already started by its own node: one row written where an
    insert, then a claim and start, make two. So it may when the advance writes one fire
    to run, as one row (not a sharded or broadcast task's, nor a ``catch_up`` task's
    several), due by database time *by* (now plus the loader's claim lead: a worker holds
    only a running job, or one about to run); the strategy
    lets the first node with a free worker take a run (*first_come*: ``default``); and no
    run of its task is *held_here* (waiting or running on this node) if the task is limited
    (``serial``, ``skip``, ``max_running``: the loader leaves such a fire PENDING too).

    The caller reserves a free worker of its node for the fire, and the write checks a
    limited task's limit (:func:`held_back`, ``TaskStore.advance_and_start``): a task at
    its limit gets its fire PENDING, to be claimed once a run has ended."""
    to_run = [fire for fire in advance.fires if fire.status == RunStatus.PENDING]
    return (
        len(to_run) == 1
        and to_run[0].due_time <= by
        and _one_run_here(task, advance.shards, advance.broadcast, first_come, held_here)
    )


def waits_for_a_worker(
    task: PlanningRow, by: datetime, *, first_come: bool, held_here: bool
) -> bool:
    """Whether a behind planner with no free worker left to reserve leaves due *task* for a
    later poll without planning it: what :func:`starts_when_written` asks of the task row
    itself holds (its next fire due by *by*, one run per fire, not broadcast, no limited run
    held here, a ``first_come`` strategy), so its fire would be written started on a worker
    this node does not have; its plan would be made and thrown away (at saturation half of
    a planner's due tasks were so: 14,112 of 28,085). A ``catch_up`` task is planned all
    the same (its advance may write several fires, which are not written started)."""
    return (
        task.next_start_time is not None
        and task.next_start_time <= by
        and task.misfire != Misfire.CATCH_UP
        and _one_run_here(task, task.shards, task.broadcast, first_come, held_here)
    )


def _one_run_here(
    task: PlanningRow, shards: int, broadcast: bool, first_come: bool, held_here: bool
) -> bool:
    """What both :func:`starts_when_written` and :func:`waits_for_a_worker` ask: a fire of
    *task* is one run (*shards* 1, not *broadcast*), the strategy lets the first node with a
    free worker take it, and no run of a limited task is *held_here*."""
    return (
        first_come
        and shards == 1
        and not broadcast
        and not (held_here and exclusive(task.overlap, task.max_running))
    )


@dataclass(frozen=True)
class JoinFacts:
    """What the join rule needs of one child of several parents and one fire time: its
    *parents* (task ids), those that *succeeded* for the fire time, the parent run that
    just *failed* for good (if that is what asks), and whether the child already has a row
    for the fire time (*made*: its run, or a SKIPPED row)."""

    parents: tuple[int, ...]
    succeeded: frozenset[int] = frozenset()
    failed: int | None = None
    made: bool = False


def join(facts: JoinFacts) -> Decision | None:
    """For a child of several parents and one fire time: START (write its run), SKIP (a
    parent failed for good: write a SKIPPED row with the reason), WAIT (a parent has not
    succeeded yet: write nothing; its end asks again), or None when the child's row for
    the fire time exists already (exactly one per fire time, whoever asks)."""
    if facts.made:
        return None
    if facts.failed is not None:
        return Decision(Verdict.SKIP, f"parent run {facts.failed} failed")
    waiting = [parent for parent in facts.parents if parent not in facts.succeeded]
    if waiting:
        ids = ", ".join(map(str, waiting))
        return Decision(Verdict.WAIT, f"waits for parent task(s) {ids}")
    return START


def superseded_reason(policy: Misfire) -> str:
    """The ``error_msg`` of one run MISSED because a later fire of its task was due first."""
    return f"missed: {SUPERSEDED} (policy {policy.value})"


def facts_of(run: Candidate | Run) -> RunFacts:
    """The :class:`RunFacts` of a run as read (a candidate, or a run held)."""
    return RunFacts(
        fire_time=run.fire_time,
        due_time=run.due_time,
        triggered_by=run.triggered_by,
        misfire=run.misfire,
        grace=run.grace,
        overlap=run.overlap,
        schedule=_stored_schedule(run.schedule_key),
        task_id=run.task_id,
        jitter_ms=run.jitter_ms,
    )


def _stored_schedule(key: ScheduleKey) -> Schedule | None:
    """The schedule of a run's task row, or None when the row holds one that cannot be
    parsed (edited by hand): such a task's runs are judged by their grace alone, and the
    planner sets the task aside and says why, once per change of the row."""
    try:
        return schedule_of(key)
    except Exception:  # a bad row must not stop the admission of every other task's runs
        return None


def jitter_of(task_id: int, fire: datetime, jitter_ms: int) -> timedelta:
    """The jitter of task *task_id*'s fire at *fire*: whole milliseconds in
    ``[0, jitter_ms)`` (zero when *jitter_ms* is 0), drawn from a hash of the two, so every
    node computes the same delay for the same fire, and fires spread evenly over the range."""
    if jitter_ms <= 0:
        return timedelta(0)
    seed = f"{task_id}:{fire.astimezone(UTC).isoformat()}".encode()
    drawn = int.from_bytes(hashlib.sha256(seed).digest()[:8], "big")
    return timedelta(milliseconds=drawn % jitter_ms)


#: A calendar's excluded days: ``(first_day, last_day)`` ranges, each inclusive.
Days = Sequence[tuple[date, date]]


def excluded_until(days: Days, fire: datetime, tz: str) -> datetime | None:
    """When *fire* falls, in time zone *tz*, on a day of *days*: the end of the excluded
    stretch it falls in (UTC: the start of the first local day after it that *days* does not
    exclude; ranges that overlap or touch make one stretch). None when the day is not
    excluded. The start of a local day is its midnight, or the first instant after it when
    midnight does not exist (a DST gap at midnight)."""
    zone = ZoneInfo(tz)
    day = fire.astimezone(zone).date()
    if not any(first <= day <= last for first, last in days):
        return None
    end = day
    for first, last in sorted(days):
        if first <= end + timedelta(days=1) and last > end:
            end = last
    after = end + timedelta(days=1)
    return datetime.combine(after, time(0), zone).astimezone(UTC)
