"""The upgrade SQL that `easyjob sql --upgrade-from 3` prints for a DBA (docs/schema.md,
docs/deployment.md), run as printed on each real database: it keeps every task's success
count, and the store opens the result."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from easyjob.core.records import Run
from easyjob.errors import SchemaVersionError
from easyjob.store import Store
from easyjob.store.schema import meta_table, metadata
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t
from tests.conftest import FAST_RETRY
from tests.store.conftest import every_second, make_pending
from tests.store.upgrade_rows import run_printed

DAY = timedelta(days=1)


def _history(store: Store) -> dict[str, int]:
    """Successes of two tasks, some of them pruned; returns the counts shown, by task."""
    for name, fires in (("job", 6), ("other", 3)):
        ids = make_pending(store, name=name, fires=fires)
        candidates = [c for c in store.runs.pending(store.now() + DAY, 1000) if c.id in ids]
        started = store.runs.start_many(store.runs.claim("node-a", candidates), exclusive=set())
        running = [r for r in started.values() if isinstance(r, Run)]
        assert store.runs.finish_many(running[:-1])
        assert store.runs.fail(running[-1], "boom", retry_in=None)
    old = store.history.runs(task="job")[-2:]
    aged = d.update().where(d.c.id.in_([r.id for r in old])).values(end_time=store.now() - 2 * DAY)
    store.db.write("age", lambda conn: conn.execute(aged))
    assert store.history.prune(DAY) == 2
    return {row.name: row.success_count or 0 for row in store.tasks.all()}


def _as_version_3(store: Store, counts: dict[str, int]) -> None:
    """What a version 3 database with the same history holds: ``success_count``, every
    success ever, none of the tables and columns of versions 5 to 7, and ``schema_version`` 3."""
    mysql = store.db.dialect in ("mysql", "mariadb")
    rename = (
        "ALTER TABLE easy_job_task CHANGE pruned_success_count success_count "
        "BIGINT NOT NULL DEFAULT 0"
        if mysql
        else "ALTER TABLE easy_job_task RENAME COLUMN pruned_success_count TO success_count"
    )

    def write(conn: sa.Connection) -> None:
        conn.exec_driver_sql(rename)
        for table in ("easy_job_catalog", "easy_job_audit"):  # what version 5 added
            conn.exec_driver_sql(f"DROP TABLE {table}")
        conn.exec_driver_sql("DROP TABLE easy_job_task_parent")  # what version 6 added
        for column in ("catalog", "health"):
            conn.exec_driver_sql(f"ALTER TABLE easy_job_node DROP COLUMN {column}")
        conn.exec_driver_sql("DROP TABLE easy_job_calendar")  # what version 6 added
        for table, column in (
            ("easy_job_task", "jitter_ms"),
            ("easy_job_task", "exclude_calendar"),
            ("easy_job_task_detail", "jitter_ms"),
            ("easy_job_task", "max_running"),
            ("easy_job_task", "priority"),
            ("easy_job_task_detail", "priority"),
            ("easy_job_task_detail", "missed_from"),  # what version 7 added
        ):
            conn.exec_driver_sql(f"ALTER TABLE {table} DROP COLUMN {column}")
        for name, count in counts.items():
            conn.execute(
                sa.text("UPDATE easy_job_task SET success_count = :n WHERE name = :name"),
                {"n": count, "name": name},
            )
        conn.execute(meta_table.update().values(value="3"))

    store.db.write("downgrade", write)


def test_the_upgrade_sql_from_version_3_keeps_every_success_count(db_url: str) -> None:
    store = Store.open(db_url, create=True, retry=FAST_RETRY)
    try:
        counts = _history(store)
        assert counts == {"job": 5, "other": 2}
        _as_version_3(store, counts)
        dialect = "mysql" if store.db.dialect in ("mysql", "mariadb") else store.db.dialect
    finally:
        store.close()
    with pytest.raises(SchemaVersionError, match="schema version '3'"):
        Store.open(db_url, retry=FAST_RETRY)

    run_printed(db_url, dialect, 3)  # what `easyjob sql --upgrade-from 3` prints

    store = Store.open(db_url, retry=FAST_RETRY)  # checks the version
    try:
        assert {row.name: row.success_count for row in store.tasks.all()} == counts
        pruned = sa.select(t.c.name, t.c.pruned_success_count)
        rows = store.db.read("pruned", lambda conn: dict(conn.execute(pruned).all()))
        assert rows == {"job": 2, "other": 0}
        columns = store.db.read("columns", lambda conn: sa.inspect(conn).get_columns(t.name))
        assert [c["name"] for c in columns] == list(metadata.tables[t.name].c.keys())
        (new,) = store.tasks.upsert([every_second("fresh")])  # the default survives the rename
        assert (new.pruned_success_count, store.tasks.get("fresh").success_count) == (0, 0)
    finally:
        store.close()
