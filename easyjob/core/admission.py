"""Whether and where a run may start: the one admission rule (pure).

Every component that lets a run start, or decides that it never will, asks this module:
the planner when it writes fires (:func:`fire_verdict`), the loader before it claims
(:func:`admit`), the dispatcher before it starts a run it holds (:func:`admit`) and when
the database says the run's task is busy (:func:`on_busy`), the strategies through the
nodes that may run a task (:func:`declares`), and the planner's split of the tasks
between nodes (:func:`planner_owner`). No policy is computed anywhere else.

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
- A *manual* run (a trigger) is never missed: it was asked for, and it waits out a pause.
  A *child* run (``parent=``) is missed only under ``skip``, past the grace.

Overlap (:func:`on_busy`): when another run of the task is RUNNING, a ``serial`` run waits
and a ``skip`` run is SKIPPED; ``allow`` runs are never held. (Whether the task is busy is
read under a lock in the database, see ``RunStore.start_many``; this says what follows.)

Placement (:func:`declares`, :func:`admit`): a node runs only the tasks its code declares
(a :class:`Catalog`: name and function, and the functions it allows for tasks added at run
time). A run of a task this node's code does not declare is left to another node. Which
node of those that declare a task takes a run is the strategy's choice among *those* nodes
only (see :mod:`easyjob.core.strategies`); past the overdue grace any of them may.

Time: a run is never started before its due time; the loader claims it at most ``lead``
before, and waits otherwise (``WAIT`` with the time to come back).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from functools import lru_cache

from easyjob.core.records import ORIGIN_RUNTIME, Candidate, Run
from easyjob.core.schedule import Schedule, build_schedule
from easyjob.core.states import Misfire, Overlap, Trigger

__all__ = [
    "SUPERSEDED",
    "Catalog",
    "Decision",
    "RunFacts",
    "ScheduleKey",
    "Verdict",
    "admit",
    "declares",
    "exclusive",
    "facts_of",
    "fire_verdict",
    "misfire",
    "on_busy",
    "planner_owner",
    "schedule_of",
    "start_deadline",
    "superseded_reason",
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


@dataclass(frozen=True)
class Catalog:
    """What a node's code declares: task name -> function, and the functions it allows
    (``@runnable``) for tasks added at run time. Stored once per distinct catalog, under
    its :attr:`digest`, and named by every node row that has it."""

    tasks: Mapping[str, str] = field(default_factory=dict)
    runnable: frozenset[str] = frozenset()

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.body().encode()).hexdigest()[:40]

    def body(self) -> str:
        """The canonical JSON text stored for this catalog."""
        return json.dumps(
            {"tasks": dict(sorted(self.tasks.items())), "runnable": sorted(self.runnable)},
            separators=(",", ":"),
        )

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


def planner_owner(task_id: int, declaring: Sequence[str]) -> str | None:
    """The node (of *declaring*, the live nodes that declare the task, sorted) that plans
    the task's fires: ``task id mod their number``. None when no live node declares it."""
    if not declaring:
        return None
    return declaring[task_id % len(declaring)]


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


def _successor(run: RunFacts) -> datetime | None:
    """The fire that supersedes *run*: the next fire of its schedule, when *run* is a fire of
    that schedule (a cron or interval fire, or a retry or recovery of one; a trigger's time
    is not on the schedule, and a child is never superseded); else None."""
    if run.schedule is None or run.triggered_by in (Trigger.PARENT, Trigger.MANUAL):
        return None
    if run.triggered_by != Trigger.CRON and run.schedule.fires_between(
        run.fire_time, run.fire_time, limit=1
    ) != [run.fire_time]:
        return None
    return run.schedule.next_after(run.fire_time)


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


def exclusive(overlap: Overlap) -> bool:
    """Whether runs of a task with *overlap* take turns: at most one RUNNING at a time (the
    shards of one fire together), so a run must find its task free to start (``serial``,
    ``skip``); ``allow`` runs never wait for each other."""
    return overlap != Overlap.ALLOW


def on_busy(overlap: Overlap) -> Decision:
    """What follows for a run whose task has another run RUNNING (see the module
    docstring): ``skip`` is SKIPPED, ``serial`` waits (and so does an ``allow`` run held
    back for another reason, such as its start deadline: it is asked again shortly)."""
    if overlap == Overlap.SKIP:
        return Decision(Verdict.SKIP, "skipped: the previous run is still running")
    return Decision(Verdict.WAIT, "waits for the previous run to end")


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
    )


def _stored_schedule(key: ScheduleKey) -> Schedule | None:
    """The schedule of a run's task row, or None when the row holds one that cannot be
    parsed (edited by hand): such a task's runs are judged by their grace alone, and the
    planner sets the task aside and says why, once per change of the row."""
    try:
        return schedule_of(key)
    except Exception:  # a bad row must not stop the admission of every other task's runs
        return None
