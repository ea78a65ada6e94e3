"""Schema version 7: a fire's row carries the gap of MISSED fires before it (issue 25).

``easy_job_task_detail.missed_from``: on a row of a fire planned while the cluster is behind,
the first fire of the gap passed over before it (``missed_count`` how many), instead of a
MISSED summary row of its own: a saturated cluster writes one row fewer per run. Additive:
nodes of versions 4 to 6 keep running on these tables (``compatible_from`` stays 4); they
write summary rows as before, which version 7 reads too. Their readers of the history do
not know the column: a gap carried by a row shows there only as that row's run
(docs/schema.md).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from easyjob.store.migrations.steps import record_version
from easyjob.store.schema import UTCDateTime

revision = "schema_7"
down_revision = "schema_6"
branch_labels = None
depends_on = None
schema_version = 7
compatible_from = 4


def upgrade() -> None:
    """Add ``missed_from``; set the version."""
    op.add_column("easy_job_task_detail", sa.Column("missed_from", UTCDateTime))
    record_version(7, previous=6, compatible_from=4)
