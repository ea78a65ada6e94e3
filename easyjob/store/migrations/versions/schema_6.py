"""Schema version 6: the scheduling features of issue 27 (a child of several parents,
concurrency limits, jitter, priority, calendars).

``easy_job_task_parent`` holds the parents of each child of several parents (a join);
``easy_job_task.pid`` stays its first parent. Every change here is additive: nodes of
versions 4 and 5 keep running on these tables (``compatible_from`` stays 4). They ignore
the new columns, so a task's new limits and calendars take effect once every node that
declares it runs version 6 (docs/deployment.md, Upgrading).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from easyjob.store.migrations.steps import record_version
from easyjob.store.schema import Id, UTCDateTime

revision = "schema_6"
down_revision = "schema_5"
branch_labels = None
depends_on = None
schema_version = 6
compatible_from = 4


def upgrade() -> None:
    """Add version 6's tables and columns; set the version."""
    _parents()
    _jitter_and_calendars()
    _limits()
    record_version(6, previous=5, compatible_from=4)


def _parents() -> None:
    """The parents of a child of several parents (a join)."""
    op.create_table(
        "easy_job_task_parent",
        sa.Column("task_id", Id, primary_key=True, autoincrement=False),
        sa.Column("parent_id", Id, primary_key=True, autoincrement=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Index("ix_easy_job_task_parent_parent", "parent_id"),
        comment=(
            "The parents of each task of several parents (a join), in declared order; "
            "easy_job_task.pid is the first of them. A task of one parent has no row here."
        ),
    )


def _jitter_and_calendars() -> None:
    """Jitter (the task's ``jitter_ms``, each fire's ``jitter_ms``) and calendars (the
    ``easy_job_calendar`` table, the task's ``exclude_calendar``)."""
    op.add_column(
        "easy_job_task",
        sa.Column("jitter_ms", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    )
    op.add_column("easy_job_task", sa.Column("exclude_calendar", sa.String(255)))
    op.add_column("easy_job_task_detail", sa.Column("jitter_ms", sa.BigInteger))
    op.create_table(
        "easy_job_calendar",
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


def _limits() -> None:
    """max_running and priority: how many runs of a task may run at once, and which start
    first."""
    op.add_column("easy_job_task", sa.Column("max_running", sa.Integer))
    op.add_column(
        "easy_job_task",
        sa.Column("priority", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.add_column("easy_job_task_detail", sa.Column("priority", sa.Integer))
