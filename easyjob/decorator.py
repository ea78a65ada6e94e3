"""``@scheduled``: marking a plain function as a task."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, TypeVar, overload

from easyjob.core.cron import CronSchedule
from easyjob.core.records import TaskSpec
from easyjob.core.states import Misfire, Overlap
from easyjob.errors import ConfigError, TaskDefinitionError
from easyjob.events import EventKind, Hook
from easyjob.registry import ParentRef, Registry, default_registry, func_path

__all__ = ["runnable", "scheduled"]

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("easyjob")
Seconds = float | int | timedelta


@overload
def scheduled(cron: F, /) -> F: ...


@overload
def scheduled(
    cron: str | None = None,
    *,
    parent: ParentRef | Sequence[ParentRef] | None = None,
    name: str | None = None,
    tz: str = "UTC",
    cron_dialect: str | None = None,
    misfire: Misfire | str = Misfire.FIRE_ONCE,
    misfire_grace: Seconds = 60,
    overlap: Overlap | str = Overlap.SERIAL,
    retries: int = 0,
    retry_delay: Seconds = 1,
    timeout: Seconds | None = None,
    kwargs: Mapping[str, Any] | None = None,
    enabled: bool = True,
    on_success: Hook | None = None,
    on_failure: Hook | None = None,
    on_missed: Hook | None = None,
    on_recovered: Hook | None = None,
    every: timedelta | str | float | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    max_runs: int | None = None,
    accepts: Sequence[str] = (),
    shards: int = 1,
    broadcast: bool = False,
    executor: str | None = None,
    jitter: Seconds = 0,
    exclude: str | None = None,
    max_running: int | None = None,
    priority: int = 0,
    registry: Registry | None = None,
) -> Callable[[F], F]: ...


def scheduled(
    cron: str | F | None = None,
    *,
    parent: ParentRef | Sequence[ParentRef] | None = None,
    name: str | None = None,
    tz: str = "UTC",
    cron_dialect: str | None = None,
    misfire: Misfire | str = Misfire.FIRE_ONCE,
    misfire_grace: Seconds = 60,
    overlap: Overlap | str = Overlap.SERIAL,
    retries: int = 0,
    retry_delay: Seconds = 1,
    timeout: Seconds | None = None,
    kwargs: Mapping[str, Any] | None = None,
    enabled: bool = True,
    on_success: Hook | None = None,
    on_failure: Hook | None = None,
    on_missed: Hook | None = None,
    on_recovered: Hook | None = None,
    every: timedelta | str | float | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    max_runs: int | None = None,
    accepts: Sequence[str] = (),
    shards: int = 1,
    broadcast: bool = False,
    executor: str | None = None,
    jitter: Seconds = 0,
    exclude: str | None = None,
    max_running: int | None = None,
    priority: int = 0,
    registry: Registry | None = None,
) -> Callable[[F], F] | F:
    """Mark a function as a task that runs on *cron*, every *every*, after each success of
    *parent*, or, with none of them, only when triggered (``easyjob trigger``).

    *parent* is one task (a name or a function) or a list of them: a child of several
    parents runs once for each fire time for which every parent succeeded (a join on the
    fire time, which a chain passes down from its root), after the last of them; their
    roots must share one schedule (see ``docs/policies.md``, Parents).

    *every* is an interval (a timedelta, seconds, or text like ``"45s"``, ``"1h30m"``),
    anchored at registration (first fire one interval later) or at *start*. *start* and
    *end* (aware datetimes) bound the fires; after *max_runs* fires the task is FINISHED.
    *accepts* names the arguments a trigger may pass (merged over *kwargs*); a trigger
    passing any other is refused.

    The function takes no argument, or one :class:`~easyjob.TaskContext`; *kwargs* (JSON) are
    passed to it as keyword arguments. The task name defaults to ``module.qualname``. A
    *cron* given together with *parent* is accepted for compatibility with easy-job (where
    Spring's ``@Scheduled`` required one) and ignored: a child runs after its parent.
    *cron_dialect* (``'unix'``, ``'spring'``, ``'quartz'``) says how *cron* is read; by
    default the field count decides (see ``docs/cron.md``). The function may be an
    ``async def``: it runs to completion on an event loop, and its timeout cancels it.
    Its JSON return value is stored in the run's ``result`` (see ``docs/events.md``).
    *on_success*, *on_failure* (no retry left), *on_missed* and *on_recovered* are hooks
    called with a :class:`~easyjob.events.RunEvent` on the node's event thread.
    Everything is validated here, with errors naming the function and the bad value.
    *shards* > 1 makes each fire that many runs, claimed and run on their own (spread over
    the nodes), each told its ``ctx.shard`` (0 to shards - 1) and ``ctx.shards``; a child
    task runs once all the shards of a fire succeeded. *broadcast* makes each fire one run on
    every RUNNING node whose code declares the task (see ``docs/policies.md``).
    *executor* (``"thread"`` or ``"process"``; None: the node's ``--executor``) says where
    its runs are called: ``"process"`` calls each in a warm child process, so a timeout kills
    it and a crash fails only the run (see ``docs/policies.md``).
    *jitter* (seconds) delays each fire of its cron or interval by a delay drawn once per
    fire, the same on every node, from 0 up to (not including) *jitter*: the run is due
    then, never earlier, and lateness is measured from there. *exclude* names a calendar
    (``easyjob calendar add NAME DAY``): fires on its days, in *tz*, are skipped, each
    stretch of them recorded as one SKIPPED row (see ``docs/policies.md``).
    *max_running* (an integer >= 1) caps how many of its runs are RUNNING at once across the
    cluster, enforced by the database; a run that finds that many running waits (``skip``:
    is SKIPPED). Without it, ``serial`` and ``skip`` mean one at a time and ``allow`` no
    limit. *priority* (an integer, -1000 to 1000, default 0): when a node has more runs due
    than it can start, higher priority first, lower ones aged so that none starves (see
    ``docs/policies.md``).
    ``@scheduled`` without parentheses is ``@scheduled()``.
    """
    if callable(cron):
        bare: Callable[[F], F] = scheduled(registry=registry)
        return bare(cron)

    def decorate(fn: F) -> F:
        path = func_path(fn)
        where = f"@scheduled on {path}"
        if "<locals>" in path:
            raise TaskDefinitionError(f"{where}: a task must be a module-level function")
        try:
            refs = _parent_refs(parent)
            if cron is not None and refs:
                # Spring's @Scheduled needs a cron, so code ported from easy-job gives children
                # one: it is checked, then ignored; the parent's successes drive the child.
                CronSchedule.parse(cron, tz, cron_dialect)
                log.info("%s: cron %r ignored, the task runs after its parent", where, cron)
            spec = TaskSpec(
                name=name if name is not None else f"{fn.__module__}.{fn.__qualname__}",
                func=path,
                cron=None if refs else cron,
                tz=tz,
                cron_dialect=None if refs else cron_dialect,
                parents=tuple(ref if isinstance(ref, str) else func_path(ref) for ref in refs),
                misfire=misfire,  # type: ignore[arg-type]
                misfire_grace=_seconds(misfire_grace, "misfire_grace"),
                overlap=overlap,  # type: ignore[arg-type]
                retries=retries,
                retry_delay=_seconds(retry_delay, "retry_delay"),
                timeout=None if timeout is None else _seconds(timeout, "timeout"),
                kwargs=dict(kwargs or {}),
                enabled=enabled,
                every=every,  # type: ignore[arg-type]
                start=start,
                end=end,
                max_runs=max_runs,
                accepts=(accepts,) if isinstance(accepts, str) else tuple(accepts),
                shards=shards,
                broadcast=broadcast,
                jitter=_seconds(jitter, "jitter"),
                exclude=exclude,
                max_running=max_running,
                priority=priority,
            )
            hooks = _hooks(
                on_success=on_success,
                on_failure=on_failure,
                on_missed=on_missed,
                on_recovered=on_recovered,
            )
            (registry if registry is not None else default_registry).add(
                fn, spec, refs, hooks, executor
            )
        except ConfigError as err:
            raise type(err)(f"{where}: {err}") from err
        return fn

    return decorate


def runnable(
    fn: F | None = None, *, accepts: Sequence[str] = (), registry: Registry | None = None
) -> F | Callable[[F], F]:
    """Allow schedules added at run time (``easyjob schedule add NAME --func PATH``) to call
    this function on the nodes whose code imports it, passing only the trigger arguments
    in *accepts*. Without it, a node runs no schedule its own code did not declare: write
    access to the tables is not code execution. ``@runnable`` or ``@runnable(accepts=[...])``.
    """

    def decorate(fn: F) -> F:
        path = func_path(fn)
        if "<locals>" in path:
            raise TaskDefinitionError(f"@runnable on {path}: must be a module-level function")
        names = (accepts,) if isinstance(accepts, str) else tuple(accepts)
        try:
            (registry if registry is not None else default_registry).allow(fn, names)
        except ConfigError as err:
            raise type(err)(f"@runnable on {path}: {err}") from err
        return fn

    return decorate(fn) if fn is not None else decorate


def _parent_refs(parent: ParentRef | Sequence[ParentRef] | None) -> list[ParentRef]:
    """*parent* as a list of references (empty: no parent)."""
    if parent is None:
        return []
    if isinstance(parent, str) or callable(parent):
        return [parent]
    if not isinstance(parent, (list, tuple)) or not parent:
        raise TaskDefinitionError(
            f"parent must be a task name, a function, or a non-empty list of them, got {parent!r}"
        )
    for ref in parent:
        if not isinstance(ref, str) and not callable(ref):
            raise TaskDefinitionError(f"parent {ref!r} in {list(parent)!r} is not a task name")
    return list(parent)


def _hooks(**given: Hook | None) -> dict[EventKind, Hook]:
    hooks = {}
    for name, hook in given.items():
        if hook is None:
            continue
        if not callable(hook):
            raise TaskDefinitionError(f"{name} must be a callable taking a RunEvent, got {hook!r}")
        hooks[EventKind(name.removeprefix("on_"))] = hook
    return hooks


def _seconds(value: Seconds, name: str) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TaskDefinitionError(f"{name} must be seconds or a timedelta, got {value!r}")
    return _timedelta(value)


@lru_cache(maxsize=256)
def _timedelta(seconds: float) -> timedelta:
    """One (immutable) timedelta per value: tasks mostly share their defaults."""
    return timedelta(seconds=seconds)
