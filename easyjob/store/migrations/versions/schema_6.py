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
from easyjob.store.schema import Id

revision = "schema_6"
down_revision = "schema_5"
branch_labels = None
depends_on = None
schema_version = 6
compatible_from = 4


def upgrade() -> None:
    """Add version 6's tables and columns; set the version."""
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
    record_version(6, previous=5, compatible_from=4)
