"""The CLI's tables of nodes, tasks and runs: which columns of the view model's rows
(:mod:`easyjob.views`) each human table shows; ``--json`` prints whole rows."""

from __future__ import annotations

from easyjob.cli.output import Column, compact_json, first_line, offset_ms
from easyjob.views import Row, counted, node_rows, records, run_rows, seconds, task_rows

__all__ = [
    "FAILING_COLUMNS",
    "FAILURE_COLUMNS",
    "LATE_COLUMNS",
    "NODE_COLUMNS",
    "RUN_COLUMNS",
    "STATUS_NODE_COLUMNS",
    "STATUS_TASK_COLUMNS",
    "TASK_COLUMNS",
    "Row",
    "counted",
    "node_rows",
    "records",
    "run_rows",
    "task_rows",
]

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
    Column("schedule"),
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
    Column("jitter_s", seconds, right=True),
    Column("late_s", seconds, right=True),
    Column("duration_s", seconds, right=True),
    Column("missed", right=True),
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
