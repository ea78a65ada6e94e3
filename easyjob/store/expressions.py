"""SQL expressions shared by the store's statements, and the shapes their lists take.

Statement shapes: a batch statement names its rows by lists of ids (and values per id).
Written as expanding IN lists, each batch size renders another SQL text, and a driver
caches by text: psycopg never prepared them server-side (nor reused its own parse: it skips
its cache for texts over 4,096 bytes), SQLite's statement cache missed. The helpers here
give every list a bounded number of texts, per database:

- PostgreSQL binds each list as one array: ``id = ANY(:ids)``, a value per id
  ``(:values)[array_position(:ids, id)]`` (the version check is one: ``version =
  (:versions)[array_position(:ids, id)]``).
  One text per statement whatever the batch, so psycopg prepares it after a few runs.
- SQLite binds each list as one JSON array: ``id IN (SELECT value FROM json_each(:ids))``
  (SQLite reads the list once and looks each id up by the primary key), a value per id
  ``json_extract(:object, '$."' || id || '"')`` from one bound JSON object (the version
  check is one). One text per statement, as on PostgreSQL; and no IN list for SQLAlchemy
  to render at each execution (a claim of 37 runs rendered some 200 parameter names: the
  claim, start and finish cost 10-20 % less CPU without them).
- MySQL/MariaDB keep IN lists, padded to the next power of two by repeating the last
  element (a duplicate in an IN list matches nothing more, a duplicate key maps to the
  same value): at most log2(batch) + 1 texts per statement. A value per id is looked up
  with ``ELT(FIELD(id, :keys...), :values...)`` over the padded lists, not chosen by a CASE
  with a WHEN per distinct value.

Which form a database gets is its dialect's to say (:attr:`Dialect.array_lists
<easyjob.store.dialects.base.Dialect.array_lists>`, :attr:`Dialect.json_lists
<easyjob.store.dialects.base.Dialect.json_lists>`, :meth:`Dialect.lookup_sql
<easyjob.store.dialects.base.Dialect.lookup_sql>`).

Each shape comes in two bindings. :func:`in_list`, :func:`not_in_list`, :func:`at_versions`
and :func:`per_key` bind their values into the expression, for a statement built per call.
:func:`in_named`, :func:`not_in_named`, :func:`at_named_versions` and :func:`per_named` name
their parameters, for a statement built once and executed with :func:`named_list`,
:func:`named_versions` and :func:`named_values`: the hot path's batch transitions (claim,
start, finish, close, release), the pending read and the reads of the runs they touch.
SQLAlchemy keeps a statement's cache key on the statement object; building a batch UPDATE
and its key for every call cost 0.6-1.0 ms of CPU, more than sending it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import Grouping
from sqlalchemy.sql.visitors import InternalTraversal

if TYPE_CHECKING:
    from easyjob.store.dialects.base import Dialect

__all__ = [
    "PRIMARY_KEY_HINT",
    "at_named_versions",
    "at_versions",
    "count_where",
    "in_list",
    "in_named",
    "named_list",
    "named_values",
    "named_versions",
    "not_in_list",
    "not_in_named",
    "ordinal_of",
    "padded",
    "per_id",
    "per_key",
    "per_named",
    "status_is",
    "unindexed",
]

_T = TypeVar("_T")

#: MySQL/MariaDB statements that lock rows by a list of ids go through the primary key. On a
#: small table MariaDB read ``SELECT ... WHERE id IN (1, 2) FOR UPDATE`` from a covering
#: secondary index instead and locked every entry it passed (READ COMMITTED does not release
#: secondary-index locks): while that batch of two runs was uncommitted, a SKIP LOCKED read
#: of the table found no row at all. Seen with that plain SELECT; the store's own batch
#: statements chose the primary key there anyway, so the hint is a guard.
PRIMARY_KEY_HINT = "FORCE INDEX (PRIMARY)"


def padded(values: Sequence[Any]) -> list[Any]:
    """*values* lengthened to the next power of two by repeating the last one (empty stays
    empty): the lists SQLite and MySQL get, so a statement renders few distinct texts."""
    size = 1 << (len(values) - 1).bit_length() if values else 0
    return [*values, *[values[-1]] * (size - len(values))]


def in_list(column: sa.ColumnElement[Any], values: Collection[Any]) -> sa.ColumnElement[bool]:
    """``column IN values`` in a shape drivers cache: ``column = ANY(:array)`` on
    PostgreSQL, ``column IN (SELECT value FROM json_each(:list))`` on SQLite, an IN list
    padded to a power of two on MySQL/MariaDB (see the module)."""
    return _in(column, *_bound_list(column, values))


def in_named(column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
    """``column IN`` the list passed at execution as :func:`named_list` *name*: the shape
    of :func:`in_list` for a statement built once and executed with its values."""
    return _in(column, *_named_list(column, name))


def named_list(name: str, values: Collection[Any]) -> dict[str, Any]:
    """The execution parameters of :func:`in_named` *name* holding *values* (one per form:
    only the one its database renders is sent)."""
    listed = list(values)
    return {f"{name}_array": listed, f"{name}_json": listed, f"{name}_list": padded(listed)}


def not_in_list(column: sa.ColumnElement[Any], values: Collection[Any]) -> sa.ColumnElement[bool]:
    """``column NOT IN values`` (*column* never NULL), shaped as :func:`in_list`."""
    return _not_in(column, *_bound_list(column, values))


def not_in_named(column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
    """``column NOT IN`` the list passed at execution as :func:`named_list` *name* (*column*
    never NULL): :func:`not_in_list` for a statement built once."""
    return _not_in(column, *_named_list(column, name))


def _in(
    column: sa.ColumnElement[Any],
    array: sa.BindParameter[Any],
    listed: sa.BindParameter[Any],
    json_list: sa.BindParameter[Any],
) -> sa.ColumnElement[bool]:
    return _Choice(column == sa.any_(array), column.in_(listed), json=column.in_(_each(json_list)))


def _not_in(
    column: sa.ColumnElement[Any],
    array: sa.BindParameter[Any],
    listed: sa.BindParameter[Any],
    json_list: sa.BindParameter[Any],
) -> sa.ColumnElement[bool]:
    return _Choice(
        column != sa.all_(array), column.not_in(listed), json=column.not_in(_each(json_list))
    )


def _each(json_list: sa.BindParameter[Any]) -> sa.Select[Any]:
    """``SELECT value FROM json_each(:list)``: the items of a list bound as a JSON array."""
    items = sa.func.json_each(json_list).table_valued("value")
    return sa.select(items.c.value)


def _bound_list(
    column: sa.ColumnElement[Any], values: Collection[Any]
) -> tuple[sa.BindParameter[Any], sa.BindParameter[Any], sa.BindParameter[Any]]:
    """*values* bound as an array of *column*'s type, as a padded expanding list and as a
    JSON array."""
    listed = list(values)
    array = sa.bindparam(None, listed, type_=sa.ARRAY(column.type))
    json_list = sa.bindparam(None, listed, type_=_JSONList(column.type))
    return array, _expanding(padded(listed), column.type), json_list


def _named_list(
    column: sa.ColumnElement[Any], name: str
) -> tuple[sa.BindParameter[Any], sa.BindParameter[Any], sa.BindParameter[Any]]:
    """The array, expanding list and JSON array parameters of :func:`named_list` *name*."""
    array = sa.bindparam(f"{name}_array", type_=sa.ARRAY(column.type))
    listed = sa.bindparam(f"{name}_list", type_=column.type, expanding=True)
    return array, listed, sa.bindparam(f"{name}_json", type_=_JSONList(column.type))


def at_versions(table: sa.Table, expected: Mapping[int, int]) -> sa.ColumnElement[bool]:
    """Rows ``id -> version`` still at the version read: the WHERE of every batch
    version-checked UPDATE (the primary key narrows the batch; each row's version is then
    checked, see :func:`_at_versions`). One text per statement on PostgreSQL (two arrays)
    and SQLite (JSON), at most log2(batch) + 1 on MySQL/MariaDB (see the module)."""
    versions = list(expected.values())
    id_array, id_list, id_json = _bound_list(table.c.id, expected)
    return _at_versions(
        table,
        _in(table.c.id, id_array, id_list, id_json),
        id_array,  # the list's own array: the ids go once
        sa.bindparam(None, versions, type_=sa.ARRAY(table.c.version.type)),
        _expanding(padded(list(expected.items())), _pair_type(table)),
        sa.bindparam(None, list(expected.items()), type_=_JSONObject(table.c.version.type)),
    )


def at_named_versions(table: sa.Table, name: str) -> sa.ColumnElement[bool]:
    """:func:`at_versions` for a statement built once and executed with the rows passed as
    :func:`named_versions` *name*: building a batch UPDATE and its cache key cost SQLAlchemy
    more than sending it (0.6-1.0 ms a statement, issue 25)."""
    id_array, id_list, id_json = _named_list(table.c.id, name)
    return _at_versions(
        table,
        _in(table.c.id, id_array, id_list, id_json),
        id_array,  # the list's own array: the ids go once
        sa.bindparam(f"{name}_versions", type_=sa.ARRAY(table.c.version.type)),
        sa.bindparam(f"{name}_pairs", type_=_pair_type(table), expanding=True),
        sa.bindparam(f"{name}_object", type_=_JSONObject(table.c.version.type)),
    )


def named_versions(name: str, expected: Mapping[int, int]) -> dict[str, Any]:
    """The execution parameters of :func:`at_named_versions` *name*: rows ``id -> version``."""
    return {
        **named_list(name, expected),
        f"{name}_versions": list(expected.values()),
        f"{name}_pairs": padded(list(expected.items())),
        f"{name}_object": expected.items(),
    }


def _at_versions(
    table: sa.Table,
    by_id: sa.ColumnElement[bool],
    id_array: sa.BindParameter[Any],
    version_array: sa.BindParameter[Any],
    pairs: sa.BindParameter[Any],
    mapping: sa.BindParameter[Any],
) -> sa.ColumnElement[bool]:
    """The rows of *by_id* whose version is the one listed beside their id: on PostgreSQL
    looked up in the arrays (``version = (:versions)[array_position(:ids, id)]``), a
    condition on each row, not a join. As ``(id, version) IN (SELECT * FROM unnest(...))``
    it was a semi-join that PostgreSQL, when it misjudged the rows of *by_id* (a table
    without statistics yet), ran as a nested loop: batch x batch comparisons, 6 ms of a
    saturated planner's advance of 200 tasks. On SQLite looked up in one JSON object
    (``version = json_extract(:object, ...)``, :meth:`Dialect.lookup_sql
    <easyjob.store.dialects.base.Dialect.lookup_sql>`); on MySQL/MariaDB a row-value IN over
    padded pairs."""
    version = table.c.version
    listed = version == _looked_up(table.c.id, id_array, version_array, version.type)
    pair = sa.tuple_(table.c.id, version)
    looked_up = version == _Lookup(table.c.id, mapping, None, None, version.type)
    return sa.and_(by_id, _Choice(listed, pair.in_(pairs), json=looked_up))


def _pair_type(table: sa.Table) -> sa.TupleType:
    return sa.TupleType(table.c.id.type, table.c.version.type)


def status_is(column: sa.ColumnElement[str], value: str) -> sa.ColumnElement[bool]:
    """``column = value`` for statements that address their rows by primary key (a batch
    ``id IN (...)``): compared through coalesce() so that no index on the status is usable.
    Given a batch of ids and an indexable status, SQLite's planner drives the statement
    from the status index instead, reading every row in that status (every ACTIVE task,
    every PENDING run: 16 ms per advance with 100,000 tasks) rather than the batch's rows.
    So does PostgreSQL on a table without statistics yet (a cluster minutes old): it took
    ``status = 'ACTIVE'`` for a rare match and read every task's entry of that index."""
    return sa.func.coalesce(column, "") == value


def per_id(table: sa.Table, values: Mapping[int, Any], type_: Any = None) -> sa.ColumnElement[Any]:
    """Each row's value ``id -> value``: :func:`per_key` on the primary key."""
    return per_key(table.c.id, values, type_)


def per_key(
    column: sa.ColumnElement[Any], values: Mapping[int, Any], type_: Any = None
) -> sa.ColumnElement[Any]:
    """The value of each row's *column* in ``values`` (NULL for a key not there), looked up
    in the bound keys and values: ``(:values)[array_position(:keys, column)]`` on
    PostgreSQL, a lookup in padded pairs elsewhere (see the module). Its text does not
    depend on the batch size (PostgreSQL) or only on its power of two, nor on how many
    distinct values there are."""
    if not values:
        return sa.null()
    value_type = sa.types.to_instance(type_) if type_ is not None else sa.types.NullType()
    keys, listed = list(values), list(values.values())
    if isinstance(value_type, sa.types.NullType):
        value_type = sa.literal(listed[0]).type
    pairs = padded(list(values.items()))
    return _per_key(
        column,
        sa.bindparam(None, keys, type_=sa.ARRAY(column.type)),
        sa.bindparam(None, listed, type_=sa.ARRAY(value_type)),
        sa.bindparam(None, list(values.items()), type_=_JSONObject(value_type)),
        _expanding([k for k, _ in pairs], column.type),
        _expanding([v for _, v in pairs], value_type),
        value_type,
    )


def per_named(column: sa.ColumnElement[Any], name: str, type_: Any) -> sa.ColumnElement[Any]:
    """:func:`per_key` for a statement built once and executed with the values passed as
    :func:`named_values` *name* (at least one)."""
    value_type = sa.types.to_instance(type_)
    return _per_key(
        column,
        sa.bindparam(f"{name}_keys", type_=sa.ARRAY(column.type)),
        sa.bindparam(f"{name}_values", type_=sa.ARRAY(value_type)),
        sa.bindparam(f"{name}_object", type_=_JSONObject(value_type)),
        sa.bindparam(f"{name}_key_list", type_=column.type, expanding=True),
        sa.bindparam(f"{name}_value_list", type_=value_type, expanding=True),
        value_type,
    )


def named_values(name: str, values: Mapping[int, Any]) -> dict[str, Any]:
    """The execution parameters of :func:`per_named` *name*: ``key -> value``."""
    pairs = padded(list(values.items()))
    return {
        f"{name}_keys": list(values),
        f"{name}_values": list(values.values()),
        f"{name}_object": list(values.items()),
        f"{name}_key_list": [k for k, _ in pairs],
        f"{name}_value_list": [v for _, v in pairs],
    }


def _per_key(
    column: sa.ColumnElement[Any],
    key_array: sa.BindParameter[Any],
    value_array: sa.BindParameter[Any],
    mapping: sa.BindParameter[Any],
    keys: sa.BindParameter[Any],
    listed: sa.BindParameter[Any],
    value_type: sa.types.TypeEngine[Any],
) -> sa.ColumnElement[Any]:
    lookup = _Lookup(column, mapping, keys, listed, value_type)
    return _Choice(_looked_up(column, key_array, value_array, value_type), lookup, value_type)


def _looked_up(
    column: sa.ColumnElement[Any],
    key_array: sa.BindParameter[Any],
    value_array: sa.BindParameter[Any],
    value_type: sa.types.TypeEngine[Any],
) -> sa.ColumnElement[Any]:
    """PostgreSQL's value of each row's *column* in bound arrays of keys and values:
    ``(:values)[array_position(:keys, column)]``, NULL for a key not there."""
    position = sa.func.array_position(key_array, column)
    looked_up = Grouping(value_array)[position]  # "$1::text[][i]" would not parse
    return sa.type_coerce(looked_up, value_type)


def _expanding(values: list[Any], type_: Any) -> sa.BindParameter[Any]:
    return sa.bindparam(None, values, type_=type_, expanding=True)


class _Choice(sa.ColumnElement[Any]):
    """*arrays* on a database that binds lists as arrays (:attr:`Dialect.array_lists`),
    *json* (when given) on one that binds them as JSON (:attr:`Dialect.json_lists`),
    *padded* on the others. All stay children (so a traversal that rewrites conditions,
    like the model test's broken stores, reaches each); only one is rendered."""

    inherit_cache = True
    _traverse_internals = [
        ("arrays", InternalTraversal.dp_clauseelement),
        ("padded", InternalTraversal.dp_clauseelement),
        ("json", InternalTraversal.dp_clauseelement),
    ]

    def __init__(
        self,
        arrays: sa.ColumnElement[Any],
        padded: sa.ColumnElement[Any],
        type_: Any = None,
        *,
        json: sa.ColumnElement[Any] | None = None,
    ) -> None:
        self.arrays = arrays
        self.padded = padded
        self.json = json
        self.type = sa.types.to_instance(type_) if type_ is not None else sa.Boolean()
        self._is_implicitly_boolean = type_ is None  # a condition: no "= 1" on SQLite


@compiles(_Choice)
def _choose(element: _Choice, compiler: SQLCompiler, **kw: Any) -> str:
    dialect = _dialect(compiler)
    if dialect.array_lists:
        chosen = element.arrays
    elif dialect.json_lists and element.json is not None:
        chosen = element.json
    else:
        chosen = element.padded
    return compiler.process(chosen, **kw)


class _Lookup(sa.ColumnElement[Any]):
    """The value of *column* among bound ``(key, value)`` pairs, on SQLite (*mapping*, one
    JSON object) and MySQL (*keys* and *values*, padded lists; None in an expression only
    SQLite renders)."""

    inherit_cache = True
    _traverse_internals = [
        ("column", InternalTraversal.dp_clauseelement),
        ("mapping", InternalTraversal.dp_clauseelement),
        ("keys", InternalTraversal.dp_clauseelement),
        ("values", InternalTraversal.dp_clauseelement),
    ]

    def __init__(
        self,
        column: sa.ColumnElement[Any],
        mapping: sa.BindParameter[Any],
        keys: sa.BindParameter[Any] | None,
        values: sa.BindParameter[Any] | None,
        type_: sa.types.TypeEngine[Any],
    ) -> None:
        self.column = column
        self.mapping = mapping
        self.keys = keys
        self.values = values
        self.type = type_


class _JSON(sa.types.TypeDecorator[Any]):
    """Values bound as one JSON text, each value as *item_type* binds it on this database
    (times as SQLite stores them: text)."""

    impl = sa.Text
    cache_ok = True

    def __init__(self, item_type: sa.types.TypeEngine[Any]) -> None:
        super().__init__()
        self.item_type = item_type

    def _item(self, dialect: sa.Dialect) -> Any:
        """How an item binds on *dialect* (None: as it is)."""
        return self.item_type.dialect_impl(dialect).bind_processor(dialect)


class _JSONList(_JSON):
    """A list bound as one JSON array ``[item, ...]`` (read with ``json_each``)."""

    cache_ok = True  # SQLAlchemy asks each class

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> str:
        process = self._item(dialect)
        return json.dumps(list(value) if process is None else [process(v) for v in value])


class _JSONObject(_JSON):
    """``(key, value)`` pairs bound as one JSON object ``{"key": value}``."""

    cache_ok = True  # SQLAlchemy asks each class

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> str:
        process = self._item(dialect)
        items = value if process is None else ((k, process(v)) for k, v in value)
        return json.dumps({str(k): v for k, v in items})


@compiles(_Lookup)
def _lookup(element: _Lookup, compiler: SQLCompiler, **kw: Any) -> str:
    def bound(name: str) -> str:  # rendered on demand: a parameter rendered is sent
        return _bare(compiler.process(getattr(element, name), **kw))

    column = compiler.process(element.column, **kw)
    return _dialect(compiler).lookup_sql(column, bound, element.type)


def _dialect(compiler: SQLCompiler) -> Dialect:
    # imported here: the dialects import this module
    from easyjob.store.engine import compiled_by

    return compiled_by(compiler)


def _bare(rendered: str) -> str:
    """An expanding parameter's rendering without the parentheses of an IN list."""
    return rendered[1:-1] if rendered.startswith("(") and rendered.endswith(")") else rendered


class _Unindexed(sa.ColumnElement[Any]):
    """*column* as a condition's operand that no index may serve (see :func:`unindexed`)."""

    inherit_cache = True
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement)]

    def __init__(self, column: sa.ColumnElement[Any]) -> None:
        self.column = column
        self.type = column.type


@compiles(_Unindexed)
def _unindexed(element: _Unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.column, **kw)
    return f"+{column}" if compiler.dialect.name == "sqlite" else column


def ordinal_of(
    column: sa.ColumnElement[int], step: int | sa.BindParameter[int]
) -> sa.ColumnElement[int]:
    """The SQL of :func:`easyjob.core.ids.ordinal`: *column* ``div`` *step*. Integer division
    on SQLite and PostgreSQL; ``FLOOR(a / b)`` on MySQL/MariaDB, whose decimal quotient is
    rounded to 4 places, which never carries to the next integer for a step under 20,000
    (a quotient's fraction is a multiple of 1 / step)."""
    return column // step


def count_where(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    """The count of the rows where *condition* holds, as an aggregate: the condition is
    counted, not searched, so no database can take the read for a range of an index on
    its columns (for a read that must range over one index and tell its rows apart by
    another column: :func:`unindexed` disqualifies an index on SQLite alone, and
    PostgreSQL without statistics chose such an index too)."""
    return sa.func.count(sa.case((condition, 1)))


def unindexed(column: sa.ColumnElement[_T]) -> sa.ColumnElement[_T]:
    """*column*, which SQLite must not look up through an index in this condition: it is
    written ``+column`` there (SQLite's documented way to disqualify an index; SQLAlchemy's
    ``with_hint`` renders nothing on SQLite), as is on the other databases. For a condition
    whose other terms match a better index that SQLite's planner, which keeps no statistics,
    would pass over for one that ranges over every matching row of the whole table."""
    return _Unindexed(column)
