"""SQL expressions shared by the store's statements (the same on every database)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

__all__ = ["PRIMARY_KEY_HINT", "at_versions", "per_id", "per_key", "status_is"]


#: MySQL/MariaDB statements that lock rows by a list of ids go through the primary key. On a
#: small table MariaDB read ``SELECT ... WHERE id IN (1, 2) FOR UPDATE`` from a covering
#: secondary index instead and locked every entry it passed (READ COMMITTED does not release
#: secondary-index locks): while that batch of two runs was uncommitted, a SKIP LOCKED read
#: of the table found no row at all. Seen with that plain SELECT; the store's own batch
#: statements chose the primary key there anyway, so the hint is a guard.
PRIMARY_KEY_HINT = "FORCE INDEX (PRIMARY)"


def at_versions(table: sa.Table, expected: Mapping[int, int]) -> sa.ColumnElement[bool]:
    """Rows ``id -> version`` still at the version read: the WHERE of every batch
    version-checked UPDATE (the primary key narrows the batch; the row-value IN checks each
    row). Both lists are single expanding parameters, so the statement compiles once for
    every batch size and is served from SQLAlchemy's compiled cache after that."""
    return sa.and_(
        table.c.id.in_(list(expected)),
        sa.tuple_(table.c.id, table.c.version).in_(list(expected.items())),
    )


def status_is(column: sa.ColumnElement[str], value: str) -> sa.ColumnElement[bool]:
    """``column = value`` for statements that address their rows by primary key (a batch
    ``id IN (...)``): compared through coalesce() so that no index on the status is usable.
    Given a batch of ids and an indexable status, SQLite's planner drives the statement
    from the status index instead, reading every row in that status (every ACTIVE task,
    every PENDING run: 16 ms per advance with 100,000 tasks) rather than the batch's rows."""
    return sa.func.coalesce(column, "") == value


def per_id(table: sa.Table, values: Mapping[int, Any], type_: Any = None) -> sa.Case[Any]:
    """A CASE giving each row ``id -> value``: :func:`per_key` on the primary key."""
    return per_key(table.c.id, values, type_)


def per_key(
    column: sa.ColumnElement[Any], values: Mapping[int, Any], type_: Any = None
) -> sa.Case[Any]:
    """A CASE giving each row the value of its *column* in ``values``: one WHEN per distinct
    value, each with an expanding IN of the keys (rows of a batch mostly share a value: one
    next fire time, a count of 1), so it compiles to few cached variants whatever the batch
    size."""
    groups: dict[Any, list[int]] = {}
    for key, value in values.items():
        groups.setdefault(value, []).append(key)
    return sa.case(
        *((column.in_(keys), sa.literal(value, type_)) for value, keys in groups.items()),
        else_=sa.null(),
    )
