"""Schema version 3: interval and runtime schedules, trigger arguments, results, shards and
broadcast, stuck jobs.

Every new column is NULL or has the default that says "as before" (``origin`` ``code``,
``shards`` 1, ``shard`` 0, ``broadcast`` false, ``stuck_count`` 0); ``declared`` stays NULL
until a node registers the task again (it then records the code's schedule, which version 2
always applied). ``fire_count`` counts the fires written to run that are still in the
history (cron first attempts other than ``MISSED``): version 2 kept no count, so fires pruned
before the upgrade are not in it. The unique key of a cron fire gains ``shard``; on SQLite
that recreates ``easy_job_task_detail`` (rows, indexes and its AUTOINCREMENT counter kept).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from easyjob.store.migrations.steps import dialect, record_version
from easyjob.store.schema import Id, LongText, NodeId, UTCDateTime

revision = "schema_3"
down_revision = "schema_2"
branch_labels = None
depends_on = None
schema_version = 3
compatible_from = 3

DETAIL = "easy_job_task_detail"
UNIQUE = "uq_easy_job_task_detail_cron_fire"
_CRON_KEY = "CASE WHEN triggered_by = 'cron' AND attempt = 1 THEN fire_time END"


def upgrade() -> None:
    """Add the node, task and run columns, widen the cron fire key; set the version."""
    _nodes()
    _tasks()
    if dialect() == "sqlite":
        _runs_sqlite()
    else:
        for column in _run_columns():
            op.add_column(DETAIL, column)
        op.drop_constraint(UNIQUE, DETAIL, type_="unique")
        op.create_unique_constraint(UNIQUE, DETAIL, ["task_id", "cron_key", "shard"])
    op.execute(
        sa.text(
            "UPDATE easy_job_task SET fire_count = (SELECT COUNT(*) FROM easy_job_task_detail d "
            "WHERE d.task_id = easy_job_task.id AND d.cron_key IS NOT NULL "
            "AND d.status <> 'MISSED')"
        )
    )
    record_version(3, previous=2, compatible_from=3)


def _nodes() -> None:
    node = "easy_job_node"
    op.add_column(
        node, sa.Column("stuck_count", sa.Integer, nullable=False, server_default=sa.text("0"))
    )
    op.add_column(node, sa.Column("broadcast_tasks", sa.JSON(none_as_null=True)))


def _tasks() -> None:
    for column in (
        sa.Column("every_ms", sa.BigInteger),
        sa.Column("anchor_time", UTCDateTime),
        sa.Column("starts_at", UTCDateTime),
        sa.Column("ends_at", UTCDateTime),
        sa.Column("max_runs", sa.BigInteger),
        sa.Column("fire_count", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("accepts", sa.JSON(none_as_null=True)),
        sa.Column("origin", sa.String(16), nullable=False, server_default="code"),
        sa.Column("declared", sa.String(512)),
        sa.Column("shards", sa.Integer, nullable=False, server_default=sa.text("1")),
        sa.Column("broadcast", sa.Boolean, nullable=False, server_default=sa.false()),
    ):
        op.add_column("easy_job_task", column)


def _run_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("kwargs", sa.JSON(none_as_null=True)),
        sa.Column("result", sa.JSON(none_as_null=True)),
        sa.Column("traceback", LongText),
        sa.Column("shard", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("shards", sa.Integer, nullable=False, server_default=sa.text("1")),
        sa.Column("target_node", NodeId),
    ]


def _runs_sqlite() -> None:
    """SQLite cannot change a table's constraints: Alembic's batch mode copies the table
    into a new one. The generated ``cron_key`` is left out of the copy and made again in its
    place; the AUTOINCREMENT counter (ids of pruned rows are never handed out again) is
    saved before and restored after."""
    op.execute(
        sa.text(
            "CREATE TEMP TABLE easy_job_upgrade_seq AS "
            f"SELECT seq FROM sqlite_sequence WHERE name = '{DETAIL}'"
        )
    )
    with op.batch_alter_table(
        DETAIL,
        recreate="always",
        copy_from=_version_2_runs(),
        table_kwargs={"sqlite_autoincrement": True},
    ) as batch:
        batch.drop_constraint(UNIQUE, type_="unique")
        batch.drop_column("cron_key")
        batch.add_column(
            sa.Column("cron_key", UTCDateTime, sa.Computed(_CRON_KEY, persisted=True)),
            insert_after="create_time",
        )
        for column in _run_columns():
            batch.add_column(column)
        batch.create_unique_constraint(UNIQUE, ["task_id", "cron_key", "shard"])
    op.execute(sa.text(f"DELETE FROM sqlite_sequence WHERE name = '{DETAIL}'"))
    op.execute(
        sa.text(
            f"INSERT INTO sqlite_sequence (name, seq) SELECT '{DETAIL}', seq "
            "FROM easy_job_upgrade_seq"
        )
    )
    op.execute(sa.text("DROP TABLE easy_job_upgrade_seq"))


def _version_2_runs() -> sa.Table:
    """``easy_job_task_detail`` as version 2 made it (the copy's source, also offline)."""
    return sa.Table(
        DETAIL,
        sa.MetaData(),
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
        sa.Column("version", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("create_time", UTCDateTime, nullable=False),
        sa.Column("cron_key", UTCDateTime, sa.Computed(_CRON_KEY, persisted=True)),
        sa.Column("recoveries", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("missed_count", sa.BigInteger),
        sa.Column("last_fire_time", UTCDateTime),
        sa.UniqueConstraint("task_id", "cron_key", name=UNIQUE),
        sa.Index("ix_easy_job_task_detail_pending", "status", "due_time"),
        sa.Index("ix_easy_job_task_detail_held", "status", "node_id"),
        sa.Index("ix_easy_job_task_detail_task_status", "task_id", "status"),
        sa.Index("ix_easy_job_task_detail_task_fire", "task_id", "fire_time"),
        sa.Index("ix_easy_job_task_detail_end", "end_time"),
        sqlite_autoincrement=True,
    )
