"""What a manual trigger writes, decided without the database: the request checked on its
own (:class:`TriggerRequest`), then against the task's row and database time
(:meth:`TriggerRequest.due`). :meth:`easyjob.store.tasks.TaskStore.trigger` reads the row,
asks, and inserts the run, in a transaction of its own or in the caller's."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from easyjob.core.records import check_priority
from easyjob.errors import TaskDefinitionError, TaskNotFoundError, shown

__all__ = ["TriggerRequest", "TriggerTarget"]


@dataclass(frozen=True)
class TriggerTarget:
    """What a trigger reads of its task's row (``easy_job_task``)."""

    id: int
    accepts: Sequence[str] | None
    misfire_grace_ms: int
    shards: int
    broadcast: bool


@dataclass(frozen=True)
class TriggerRequest:
    """A trigger of task *name*: due *at* (None: now, database time), with the trigger
    arguments *kwargs* as stored (JSON; None when there are none) and *priority* (None: its
    task's). Build it with :meth:`of`, which refuses what no task could take."""

    name: str
    at: datetime | None
    kwargs: dict[str, Any] | None
    priority: int | None = None

    @classmethod
    def of(
        cls,
        name: str,
        at: datetime | None,
        kwargs: Mapping[str, Any] | None,
        priority: int | None = None,
    ) -> TriggerRequest:
        """The request, or TaskDefinitionError naming what is wrong: *kwargs* not a JSON
        object, *at* not an aware datetime, *priority* out of range."""
        stored = _stored_kwargs(name, kwargs)
        if at is not None and (not isinstance(at, datetime) or at.utcoffset() is None):
            raise TaskDefinitionError(
                f"trigger of {name!r}: at must be an aware datetime, got {at!r}"
            )
        if priority is not None:
            check_priority(priority, f"trigger of {name!r}")
        return cls(name, at, stored, priority)

    def due(self, target: TriggerTarget | None, now: datetime) -> datetime:
        """The run's due time, given its task's row (None: there is none) and database
        time *now*. TaskNotFoundError for no task; TaskDefinitionError for an argument the
        task does not accept, or a time before *now* less its misfire grace (the run would
        be missed at once)."""
        if target is None:
            raise TaskNotFoundError(f"no task named {shown(self.name)}")
        refused = sorted(set(self.kwargs or ()) - set(target.accepts or ()))
        if refused:
            accepted = ", ".join(map(repr, target.accepts or ())) or "none"
            raise TaskDefinitionError(
                f"task {self.name!r} does not accept trigger argument(s) "
                f"{', '.join(map(repr, refused))} (it accepts: {accepted})"
            )
        due = now if self.at is None else self.at
        if due < now - timedelta(milliseconds=target.misfire_grace_ms):
            raise TaskDefinitionError(
                f"trigger of {self.name!r} at {due.isoformat()}: in the past (database time "
                f"{now.isoformat()}), beyond the task's misfire grace"
            )
        return due


def _stored_kwargs(name: str, kwargs: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """*kwargs* as stored (JSON), None when there are none; TaskDefinitionError if not JSON."""
    if not kwargs:
        return None
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise TaskDefinitionError(
            f"trigger of {name!r}: kwargs must be a JSON object, got {kwargs!r}"
        )
    try:
        return dict(json.loads(json.dumps(dict(kwargs), allow_nan=False)))
    except (TypeError, ValueError) as err:
        raise TaskDefinitionError(f"trigger of {name!r}: kwargs must be JSON: {err}") from err
