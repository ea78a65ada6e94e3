"""A new attempt of a run: the PENDING row a retry or a recovery inserts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from easyjob.core.states import RunStatus, Trigger
from easyjob.store.schema import task_detail_table

__all__ = ["new_attempt"]

d = task_detail_table


def new_attempt(
    conn: sa.Connection,
    task_id: int,
    pid: int | None,
    fire_time: datetime,
    attempt: int,
    trigger: Trigger,
    due: datetime,
    now: datetime,
    *,
    recoveries: int = 0,
    kwargs: dict[str, Any] | None = None,
    shard: int = 0,
    shards: int = 1,
    target_node: str | None = None,
    priority: int | None = None,
) -> int:
    """Insert a PENDING attempt of a run of *task_id*, due at *due*; returns its id. It
    keeps the *priority* its trigger gave the run (None: its task's)."""
    result = conn.execute(
        d.insert().values(
            kwargs=kwargs,
            priority=priority,
            recoveries=recoveries,
            shard=shard,
            shards=shards,
            target_node=target_node,
            task_id=task_id,
            pid=pid,
            fire_time=fire_time,
            due_time=due,
            status=str(RunStatus.PENDING),
            triggered_by=str(trigger),
            attempt=attempt,
            create_time=now,
        )
    )
    return int(result.inserted_primary_key[0])  # type: ignore[index]
