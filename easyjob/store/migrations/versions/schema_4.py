"""Schema version 4: ``easy_job_task.success_count`` becomes ``pruned_success_count``.

Version 3 counted every success of a task in ``success_count``; version 4 counts there only
the successes whose rows were pruned, and a task's successes are that column plus its
``SUCCESS`` rows still in the history. The column is renamed (a query written for version 3
fails instead of showing a smaller number) and each count lowered by the task's ``SUCCESS``
rows, so every task shows the count it showed before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from easyjob.store.migrations.steps import record_version

revision = "schema_4"
down_revision = "schema_3"
branch_labels = None
depends_on = None
schema_version = 4
compatible_from = 4


def upgrade() -> None:
    """Rename the column, subtract the successes still in the history; set the version."""
    op.alter_column(
        "easy_job_task",
        "success_count",
        new_column_name="pruned_success_count",
        existing_type=sa.BigInteger(),
        existing_nullable=False,
        existing_server_default=sa.text("0"),
    )
    op.execute(
        sa.text(
            "UPDATE easy_job_task SET pruned_success_count = pruned_success_count - ("
            "SELECT COUNT(*) FROM easy_job_task_detail d "
            "WHERE d.task_id = easy_job_task.id AND d.status = 'SUCCESS')"
        )
    )
    record_version(4, previous=3, compatible_from=4)
