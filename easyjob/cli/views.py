"""What the CLI shows of nodes, tasks and runs: rows keyed by the tables' column names.

A row holds every column of its database table (``task_name`` for a run's task) plus a few
derived ones: a node's heartbeat ``age_s`` and ``held`` runs, a task's ``parent`` name,
``next_fire``, ``lag_s``, ``pending`` runs and ``success_count`` (its pruned successes plus
its SUCCESS rows kept, as the store read them), a run's ``duration_s`` (times in seconds).
The column lists below choose what the human tables show; ``--json`` prints whole rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from datetime import datetime
from enum import Enum
from typing import Any

from easyjob.cli.output import Column, compact_json, first_line, offset_ms, seconds
from easyjob.core.records import HistoryRow, NodeRow, TaskRow
from easyjob.core.states import TaskStatus
from easyjob.store.contract import Backlog

__all__ = [
    "FAILING_COLUMNS",
    "FAILURE_COLUMNS",
    "LATE_COLUMNS",
    "NODE_COLUMNS",
    "RUN_COLUMNS",
    "STATUS_NODE_COLUMNS",
    "STATUS_TASK_COLUMNS",
    "TASK_COLUMNS",
    "counted",
    "node_rows",
    "records",
    "run_rows",
    "task_rows",
]

Row = dict[str, Any]

#: A RUNNING node whose heartbeat is older than this is not counted as live by the CLI (it
#: does not know the nodes' heartbeat settings; peers mark a crashed node DEAD much sooner).
GONE_AFTER_S = 60.0


def _columns(record: Any) -> Row:
    row = {}
    for field in fields(record):
        value = getattr(record, field.name)
        row[field.name] = value.value if isinstance(value, Enum) else value
    return row


def node_rows(nodes: Iterable[NodeRow], held: Mapping[str, int]) -> list[Row]:
    """Node rows with ``age_s`` (heartbeat age in database time) and ``held`` (runs this
    node has CLAIMED or RUNNING)."""
    rows = []
    for node in nodes:
        row = _columns(node)
        del row["age"]
        rows.append({**row, "age_s": node.age_s, "held": held.get(node.node_id, 0)})
    return rows


def records(items: Iterable[Any]) -> list[Row]:
    """Rows of dataclass records, one column per field."""
    return [_columns(item) for item in items]


def counted(counts: Mapping[str, int], order: Iterable[str] = ()) -> str:
    """``3 RUNNING, 1 DEAD``: *counts* in *order* first, then the others by name; ``none``."""
    keys = [k for k in order if counts.get(k)] + sorted(set(counts) - set(order))
    return ", ".join(f"{counts[k]} {k}" for k in keys if counts[k]) or "none"


def task_rows(
    tasks: Iterable[TaskRow],
    db_now: datetime,
    backlog: Mapping[int, Backlog],
    code_since: datetime | None = None,
    next_fires: Mapping[int, datetime] | None = None,
) -> list[Row]:
    """Task rows with ``parent`` (the parent task's name), ``pending`` (runs due and not yet
    claimed), ``next_fire`` and ``lag_s``. ``next_fire``: the task's earliest fire not
    started, the earlier of its earliest unstarted cron run (*next_fires*, by task id: fires
    written ahead, or due and waiting) and ``next_start_time`` (its planning cursor, the
    first fire no node has written yet). ``lag_s``: how long the oldest unstarted fire has
    been due, in database time: the earlier of ``next_start_time`` and the oldest due
    PENDING run (fires no node has claimed), 0 when nothing is late (a cursor ahead of now
    is never a lag); None for a PAUSED task, whose fires wait on purpose. ``in_code``:
    whether a running node registered the task when it started (its ``seen_time`` is not
    older than the oldest running node's start, *code_since*); None when no node runs. A
    task that left every node's code stays in the table, flagged ``in_code`` false, and is
    never deleted automatically. With no live node at all, every task is ``in_code``
    false."""
    tasks = list(tasks)
    names = {task.id: task.name for task in tasks}
    rows = []
    for task in tasks:
        waiting = backlog.get(task.id)
        due = [task.next_start_time] if task.next_start_time is not None else []
        if waiting is not None:
            due.append(waiting.oldest_due)
        if task.status == TaskStatus.PAUSED:
            lag: float | None = None
        else:
            lag = max([0.0, *((db_now - t).total_seconds() for t in due)])
        row = _columns(task)
        row["parent"] = names.get(task.pid) if task.pid is not None else None
        written = (next_fires or {}).get(task.id)
        row["next_fire"] = min(
            (x for x in (written, task.next_start_time) if x is not None), default=None
        )
        row["lag_s"] = lag
        row["pending"] = waiting.runs if waiting else 0
        row["in_code"] = code_since is not None and task.seen_time >= code_since
        rows.append(row)
    return rows


def run_rows(runs: Iterable[HistoryRow]) -> list[Row]:
    """Run rows with ``duration_s`` (end minus start, for runs that started and ended)."""
    rows = []
    for run in runs:
        row = _columns(run)
        start, end = run.start_time, run.end_time
        row["duration_s"] = (end - start).total_seconds() if start and end else None
        rows.append(row)
    return rows


NODE_COLUMNS = (
    Column("node_id"),
    Column("status"),
    Column("age_s", seconds, right=True),
    Column("clock_offset_ms", offset_ms, right=True),
    Column("held", right=True),
    Column("claimed_count", right=True),
    Column("completed_count", right=True),
    Column("stuck_count", right=True),
    Column("host"),
    Column("pid", right=True),
    Column("workers", right=True),
    Column("strategy"),
    Column("weight", right=True),
    Column("heartbeat_at"),
)

STATUS_NODE_COLUMNS = (
    *NODE_COLUMNS[:5],
    Column("held_due", right=True),
    Column("succeeded", right=True),
    Column("failed", right=True),
    Column("host"),
    Column("pid", right=True),
    Column("workers", right=True),
    Column("strategy"),
    Column("heartbeat_at"),
)

LATE_COLUMNS = (
    Column("name"),
    Column("lag_s", seconds, right=True),
    Column("next_start_time"),
    Column("oldest_pending"),
    Column("pending", right=True),
    Column("success_count", right=True),
    Column("fail_count", right=True),
)

FAILING_COLUMNS = (
    Column("name"),
    Column("failures", right=True),
    Column("last_end_time"),
    Column("fail_count", right=True),
)

STATUS_TASK_COLUMNS = (
    Column("name"),
    Column("status"),
    Column("next_fire"),
    Column("lag_s", seconds, right=True),
    Column("pending", right=True),
    Column("success_count", right=True),
    Column("fail_count", right=True),
)

TASK_COLUMNS = (
    *STATUS_TASK_COLUMNS[:2],
    Column("cron_expr"),
    Column("tz"),
    Column("parent"),
    *STATUS_TASK_COLUMNS[2:],
    Column("in_code"),
    Column("func"),
)

RUN_COLUMNS = (
    Column("id", right=True),
    Column("task_name"),
    Column("status"),
    Column("fire_time"),
    Column("attempt", right=True),
    Column("triggered_by"),
    Column("node_id"),
    Column("duration_s", seconds, right=True),
    Column("result", compact_json(30)),
    Column("error_msg", first_line(60)),
)

FAILURE_COLUMNS = (
    Column("id", right=True),
    Column("task_name"),
    Column("status"),
    Column("fire_time"),
    Column("attempt", right=True),
    Column("node_id"),
    Column("end_time"),
    Column("error_msg", first_line(60)),
)
