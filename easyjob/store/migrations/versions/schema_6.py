"""Schema version 6: the scheduling features of issue 27 (a child of several parents,
concurrency limits, jitter, priority, calendars).

Every change here is additive: nodes of versions 4 and 5 keep running on these tables
(``compatible_from`` stays 4). They ignore the new columns, so a task's new limits and
calendars take effect once every node that declares it runs version 6 (docs/deployment.md,
Upgrading).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from easyjob.store.migrations.steps import record_version

revision = "schema_6"
down_revision = "schema_5"
branch_labels = None
depends_on = None
schema_version = 6
compatible_from = 4


def upgrade() -> None:
    """Add version 6's tables and columns; set the version."""
    # max_running + priority: how many runs of a task may run at once, and which start first
    op.add_column("easy_job_task", sa.Column("max_running", sa.Integer))
    op.add_column(
        "easy_job_task",
        sa.Column("priority", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.add_column("easy_job_task_detail", sa.Column("priority", sa.Integer))
    record_version(6, previous=5, compatible_from=4)
