"""Schema version 1, the first release's: the base every upgrade starts from.

A database made by release 1 holds these tables already (``sql/*.sql`` of that release,
kept in ``tests/store/old_schemas``); it is stamped here before its first upgrade, so this
revision creates nothing.
"""

from __future__ import annotations

revision = "schema_1"
down_revision: str | None = None
branch_labels = None
depends_on = None
schema_version = 1
compatible_from = 1


def upgrade() -> None:
    """Nothing: the tables exist."""
