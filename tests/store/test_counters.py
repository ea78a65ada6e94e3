"""``Counters``: statements and rows written, as each driver reports them, on every backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from easyjob.core.records import Advance, PlannedFire
from easyjob.core.states import RunStatus
from easyjob.store import Store, schema
from easyjob.store.database import Counters, written_table
from tests.store.conftest import every_second, make_pending

_meta = sa.MetaData()
_t = sa.Table(
    "counted",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("v", sa.Integer, nullable=False),
)


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(db_url)
    _meta.create_all(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def _rows(counters: Counters, engine: sa.Engine, fn: Callable[[sa.Connection], object]) -> int:
    """Rows counted for what *fn* does in one transaction (results read in full)."""
    before = counters.snapshot()["rows_written"]
    with engine.begin() as conn:
        result = fn(conn)
        if isinstance(result, sa.CursorResult) and result.returns_rows:
            result.all()
    return counters.snapshot()["rows_written"] - before


def test_rows_written_for_each_statement_shape(engine: sa.Engine) -> None:
    counters = Counters()
    counters.watch(engine)
    returning = engine.dialect.update_returning
    many = [{"v": i % 10} for i in range(2500)]  # more than one insertmanyvalues batch
    counts = {
        "insert": _rows(counters, engine, lambda c: c.execute(_t.insert().values(v=1))),
        "executemany": _rows(counters, engine, lambda c: c.execute(_t.insert(), many)),
        "executemany returning": _rows(
            counters, engine, lambda c: c.execute(_t.insert().returning(_t.c.id), many[:5])
        ),
        "update": _rows(
            counters, engine, lambda c: c.execute(_t.update().where(_t.c.v < 3).values(v=20))
        ),
        "update none": _rows(
            counters, engine, lambda c: c.execute(_t.update().where(_t.c.v > 99).values(v=0))
        ),
        "update by id, many": _rows(
            counters,
            engine,
            lambda c: c.execute(
                _t.update().where(_t.c.id == sa.bindparam("b_id")).values(v=30),
                [{"b_id": 1}, {"b_id": 2}, {"b_id": 10**6}],
            ),
        ),
        "update returning": _rows(
            counters,
            engine,
            lambda c: c.execute(
                _t.update().where(_t.c.v == 20).values(v=21).returning(_t.c.id)
                if returning
                else _t.update().where(_t.c.v == 20).values(v=21)
            ),
        ),
        "text delete": _rows(
            counters, engine, lambda c: c.execute(sa.text("DELETE FROM counted WHERE v = 21"))
        ),
        "delete returning": _rows(
            counters,
            engine,
            lambda c: c.execute(_t.delete().where(_t.c.v == 30).returning(_t.c.id)),
        ),
        "select": _rows(counters, engine, lambda c: c.execute(sa.select(_t))),
    }
    # 2,506 rows after the inserts: 250 of each v in 0..9, plus v=1 and v in 0..4; v < 3: 754
    assert counts == {
        "insert": 1,
        "executemany": 2500,
        "executemany returning": 5,
        "update": 754,
        "update none": 0,
        "update by id, many": 2,
        "update returning": 752,
        "text delete": 752,
        "delete returning": 2,
        "select": 0,
    }
    snapshot = counters.snapshot()
    assert snapshot["rows_written.counted"] == snapshot["rows_written"] == sum(counts.values())


def test_written_table_reads_sql_text() -> None:
    assert [
        written_table(sql, None)
        for sql in (
            'UPDATE "easy_job_task" SET version = 1',
            "insert ignore into `easy_job_node` (id) values (1)",
            "DELETE FROM easy_job_task_detail WHERE id = 1",
            "SELECT id FROM easy_job_task FOR UPDATE",
        )
    ] == ["easy_job_task", "easy_job_node", "easy_job_task_detail", None]


def _by_table(store: Store) -> dict[str, int]:
    return {
        key.removeprefix("rows_written."): n
        for key, n in store.counters().items()
        if key.startswith("rows_written.")
    }


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {t: n - before.get(t, 0) for t, n in after.items() if n != before.get(t, 0)}


def test_a_store_counts_fires_written_and_runs_claimed_by_table(store: Store) -> None:
    before = _by_table(store)
    ids = make_pending(store, "job", fires=5)  # the task row, then 5 fires in one advance
    after_fires = _by_table(store)
    assert len(ids) == 5
    fires = _delta(before, after_fires)
    assert fires["easy_job_task_detail"] == 5
    assert fires["easy_job_task"] >= 1  # registered, then advanced

    far = store.now() + timedelta(days=1)
    candidates = store.runs.pending(far, 100)[:3]
    assert len(store.runs.claim("n1", candidates)) == 3
    assert _delta(after_fires, _by_table(store)) == {"easy_job_task_detail": 3}


def test_an_insert_that_skips_existing_rows_counts_the_rows_it_wrote(
    store: Store, db_backend: str
) -> None:
    meta = schema.meta_table
    rows = [{"name": "schema_version", "value": "0"}, {"name": "a", "value": "1"}]
    rows.append({"name": "b", "value": "2"})
    before = _by_table(store).get(meta.name, 0)
    store.db.write(
        "insert", lambda conn: conn.execute(store.db.backend.insert_ignore(meta, ["name"]), rows)
    )
    # MariaDB's ON DUPLICATE KEY UPDATE reports the existing row it left alone as found
    # (SQLAlchemy's PyMySQL connections count rows found): one more (docs/performance.md)
    assert _by_table(store)[meta.name] - before == (3 if db_backend == "mariadb" else 2)


def _by_write(store: Store) -> dict[str, int]:
    return {
        key.removeprefix("rows_by_write."): n
        for key, n in store.counters().items()
        if key.startswith("rows_by_write.")
    }


def test_a_store_counts_rows_by_write_and_status_inserted(store: Store) -> None:
    (task,) = store.tasks.upsert([every_second("gappy")])
    assert task.next_start_time is not None
    first = task.next_start_time
    missed = PlannedFire(
        first,
        RunStatus.MISSED,
        "missed",
        missed_count=3,
        last_fire_time=first + timedelta(seconds=2),
    )
    fires = (missed, *(PlannedFire(first + timedelta(seconds=i)) for i in (3, 4)))
    advance = Advance(task.id, task.version, first + timedelta(seconds=5), fires)
    before = _by_write(store)
    assert store.tasks.advance("n1", [advance]) == [task.id]
    candidates = store.runs.pending(first + timedelta(seconds=5), 10)
    assert len(store.runs.claim_started("n1", candidates[:1])) == 1
    assert len(store.runs.claim("n1", candidates[1:])) == 1
    assert _delta(before, _by_write(store)) == {
        "advance_tasks.easy_job_task.": 1,
        "advance_tasks.easy_job_task_detail.MISSED": 1,
        "advance_tasks.easy_job_task_detail.PENDING": 2,
        "claim_started_runs.easy_job_task_detail.": 1,
        "claim_runs.easy_job_task_detail.": 1,
    }
