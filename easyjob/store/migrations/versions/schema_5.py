"""Schema version 5: what each node's code declares (catalogs), each node's health, and the
dashboard's audit.

``easy_job_catalog`` holds one row per distinct catalog (a node's declared tasks with their
functions, and its ``@runnable`` functions, as JSON), and ``easy_job_node.catalog`` names a
node's; strategies rank a run over the live nodes that declare its task.
``easy_job_node.health`` holds why a node is unhealthy (NULL: healthy), written at each
heartbeat. ``easy_job_audit``
records the dashboard's operator actions. Both are additive: nodes of version 4 keep running
on these tables (``compatible_from`` stays 4), leave ``catalog`` NULL and are taken to
declare every task, as they did.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from easyjob.store.migrations.steps import record_version
from easyjob.store.schema import Id, LongText, UTCDateTime

revision = "schema_5"
down_revision = "schema_4"
branch_labels = None
depends_on = None
schema_version = 5
compatible_from = 4


def upgrade() -> None:
    """Add the catalog table and column, and the audit table; set the version."""
    op.add_column("easy_job_node", sa.Column("catalog", sa.String(64)))
    op.add_column("easy_job_node", sa.Column("health", sa.String(1000)))
    op.create_table(
        "easy_job_catalog",
        sa.Column("catalog", sa.String(64), primary_key=True),
        sa.Column("body", LongText, nullable=False),
        sa.Column("create_time", UTCDateTime, nullable=False),
        comment=(
            "What a node's code declares (task name -> function, and the functions allowed "
            "for tasks added at run time), as JSON, once per distinct catalog; "
            "easy_job_node.catalog names it."
        ),
    )
    op.create_table(
        "easy_job_audit",
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
    record_version(5, previous=4, compatible_from=4)
