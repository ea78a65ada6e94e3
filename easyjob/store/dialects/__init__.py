"""One object per database product, holding everything that differs between them.

:class:`Dialect` (in :mod:`~easyjob.store.dialects.base`) lists what a database must say:
URL rules, engine and session settings, which driver errors are transient, database time,
insert-or-ignore, how batch UPDATE winners are found, the schema lock, ``SKIP LOCKED``
support. :data:`DIALECTS` holds one instance per supported database; :func:`dialect_for`
picks the one a URL or engine names. See docs/architecture.md, "Adding a database".
"""

from __future__ import annotations

from easyjob.store.dialects.base import Dialect, EngineOptions
from easyjob.store.dialects.mysql import MySQLDialect
from easyjob.store.dialects.postgresql import PostgreSQLDialect
from easyjob.store.dialects.sqlite import SQLiteDialect

__all__ = [
    "DIALECTS",
    "Dialect",
    "EngineOptions",
    "MySQLDialect",
    "PostgreSQLDialect",
    "SQLiteDialect",
    "dialect_for",
    "dialect_of_error",
]

#: Every database easyjob runs on.
DIALECTS: tuple[Dialect, ...] = (SQLiteDialect(), PostgreSQLDialect(), MySQLDialect())

_BY_NAME = {name: dialect for dialect in DIALECTS for name in dialect.sqlalchemy_names}
_BY_SCHEME = {scheme: dialect for dialect in DIALECTS for scheme in dialect.schemes}


def dialect_for(name: str) -> Dialect | None:
    """The dialect of a URL drivername (``postgres``, ``mysql+pymysql`` ...) or of a
    SQLAlchemy dialect name (``engine.dialect.name``); None when easyjob has none."""
    return _BY_SCHEME.get(name) or _BY_NAME.get(name)


def dialect_of_error(orig: BaseException | None) -> Dialect | None:
    """The dialect whose driver raised *orig*, or None."""
    module = type(orig).__module__ if orig is not None else ""
    return next((d for d in DIALECTS if module.startswith(d.driver_module)), None)
