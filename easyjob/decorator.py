"""``@scheduled``: marking a plain function as a task."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar, overload

from easyjob.core.cron import CronSchedule
from easyjob.core.records import TaskSpec
from easyjob.core.states import Misfire, Overlap
from easyjob.errors import ConfigError, TaskDefinitionError
from easyjob.registry import Registry, default_registry, func_path

__all__ = ["scheduled"]

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("easyjob")
Seconds = float | int | timedelta


@overload
def scheduled(cron: F, /) -> F: ...


@overload
def scheduled(
    cron: str | None = None,
    *,
    parent: str | Callable[..., Any] | None = None,
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
    shards: int = 1,
    broadcast: bool = False,
    registry: Registry | None = None,
) -> Callable[[F], F]: ...


def scheduled(
    cron: str | F | None = None,
    *,
    parent: str | Callable[..., Any] | None = None,
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
    shards: int = 1,
    broadcast: bool = False,
    registry: Registry | None = None,
) -> Callable[[F], F] | F:
    """Mark a function as a task that runs on *cron* and/or after each success of *parent*.

    The function takes no argument, or one :class:`~easyjob.TaskContext`; *kwargs* (JSON) are
    passed to it as keyword arguments. The task name defaults to ``module.qualname``. A
    *cron* given together with *parent* is accepted for compatibility with easy-job (where
    Spring's ``@Scheduled`` required one) and ignored: a child runs after its parent.
    *cron_dialect* (``'unix'``, ``'spring'``, ``'quartz'``) says how *cron* is read; by
    default the field count decides (see ``docs/cron.md``).
    Everything is validated here, with errors naming the function and the bad value.
    *shards* > 1 makes each fire that many runs, claimed and run on their own (spread over
    the nodes), each told its ``ctx.shard`` (0 to shards - 1) and ``ctx.shards``; a child
    task runs once all the shards of a fire succeeded. *broadcast* makes each fire one run on
    every RUNNING node whose code declares the task (see ``docs/policies.md``).
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
            if cron is not None and parent is not None:
                # Spring's @Scheduled needs a cron, so code ported from easy-job gives children
                # one: it is checked, then ignored; the parent's successes drive the child.
                CronSchedule.parse(cron, tz, cron_dialect)
                log.info("%s: cron %r ignored, the task runs after its parent", where, cron)
            spec = TaskSpec(
                name=name if name is not None else f"{fn.__module__}.{fn.__qualname__}",
                func=path,
                cron=cron if parent is None else None,
                tz=tz,
                cron_dialect=cron_dialect if parent is None else None,
                parent=parent
                if isinstance(parent, str)
                else (func_path(parent) if parent is not None else None),
                misfire=misfire,  # type: ignore[arg-type]
                misfire_grace=_seconds(misfire_grace, "misfire_grace"),
                overlap=overlap,  # type: ignore[arg-type]
                retries=retries,
                retry_delay=_seconds(retry_delay, "retry_delay"),
                timeout=None if timeout is None else _seconds(timeout, "timeout"),
                kwargs=dict(kwargs or {}),
                enabled=enabled,
                shards=shards,
                broadcast=broadcast,
            )
            (registry if registry is not None else default_registry).add(fn, spec, parent)
        except ConfigError as err:
            raise type(err)(f"{where}: {err}") from err
        return fn

    return decorate


def _seconds(value: Seconds, name: str) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TaskDefinitionError(f"{name} must be seconds or a timedelta, got {value!r}")
    return timedelta(seconds=value)
