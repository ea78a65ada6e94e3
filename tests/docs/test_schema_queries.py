"""docs/schema.md is true: it documents every column, and every query in it runs.

Each ```sql block of the document runs on each real database (blocks marked
``<!-- dialect: X -->`` only on that dialect) against data made through the store API, and the
queries we know the answer of must give it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from easyjob.core.records import Advance, PlannedFire, Run, TaskSpec
from easyjob.core.states import NodeStatus, RunStatus, TaskStatus, Trigger
from easyjob.store import Store
from easyjob.store.engine import READONLY, create_engine
from easyjob.store.schema import SCHEMA_VERSION, metadata, node_table, task_table
from tests.conftest import FAST_RETRY

DOC = Path(__file__).resolve().parents[2] / "docs" / "schema.md"
DIALECTS = ("sqlite", "postgresql", "mysql")
#: Session time zones far from UTC: the queries must not depend on the session's zone.
SESSION_TZ = {
    "postgresql": "SET TIME ZONE 'Asia/Kathmandu'",
    "mysql": "SET time_zone = '+05:45'",
}

_MARKER = re.compile(r"<!--\s*(dialect|upgrade):\s*([\w-]+)\s*-->")


@dataclass(frozen=True)
class Block:
    heading: str
    dialect: str | None  # None: portable
    sql: str
    line: int
    upgrade: bool = False  # statements that change the schema, not a query

    def __str__(self) -> str:
        return f"{self.heading!r} [{self.dialect or 'portable'}] (docs/schema.md:{self.line})"


def sql_blocks(text: str) -> list[Block]:
    """Every ```sql block, with the last heading above it and its dialect marker, if any."""
    blocks: list[Block] = []
    lines = text.splitlines()
    heading = ""
    marker: tuple[str, str, int] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        found = _MARKER.fullmatch(line.strip())
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if found:
            marker = (found.group(1), found.group(2), i + 1)
            i += 1
            continue
        if line.strip() == "```sql":
            start = i + 1
            end = start
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            assert end < len(lines), f"docs/schema.md:{i + 1}: unclosed ```sql block"
            dialect = marker[1] if marker is not None else None
            upgrade = marker is not None and marker[0] == "upgrade"
            text = "\n".join(lines[start:end]).strip()
            blocks.append(Block(heading, dialect, text, i + 1, upgrade))
            marker = None
            i = end + 1
            continue
        assert marker is None, (
            f"docs/schema.md:{marker[2]}: a dialect marker must come right before a ```sql fence"
        )
        i += 1
    return blocks


def section(text: str, title: str) -> str:
    """The text of the ``##`` section called *title* (up to the next ``##`` heading)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/schema.md has no section '## {title}'"
    return match.group(1)


TEXT = DOC.read_text(encoding="utf-8")
BLOCKS = [b for b in sql_blocks(TEXT) if not b.upgrade]
UPGRADES = [b for b in sql_blocks(TEXT) if b.upgrade]


# -- the document itself --------------------------------------------------------------------


@pytest.mark.parametrize("table", metadata.sorted_tables, ids=lambda t: t.name)
def test_every_column_is_documented_in_its_table_section(table: sa.Table) -> None:
    body = section(TEXT, f"`{table.name}`")
    columns = re.search(r"^\| Column \|.*?(?=^$)", body, re.M | re.S)
    assert columns, f"no '| Column |' table in the section of {table.name}"
    documented = re.findall(r"^\| `(\w+)` \|", columns.group(0), re.M)
    assert sorted(documented) == sorted(table.c.keys()), (
        f"the column table of {table.name} in docs/schema.md differs from the schema"
    )
    names = {i.name for i in table.indexes} | {
        c.name for c in table.constraints if isinstance(c, sa.UniqueConstraint)
    }
    for name in names:
        assert f"`{name}`" in body, f"index {name} of {table.name} is not documented"


def test_every_status_and_trigger_is_documented() -> None:
    vocab = section(TEXT, "Status vocabularies")
    for kind in (TaskStatus, RunStatus, NodeStatus, Trigger):
        for value in kind:
            assert f"| `{value}` |" in vocab, f"{kind.__name__}.{value.name} is not documented"


def test_the_ddl_and_upgrade_commands_are_named() -> None:
    for name in ("easyjob sql --dialect", "easyjob upgrade-db", "--upgrade-from N", "sql/*.sql"):
        assert name in TEXT


def test_blocks_are_single_statements_for_known_dialects() -> None:
    assert len(BLOCKS) >= 10
    for block in BLOCKS:
        assert block.dialect in (None, *DIALECTS), f"{block}: unknown dialect"
        assert block.sql.endswith(";"), f"{block}: end the statement with ';'"
        assert ";" not in block.sql[:-1], f"{block}: one statement per block"


def test_each_query_runs_everywhere_portably_or_once_per_dialect() -> None:
    queries = section(TEXT, "Queries to paste")
    headings = re.findall(r"^### (.+)$", queries, re.M)
    assert headings, "no queries"
    for heading in headings:
        dialects = [b.dialect for b in BLOCKS if b.heading == heading]
        assert dialects, f"query {heading!r} has no ```sql block"
        if None in dialects:
            assert dialects == [None], f"{heading!r}: a portable block and dialect blocks"
        else:
            assert sorted(dialects) == sorted(DIALECTS), (
                f"{heading!r}: needs one block for each of {DIALECTS}, has {dialects}"
            )


# -- the queries on real databases ------------------------------------------------------------


@dataclass
class Facts:
    """What the data set up by :func:`_populate` contains (run ids by role)."""

    succeeded: int
    failed: int
    failed_with_retry: int
    retry: int
    held_by_dead: int
    late_pending: int
    manual: int
    #: the first fire of the summary row's gap, and of the gap the late fire carries
    missed: dict[str, Any]


def _claim_start(store: Store, node: str, run_id: int) -> Run:
    horizon = store.db.now() + timedelta(days=1)
    candidates = [c for c in store.runs.pending(horizon, 1000) if c.id == run_id]
    (run,) = store.runs.claim(node, candidates)
    running = store.runs.start(run)
    assert isinstance(running, Run)
    return running


def _set(store: Store, table: sa.Table, key: sa.ColumnElement[bool], **ago: timedelta) -> None:
    """Move the given time columns of a row into the past (there is no API to age rows)."""

    def write(conn: sa.Connection) -> None:
        row = conn.execute(sa.select(*(table.c[c] for c in ago)).where(key)).one()
        values = {c: row[i] - delta for i, (c, delta) in enumerate(ago.items())}
        conn.execute(table.update().where(key).values(**values))

    store.db.write("age", write)


def _populate(store: Store) -> Facts:
    every_second = "* * * * * *"
    tasks = store.tasks.upsert(
        [
            TaskSpec(name="refresh_cache", func="myapp.jobs:refresh_cache", cron=every_second),
            TaskSpec(name="rebuild_index", func="myapp.jobs:rebuild_index", parent="refresh_cache"),
            TaskSpec(name="orphan", func="oldapp.jobs:gone", cron="0 0 0 1 1 *"),
        ]
    )
    refresh = tasks[0]
    # "orphan" was last registered two days ago: no running node has its code.
    _set(store, task_table, task_table.c.name == "orphan", seen_time=timedelta(days=2))

    # Fires 30, 20, 10, 5 and 2 minutes ago; the loader stopped advancing a minute ago.
    now = store.db.now().replace(microsecond=0)
    fires = [now - timedelta(minutes=m) for m in (30, 20, 10, 5, 2)]
    # a summary row of the fires 40 to 35 minutes ago, and the fire of 2 minutes ago carries
    # the gap of the fires 4 and 3 minutes ago
    summary = PlannedFire(
        now - timedelta(minutes=40),
        RunStatus.MISSED,
        "missed 6 fires",
        missed_count=6,
        last_fire_time=now - timedelta(minutes=35),
    )
    carrying = PlannedFire(fires[-1], missed_count=2, missed_from=now - timedelta(minutes=4))
    advance = Advance(
        refresh.id,
        refresh.version,
        now - timedelta(minutes=1),
        (summary, *(PlannedFire(f) for f in fires[:-1]), carrying),
    )
    assert store.tasks.advance("node-a", [advance]) == [refresh.id]
    pending = store.runs.pending(now + timedelta(days=1), 1000)
    ids = [c.id for c in pending if c.task_id == refresh.id]
    assert len(ids) == len(fires)
    missed = {"summary": now - timedelta(minutes=40), "gap": now - timedelta(minutes=4)}

    assert store.runs.finish(_claim_start(store, "node-a", ids[0]))
    assert store.runs.fail(_claim_start(store, "node-a", ids[1]), "ValueError: boom", retry_in=None)
    failing = _claim_start(store, "node-a", ids[2])
    assert store.runs.fail(failing, "OSError: disk full", retry_in=timedelta(hours=1))
    _claim_start(store, "node-dead", ids[3])
    (retry,) = [r for r in store.history.runs(task="refresh_cache") if r.attempt == 2]
    manual = store.tasks.trigger("refresh_cache")

    store.nodes.register("node-dead", host="h2", pid=22, weight=1, strategy="default", workers=4)
    _set(store, node_table, node_table.c.node_id == "node-dead", heartbeat_at=timedelta(minutes=10))
    store.nodes.register("node-gone", host="h3", pid=33, weight=1, strategy="default", workers=4)
    store.nodes.set_status("node-gone", NodeStatus.STOPPED)
    store.nodes.register("node-a", host="h1", pid=11, weight=2, strategy="id_hash", workers=8)
    return Facts(
        succeeded=ids[0],
        failed=ids[1],
        failed_with_retry=ids[2],
        retry=retry.id,
        held_by_dead=ids[3],
        late_pending=ids[4],
        manual=manual,
        missed=missed,
    )


Rows = list[dict[str, Any]]
Check = Callable[[Rows, Facts], None]


def _num(value: Any) -> float:
    assert isinstance(value, (int, float, Decimal)), value
    return float(value)


def _by(rows: Rows, key: str) -> dict[Any, dict[str, Any]]:
    return {row[key]: row for row in rows}


def _check_alive(rows: Rows, facts: Facts) -> None:
    nodes = _by(rows, "node_id")
    assert set(nodes) == {"node-a", "node-dead"}  # node-gone is STOPPED
    assert nodes["node-a"]["alive"] == 1
    assert 0 <= _num(nodes["node-a"]["heartbeat_age_s"]) < 5
    assert nodes["node-dead"]["alive"] == 0
    assert 595 < _num(nodes["node-dead"]["heartbeat_age_s"]) < 700


def _check_late_runs(rows: Rows, facts: Facts) -> None:
    late = _by(rows, "id")
    assert facts.late_pending in late
    assert facts.retry not in late  # due in an hour
    assert 115 < _num(late[facts.late_pending]["late_s"]) < 200


def _check_failed_today(rows: Rows, facts: Facts) -> None:
    assert [r["id"] for r in rows] == [facts.failed_with_retry, facts.failed]
    assert rows[1]["error_msg"] == "ValueError: boom"


def _check_counts(rows: Rows, facts: Facts) -> None:
    counts = {(r["node_id"], r["status"]): int(r["runs"]) for r in rows}
    assert counts[("node-a", "SUCCESS")] == 1
    assert counts[("node-a", "FAILED")] == 2
    assert counts[("node-dead", "RUNNING")] == 1
    # the late cron fire, the retry, the manual run, the child of the success
    assert counts[(None, "PENDING")] == 4
    assert counts[(None, "SKIPPED")] == 1  # the child of the failure
    assert counts[(None, "MISSED")] == 1  # the summary row


def _check_history(rows: Rows, facts: Facts) -> None:
    assert len(rows) == 8  # five cron fires, a summary row, one retry, one manual run
    assert rows[0]["id"] == facts.manual
    assert {r["triggered_by"] for r in rows} == {"cron", "retry", "manual"}


def _check_missed(rows: Rows, facts: Facts) -> None:
    def when(value: Any) -> str:  # SQLite answers text, the others naive datetimes
        return str(value.replace(tzinfo=None) if isinstance(value, datetime) else value)[:19]

    got = [
        (r["id"], r["status"], when(r["first_missed"]), r["missed_before"] is None) for r in rows
    ]
    first = {k: when(v) for k, v in facts.missed.items()}
    assert got == [
        (facts.late_pending, "PENDING", first["gap"], False),
        (got[1][0], "MISSED", first["summary"], True),
    ]
    assert [int(r["missed_count"]) for r in rows] == [2, 6]
    assert rows[0]["last_missed"] is None and rows[1]["last_missed"] is not None


def _check_held(rows: Rows, facts: Facts) -> None:
    assert [(r["node_id"], r["id"], r["status"]) for r in rows] == [
        ("node-dead", facts.held_by_dead, "RUNNING")
    ]


def _check_recoverable(rows: Rows, facts: Facts) -> None:
    assert [(r["node_id"], r["id"]) for r in rows] == [("node-dead", facts.held_by_dead)]


def _check_lateness(rows: Rows, facts: Facts) -> None:
    (row,) = rows
    assert row["task"] == "refresh_cache"
    assert int(row["runs"]) == 4  # started: the fires of 30, 20, 10 and 5 minutes ago
    assert 1795 < _num(row["max_late_s"]) < 1900
    assert 970 < _num(row["avg_late_s"]) < 1075


def _check_meta(rows: Rows, facts: Facts) -> None:
    assert sorted(rows, key=lambda r: r["name"]) == [
        {"name": "compatible_from", "value": "4"},
        {"name": "schema_version", "value": str(SCHEMA_VERSION)},
    ]


def _check_tasks(rows: Rows, facts: Facts) -> None:
    tasks = _by(rows, "name")
    assert set(tasks) == {"orphan", "rebuild_index", "refresh_cache"}
    assert tasks["rebuild_index"]["parent"] == "refresh_cache"
    counts = {name: (int(r["success_count"]), int(r["fail_count"])) for name, r in tasks.items()}
    assert counts == {"orphan": (0, 0), "rebuild_index": (0, 0), "refresh_cache": (1, 2)}


def _names(expected: set[str]) -> Check:
    def check(rows: Rows, facts: Facts) -> None:
        assert {r["name"] for r in rows} == expected

    return check


#: What the data says each query must answer, by heading (other queries must just run).
EXPECTED: dict[str, Check] = {
    "Schema version": _check_meta,
    "Tasks at a glance": _check_tasks,
    "Who is alive": _check_alive,
    "Late runs: PENDING past their due time": _check_late_runs,
    "Late schedules: ACTIVE tasks whose next_start_time has passed": _names({"refresh_cache"}),
    "What failed today (UTC)": _check_failed_today,
    "Run counts per node and status": _check_counts,
    "Missed fires of one task": _check_missed,
    "A task's recent history": _check_history,
    "Runs held by each node": _check_held,
    "Runs that recovery will take back": _check_recoverable,
    "Start lateness per task, last hour": _check_lateness,
    "Tasks no node has registered for a day": _names({"orphan"}),
    "Tasks no live node has code for": _names({"orphan"}),
}


def test_every_expectation_names_a_query_in_the_doc() -> None:
    headings = {b.heading for b in BLOCKS}
    assert set(EXPECTED) <= headings, f"renamed or removed: {set(EXPECTED) - headings}"


def _run(conn: sa.Connection, block: Block) -> Rows:
    # no_parameters: hand the text to the driver as is ('%' is not a placeholder here).
    result = conn.execution_options(no_parameters=True).exec_driver_sql(block.sql)
    return [dict(row) for row in result.mappings()]


def test_every_query_runs_and_answers_right(db_url: str) -> None:
    store = Store.open(db_url, create=True, retry=FAST_RETRY)
    try:
        facts = _populate(store)
        dialect = "mysql" if store.db.dialect in ("mysql", "mariadb") else store.db.dialect
    finally:
        store.close()
    mine = [b for b in BLOCKS if b.dialect in (None, dialect)]
    assert {b.heading for b in mine} >= set(EXPECTED)
    # A connection of its own, as an operator's: read-only, in a session zone far from UTC.
    engine = create_engine(db_url, pool_size=1)
    failures: list[str] = []
    try:
        with engine.connect() as conn:
            conn = conn.execution_options(**READONLY)
            if dialect in SESSION_TZ:
                conn.exec_driver_sql(SESSION_TZ[dialect])
            for block in mine:
                try:
                    rows = _run(conn, block)
                except sa.exc.DBAPIError as err:
                    failures.append(f"{block} failed: {str(err.orig or err).splitlines()[0]}")
                    conn.rollback()
                    if dialect in SESSION_TZ:
                        conn.exec_driver_sql(SESSION_TZ[dialect])
                    continue
                check = EXPECTED.get(block.heading)
                if check is None:
                    continue
                try:
                    check(rows, facts)
                except AssertionError as err:
                    failures.append(f"{block}: {str(err) or 'unexpected rows'}\n  rows: {rows}")
    finally:
        engine.dispose()
    assert not failures, "\n".join(failures)
