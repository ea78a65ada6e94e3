"""What every revision does besides its own change: record the schema version it makes and
the oldest code version that may still run on it (see :mod:`easyjob.store.compat`).

Revisions write SQL that also renders offline (``easyjob sql --upgrade-from N``): literal
values, no reads whose result Python would act on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from easyjob.store.compat import COMPATIBLE_FROM, SCHEMA_VERSION_ROW, VERSION_TABLE

__all__ = ["VERSION_TABLE", "dialect", "record_version"]


def dialect() -> str:
    """SQLAlchemy's name of the database being migrated (``sqlite``, ``postgresql``,
    ``mysql``, ``mariadb``)."""
    return op.get_context().dialect.name


def record_version(version: int, *, previous: int, compatible_from: int) -> None:
    """Set ``schema_version`` from *previous* to *version* and ``compatible_from``."""
    op.execute(
        sa.text(
            f"UPDATE easy_job_meta SET value = '{version}' "
            f"WHERE name = '{SCHEMA_VERSION_ROW}' AND value = '{previous}'"
        )
    )
    op.execute(sa.text(f"DELETE FROM easy_job_meta WHERE name = '{COMPATIBLE_FROM}'"))
    op.execute(
        sa.text(
            f"INSERT INTO easy_job_meta (name, value) "
            f"VALUES ('{COMPATIBLE_FROM}', '{compatible_from}')"
        )
    )
