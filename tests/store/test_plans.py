"""The polling reads are served by their indexes on each real database: their cost follows
the rows they return, not the size of the run history or the task catalogue.

Each read is captured as the store sends it and handed to the database's own EXPLAIN. A
statement that hides the indexed column (a ``coalesce(status, '')`` in the WHERE, say) still
returns the right rows; only its plan shows that it reads the whole table.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from easyjob.core.records import TaskSpec
from easyjob.store import Store
from easyjob.store.schema import task_detail_table as d
from tests.store.conftest import make_pending


def yearly(name: str) -> TaskSpec:
    return TaskSpec(name=name, func="tests.jobs:noop", cron="0 0 1 1 *")


def _statements(store: Store, call: Callable[[], object]) -> list[tuple[str, Any]]:
    sent: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        sent.append((statement, params))

    sa.event.listen(store.db.engine, "before_cursor_execute", capture)
    try:
        call()
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", capture)
    return [(s, p) for s, p in sent if s.lstrip().upper().startswith("SELECT")]


def _plan(store: Store, statement: str, params: Any) -> str:
    """The plan of *statement* as one text. PostgreSQL is told to avoid sequential scans,
    as it would on these tiny tables whatever the indexes: an index it can use then shows
    as an Index Cond; one it cannot does not."""

    def read(conn: sa.Connection) -> str:
        if store.db.dialect == "sqlite":
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)
            return "\n".join(str(row[-1]) for row in rows)
        if store.db.dialect == "postgresql":
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            rows = conn.exec_driver_sql("EXPLAIN " + statement, params)
            return "\n".join(str(row[0]) for row in rows)
        found = conn.exec_driver_sql("EXPLAIN " + statement, params).mappings()
        return "\n".join(f"{r['table']} type={r['type']} key={r['key']}" for r in found)

    return store.db.read("explain", read)


def _indexed(plan: str, dialect: str, table: str) -> bool:
    """Whether *plan* reaches *table* through an index condition (any index) rather than
    reading it whole."""
    lines = plan.splitlines()
    if dialect == "sqlite":
        mine = [line for line in lines if line.split(" ")[1:2] == [table]]
        return bool(mine) and all(line.startswith(f"SEARCH {table} USING ") for line in mine)
    if dialect == "postgresql":
        scans = [i for i, line in enumerate(lines) if f" on {table} " in f"{line} "]
        return bool(scans) and all(
            "Seq Scan" not in lines[i]
            and any(
                cond in later
                for later in lines[i : i + 4]
                for cond in ("Index Cond", "Recheck Cond")
            )
            for i in scans
        )
    mine = [line for line in lines if line.startswith(f"{table} ")]
    return bool(mine) and all(
        any(f" type={kind} " in line for kind in ("ref", "range", "eq_ref", "const"))
        for line in mine
    )


def _fill(store: Store) -> None:
    """Three tasks with a long history of finished runs and a few PENDING ones, with the
    database's statistics taken: the shape the planners see on a cluster that has run a
    while (on a few rows, MariaDB rightly reads the whole tiny table)."""
    store.tasks.upsert([yearly(f"catalogue-{i}") for i in range(1000)])
    ids = [run for i in range(3) for run in make_pending(store, f"job-{i}", fires=400)]
    finished = [run for run in ids if run % 100]

    def finish(conn: sa.Connection) -> None:
        conn.execute(d.update().where(d.c.id.in_(finished)).values(status="SUCCESS"))

    store.db.write("test", finish)
    if store.db.dialect != "sqlite":
        with store.db.engine.connect() as conn:
            for table in ("easy_job_task", "easy_job_task_detail"):
                conn.exec_driver_sql(
                    f"ANALYZE {'TABLE ' if store.db.dialect != 'postgresql' else ''}{table}"
                )
            conn.commit()


def test_the_pending_read_searches_the_pending_index(store: Store) -> None:
    _fill(store)
    horizon = store.now() + timedelta(days=1)
    (sent,) = _statements(store, lambda: store.runs.pending(horizon, 50, [999_999]))
    plan = _plan(store, *sent)
    assert _indexed(plan, store.db.dialect, "easy_job_task_detail"), plan


def test_the_due_tasks_read_searches_the_due_index(store: Store) -> None:
    _fill(store)
    horizon = store.now() + timedelta(days=1)
    reads = _statements(
        store,
        lambda: store.tasks.due(
            horizon,
            50,
            [999_999],
            share=(0, 2),
            overdue_before=horizon,
            behind_before=horizon,
        ),
    )
    (sent,) = reads
    plan = _plan(store, *sent)
    assert _indexed(plan, store.db.dialect, "easy_job_task"), plan
    assert _indexed(plan, store.db.dialect, "easy_job_task_detail"), plan  # the behind probe


FULL_READS = [
    ("sqlite", "SCAN easy_job_task_detail USING INDEX ix_easy_job_task_detail_pending"),
    ("sqlite", "SCAN easy_job_task_detail"),
    (
        "postgresql",
        "Index Scan using ix_easy_job_task_detail_pending on easy_job_task_detail  (cost=1)\n"
        "  Filter: ((COALESCE(status, ''::character varying))::text = 'PENDING'::text)",
    ),
    ("postgresql", "Seq Scan on easy_job_task_detail  (cost=0.00..35.50 rows=10 width=40)"),
    ("mysql", "easy_job_task_detail type=index key=ix_easy_job_task_detail_pending"),
    ("mysql", "easy_job_task_detail type=ALL key=None"),
]


@pytest.mark.parametrize(("dialect", "plan"), FULL_READS)
def test_a_plan_reading_the_whole_table_is_told_apart(dialect: str, plan: str) -> None:
    """The check above can fail: full reads as each database prints them."""
    assert not _indexed(plan, dialect, "easy_job_task_detail")
