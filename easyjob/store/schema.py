"""The easyjob tables, defined once for SQLite, PostgreSQL and MySQL/MariaDB.

Column names are a contract: operators query them with plain SQL. Every column is
documented in ``docs/schema.md``; ``sql/*.sql`` hold the rendered DDL and a test fails when
they drift from these definitions.

All times are UTC, stored without a zone, with microsecond precision (SQLite stores them as
``YYYY-MM-DD HH:MM:SS.ffffff`` text, which sorts as time does; its database clock has
milliseconds). On SQLite, ids use AUTOINCREMENT so a pruned id is never handed out again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from easyjob.clock import utc
from easyjob.store import dialects

__all__ = [
    "COMPATIBLE_FROM_VERSION",
    "SCHEMA_VERSION",
    "UTCDateTime",
    "audit_table",
    "calendar_table",
    "catalog_table",
    "meta_table",
    "metadata",
    "node_table",
    "task_detail_table",
    "task_parent_table",
    "task_table",
]

#: Bumped whenever a table, column or index changes, with a migration that makes it
#: (:mod:`easyjob.store.migrations`); checked by every node at start.
SCHEMA_VERSION = 7
#: The oldest code version that may run on tables of this version (:mod:`easyjob.store.compat`):
#: SCHEMA_VERSION after a change that older code cannot live with, else unchanged.
COMPATIBLE_FROM_VERSION = 4


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC datetimes in Python, naive UTC in the database."""

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        ours = dialects.dialect_for(dialect.name)
        special = ours.column_types().get("datetime") if ours is not None else None
        return dialect.type_descriptor(special if special is not None else sa.DateTime())

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return utc(value).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # SQLite expressions (e.g. db_now()) come back as text
            value = datetime.fromisoformat(value)
        return utc(value)


def _per_dialect(role: str, generic: sa.types.TypeEngine[Any]) -> sa.types.TypeEngine[Any]:
    """*generic* with the variant each dialect gives for *role* (``Dialect.column_types``)."""
    for dialect in dialects.DIALECTS:
        special = dialect.column_types().get(role)
        if special is not None:
            generic = generic.with_variant(special, *dialect.sqlalchemy_names)
    return generic


#: Surrogate keys: BIGINT everywhere, but SQLite only autoincrements ``INTEGER PRIMARY KEY``.
Id = _per_dialect("id", sa.BigInteger())
Count = sa.BigInteger()
#: Long text: a traceback or a result may pass MySQL's 64 KiB TEXT.
LongText = _per_dialect("long_text", sa.Text())
NodeId = sa.String(128)

metadata = sa.MetaData()

meta_table = sa.Table(
    "easy_job_meta",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(255), nullable=False),
    comment="Key/value facts about this database; holds the schema_version row.",
)

node_table = sa.Table(
    "easy_job_node",
    metadata,
    sa.Column("node_id", NodeId, primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("weight", sa.Integer, nullable=False, server_default=sa.text("1")),
    sa.Column("strategy", sa.String(255), nullable=False, server_default="default"),
    sa.Column("workers", sa.Integer, nullable=False, server_default=sa.text("1")),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("heartbeat_at", UTCDateTime, nullable=False),
    sa.Column("stopped_at", UTCDateTime),
    sa.Column("clock_offset_ms", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("claimed_count", Count, nullable=False, server_default=sa.text("0")),
    sa.Column("completed_count", Count, nullable=False, server_default=sa.text("0")),
    sa.Column("stuck_count", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("version", Count, nullable=False, server_default=sa.text("0")),
    sa.Column("broadcast_tasks", sa.JSON(none_as_null=True)),
    sa.Column("catalog", sa.String(64)),
    sa.Column("health", sa.String(1000)),
    sa.Index("ix_easy_job_node_status_heartbeat", "status", "heartbeat_at"),
    comment="One row per node incarnation; liveness is heartbeat_at judged in database time.",
)

catalog_table = sa.Table(
    "easy_job_catalog",
    metadata,
    sa.Column("catalog", sa.String(64), primary_key=True),
    sa.Column("body", LongText, nullable=False),
    sa.Column("create_time", UTCDateTime, nullable=False),
    comment=(
        "What a node's code declares (task name -> function, and the functions allowed for "
        "tasks added at run time), as JSON, once per distinct catalog; easy_job_node.catalog "
        "names it."
    ),
)

task_table = sa.Table(
    "easy_job_task",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("func", sa.String(512), nullable=False),
    sa.Column("cron_expr", sa.String(255)),
    sa.Column("tz", sa.String(64), nullable=False, server_default="UTC"),
    sa.Column("pid", Id),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("next_start_time", UTCDateTime),
    sa.Column("version", Count, nullable=False, server_default=sa.text("0")),
    sa.Column("node_id", NodeId),
    sa.Column("misfire", sa.String(16), nullable=False, server_default="fire_once"),
    sa.Column("misfire_grace_ms", sa.BigInteger, nullable=False, server_default=sa.text("60000")),
    sa.Column("overlap", sa.String(16), nullable=False, server_default="serial"),
    sa.Column("retries", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("retry_delay_ms", sa.BigInteger, nullable=False, server_default=sa.text("1000")),
    sa.Column("timeout_ms", sa.BigInteger),
    sa.Column("kwargs", sa.JSON, nullable=False),
    sa.Column("pruned_success_count", Count, nullable=False, server_default=sa.text("0")),
    sa.Column("fail_count", Count, nullable=False, server_default=sa.text("0")),
    sa.Column("create_time", UTCDateTime, nullable=False),
    sa.Column("update_time", UTCDateTime, nullable=False),
    sa.Column("seen_time", UTCDateTime, nullable=False),
    sa.Column("every_ms", sa.BigInteger),
    sa.Column("anchor_time", UTCDateTime),
    sa.Column("starts_at", UTCDateTime),
    sa.Column("ends_at", UTCDateTime),
    sa.Column("max_runs", sa.BigInteger),
    sa.Column("fire_count", Count, nullable=False, server_default=sa.text("0")),
    sa.Column("accepts", sa.JSON(none_as_null=True)),
    sa.Column("origin", sa.String(16), nullable=False, server_default="code"),
    sa.Column("declared", sa.String(512)),
    sa.Column("shards", sa.Integer, nullable=False, server_default=sa.text("1")),
    sa.Column("broadcast", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("jitter_ms", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("exclude_calendar", sa.String(255)),
    sa.Column("max_running", sa.Integer),
    sa.Column("priority", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.UniqueConstraint("name", name="uq_easy_job_task_name"),
    sa.Index("ix_easy_job_task_due", "status", "next_start_time"),
    sa.Index("ix_easy_job_task_pid", "pid"),
    comment="One row per task (a named function with a schedule); cron fires are made from it.",
    sqlite_autoincrement=True,
)

task_parent_table = sa.Table(
    "easy_job_task_parent",
    metadata,
    sa.Column("task_id", Id, primary_key=True, autoincrement=False),
    sa.Column("parent_id", Id, primary_key=True, autoincrement=False),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Index("ix_easy_job_task_parent_parent", "parent_id"),
    comment=(
        "The parents of each task of several parents (a join), in declared order; "
        "easy_job_task.pid is the first of them. A task of one parent has no row here."
    ),
)

#: ``fire_time`` for the first attempt of a cron fire, NULL otherwise; unique per task, so the
#: database itself refuses a second row for the same scheduled fire.
_CRON_KEY = sa.Computed(
    "CASE WHEN triggered_by = 'cron' AND attempt = 1 THEN fire_time END", persisted=True
)

task_detail_table = sa.Table(
    "easy_job_task_detail",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("task_id", Id, nullable=False),
    sa.Column("pid", Id),
    sa.Column("fire_time", UTCDateTime, nullable=False),
    sa.Column("due_time", UTCDateTime, nullable=False),
    sa.Column("node_id", NodeId),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("triggered_by", sa.String(16), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False, server_default=sa.text("1")),
    sa.Column("claim_time", UTCDateTime),
    sa.Column("start_time", UTCDateTime),
    sa.Column("end_time", UTCDateTime),
    sa.Column("error_msg", sa.Text),
    sa.Column("version", Count, nullable=False, server_default=sa.text("0")),
    sa.Column("create_time", UTCDateTime, nullable=False),
    sa.Column("cron_key", UTCDateTime, _CRON_KEY),
    sa.Column("recoveries", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("missed_count", Count),
    sa.Column("last_fire_time", UTCDateTime),
    sa.Column("missed_from", UTCDateTime),
    sa.Column("kwargs", sa.JSON(none_as_null=True)),
    sa.Column("result", sa.JSON(none_as_null=True)),
    sa.Column("traceback", LongText),
    sa.Column("shard", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("shards", sa.Integer, nullable=False, server_default=sa.text("1")),
    sa.Column("target_node", NodeId),
    sa.Column("jitter_ms", sa.BigInteger),
    sa.Column("priority", sa.Integer),
    sa.UniqueConstraint("task_id", "cron_key", "shard", name="uq_easy_job_task_detail_cron_fire"),
    sa.Index("ix_easy_job_task_detail_pending", "status", "due_time"),
    sa.Index("ix_easy_job_task_detail_held", "status", "node_id"),
    sa.Index("ix_easy_job_task_detail_task_status", "task_id", "status"),
    sa.Index("ix_easy_job_task_detail_task_fire", "task_id", "fire_time"),
    sa.Index("ix_easy_job_task_detail_end", "end_time"),
    comment="One row per attempt of a fire (the run history); claimed by version-checked UPDATEs.",
    sqlite_autoincrement=True,
)


audit_table = sa.Table(
    "easy_job_audit",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("actor", sa.String(255), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("target", sa.String(255)),
    sa.Column("detail", sa.JSON(none_as_null=True)),
    sa.Column("result", sa.String(16), nullable=False),
    sa.Column("message", sa.Text),
    sa.Column("remote", sa.String(64)),
    sa.Index("ix_easy_job_audit_at", "at"),
    comment="One row per operator action from the dashboard: who, what, when, and its result.",
    sqlite_autoincrement=True,
)


calendar_table = sa.Table(
    "easy_job_calendar",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("first_day", sa.Date, nullable=False),
    sa.Column("last_day", sa.Date, nullable=False),
    sa.Column("note", sa.String(1000)),
    sa.Column("create_time", UTCDateTime, nullable=False),
    sa.Index("ix_easy_job_calendar_name", "name", "first_day"),
    comment=(
        "Calendars: one row per range of days (first_day..last_day, inclusive) a named "
        "calendar excludes; tasks declared with exclude=NAME skip their fires on those days."
    ),
    sqlite_autoincrement=True,
)
