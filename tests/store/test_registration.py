"""Registering a node's catalogue writes only what changed (issue 25, goal 2), on each real
database: an unchanged catalogue is read, never written."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from easyjob.core.records import TaskSpec
from easyjob.store import Store
from easyjob.store import tasks as tasks_module
from easyjob.store.parents import parents_of
from easyjob.store.schema import task_table as t
from easyjob.store.tasks import _WRITE_CHUNK, SEEN_REFRESH


def _catalogue() -> list[TaskSpec]:
    """Tasks setting every kind of column: schedules, bounds, JSON, a parent, a pause."""
    start = datetime(2030, 1, 1, tzinfo=UTC)
    specs = [
        TaskSpec(name=f"plain-{i}", func=f"tests.jobs:f{i}", cron="*/5 * * * * *")
        for i in range(30)
    ]
    specs += [
        TaskSpec(
            name="rich",
            func="tests.jobs:rich",
            cron="0 0 12 ? * 2-6",
            cron_dialect="quartz",
            tz="Europe/Berlin",
            misfire="catch_up",  # type: ignore[arg-type]
            misfire_grace=timedelta(seconds=5),
            overlap="allow",  # type: ignore[arg-type]
            retries=2,
            timeout=timedelta(seconds=30),
            kwargs={"n": 1, "names": ["a", "b"], "nested": {"x": 1.5}},
            accepts=("user", "limit"),
            start=start,
            end=start + timedelta(days=30),
            max_runs=10,
            shards=3,
            jitter=timedelta(seconds=2),
            exclude="holidays",
            max_running=2,
            priority=5,
        ),
        TaskSpec(name="interval", func="tests.jobs:interval", every=timedelta(minutes=5)),
        TaskSpec(name="child", func="tests.jobs:child", parent="rich"),
        TaskSpec(name="join", func="tests.jobs:join", parents=("plain-0", "plain-1")),
        TaskSpec(name="paused", func="tests.jobs:paused", cron="@hourly", enabled=False),
        TaskSpec(name="manual", func="tests.jobs:manual", accepts=("x",)),
        TaskSpec(name="wide", func="tests.jobs:wide", cron="@daily", broadcast=True),
    ]
    return specs


_TASK_WRITE = re.compile(
    r"\s*(INSERT\s+(IGNORE\s+)?INTO|UPDATE|DELETE\s+FROM)\s+[`\"]?easy_job_task(_parent)?\b",
    re.I,
)


#: A read of one task's id by name (what registration asks when it lacks a parent's id).
_ID_LOOKUP = re.compile(r"\s*SELECT\s+\S*id\s+FROM\s+\S*easy_job_task\b", re.I)


@contextmanager
def _sent(store: Store, pattern: re.Pattern[str]) -> Iterator[list[str]]:
    """The statements matching *pattern* sent meanwhile."""
    sent: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if pattern.match(statement):
            sent.append(statement)

    sa.event.listen(store.db.engine, "before_cursor_execute", note)
    try:
        yield sent
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", note)


def _task_writes(store: Store) -> AbstractContextManager[list[str]]:
    """The INSERT, UPDATE and DELETE statements sent on ``easy_job_task`` meanwhile."""
    return _sent(store, _TASK_WRITE)


def test_an_unchanged_catalogue_is_read_not_written(store: Store) -> None:
    specs = _catalogue()
    assert store.tasks.register(specs) == len(specs)
    before = {row.name: (row.version, row.update_time) for row in store.tasks.all()}
    with _task_writes(store) as sent:
        ids: dict[str, int] = {}
        assert store.tasks.register(specs, ids.update) == 0
    assert sent == []
    assert set(ids) == {spec.name for spec in specs}
    after = {row.name: (row.version, row.update_time) for row in store.tasks.all()}
    assert after == before


def test_only_the_changed_task_is_written(store: Store) -> None:
    specs = _catalogue()
    store.tasks.register(specs)
    changed = [
        s if s.name != "plain-7" else TaskSpec(**{**_fields(s), "retries": 4}) for s in specs
    ]
    with _task_writes(store) as sent:
        assert store.tasks.register(changed) == 1
    assert sent
    assert store.tasks.get("plain-7").retries == 4
    assert store.tasks.get("plain-8").version == 0


def test_a_task_unseen_for_long_is_written_again_to_refresh_its_seen_time(store: Store) -> None:
    specs = _catalogue()
    store.tasks.register(specs)
    long_ago = store.now() - SEEN_REFRESH - timedelta(minutes=1)
    store.db.write(
        "age",
        lambda conn: conn.execute(
            t.update().where(t.c.name == "interval").values(seen_time=long_ago)
        ),
    )
    assert store.tasks.register(specs) == 1
    assert store.tasks.get("interval").seen_time > long_ago
    assert store.tasks.get("interval").version == 0  # seen again, not changed


def test_a_join_whose_other_parent_changed_is_written(store: Store) -> None:
    specs = _catalogue()
    store.tasks.register(specs)
    changed = [
        s if s.name != "join" else TaskSpec(**{**_fields(s), "parents": ("plain-0", "plain-2")})
        for s in specs
    ]
    with _task_writes(store) as sent:
        assert store.tasks.register(changed) == 1
    assert any("easy_job_task_parent" in statement for statement in sent)
    ids = {row.name: row.id for row in store.tasks.all()}
    with store.db.engine.connect() as conn:
        stored = parents_of(conn, [ids["join"]])
    assert stored == {ids["join"]: [ids["plain-0"], ids["plain-2"]]}


def test_a_first_registration_writes_every_column_and_parent(store: Store) -> None:
    """The rows a first registration inserts are checked by a narrow compare, not read back
    whole: every one must still say what its spec declares (a child's parent's id and a
    join's other parents are written after the insert)."""
    # first a task that accepts one argument beside one that accepts none: on PostgreSQL
    # a JSON list in an array of rows was taken for another dimension (malformed array)
    lists = [
        TaskSpec(name="one-arg", func="tests.jobs:one", accepts=("order",)),
        TaskSpec(name="no-arg", func="tests.jobs:none"),
    ]
    specs = lists + _catalogue()
    assert store.tasks.register(specs) == len(specs)
    rows = {row.name: row for row in store.tasks.all()}
    assert (rows["one-arg"].accepts, rows["no-arg"].accepts) == (["order"], None)
    assert rows["rich"].accepts == ["limit", "user"]
    assert rows["child"].pid == rows["rich"].id
    assert rows["rich"].kwargs == {"n": 1, "names": ["a", "b"], "nested": {"x": 1.5}}
    assert rows["paused"].status == "PAUSED"
    with store.db.engine.connect() as conn:
        assert parents_of(conn, [rows["join"].id]) == {
            rows["join"].id: [rows["plain-0"].id, rows["plain-1"].id]
        }
    assert store.tasks.register(specs) == 0


def test_children_in_later_chunks_find_their_parents_ids(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registration keeps the ids of parents only from one chunk to the next (every task's,
    kept, left 12-14 MB of a 100,000-task node's memory held): a child, or a join, chunks
    after its parents still names their ids, found without asking the database, and a
    second registration writes nothing."""
    monkeypatch.setattr(tasks_module, "_FIRST_CHUNK", 10)
    monkeypatch.setattr(tasks_module, "_UPSERT_CHUNK", 20)
    specs = [TaskSpec(name=f"root-{i}", func=f"tests.jobs:r{i}", cron="@hourly") for i in range(25)]
    specs += [
        TaskSpec(name=f"child-{i}", func=f"tests.jobs:c{i}", parent=f"root-{i % 3}")
        for i in range(30)
    ]
    specs.append(TaskSpec(name="join", func="tests.jobs:j", parents=("root-0", "child-29")))
    with _sent(store, _ID_LOOKUP) as lookups:
        assert store.tasks.register(specs) == len(specs)
    assert lookups == []  # every parent's id was kept from its chunk
    rows = {row.name: row for row in store.tasks.all()}
    assert {rows[f"child-{i}"].pid for i in range(30)} == {rows[f"root-{i}"].id for i in range(3)}
    assert all(rows[f"child-{i}"].pid == rows[f"root-{i % 3}"].id for i in range(30))
    with store.db.engine.connect() as conn:
        assert parents_of(conn, [rows["join"].id]) == {
            rows["join"].id: [rows["root-0"].id, rows["child-29"].id]
        }
    with _task_writes(store) as sent:
        assert store.tasks.register(specs) == 0
    assert sent == []


def test_a_row_another_node_inserts_meanwhile_from_other_code_is_made_this_codes(
    store: Store,
) -> None:
    """Two nodes registering at once, of different code: the other inserts a task between
    this node's read and its insert, which then skips that name. The compare after the
    insert finds the row differs, and this node writes its definition, as when it found the
    row in its read."""
    if store.db.dialect == "sqlite":
        pytest.skip("SQLite's writer holds the file lock: no insert can come in between")
    specs = _catalogue()
    other = Store.open(store.db.engine.url.render_as_string(hide_password=False))
    theirs = TaskSpec(**{**_fields(specs[3]), "retries": 7, "cron": "*/7 * * * * *"})
    done: list[int] = []

    def meanwhile(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not done and _TASK_WRITE.match(statement) and "INSERT" in statement.upper():
            done.append(other.tasks.register([theirs]))

    sa.event.listen(store.db.engine, "before_cursor_execute", meanwhile)
    try:
        store.tasks.register(specs)
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", meanwhile)
        other.close()
    assert done == [1]
    row = store.tasks.get(specs[3].name)
    assert (row.retries, row.cron_expr) == (0, "*/5 * * * * *")
    assert row.version == 1  # inserted by the other node, then updated by this one
    assert store.tasks.register(specs) == 0


def _fields(spec: TaskSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in TaskSpec.__dataclass_fields__}


def test_a_node_that_finds_its_chunk_inserted_meanwhile_by_a_node_of_the_same_code_writes_none(
    store: Store,
) -> None:
    """Nodes starting together read the same missing tasks; the first inserts them. The
    others, once their turn to write comes, compare the chunk again as the lock-free read
    does (a few columns, as tuples) and write nothing, and say so: they read every row whole
    under the write lock (4 SQLite nodes x 6,000 tasks: 0.1-0.17 s of the lock per chunk and
    node)."""
    specs = _catalogue()
    other = Store.open(store.db.engine.url.render_as_string(hide_password=False))
    done: list[int] = []

    def meanwhile(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        reads_tasks = (
            statement.lstrip().upper().startswith("SELECT") and "easy_job_task" in statement
        )
        if not done and reads_tasks:
            done.append(other.tasks.register(specs))  # after this node's read of the chunk

    sa.event.listen(store.db.engine, "after_cursor_execute", meanwhile)
    try:
        written = store.tasks.register(specs)
    finally:
        sa.event.remove(store.db.engine, "after_cursor_execute", meanwhile)
        other.close()
    assert done == [len(specs)]
    assert written == 0
    assert store.counters().get("rows_written.easy_job_task", 0) == 0
    assert [task.name for task in store.tasks.all()] == sorted(spec.name for spec in specs)


def test_a_registration_writes_a_few_hundred_tasks_a_transaction_on_sqlite(store: Store) -> None:
    """SQLite has one writer: a transaction inserting a 2,000-task chunk held it while every
    node's claims waited (a second of fires missed when 4 nodes started on empty tables).
    The reads go by 2,000, the writes by ``_WRITE_CHUNK`` there; elsewhere a chunk read is
    written in one transaction (nothing waits for it, and in 500s a 100,000-task first
    registration took up to a third longer on PostgreSQL)."""
    specs = [
        TaskSpec(name=f"t{i}", func="tests.jobs:noop", cron="0 0 1 1 *")
        for i in range(2 * _WRITE_CHUNK + 300)
    ]
    per_commit: list[int] = []

    def committed(conn: Any) -> None:
        per_commit.append(store.counters().get("rows_written.easy_job_task", 0))

    sa.event.listen(store.db.engine, "commit", committed)
    try:
        assert store.tasks.register(specs) == len(specs)
    finally:
        sa.event.remove(store.db.engine, "commit", committed)
    written = [b - a for a, b in zip([0, *per_commit], per_commit, strict=False) if b > a]
    assert sum(written) >= len(specs)
    if store.db.backend.one_writer:
        assert max(written) <= _WRITE_CHUNK
    else:
        assert max(written) > _WRITE_CHUNK
    assert len(store.tasks.all()) == len(specs)
