"""Schema upgrades: Alembic revisions shipped inside the package, run without an alembic.ini.

Revision ``schema_N`` (``versions/schema_N.py``) makes schema version N from N - 1; its module
says ``schema_version`` and ``compatible_from`` (see :mod:`easyjob.store.compat`), and its
last step records both in ``easy_job_meta``. The meta row stays authoritative: before each
upgrade, Alembic's own table (``easy_job_alembic_version``) is set to the revision of the
version the meta row records, so a database made before migrations existed, or upgraded by
hand, needs no stamp of its own. ``init-db`` stamps a new database with the head revision.

Upgrades run inside the caller's transaction and schema lock (:meth:`Database.upgrade_schema
<easyjob.store.database.Database.upgrade_schema>`); :func:`upgrade_sql` writes the same steps
as SQL for a DBA (Alembic's offline mode).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from functools import cache
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.schema import CreateTable

from easyjob.errors import ConfigError, SchemaMissingError, SchemaOutdatedError
from easyjob.store import compat
from easyjob.store.compat import VERSION_TABLE, read_versions
from easyjob.store.schema import COMPATIBLE_FROM_VERSION, SCHEMA_VERSION, meta_table

__all__ = [
    "VERSION_TABLE",
    "complete_bookkeeping",
    "read_versions",
    "revisions",
    "stamp_head",
    "upgrade",
    "upgrade_sql",
    "version_table_def",
]

_HERE = Path(__file__).parent
log = logging.getLogger("easyjob.store")


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_HERE))
    return config


@cache
def revisions() -> dict[int, str]:
    """Each schema version this code can upgrade from or to, with its revision id."""
    script = ScriptDirectory.from_config(_config())
    found = {rev.module.schema_version: rev.revision for rev in script.walk_revisions()}
    return dict(sorted(found.items()))


def stamp_head(conn: sa.Connection) -> None:
    """Record in Alembic's table that the tables are the head revision's (a new database)."""
    _online(conn, lambda config: command.stamp(config, "head", purge=True))


def complete_bookkeeping(conn: sa.Connection) -> None:
    """On tables of this code's version, add what a release before migrations did not
    write: the ``compatible_from`` row and Alembic's stamp. Anything else is left alone."""
    found, compatible_from = read_versions(conn)
    if found != str(SCHEMA_VERSION):
        return
    if compatible_from is None:
        conn.execute(
            meta_table.insert().values(
                name=compat.COMPATIBLE_FROM, value=str(COMPATIBLE_FROM_VERSION)
            )
        )
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        stamp_head(conn)


def upgrade(conn: sa.Connection, url: str) -> tuple[int, int]:
    """Upgrade the tables behind *conn* (inside its transaction, under the schema lock the
    caller holds) to this code's version; returns the versions before and after. A database
    already at this version, or newer and compatible, is left alone."""
    if not sa.inspect(conn).has_table(meta_table.name):
        raise SchemaMissingError(
            f"the easyjob tables are missing in {url!r}: nothing to upgrade; run `easyjob init-db`"
        )
    found, compatible_from = read_versions(conn)
    try:
        compat.judge(url, found, compatible_from, SCHEMA_VERSION)
    except SchemaOutdatedError:
        pass
    else:
        complete_bookkeeping(conn)
        version = int(found or 0)
        return version, version
    before = int(found or 0)
    if before not in revisions():
        raise SchemaOutdatedError(
            f"the easyjob tables in {url!r} are schema version {found!r}, which no release of "
            f"easyjob made: upgrade them by hand to one of {sorted(revisions())}"
        )
    log.info(
        "upgrading the easyjob tables in %s from schema version %d to %d",
        url,
        before,
        SCHEMA_VERSION,
    )
    _online(conn, lambda config: command.stamp(config, revisions()[before], purge=True))
    _online(conn, lambda config: command.upgrade(config, "head"))
    after, _ = read_versions(conn)
    return before, int(after or 0)


def _online(conn: sa.Connection, run: Callable[[Config], None]) -> None:
    config = _config()
    config.attributes["connection"] = conn
    run(config)


def upgrade_sql(dialect: str, from_version: int) -> str:
    """The SQL that upgrades a database of *from_version* to this code's version, for
    *dialect* (``sqlite``, ``postgresql`` or ``mysql``): Alembic's offline mode, after
    statements that set its table to *from_version*'s revision."""
    from easyjob.store.ddl import DIALECTS

    if dialect not in DIALECTS:
        raise ConfigError(
            f"unknown SQL dialect {dialect!r}: choose one of {', '.join(map(repr, DIALECTS))}"
        )
    known = revisions()
    if from_version not in known or from_version >= SCHEMA_VERSION:
        older = [v for v in known if v < SCHEMA_VERSION]
        raise ConfigError(
            f"cannot upgrade from schema version {from_version!r}: this easyjob is version "
            f"{SCHEMA_VERSION} and upgrades from {', '.join(map(str, older))}"
        )
    engine_dialect = DIALECTS[dialect]
    table = version_table_def()
    stamp = [
        str(CreateTable(table, if_not_exists=True).compile(dialect=engine_dialect)).strip(),
        f"DELETE FROM {VERSION_TABLE}",
        f"INSERT INTO {VERSION_TABLE} (version_num) VALUES ('{known[from_version]}')",
    ]
    buffer = io.StringIO()
    config = Config(output_buffer=buffer)
    config.set_main_option("script_location", str(_HERE))
    config.attributes["dialect"] = engine_dialect.name
    command.upgrade(config, f"{known[from_version]}:head", sql=True)
    head = [
        f"-- easyjob: upgrade schema version {from_version} to {SCHEMA_VERSION} on {dialect}.",
        "-- Stop every node first (docs/deployment.md, Upgrading); check that",
        f"-- SELECT value FROM easy_job_meta WHERE name = 'schema_version' shows '{from_version}'.",
        "",
        *(statement + ";" for statement in stamp),
        "",
    ]
    return "\n".join(head) + buffer.getvalue()


def version_table_def() -> sa.Table:
    """Alembic's version table as Alembic creates it, for SQL written ahead (``easyjob sql``)."""
    return sa.Table(
        VERSION_TABLE,
        sa.MetaData(),
        sa.Column("version_num", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("version_num", name=f"{VERSION_TABLE}_pkc"),
    )
