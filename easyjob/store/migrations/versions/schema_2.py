"""Schema version 2 (never released on its own): recovery counts and missed summaries.

``easy_job_task_detail`` gains ``recoveries`` (0: no recovery had been counted, as for any
first attempt), ``missed_count`` and ``last_fire_time`` (NULL: a release 1 ``MISSED`` row
stands for one fire, as a version 2 row without a count does). Every row is kept as it was.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from easyjob.store.migrations.steps import record_version
from easyjob.store.schema import UTCDateTime

revision = "schema_2"
down_revision = "schema_1"
branch_labels = None
depends_on = None
schema_version = 2
compatible_from = 2


def upgrade() -> None:
    """Add the three run columns; set the version."""
    detail = "easy_job_task_detail"
    op.add_column(
        detail,
        sa.Column("recoveries", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.add_column(detail, sa.Column("missed_count", sa.BigInteger))
    op.add_column(detail, sa.Column("last_fire_time", UTCDateTime))
    record_version(2, previous=1, compatible_from=2)
