"""Which schema versions this code runs on: the rule every node applies at start.

A database records two facts in ``easy_job_meta``: ``schema_version``, the version its tables
are (written by ``init-db`` and by each migration), and ``compatible_from``, the oldest code
version that may still run on them (written with it; absent in databases made before
migrations existed, where it is taken to equal ``schema_version``). Code of schema version N
runs on a database of version V when V == N, or when V > N and ``compatible_from`` <= N: the
migrations from N to V were additive, so nodes of the previous release keep working during a
rolling upgrade (docs/deployment.md). An older database is refused until ``easyjob
upgrade-db`` ran; a newer one that is not compatible is refused until the code is upgraded.
"""

from __future__ import annotations

import sqlalchemy as sa

from easyjob.errors import SchemaOutdatedError, SchemaTooNewError, SchemaVersionError
from easyjob.store.schema import meta_table

__all__ = ["COMPATIBLE_FROM", "SCHEMA_VERSION_ROW", "VERSION_TABLE", "judge", "read_versions"]

#: The ``easy_job_meta`` rows this rule reads.
SCHEMA_VERSION_ROW = "schema_version"
COMPATIBLE_FROM = "compatible_from"
#: Alembic's bookkeeping table (:mod:`easyjob.store.migrations`); named apart from
#: ``alembic_version`` so that an application that uses Alembic for its own tables in the
#: same database keeps its own.
VERSION_TABLE = "easy_job_alembic_version"


def read_versions(conn: sa.Connection) -> tuple[str | None, str | None]:
    """``schema_version`` and ``compatible_from`` as the meta rows hold them (None: absent)."""
    rows = conn.execute(sa.select(meta_table.c.name, meta_table.c.value))
    found = {name: value for name, value in rows}
    return found.get(SCHEMA_VERSION_ROW), found.get(COMPATIBLE_FROM)


def judge(url: str, found: str | None, compatible_from: str | None, code: int) -> bool:
    """Whether code of schema version *code* may run on a database whose meta rows say
    *found* and *compatible_from*: True when they are equal, False when the database is
    newer and compatible; raises :class:`SchemaOutdatedError` (older: upgrade the database),
    :class:`SchemaTooNewError` (newer, not compatible: upgrade the code) or
    :class:`SchemaVersionError` (not a version) naming *url* and both versions."""
    head = f"the easyjob tables in {url!r} are schema version {found!r}, "
    version = _number(found)
    if version is None:
        raise SchemaVersionError(head + f"this easyjob needs version {code}: not a version")
    if version == code:
        return True
    if version < code:
        raise SchemaOutdatedError(
            head + f"this easyjob needs version {code}: run `easyjob upgrade-db` to upgrade "
            "them in place, keeping every row (docs/deployment.md, Upgrading)"
        )
    oldest = _number(compatible_from)
    if oldest is None:
        oldest = version
    if oldest <= code:
        return False
    raise SchemaTooNewError(
        head + f"this easyjob needs version {code}, and version {version} runs only code of "
        f"version {oldest} or later (its compatible_from): upgrade easyjob on this host"
    )


def _number(text: str | None) -> int | None:
    if text is None or not text.strip().isdigit():
        return None
    return int(text)
