"""status, tasks, nodes and history: JSON that agrees with the store, and readable tables."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import sqlalchemy as sa

from easyjob.core.states import RunStatus, TaskStatus
from easyjob.store import Store
from easyjob.store.schema import node_table as n
from easyjob.store.schema import task_table as t
from tests.cli.conftest import YEARLY, Cli, age_runs, register, start_manual_run, yearly

ISO_MS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def _when(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text)


def _age_node(store: Store, node_id: str, seconds: float) -> None:
    def write(conn: sa.Connection) -> None:
        (beat,) = conn.execute(sa.select(n.c.heartbeat_at).where(n.c.node_id == node_id)).one()
        stmt = n.update().where(n.c.node_id == node_id)
        conn.execute(stmt.values(heartbeat_at=beat - timedelta(seconds=seconds)))

    store.db.write("age_node", write)


def _cluster(store: Store) -> dict[str, int]:
    """Two nodes (one silent for 100 s, one 250 ms ahead), three tasks: ``late`` whose next
    fire is 60 s overdue, ``queued`` with a run due 30 s ago that nobody claimed, ``broken``
    with one failed run; plus one run still RUNNING on node-a."""
    register(store, "node-a", offset_ms=250)
    register(store, "node-b")
    _age_node(store, "node-b", 100)
    store.tasks.upsert(yearly("broken", "late", "queued"))
    failed = start_manual_run(store, "broken")
    assert store.runs.fail(failed, "ValueError: boom\nsecond line", retry_in=None)
    running = start_manual_run(store, "late")
    queued = store.tasks.trigger("queued")
    age_runs(store, [queued], "due_time", timedelta(seconds=30))

    overdue = store.db.now() - timedelta(seconds=60)
    stmt = t.update().where(t.c.name == "late").values(next_start_time=overdue)
    store.db.write("overdue", lambda conn: conn.execute(stmt))
    return {"failed": failed.id, "running": running.id, "queued": queued}


def test_status_json_agrees_with_the_store(cli: Cli, store: Store, db_url: str) -> None:
    ids = _cluster(store)
    result = cli("status", "--json", "--db", db_url)
    assert (result.code, result.err) == (0, "")
    doc = result.json()
    assert set(doc) == {"db_time", "nodes", "tasks", "failures"}
    db_time = _when(doc["db_time"])
    assert abs(db_time - store.db.now()) < timedelta(seconds=30)

    _, nodes = store.nodes.all()
    by_id = {node["node_id"]: node for node in doc["nodes"]}
    assert sorted(by_id) == [node.node_id for node in nodes] == ["node-a", "node-b"]
    for node in nodes:
        shown = by_id[node.node_id]
        assert (shown["status"], shown["clock_offset_ms"], shown["host"]) == (
            node.status.value,
            node.clock_offset_ms,
            node.host,
        )
        assert _when(shown["heartbeat_at"]) == node.heartbeat_at
        assert shown["age_s"] == (db_time - node.heartbeat_at).total_seconds()
    assert by_id["node-a"]["clock_offset_ms"] == 250
    assert 0 <= by_id["node-a"]["age_s"] < 30
    assert 100 <= by_id["node-b"]["age_s"] < 130
    assert (by_id["node-a"]["held"], by_id["node-b"]["held"]) == (1, 0)

    tasks = {task["name"]: task for task in doc["tasks"]}
    for row in store.tasks.all():
        shown = tasks[row.name]
        assert (shown["id"], shown["status"], shown["fail_count"]) == (
            row.id,
            row.status.value,
            row.fail_count,
        )
        assert _when(shown["next_start_time"]) == row.next_start_time
    assert 60 <= tasks["late"]["lag_s"] < 90
    assert (tasks["queued"]["pending"], tasks["late"]["pending"]) == (1, 0)
    assert 30 <= tasks["queued"]["lag_s"] < 60
    assert tasks["broken"]["lag_s"] == 0.0

    (failure,) = doc["failures"]
    (stored,) = store.history.failures()
    assert (failure["id"], failure["task_name"], failure["status"]) == (
        ids["failed"],
        "broken",
        "FAILED",
    )
    assert failure["error_msg"] == stored.error_msg == "ValueError: boom\nsecond line"
    assert _when(failure["end_time"]) == stored.end_time


def test_status_human_shows_every_section(cli: Cli, store: Store, db_url: str) -> None:
    ids = _cluster(store)
    result = cli("status", "--db", db_url)
    assert result.code == 0
    text = result.out
    assert re.match(rf"database time {ISO_MS}\n\nnodes\n", text)
    nodes, tasks, failures = text.split("\n\n")[1:]
    lines = nodes.splitlines()
    assert lines[1].split()[:4] == ["node_id", "status", "age_s", "clock_offset_ms"]
    node_a = lines[2].split()
    assert node_a[:2] == ["node-a", "RUNNING"]
    assert re.fullmatch(r"\d+\.\ds", node_a[2]) and node_a[3] == "+250ms"
    assert lines[3].split()[:4] == ["node-b", "RUNNING", "1m40s", "+0ms"]
    assert re.search(ISO_MS, lines[3])
    task_lines = tasks.splitlines()
    assert task_lines[1].split()[:4] == ["name", "status", "next_start_time", "lag_s"]
    assert [line.split()[0] for line in task_lines[2:]] == ["broken", "late", "queued"]
    assert re.fullmatch(r"1m0\ds", task_lines[3].split()[3])
    failure_lines = failures.splitlines()
    assert failure_lines[0] == "recent failures"
    assert failure_lines[2].split()[:3] == [str(ids["failed"]), "broken", "FAILED"]
    assert failure_lines[2].endswith("ValueError: boom")  # the first line of the error


def test_tasks_and_nodes_list_every_row(cli: Cli, store: Store, db_url: str) -> None:
    register(store, "node-a")
    store.tasks.upsert(yearly("alpha", "beta"))
    store.tasks.set_status("beta", TaskStatus.PAUSED)

    tasks = cli("tasks", "--db", db_url)
    lines = tasks.out.splitlines()
    assert tasks.code == 0
    assert lines[0].split() == [
        "name",
        "status",
        "cron_expr",
        "tz",
        "parent",
        "next_start_time",
        "lag_s",
        "pending",
        "success_count",
        "fail_count",
        "in_code",
        "func",
    ]
    assert lines[1].split()[:2] == ["alpha", "ACTIVE"]
    assert f"  {YEARLY}  UTC  -  " in lines[1]
    assert lines[2].split()[:2] == ["beta", "PAUSED"]
    assert lines[2].split()[-6:-4] == ["-", "0"]  # no lag for a paused task, nothing pending
    doc = cli("tasks", "--json", "--db", db_url).json()
    assert [(row["name"], row["status"], row["cron_expr"]) for row in doc["tasks"]] == [
        ("alpha", "ACTIVE", YEARLY),
        ("beta", "PAUSED", YEARLY),
    ]
    assert doc["tasks"][1]["lag_s"] is None
    assert [row["in_code"] for row in doc["tasks"]] == [True, True]

    nodes = cli("nodes", "--db", db_url)
    assert nodes.code == 0
    assert nodes.out.splitlines()[1].split()[:2] == ["node-a", "RUNNING"]
    (node,) = cli("nodes", "--json", "--db", db_url).json()["nodes"]
    assert (node["node_id"], node["workers"], node["held"]) == ("node-a", 4, 0)


def test_history_json_agrees_with_the_store(cli: Cli, store: Store, db_url: str) -> None:
    store.tasks.upsert(yearly("a", "b"))
    done = start_manual_run(store, "a")
    assert store.runs.finish(done)
    failed = start_manual_run(store, "b")
    assert store.runs.fail(failed, "boom", retry_in=None)
    pending = [store.tasks.trigger("a") for _ in range(3)]

    doc = cli("history", "--json", "--db", db_url).json()
    stored = store.history.runs()
    assert [row["id"] for row in doc["runs"]] == [run.id for run in stored]
    assert len(stored) == 5
    for row, run in zip(doc["runs"], stored, strict=True):
        assert (row["task_name"], row["status"], row["triggered_by"], row["node_id"]) == (
            run.task_name,
            run.status.value,
            run.triggered_by.value,
            run.node_id,
        )
        assert _when(row["fire_time"]) == run.fire_time
        assert row["attempt"] == run.attempt and row["error_msg"] == run.error_msg
    (success,) = [row for row in doc["runs"] if row["id"] == done.id]
    assert success["duration_s"] >= 0 and success["status"] == "SUCCESS"

    only_a = cli("history", "--json", "--task", "a", "--db", db_url).json()["runs"]
    assert sorted(row["id"] for row in only_a) == sorted([done.id, *pending])
    failures = cli("history", "--json", "--status", "failed", "--db", db_url).json()["runs"]
    assert [row["id"] for row in failures] == [failed.id]
    limited = cli("history", "--json", "--limit", "2", "--db", db_url).json()["runs"]
    assert [row["id"] for row in limited] == [run.id for run in stored[:2]]


def test_history_human_table(cli: Cli, store: Store, db_url: str) -> None:
    store.tasks.upsert(yearly("a"))
    failed = start_manual_run(store, "a")
    assert store.runs.fail(failed, "x" * 200, retry_in=None)
    result = cli("history", "--db", db_url, "--status", "FAILED")
    header, row = result.out.splitlines()
    assert header.split() == [
        "id",
        "task_name",
        "status",
        "fire_time",
        "attempt",
        "triggered_by",
        "node_id",
        "duration_s",
        "result",
        "error_msg",
    ]
    cells = row.split()
    assert cells[:3] == [str(failed.id), "a", "FAILED"]
    assert re.fullmatch(ISO_MS, cells[3])
    assert cells[4:7] == ["1", "manual", "node-a"]
    assert cells[-1] == "x" * 57 + "..."
    assert header.index("status") == row.index("FAILED")  # aligned columns
    empty = cli("history", "--db", db_url, "--status", RunStatus.MISSED.value)
    assert (empty.code, empty.out) == (0, "no runs\n")


def test_history_shows_results_and_keeps_tracebacks_in_json(
    cli: Cli, store: Store, db_url: str
) -> None:
    store.tasks.upsert(yearly("a", "b"))
    done = start_manual_run(store, "a")
    assert store.runs.finish_many([done], {done.id: {"rows": 3, "note": "x" * 40}})
    failed = start_manual_run(store, "b")
    trace = 'Traceback (most recent call last):\n  File "jobs.py", line 3\nValueError: bad'
    assert store.runs.fail(failed, "ValueError: bad", retry_in=None, traceback=trace)
    header, *rows = cli("history", "--db", db_url).out.splitlines()
    at = header.index("result")
    cells = {row.split()[1]: row[at:].split()[0] for row in rows}
    assert cells == {"a": '{"rows":3,"note":"xxxxxxxxx...', "b": "-"}
    doc = {r["task_name"]: r for r in cli("history", "--json", "--db", db_url).json()["runs"]}
    assert doc["a"]["result"] == {"rows": 3, "note": "x" * 40} and doc["a"]["traceback"] is None
    assert (doc["b"]["error_msg"], doc["b"]["traceback"]) == ("ValueError: bad", trace)


def test_a_task_no_running_node_registered_is_flagged_not_deleted(
    cli: Cli, store: Store, db_url: str
) -> None:
    store.tasks.upsert(yearly("gone", "kept"))
    store.db.write(
        "age",
        lambda conn: conn.execute(
            t.update().where(t.c.name == "gone").values(seen_time=_when("2020-01-01T00:00:00Z"))
        ),
    )
    assert cli("tasks", "--json", "--db", db_url).json()["tasks"][0]["in_code"] is False
    register(store, "node-a")
    store.tasks.upsert(yearly("kept"))  # what node-a's code declares, after its row
    doc = cli("tasks", "--json", "--db", db_url).json()
    assert [(row["name"], row["in_code"]) for row in doc["tasks"]] == [
        ("gone", False),
        ("kept", True),
    ]
