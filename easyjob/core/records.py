"""Frozen records passed between the store and the node (pure; no database code)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple, Self, TypeVar, cast

from easyjob.core.states import (
    Misfire,
    NodeStatus,
    Overlap,
    RunStatus,
    TaskStatus,
    Trigger,
    by_value,
)
from easyjob.errors import TaskDefinitionError, shown

if TYPE_CHECKING:
    from easyjob.core.schedule import Schedule

__all__ = [
    "MAX_RUNNING",
    "MAX_SHARDS",
    "ORIGIN_CODE",
    "ORIGIN_RUNTIME",
    "PRIORITY_RANGE",
    "Advance",
    "Advanced",
    "Candidate",
    "HeldRun",
    "HistoryRow",
    "Missed",
    "NodeRow",
    "PlannedFire",
    "Run",
    "TaskRow",
    "TaskSpec",
    "check_priority",
    "from_values",
]

R = TypeVar("R")


def from_values(cls: type[R], values: dict[str, Any]) -> R:
    """An instance of the frozen dataclass *cls* (without slots) holding *values*: a fresh
    dict of its fields, valid already (a database row's), taken as the instance's own, the
    fields left out at their defaults. Its generated ``__init__`` is not run: a frozen
    dataclass's sets each field through ``object.__setattr__``, 8.2 µs for a :class:`Run`'s
    34 fields against 3.1 µs made so, and ``dataclasses.replace`` 17 µs (``timeit``,
    2026-11-29); the hot reads make one per row, and every run is made at least once. The
    instance stays frozen and compares as one made by ``__init__``."""
    names, defaults = _fields_of(cast(Hashable, cls))
    if len(values) != len(names):
        wrong = (values.keys() - names) | (names - values.keys() - defaults.keys())
        if wrong:
            raise TypeError(f"{cls.__name__}: fields unknown or missing: {sorted(wrong)}")
        values = {**defaults, **values}
    record = object.__new__(cls)
    object.__setattr__(record, "__dict__", values)
    return record


@cache
def _fields_of(cls: Any) -> tuple[frozenset[str], dict[str, Any]]:
    """The field names of the dataclass *cls*, and the defaults of those that have one (a
    field made by a factory has none here: :func:`from_values` must be given it)."""
    found = dataclasses.fields(cls)
    defaults = {f.name: f.default for f in found if f.default is not dataclasses.MISSING}
    return frozenset(f.name for f in found), defaults


_MAX_NAME = 255
#: Most runs one fire of a sharded task becomes (each a row, claimed on its own).
MAX_SHARDS = 1000

#: ``easy_job_task.origin``: declared by a node's code, or added at run time.
ORIGIN_CODE = "code"
ORIGIN_RUNTIME = "runtime"

#: The kwargs of every task that has none: one empty dict shared, not one per task (64 B
#: each: 6 MB for 100,000 tasks, issue 25). Only ever read (``Mapping``); never mutated.
_NO_KWARGS: dict[str, Any] = {}


def _ms(value: timedelta | None) -> int | None:
    return None if value is None else round(value.total_seconds() * 1000)


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """A task as the code declares it; upserted into ``easy_job_task`` by name.

    Slotted (no ``__dict__``): a node may hold 100,000 of them. A new setting is a field
    with a default, validated in ``__post_init__`` and written by :meth:`columns` (the
    task row's column of the same name): registration compares exactly what
    :meth:`columns` returns, so a field it leaves out is never written again once the row
    exists.

    *cron_dialect* (``'unix'``, ``'spring'``, ``'quartz'``; ``None``: by field count) is
    stored in ``cron_expr`` as a marker (``'quartz: 0 0 12 ? * 2-6'``), so every node
    reads the row the same way; see :attr:`cron_text`.

    *parents* names every parent task (a child of several parents runs once per fire time
    for which all of them succeeded: a join, see ``docs/policies.md``); *parent* is the
    first of them (``easy_job_task.pid``). Give either: the other is derived.
    """

    name: str
    func: str
    cron: str | None = None
    tz: str = "UTC"
    parent: str | None = None
    misfire: Misfire = Misfire.FIRE_ONCE
    misfire_grace: timedelta = timedelta(seconds=60)
    overlap: Overlap = Overlap.SERIAL
    retries: int = 0
    retry_delay: timedelta = timedelta(seconds=1)
    timeout: timedelta | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    enabled: bool = True
    cron_dialect: str | None = None
    every: timedelta | None = None
    start: datetime | None = None
    end: datetime | None = None
    max_runs: int | None = None
    accepts: tuple[str, ...] = ()
    shards: int = 1
    broadcast: bool = False
    parents: tuple[str, ...] = ()
    #: each fire is due a delay in [0, jitter) after its fire time (see admission.jitter_of)
    jitter: timedelta = timedelta(0)
    #: the calendar (``easy_job_calendar.name``) whose days this task's fires skip
    exclude: str | None = None
    max_running: int | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        key = _settings_key(self)
        settled = _VALIDATED.get(key) if key is not None else None
        if settled is not None:  # the same settings as a task already validated
            _check_name_and_func(self)
            for name, value in settled:
                object.__setattr__(self, name, value)
            return
        self._validate()
        if key is not None and len(_VALIDATED) < _VALIDATED_MAX:
            _VALIDATED[key] = tuple((name, getattr(self, name)) for name in _NORMALISED)

    def _validate(self) -> None:
        from easyjob.core.cron import CronSchedule, parse_tz

        what = f"task {shown(self.name)}"
        _check_parents(self, what)
        _check_schedule(self, what)
        _check_jitter_and_calendar(self, what)
        _check_name_and_func(self)
        if self.cron is None:
            parse_tz(self.tz)
        else:
            CronSchedule.parse(self.cron, self.tz, self.cron_dialect)
        object.__setattr__(self, "misfire", _enum(Misfire, self.misfire, what, "misfire"))
        object.__setattr__(self, "overlap", _enum(Overlap, self.overlap, what, "overlap"))
        if not isinstance(self.retries, int) or isinstance(self.retries, bool) or self.retries < 0:
            raise TaskDefinitionError(
                f"{what}: retries must be an integer >= 0, got {self.retries!r}"
            )
        if (
            not isinstance(self.shards, int)
            or isinstance(self.shards, bool)
            or not 1 <= self.shards <= MAX_SHARDS
        ):
            raise TaskDefinitionError(
                f"{what}: shards must be an integer from 1 to {MAX_SHARDS}, got {self.shards!r}"
            )
        _check_limits(self, what)
        if not isinstance(self.broadcast, bool):
            raise TaskDefinitionError(
                f"{what}: broadcast must be True or False, got {self.broadcast!r}"
            )
        if self.broadcast and self.shards > 1:
            raise TaskDefinitionError(
                f"{what}: broadcast and shards cannot be combined: a broadcast fire is already "
                "one run per node"
            )
        if self.broadcast and self.cron is None:
            raise TaskDefinitionError(
                f"{what}: a broadcast task needs a cron expression of its own, not a parent"
            )
        for name in ("misfire_grace", "retry_delay", "timeout"):
            value = getattr(self, name)
            if value is None and name == "timeout":
                continue
            if not isinstance(value, timedelta) or value < timedelta(0):
                raise TaskDefinitionError(f"{what}: {name} must be a timedelta >= 0, got {value!r}")
        if self.timeout is not None and self.timeout <= timedelta(0):
            raise TaskDefinitionError(f"{what}: timeout must be positive, got {self.timeout!r}")
        if not self.kwargs:  # most tasks: no JSON round trip, and one empty mapping for all
            object.__setattr__(self, "kwargs", _NO_KWARGS)
            return
        try:
            kwargs = json.loads(json.dumps(dict(self.kwargs), allow_nan=False))
        except (TypeError, ValueError) as err:
            raise TaskDefinitionError(f"{what}: kwargs must be JSON: {err}") from err
        object.__setattr__(self, "kwargs", kwargs)

    @property
    def cron_text(self) -> str | None:
        """``cron_expr`` as stored: *cron* itself, or with the *cron_dialect* marker."""
        if self.cron is None or self.cron_dialect is None:
            return self.cron
        from easyjob.core.cron import CronSchedule

        return CronSchedule.parse(self.cron, self.tz, self.cron_dialect).text

    @property
    def every_ms(self) -> int | None:
        """The interval in whole milliseconds, as stored (``every_ms``)."""
        return None if self.every is None else self.every // timedelta(milliseconds=1)

    @property
    def manual(self) -> bool:
        """Whether the task runs only when triggered: no cron, no interval, no parent."""
        return self.cron is None and self.every is None and self.parent is None

    def columns(self) -> dict[str, Any]:
        """The ``easy_job_task`` columns this definition sets (not ``pid``: resolved by name)."""
        return {
            "func": self.func,
            "cron_expr": self.cron_text,
            "every_ms": self.every_ms,
            "starts_at": self.start,
            "ends_at": self.end,
            "max_runs": self.max_runs,
            "accepts": list(self.accepts) if self.accepts else None,
            "tz": self.tz,
            "misfire": str(self.misfire),
            "misfire_grace_ms": _ms(self.misfire_grace),
            "overlap": str(self.overlap),
            "retries": self.retries,
            "retry_delay_ms": _ms(self.retry_delay),
            "timeout_ms": _ms(self.timeout),
            "kwargs": dict(self.kwargs),
            "shards": self.shards,
            "broadcast": self.broadcast,
            "jitter_ms": _ms(self.jitter),
            "exclude_calendar": self.exclude,
            "max_running": self.max_running,
            "priority": self.priority,
        }


#: The fields ``TaskSpec.__post_init__`` may rewrite (normalise) once validated.
_NORMALISED = ("parents", "parent", "every", "accepts", "misfire", "overlap", "kwargs")
#: Settings already validated (see :func:`_settings_key`) -> their normalised fields: a
#: catalogue of many tasks declared alike validates its settings once (issue 25: 100,000
#: decorations cost 1.35 s of an import, most of it validating the same settings again).
_VALIDATED: dict[tuple[Any, ...], tuple[tuple[str, Any], ...]] = {}
_VALIDATED_MAX = 4096
#: Every field but name, func and kwargs.
_SETTINGS = tuple(
    name for name in TaskSpec.__dataclass_fields__ if name not in ("name", "func", "kwargs")
)


def _settings_key(spec: TaskSpec) -> tuple[Any, ...] | None:
    """What validating *spec* depends on besides its name and function: each setting with
    its type (``1`` and ``True`` compare equal, and only one may be valid); None when the
    spec has kwargs (validated each time) or a setting cannot be a key (a list)."""
    if spec.kwargs:
        return None
    values = tuple(getattr(spec, name) for name in _SETTINGS)
    key = (*values, *map(type, values))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _check_name_and_func(spec: TaskSpec) -> None:
    if not isinstance(spec.name, str) or not spec.name or len(spec.name) > _MAX_NAME:
        raise TaskDefinitionError(f"invalid task name {shown(spec.name)}: 1-{_MAX_NAME} characters")
    if not isinstance(spec.func, str) or not spec.func:
        raise TaskDefinitionError(f"task {shown(spec.name)}: invalid function path {spec.func!r}")


def _check_parents(spec: TaskSpec, what: str) -> None:
    """*parent* and *parents* of *spec* made one list: ``parents``, its first ``parent``."""
    parents = spec.parents
    if isinstance(parents, str) or not isinstance(parents, (tuple, list)):
        raise TaskDefinitionError(f"{what}: parents must be a list of task names, got {parents!r}")
    parents = tuple(parents)
    if spec.parent is not None and parents and parents[0] != spec.parent:
        raise TaskDefinitionError(
            f"{what}: parent {spec.parent!r} is not the first of parents {list(parents)!r}"
        )
    if spec.parent is not None and not parents:
        parents = (spec.parent,)
    for name in parents:
        if not isinstance(name, str) or not name:
            raise TaskDefinitionError(f"{what}: invalid parent {name!r} in {list(parents)!r}")
    if twice := sorted({name for name in parents if parents.count(name) > 1}):
        raise TaskDefinitionError(
            f"{what}: parent(s) {', '.join(map(repr, twice))} given more than once"
        )
    object.__setattr__(spec, "parents", parents)
    object.__setattr__(spec, "parent", parents[0] if parents else None)


#: The range of a task's or a trigger's ``priority``.
PRIORITY_RANGE = range(-1000, 1001)
#: The largest ``max_running``.
MAX_RUNNING = 1_000_000


def check_priority(value: Any, what: str) -> int:
    """*value* as a priority: an integer in :data:`PRIORITY_RANGE`, else TaskDefinitionError
    naming *what* and the value."""
    if not isinstance(value, int) or isinstance(value, bool) or value not in PRIORITY_RANGE:
        raise TaskDefinitionError(
            f"{what}: priority must be an integer from {PRIORITY_RANGE.start} to "
            f"{PRIORITY_RANGE.stop - 1}, got {value!r}"
        )
    return value


def _check_limits(spec: TaskSpec, what: str) -> None:
    """*max_running* (None, or 1 to :data:`MAX_RUNNING`) and *priority* of *spec*."""
    value = spec.max_running
    if value is not None and (
        not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_RUNNING
    ):
        raise TaskDefinitionError(
            f"{what}: max_running must be None or an integer from 1 to {MAX_RUNNING}, got {value!r}"
        )
    check_priority(spec.priority, what)


def _check_schedule(spec: TaskSpec, what: str) -> None:
    """Interval, bounds, max_runs and accepted trigger arguments of *spec*."""
    from easyjob.core.schedule import parse_every

    if spec.every is not None:
        if spec.cron is not None:
            raise TaskDefinitionError(f"{what}: give a cron or an interval (every=), not both")
        if spec.parent is not None:
            raise TaskDefinitionError(f"{what}: a child runs after its parent; every= is refused")
        object.__setattr__(spec, "every", parse_every(spec.every))
    for name in ("start", "end"):
        value = getattr(spec, name)
        if value is not None and (not isinstance(value, datetime) or value.utcoffset() is None):
            raise TaskDefinitionError(f"{what}: {name} must be an aware datetime, got {value!r}")
    scheduled = spec.cron is not None or spec.every is not None
    bounds = {"start": spec.start, "end": spec.end, "max_runs": spec.max_runs}
    given = [name for name, value in bounds.items() if value is not None]
    if given and (not scheduled or spec.parent is not None):
        raise TaskDefinitionError(f"{what}: {', '.join(given)} need(s) a cron or an interval")
    if spec.start is not None and spec.end is not None and spec.end < spec.start:
        raise TaskDefinitionError(
            f"{what}: end {spec.end.isoformat()} is before start {spec.start.isoformat()}"
        )
    if spec.max_runs is not None and (
        not isinstance(spec.max_runs, int) or isinstance(spec.max_runs, bool) or spec.max_runs < 1
    ):
        raise TaskDefinitionError(
            f"{what}: max_runs must be an integer >= 1, got {spec.max_runs!r}"
        )
    accepts = (spec.accepts,) if isinstance(spec.accepts, str) else tuple(spec.accepts or ())
    for name in accepts:
        if not isinstance(name, str) or not name.isidentifier():
            raise TaskDefinitionError(f"{what}: accepts names an invalid argument {name!r}")
    object.__setattr__(spec, "accepts", tuple(sorted(set(accepts))))


def _check_jitter_and_calendar(spec: TaskSpec, what: str) -> None:
    """``jitter`` (a timedelta of whole milliseconds, >= 0, shorter than an interval) and
    ``exclude`` (a calendar name) of *spec*; both need a cron or an interval."""
    from easyjob.core.calendars import check_calendar_name

    jitter = spec.jitter
    if not isinstance(jitter, timedelta) or jitter < timedelta(0):
        raise TaskDefinitionError(f"{what}: jitter must be seconds >= 0, got {jitter!r}")
    if jitter % timedelta(milliseconds=1):
        raise TaskDefinitionError(
            f"{what}: jitter must be a whole number of milliseconds, got {jitter!r}"
        )
    scheduled = spec.cron is not None or spec.every is not None
    for name, value in (("jitter", jitter or None), ("exclude", spec.exclude)):
        if value is not None and (not scheduled or spec.parent is not None):
            raise TaskDefinitionError(f"{what}: {name} needs a cron or an interval")
    if spec.every is not None and jitter >= spec.every:
        raise TaskDefinitionError(
            f"{what}: jitter {jitter.total_seconds():g}s must be shorter than the interval "
            f"{spec.every.total_seconds():g}s (a fire's successor would be due first)"
        )
    if spec.exclude is not None:
        try:
            check_calendar_name(spec.exclude)
        except ValueError as err:
            raise TaskDefinitionError(f"{what}: exclude: {err}") from None


def _enum(kind: type[Misfire] | type[Overlap], value: Any, what: str, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise TaskDefinitionError(
            f"{what}: {name} must be one of {allowed}, got {value!r}"
        ) from None


@dataclass(frozen=True, kw_only=True)
class PlanningRow:
    """The columns of an ``easy_job_task`` row that planning and admission read: what a
    planner's due read (:meth:`TaskStore.due <easyjob.store.contract.TaskStore.due>`)
    selects, so that a behind planner, which reads a task per run, does not fetch and decode
    the rest (its ``kwargs`` JSON, its counters and times). :class:`TaskRow` is the whole row."""

    id: int
    name: str
    func: str
    cron_expr: str | None
    tz: str
    status: TaskStatus
    next_start_time: datetime | None
    version: int
    misfire: Misfire
    misfire_grace_ms: int
    overlap: Overlap
    every_ms: int | None = None
    anchor_time: datetime | None = None
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    max_runs: int | None = None
    fire_count: int = 0
    origin: str = "code"
    shards: int = 1
    broadcast: bool = False
    jitter_ms: int = 0
    exclude_calendar: str | None = None
    #: at most this many runs RUNNING at once (None: as its overlap says)
    max_running: int | None = None

    @property
    def runtime(self) -> bool:
        """Whether the task was added at run time (``easyjob schedule add``), not by code."""
        return self.origin == ORIGIN_RUNTIME

    @property
    def schedule(self) -> Schedule | None:
        """Its schedule (cron or interval, within its start and end); None: child or manual."""
        from easyjob.core.schedule import build_schedule

        return build_schedule(
            self.cron_expr, self.tz, self.every_ms, self.anchor_time, self.starts_at, self.ends_at
        )

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Self:
        """From a result row of the class's columns (:func:`dataclasses.fields`)."""
        values = dict(row)
        values["status"] = by_value(TaskStatus)[values["status"]]
        values["misfire"] = by_value(Misfire)[values["misfire"]]
        values["overlap"] = by_value(Overlap)[values["overlap"]]
        return from_values(cls, values)


@dataclass(frozen=True, kw_only=True)
class TaskRow(PlanningRow):
    """A row of ``easy_job_task``: its planning columns and the rest."""

    pid: int | None
    node_id: str | None
    retries: int
    retry_delay_ms: int
    timeout_ms: int | None
    kwargs: dict[str, Any]
    pruned_success_count: int
    fail_count: int
    create_time: datetime
    update_time: datetime
    seen_time: datetime
    accepts: list[str] | None = None
    declared: str | None = None
    #: Runs recorded SUCCESS, ever: ``pruned_success_count`` plus the task's SUCCESS rows in
    #: the history, read in the same statement as the row. None from the reads of a node's
    #: loops (planning, registration), which do not pay for the count.
    success_count: int | None = None
    priority: int = 0


@dataclass(frozen=True)
class PlannedFire:
    """A fire the loader computed from a task's schedule, to be written as a run row."""

    fire_time: datetime
    status: RunStatus = RunStatus.PENDING
    error_msg: str | None = None
    #: A MISSED summary row stands for this many late fires, from ``fire_time`` to
    #: ``last_fire_time`` (None: the row is one fire). A PENDING fire that *carries* a gap
    #: (``missed_from`` set) counts here the fires of that gap, missed before it (None:
    #: too many to count).
    missed_count: int | None = None
    last_fire_time: datetime | None = None
    #: The first fire of the gap a PENDING fire carries: every fire of the task's schedule
    #: from ``missed_from`` to just before ``fire_time`` was MISSED, recorded on this row
    #: instead of a summary row of its own (see easyjob.core.planner, "Planning behind").
    missed_from: datetime | None = None
    #: due this long after ``fire_time`` (the task's jitter: ``easy_job_task_detail.jitter_ms``);
    #: None for a task without jitter (a task with jitter may draw 0, stored as 0)
    jitter: timedelta | None = None

    @property
    def due_time(self) -> datetime:
        """When the fire may start: its fire time plus its jitter."""
        return self.fire_time if self.jitter is None else self.fire_time + self.jitter

    @property
    def gap(self) -> tuple[datetime, int] | None:
        """The MISSED fires this row records, as (the first, how many: 1 for a gap too long
        to count): a MISSED row's own, or the gap a PENDING fire carries; None if none."""
        if self.status == RunStatus.MISSED:
            return self.fire_time, self.missed_count or 1
        if self.missed_from is not None:
            return self.missed_from, self.missed_count or 1
        return None


@dataclass(frozen=True)
class Advance:
    """Move a task's ``next_start_time`` from the version read, writing its fires (a
    PENDING fire of a task of *shards* > 1 as that many runs; any other as one row)."""

    task_id: int
    version: int
    next_start_time: datetime | None
    fires: tuple[PlannedFire, ...]
    shards: int = 1
    broadcast: bool = False


class Advanced(NamedTuple):
    """What ``TaskStore.advance_and_start`` wrote: the ids of the tasks advanced, and the
    runs written already started by the node (RUNNING, for it to run)."""

    won: list[int]
    started: list[Run]


@dataclass(frozen=True, kw_only=True)
class _TaskSchedule:
    """The schedule columns of a run's task (see :attr:`TaskRow.schedule`), carried with the
    run for the admission rule; keyword-only, after the run's own fields."""

    cron_expr: str | None = None
    tz: str = "UTC"
    every_ms: int | None = None
    anchor_time: datetime | None = None
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    #: the task's ``jitter_ms`` (when a fire's successor is due: admission.jitter_of)
    jitter_ms: int = 0

    @property
    def schedule_key(self) -> tuple[Any, ...]:
        """(cron_expr, tz, every_ms, anchor_time, starts_at, ends_at): the key of
        :func:`easyjob.core.admission.schedule_of`."""
        return (
            self.cron_expr,
            self.tz,
            self.every_ms,
            self.anchor_time,
            self.starts_at,
            self.ends_at,
        )


@dataclass(frozen=True)
class Candidate(_TaskSchedule):
    """A PENDING run as polled: what a claim needs, what strategies look at, and what the
    loader checks first (is the task this node's code, is the run past its misfire grace)."""

    id: int
    task_id: int
    version: int
    fire_time: datetime
    due_time: datetime
    task_name: str = ""
    func: str = ""
    overlap: Overlap = Overlap.SERIAL
    misfire: Misfire = Misfire.FIRE_ONCE
    misfire_grace_ms: int = 60_000
    origin: str = "code"
    shard: int = 0
    target_node: str | None = None
    triggered_by: Trigger = Trigger.CRON
    shards: int = 1
    max_running: int | None = None
    #: the run's priority: its trigger's, else its task's (see admission.start_order)
    priority: int = 0

    @property
    def grace(self) -> timedelta:
        """How late its start may be before the misfire policy applies."""
        return timedelta(milliseconds=self.misfire_grace_ms)


@dataclass(frozen=True)
class Run(_TaskSchedule):
    """A run held by a node: everything a worker needs, and the version as fencing token."""

    id: int
    version: int
    status: RunStatus
    node_id: str
    task_id: int
    task_name: str
    func: str
    kwargs: dict[str, Any]
    fire_time: datetime
    due_time: datetime
    attempt: int
    triggered_by: Trigger
    pid: int | None
    overlap: Overlap
    retries: int
    retry_delay_ms: int
    timeout_ms: int | None
    misfire: Misfire
    misfire_grace_ms: int
    #: Arguments a trigger passed (``easy_job_task_detail.kwargs``); None for other runs.
    trigger_kwargs: dict[str, Any] | None = None
    origin: str = "code"
    shard: int = 0
    shards: int = 1
    target_node: str | None = None
    max_running: int | None = None
    #: the run's priority: its trigger's, else its task's (see admission.start_order)
    priority: int = 0
    #: the priority its trigger gave it (``easy_job_task_detail.priority``), kept by a retry
    trigger_priority: int | None = None

    @property
    def grace(self) -> timedelta:
        """How late its start may be before the misfire policy applies."""
        return timedelta(milliseconds=self.misfire_grace_ms)

    def bumped(self, status: RunStatus) -> Run:
        """This run after one accepted transition to *status*."""
        return from_values(Run, {**vars(self), "status": status, "version": self.version + 1})


@dataclass(frozen=True)
class HeldRun:
    """A run held (CLAIMED or RUNNING) by a node that is judged dead."""

    id: int
    version: int
    status: RunStatus
    node_id: str
    task_id: int
    pid: int | None
    fire_time: datetime
    attempt: int
    recoveries: int = 0  # times a node died while running this fire (see RunStore.recover)
    kwargs: dict[str, Any] | None = None  # a trigger's arguments, carried to the new attempt
    task_name: str = ""
    shard: int = 0
    shards: int = 1
    target_node: str | None = None
    priority: int | None = None  # its trigger's, carried to the new attempt


@dataclass(frozen=True)
class Missed:
    """Runs of one task the store marked MISSED in one go: how many, the earliest fire
    among them, and the task's misfire policy."""

    count: int
    first_fire: datetime
    policy: Misfire


@dataclass(frozen=True)
class NodeRow:
    """A row of ``easy_job_node`` plus its heartbeat age in database time."""

    node_id: str
    host: str
    pid: int
    weight: int
    strategy: str
    workers: int
    status: NodeStatus
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    clock_offset_ms: int
    claimed_count: int
    completed_count: int
    version: int
    age: timedelta
    #: jobs past their timeout still holding a worker thread, as of the last heartbeat
    stuck_count: int = 0
    broadcast_tasks: list[str] | None = None
    #: the digest of what its code declares (``easy_job_catalog``); None: an earlier release
    catalog: str | None = None
    #: why it is unhealthy, as of its last heartbeat (see easyjob.node.health); None: healthy
    health: str | None = None

    @property
    def age_s(self) -> float:
        return self.age.total_seconds()


@dataclass(frozen=True)
class HistoryRow:
    """A row of ``easy_job_task_detail`` with its task's name."""

    id: int
    task_id: int
    task_name: str
    pid: int | None
    fire_time: datetime
    due_time: datetime
    node_id: str | None
    status: RunStatus
    triggered_by: Trigger
    attempt: int
    claim_time: datetime | None
    start_time: datetime | None
    end_time: datetime | None
    error_msg: str | None
    version: int
    create_time: datetime
    recoveries: int = 0
    missed_count: int | None = None
    last_fire_time: datetime | None = None
    #: the first fire of the gap this run's row carries (see PlannedFire.missed_from)
    missed_from: datetime | None = None
    result: Any = None  # the job's JSON return value (see easyjob.core.outcome)
    traceback: str | None = None
    shard: int = 0
    shards: int = 1
    target_node: str | None = None
    #: the arguments a trigger passed (None for other runs)
    kwargs: dict[str, Any] | None = None
    #: how long after ``fire_time`` the fire was due, its task's jitter (None: no jitter)
    jitter_ms: int | None = None

    def records(self, fire: datetime) -> bool:
        """Whether this row records *fire*, a fire of its task's schedule: its own fire, one
        of a MISSED or SKIPPED summary's span (``fire_time`` to ``last_fire_time``), or one
        of the gap the row carries (``missed_from`` up to its own fire, each MISSED)."""
        if self.fire_time == fire:
            return True
        if self.last_fire_time is not None and self.fire_time <= fire <= self.last_fire_time:
            return True
        return self.carries(fire)

    def carries(self, fire: datetime) -> bool:
        """Whether *fire* is one of the gap this row carries (``missed_from`` up to its own
        fire, not included): a fire recorded MISSED on this row, whatever its status."""
        return self.missed_from is not None and self.missed_from <= fire < self.fire_time

    @property
    def missed_fires(self) -> int:
        """How many fires this row records MISSED: a MISSED row's own (``missed_count`` of a
        summary), plus the gap it carries; a gap too long to count counts 1."""
        if self.missed_from is None:  # at most its own fire, or a summary's span
            return (self.missed_count or 1) if self.status == RunStatus.MISSED else 0
        carried = self.missed_count or 1
        return carried + (1 if self.status == RunStatus.MISSED else 0)

    def missed(self, fire: datetime) -> bool:
        """Whether this row records *fire* as MISSED (see :meth:`records`)."""
        return self.carries(fire) or (self.status == RunStatus.MISSED and self.records(fire))
