"""Schema upgrades (easyjob.store.migrations) on databases made from each earlier release's
DDL, with rows in every table: every row and value survives, new columns hold what the
migrations promise, and the result is the schema a fresh database gets."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from easyjob.core.records import Run
from easyjob.errors import SchemaMissingError, SchemaOutdatedError, SchemaTooNewError
from easyjob.store import Database, Store, migrations
from easyjob.store.engine import create_engine
from easyjob.store.schema import SCHEMA_VERSION
from tests.conftest import FAST_RETRY
from tests.store.conftest import every_second, make_pending, race_in_processes
from tests.store.upgrade_rows import (
    SUCCESS_COUNT,
    TABLES,
    columns,
    create_old,
    fill,
    read_all,
    run_printed,
    sql_dialect,
    structure,
)

#: Releases whose databases are upgraded; 4 (the release before migrations) joins them once
#: this code's schema is 5 (docs/architecture.md, Changing the schema).
OLD_VERSIONS = tuple(range(1, SCHEMA_VERSION))
#: A version after this one, whose tables this code may not run on.
NEWER = SCHEMA_VERSION + 1
_DAY = timedelta(days=1)


@pytest.fixture
def engine(db_url: str) -> Any:
    engine = create_engine(db_url, pool_size=2)
    yield engine
    engine.dispose()


def _old_database(engine: sa.Engine, version: int) -> dict[str, list[str]]:
    create_old(engine, version)
    fill(engine, version)
    return columns(engine)


def _upgrade(db_url: str) -> tuple[int, int]:
    db = Database.open(db_url, retry=FAST_RETRY)
    try:
        return db.upgrade_schema()
    finally:
        db.dispose()


def test_every_version_has_a_revision_and_the_head_is_this_code() -> None:
    assert list(migrations.revisions()) == list(range(1, SCHEMA_VERSION + 1))


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_an_old_database_is_refused_until_upgraded(db_url: str, engine: Any, version: int) -> None:
    shape = _old_database(engine, version)
    tables = _table_names(engine)
    with pytest.raises(SchemaOutdatedError, match="run `easyjob upgrade-db`"):
        Store.open(db_url, retry=FAST_RETRY)
    with pytest.raises(SchemaOutdatedError, match=f"schema version '{version}'"):
        Store.open(db_url, create=True, retry=FAST_RETRY)
    # a node's create left the old tables as they were, and added none beside them
    assert columns(engine) == shape
    assert _table_names(engine) == tables
    assert set(TABLES) <= set(tables)


def _table_names(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(sa.inspect(conn).get_table_names())


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_upgrade_keeps_every_row_and_value(db_url: str, engine: Any, version: int) -> None:
    shape = _old_database(engine, version)
    before = read_all(engine, shape)
    assert all(before[t] for t in TABLES)

    assert _upgrade(db_url) == (version, SCHEMA_VERSION)

    after = read_all(engine, shape, {"success_count": SUCCESS_COUNT})
    meta = {r["name"]: r["value"] for r in after.pop("easy_job_meta")}
    assert meta == {"schema_version": str(SCHEMA_VERSION), "compatible_from": "4"}
    before.pop("easy_job_meta")
    assert after == before
    _check_new_columns(engine, version)


def _check_new_columns(engine: sa.Engine, version: int) -> None:
    new = {
        "easy_job_node": "node_id, stuck_count, broadcast_tasks",
        "easy_job_task": "name, pruned_success_count, fire_count, origin, shards, broadcast, "
        "declared",
        "easy_job_task_detail": "status, triggered_by, recoveries, missed_count, shard, shards, "
        "kwargs",
    }
    with engine.connect() as conn:
        rows = {
            t: [tuple(r) for r in conn.exec_driver_sql(f"SELECT {c} FROM {t} ORDER BY 1, 2")]
            for t, c in new.items()
        }
    # version 3's success_count 7 less the SUCCESS rows still there: 3, 1 and 1
    pruned = {name: count for name, count, *_ in rows["easy_job_task"]}
    assert pruned == {"jobs.a": 4, "jobs.b": 6, "jobs.c": 6}
    if version >= 3:
        return  # its own values, compared above
    assert [r[1:] for r in rows["easy_job_node"]] == [(0, None), (0, None)]
    # fires written to run that are still in the history: cron first attempts, not MISSED
    assert [(r[0], *r[2:]) for r in rows["easy_job_task"]] == [
        ("jobs.a", 4, "code", 1, False, None),
        ("jobs.b", 0, "code", 1, False, None),
        ("jobs.c", 1, "code", 1, False, None),
    ]
    runs = rows["easy_job_task_detail"]
    assert {r[4:] for r in runs} == {(0, 1, None)}  # shard 0 of 1, no trigger arguments
    if version == 1:
        assert {r[2:4] for r in runs} == {(0, None)}


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_the_printed_upgrade_sql_keeps_every_row_and_makes_the_fresh_schema(
    db_url: str, engine: Any, version: int
) -> None:
    """What `easyjob sql --upgrade-from N` prints for a DBA, run as printed."""
    shape = _old_database(engine, version)
    before = read_all(engine, shape)
    run_printed(db_url, sql_dialect(engine), version)
    after = read_all(engine, shape, {"success_count": SUCCESS_COUNT})
    assert after.pop("easy_job_meta") == [
        {"name": "compatible_from", "value": "4"},
        {"name": "schema_version", "value": str(SCHEMA_VERSION)},
    ]
    before.pop("easy_job_meta")
    assert after == before
    _check_new_columns(engine, version)
    Store.open(db_url, retry=FAST_RETRY).close()
    printed = structure(engine)
    with engine.begin() as conn:
        for table in (*TABLES, migrations.VERSION_TABLE):
            conn.exec_driver_sql(f"DROP TABLE {table}")
    Store.open(db_url, create=True, retry=FAST_RETRY).close()
    assert printed == structure(engine)


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_upgraded_schema_is_the_fresh_schema(db_url: str, engine: Any, version: int) -> None:
    _old_database(engine, version)
    _upgrade(db_url)
    upgraded = structure(engine)
    with engine.begin() as conn:
        for table in (*TABLES, migrations.VERSION_TABLE):
            conn.exec_driver_sql(f"DROP TABLE {table}")
    Store.open(db_url, create=True, retry=FAST_RETRY).close()
    assert upgraded == structure(engine)
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            sql = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE name = 'easy_job_task_detail'"
            ).scalar_one()
        assert "AUTOINCREMENT" in sql


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_the_upgraded_store_works_and_never_reuses_a_pruned_id(
    db_url: str, engine: Any, version: int
) -> None:
    _old_database(engine, version)
    with engine.connect() as conn:
        pruned = conn.exec_driver_sql("SELECT MAX(id) FROM easy_job_task_detail").scalar_one() + 1
    _upgrade(db_url)
    store = Store.open(db_url, retry=FAST_RETRY)
    try:
        assert {t.name: t.success_count for t in store.tasks.all()} == {
            "jobs.a": 7,
            "jobs.b": 7,
            "jobs.c": 7,
        }
        ids = make_pending(store, name="fresh", fires=2)
        assert min(ids) > pruned
        candidates = [c for c in store.runs.pending(store.now() + _DAY, 100) if c.id in ids]
        started = store.runs.start_many(store.runs.claim("node-x", candidates), exclusive=set())
        assert all(isinstance(r, Run) for r in started.values())
        assert len(store.history.runs(task="jobs.a")) == 6
    finally:
        store.close()


def test_a_fresh_database_is_stamped_and_needs_no_upgrade(db_url: str, engine: Any) -> None:
    Store.open(db_url, create=True, retry=FAST_RETRY).close()
    with engine.connect() as conn:
        stamp = conn.exec_driver_sql(f"SELECT version_num FROM {migrations.VERSION_TABLE}")
        assert stamp.scalars().all() == [migrations.revisions()[SCHEMA_VERSION]]
        assert migrations.read_versions(conn) == (str(SCHEMA_VERSION), "4")
    assert _upgrade(db_url) == (SCHEMA_VERSION, SCHEMA_VERSION)


def test_a_database_of_the_release_before_migrations_is_stamped(db_url: str, engine: Any) -> None:
    """Release 4 made no stamp and no compatible_from row: a node of this code adds both."""
    Store.open(db_url, create=True, retry=FAST_RETRY).close()
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {migrations.VERSION_TABLE}")
        conn.exec_driver_sql("DELETE FROM easy_job_meta WHERE name = 'compatible_from'")
    Store.open(db_url, create=True, retry=FAST_RETRY).close()
    with engine.connect() as conn:
        stamp = conn.exec_driver_sql(f"SELECT version_num FROM {migrations.VERSION_TABLE}")
        assert stamp.scalars().all() == [f"schema_{SCHEMA_VERSION}"]


def test_the_release_before_migrations_is_upgraded_in_place(db_url: str, engine: Any) -> None:
    """Release 4's DDL (no compatible_from row, no stamp) with rows: upgrade-db keeps every
    row and completes the bookkeeping."""
    shape = _old_database(engine, 4)
    before = read_all(engine, shape)
    assert _upgrade(db_url) == (4, SCHEMA_VERSION)
    after = read_all(engine, shape)
    meta = {r["name"]: r["value"] for r in after.pop("easy_job_meta")}
    assert meta == {"schema_version": str(SCHEMA_VERSION), "compatible_from": "4"}
    before.pop("easy_job_meta")
    assert after == before
    with engine.connect() as conn:
        stamp = conn.exec_driver_sql(f"SELECT version_num FROM {migrations.VERSION_TABLE}")
        assert stamp.scalars().all() == [migrations.revisions()[SCHEMA_VERSION]]


def test_upgrade_of_nothing_names_init_db(db_url: str) -> None:
    with pytest.raises(SchemaMissingError, match="run `easyjob init-db`"):
        _upgrade(db_url)


def test_a_newer_incompatible_schema_is_refused_and_left_alone(db_url: str, engine: Any) -> None:
    Store.open(db_url, create=True, retry=FAST_RETRY).close()
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE easy_job_meta SET value = '9' WHERE name = 'schema_version'")
        conn.exec_driver_sql(
            f"UPDATE easy_job_meta SET value = '{NEWER}' WHERE name = 'compatible_from'"
        )
    message = f"runs only code of version {NEWER} or later .* upgrade easyjob on this host"
    with pytest.raises(SchemaTooNewError, match=message):
        Store.open(db_url, retry=FAST_RETRY)
    with pytest.raises(SchemaTooNewError, match=message):
        _upgrade(db_url)


def test_a_newer_compatible_schema_is_accepted(db_url: str, engine: Any) -> None:
    Store.open(db_url, create=True, retry=FAST_RETRY).close()
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"UPDATE easy_job_meta SET value = '{NEWER}' WHERE name = 'schema_version'"
        )
    store = Store.open(db_url, create=True, retry=FAST_RETRY)
    try:
        (task,) = store.tasks.upsert([every_second("job")])
        assert task.name == "job"
    finally:
        store.close()
    assert _upgrade(db_url) == (NEWER, NEWER)  # nothing to do


def _upgrade_in_process(db_url: str, name: str, start: Any, out: Any) -> None:
    db = Database.open(db_url, retry=FAST_RETRY)
    try:
        start.wait()
        before, after = db.upgrade_schema()
        out.put((name, [before, after]))
    finally:
        db.dispose()


def test_two_processes_upgrading_at_once_take_turns(db_url: str, engine: Any) -> None:
    shape = _old_database(engine, 1)
    before = read_all(engine, shape)
    args = [(db_url, "first"), (db_url, "second")]
    results = race_in_processes(_upgrade_in_process, args, timeout=120)
    assert sorted(results.values()) == [[1, SCHEMA_VERSION], [SCHEMA_VERSION, SCHEMA_VERSION]]
    after = read_all(engine, shape, {"success_count": SUCCESS_COUNT})
    assert after.pop("easy_job_task") == before.pop("easy_job_task")
    assert after["easy_job_task_detail"] == before["easy_job_task_detail"]


def test_tables_without_a_version_row_are_missing_not_another_version(
    db_url: str, engine: Any
) -> None:
    """What a reader sees while a MySQL creator is half way (each CREATE TABLE commits): it
    is waited for (easyjob.cli.waiting), not refused as another version."""
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE easy_job_meta (name VARCHAR(64) PRIMARY KEY, value VARCHAR(255))"
        )
    with pytest.raises(SchemaMissingError, match="have no schema_version yet"):
        Store.open(db_url, retry=FAST_RETRY)
    Store.open(db_url, create=True, retry=FAST_RETRY).close()  # a creator completes them
    Store.open(db_url, retry=FAST_RETRY).close()
