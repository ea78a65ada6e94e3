"""status, tasks, nodes and history: JSON that agrees with the store, and readable tables."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import sqlalchemy as sa

from easyjob.core.records import Advance, PlannedFire
from easyjob.core.states import NodeStatus, RunStatus, TaskStatus
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

    overdue = store.now() - timedelta(seconds=60)
    stmt = t.update().where(t.c.name == "late").values(next_start_time=overdue)
    store.db.write("overdue", lambda conn: conn.execute(stmt))
    return {"failed": failed.id, "running": running.id, "queued": queued}


def test_status_json_summarises_and_agrees_with_the_store(
    cli: Cli, store: Store, db_url: str
) -> None:
    ids = _cluster(store)
    register(store, "node-c")
    store.nodes.set_status("node-c", NodeStatus.STOPPED)
    result = cli("status", "--json", "--db", db_url)
    assert (result.code, result.err) == (0, "")
    doc = result.json()
    assert set(doc) == {"db_time", "window_s", "counts", "nodes", "late", "failing", "failures"}
    db_time = _when(doc["db_time"])
    assert abs(db_time - store.now()) < timedelta(seconds=30)
    assert doc["window_s"] == 3600.0
    assert doc["counts"] == {
        "tasks": {"ACTIVE": 3},
        "runs": {"PENDING": 1, "RUNNING": 1},
        "ended": {"FAILED": 1},
        "nodes": {"RUNNING": 2, "STOPPED": 1},
    }

    _, nodes = store.nodes.all()
    by_id = {node["node_id"]: node for node in doc["nodes"]}
    assert sorted(by_id) == ["node-a", "node-b"]  # a STOPPED node is only counted
    for node in nodes[:2]:
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
    node_a, node_b = by_id["node-a"], by_id["node-b"]
    assert (node_a["held"], node_a["succeeded"], node_a["failed"]) == (1, 0, 1)
    assert (node_b["held"], node_b["succeeded"], node_b["failed"]) == (0, 0, 0)

    assert doc["late"]["total"] == 2
    late, queued = doc["late"]["tasks"]
    assert (late["name"], late["pending"], late["oldest_pending"]) == ("late", 0, None)
    assert 60 <= late["lag_s"] < 90
    assert _when(late["next_start_time"]) == store.tasks.get("late").next_start_time
    assert (queued["name"], queued["pending"]) == ("queued", 1)
    assert 30 <= queued["lag_s"] < 60
    assert doc["failing"] == [
        {
            "name": "broken",
            "failures": 1,
            "last_end_time": doc["failures"][0]["end_time"],
            "fail_count": store.tasks.get("broken").fail_count,
        }
    ]

    (failure,) = doc["failures"]
    (stored,) = store.history.failures()
    assert (failure["id"], failure["task_name"], failure["status"]) == (
        ids["failed"],
        "broken",
        "FAILED",
    )
    assert failure["error_msg"] == stored.error_msg == "ValueError: boom\nsecond line"
    assert _when(failure["end_time"]) == stored.end_time


def test_status_is_bounded_by_top_and_window(cli: Cli, store: Store, db_url: str) -> None:
    names = [f"t{i:02d}" for i in range(30)]
    store.tasks.upsert(yearly(*names, "resting"))
    for i, name in enumerate(names):  # t00 is the most late, t29 the least
        overdue = store.now() - timedelta(minutes=60 - i)
        stmt = t.update().where(t.c.name == name).values(next_start_time=overdue)
        store.db.write("overdue", lambda conn, stmt=stmt: conn.execute(stmt))
    store.tasks.set_status("t00", TaskStatus.PAUSED)  # a paused task waits on purpose
    failed = []
    for name in ("t05", "t05", "t06"):
        run = start_manual_run(store, name)
        assert store.runs.fail(run, "boom", retry_in=None)
        failed.append(run.id)
    age_runs(store, failed[:1], "end_time", timedelta(hours=2))  # out of a 1 h window

    doc = cli("status", "--json", "--top", "3", "--db", db_url).json()
    assert doc["late"]["total"] == 29
    assert [row["name"] for row in doc["late"]["tasks"]] == ["t01", "t02", "t03"]
    assert sorted((row["name"], row["failures"]) for row in doc["failing"]) == [
        ("t05", 1),
        ("t06", 1),
    ]
    assert doc["counts"]["ended"] == {"FAILED": 2}
    assert doc["counts"]["tasks"] == {"ACTIVE": 30, "PAUSED": 1}
    wide = cli("status", "--json", "--window", "3h", "--db", db_url).json()
    assert [(row["name"], row["failures"]) for row in wide["failing"]] == [("t05", 2), ("t06", 1)]
    assert len(wide["late"]["tasks"]) == 10  # the default --top
    assert cli("status", "--top", "0", "--db", db_url).code == 2


def test_status_human_shows_every_section(cli: Cli, store: Store, db_url: str) -> None:
    ids = _cluster(store)
    result = cli("status", "--db", db_url)
    assert result.code == 0
    text = result.out
    assert re.match(rf"database time {ISO_MS}\n\nnodes: 2 RUNNING\n", text)
    nodes, counts, late, failing, failures = text.split("\n\n")[1:]
    lines = nodes.splitlines()
    assert lines[1].split()[:8] == [
        "node_id",
        "status",
        "age_s",
        "clock_offset_ms",
        "held",
        "held_due",
        "succeeded",
        "failed",
    ]
    node_a = lines[2].split()
    assert node_a[:2] == ["node-a", "RUNNING"]
    assert re.fullmatch(r"\d+\.\ds", node_a[2]) and node_a[3:8] == ["+250ms", "1", "0", "0", "1"]
    node_b = lines[3].split()
    # aged 100 s before the command ran; a loaded machine may take a second or more to get there
    assert node_b[:2] == ["node-b", "RUNNING"] and node_b[3] == "+0ms"
    assert re.fullmatch(r"1m4\ds", node_b[2]), node_b[2]
    assert re.search(ISO_MS, lines[3])
    assert counts.splitlines() == [
        "tasks: 3 (3 ACTIVE), 2 late",
        "runs: 1 PENDING due, 1 RUNNING; ended in the last 1h: 1 FAILED",
    ]
    late_lines = late.splitlines()
    assert late_lines[0] == "late tasks: 2 of 2, most late first"
    assert late_lines[1].split()[:2] == ["name", "lag_s"]
    assert [line.split()[0] for line in late_lines[2:]] == ["late", "queued"]
    assert re.fullmatch(r"1m0\ds", late_lines[2].split()[1])
    failing_lines = failing.splitlines()
    assert failing_lines[0] == "failing tasks: most FAILED or ABANDONED runs in the last 1h first"
    assert failing_lines[2].split()[:2] == ["broken", "1"]
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
        "schedule",
        "next_fire",
        "lag_s",
        "pending",
        "success_count",
        "fail_count",
        "in_code",
        "func",
    ]
    assert lines[1].split()[:2] == ["alpha", "ACTIVE"]
    assert f"  cron {YEARLY}  " in lines[1]
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


def test_tasks_show_the_next_fire_of_a_task_planned_ahead(
    cli: Cli, store: Store, db_url: str
) -> None:
    # next_start_time is the planning cursor, past the fires written ahead: the next fire
    # is the earliest of those, and a cursor ahead of now is no lag
    (row,) = store.tasks.upsert(yearly("ahead"))
    first = row.next_start_time
    assert first is not None
    fires = tuple(PlannedFire(first + timedelta(days=365 * i)) for i in range(3))
    cursor = first + timedelta(days=3 * 365)
    assert store.tasks.advance("n", [Advance(row.id, row.version, cursor, fires)]) == [row.id]
    (shown,) = cli("tasks", "--json", "--db", db_url).json()["tasks"]
    assert _when(shown["next_fire"]) == first
    assert _when(shown["next_start_time"]) == cursor
    assert (shown["lag_s"], shown["pending"]) == (0.0, 0)
    line = cli("tasks", "--db", db_url).out.splitlines()[1]
    assert first.isoformat(timespec="milliseconds").replace("+00:00", "Z") in line
    assert cli("status", "--json", "--db", db_url).json()["late"]["total"] == 0


def test_history_json_agrees_with_the_store(cli: Cli, store: Store, db_url: str) -> None:
    store.tasks.upsert(yearly("a", "b"))
    done = start_manual_run(store, "a")
    assert store.runs.finish(done)
    failed = start_manual_run(store, "b")
    assert store.runs.fail(failed, "boom", retry_in=None)
    pending = [store.tasks.trigger("a") for _ in range(3)]

    doc = cli("history", "--json", "--db", db_url).json()
    stored = store.history.runs(started=True)  # what happened: the planned runs are apart
    assert [row["id"] for row in doc["runs"]] == [run.id for run in stored]
    assert len(stored) == 2
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
    assert [row["id"] for row in only_a] == [done.id]
    upcoming = cli("history", "--json", "--upcoming", "--db", db_url).json()["runs"]
    assert sorted(row["id"] for row in upcoming) == sorted(pending)
    assert all(row["status"] == "PENDING" for row in upcoming)
    pending_rows = cli("history", "--json", "--status", "pending", "--db", db_url).json()["runs"]
    assert sorted(row["id"] for row in pending_rows) == sorted(pending)
    failures = cli("history", "--json", "--status", "failed", "--db", db_url).json()["runs"]
    assert [row["id"] for row in failures] == [failed.id]
    limited = cli("history", "--json", "--limit", "1", "--db", db_url).json()["runs"]
    assert [row["id"] for row in limited] == [run.id for run in stored[:1]]


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
        "jitter_s",
        "late_s",
        "duration_s",
        "missed",
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
    register(store, "node-a")  # a node of an earlier release: it publishes no catalog
    # and, registering what its code declares, writes each task's seen_time (this release
    # writes it only for a changed row, and tells what a node declares by its catalog)
    store.db.write(
        "seen",
        lambda conn: conn.execute(
            t.update().where(t.c.name == "kept").values(seen_time=store.now())
        ),
    )
    doc = cli("tasks", "--json", "--db", db_url).json()
    assert [(row["name"], row["in_code"]) for row in doc["tasks"]] == [
        ("gone", False),
        ("kept", True),
    ]


def test_tasks_filter_by_name_pattern_status_and_limit(cli: Cli, store: Store, db_url: str) -> None:
    store.tasks.upsert(yearly("jobs.a_1", "jobs.a_2", "jobs.a91", "jobs.b", "other.a_1"))
    store.tasks.set_status("jobs.a_2", TaskStatus.PAUSED)

    def names(*argv: str) -> tuple[int, list[str]]:
        doc = cli("tasks", "--json", *argv, "--db", db_url).json()
        return doc["total"], sorted(row["name"] for row in doc["tasks"])

    assert names() == (5, ["jobs.a91", "jobs.a_1", "jobs.a_2", "jobs.b", "other.a_1"])
    assert names("--task", "jobs.a_*") == (2, ["jobs.a_1", "jobs.a_2"])  # _ is no wildcard
    assert names("--task", "*.a?1") == (3, ["jobs.a91", "jobs.a_1", "other.a_1"])
    assert names("--task", "jobs.b") == (1, ["jobs.b"])
    assert names("--status", "paused") == (1, ["jobs.a_2"])
    assert names("--task", "jobs.*", "--status", "ACTIVE") == (
        3,
        ["jobs.a91", "jobs.a_1", "jobs.b"],
    )
    # the first by name, in the database's own collation
    ordered = [row["name"] for row in cli("tasks", "--json", "--db", db_url).json()["tasks"]]
    limited = cli("tasks", "--limit", "2", "--db", db_url)
    assert limited.code == 0
    assert [line.split()[0] for line in limited.out.splitlines()[1:]] == ordered[:2]
    assert limited.err == (
        "easyjob: showing 2 of 5 tasks (the first by name): narrow with --task or --status, "
        "or raise --limit\n"
    )
    none = cli("tasks", "--task", "nothing*", "--db", db_url)
    assert (none.code, none.out, none.err) == (0, "no tasks\n", "")
    unknown = cli("tasks", "--task", "nothing", "--db", db_url)
    assert (unknown.code, unknown.err) == (4, "easyjob: no task named 'nothing'\n")
    bad = cli("tasks", "--status", "RUNNING", "--db", db_url)
    assert bad.code == 2
    assert bad.err.splitlines()[-1] == (
        "easyjob tasks: error: argument --status: must be one of ACTIVE, PAUSED, FINISHED, "
        "got 'RUNNING'"
    )


def test_history_filters_by_pattern_node_and_since(cli: Cli, store: Store, db_url: str) -> None:
    store.tasks.upsert(yearly("jobs.a", "jobs.b", "other"))
    old = start_manual_run(store, "jobs.a", "node-a")
    assert store.runs.finish(old)
    age_runs(store, [old.id], "fire_time", timedelta(hours=3))
    on_b = start_manual_run(store, "jobs.b", "node-b")
    other = start_manual_run(store, "other", "node-a")

    def ids(*argv: str) -> list[int]:
        result = cli("history", "--json", *argv, "--db", db_url)
        assert result.code == 0, result.err
        return sorted(row["id"] for row in result.json()["runs"])

    assert ids("--task", "jobs.*") == sorted([old.id, on_b.id])
    assert ids("--node", "node-a") == sorted([old.id, other.id])
    assert ids("--since", "1h") == sorted([on_b.id, other.id])
    assert ids("--since", "1h", "--node", "node-a") == [other.id]
    cutoff = (store.now() - timedelta(hours=2)).isoformat()
    assert ids("--since", cutoff) == sorted([on_b.id, other.id])
    naive = (store.now() - timedelta(hours=4)).replace(tzinfo=None).isoformat()
    assert ids("--since", naive, "--task", "jobs.?") == sorted([old.id, on_b.id])
    assert ids("--task", "nothing*") == []
    bad = cli("history", "--since", "yesterday", "--db", db_url)
    assert bad.code == 2
    assert bad.err.splitlines()[-1] == (
        "easyjob history: error: argument --since: invalid time 'yesterday': give a duration "
        "back from now (30m, 12h, 1d12h) or an ISO 8601 time (2030-01-02T03:00:00Z)"
    )


def test_tasks_and_status_count_successes_pruned_or_not(
    cli: Cli, store: Store, db_url: str
) -> None:
    register(store, "node-a")
    store.tasks.upsert(yearly("done"))
    finished = []
    for _ in range(3):
        run = start_manual_run(store, "done")
        assert store.runs.finish(run)
        finished.append(run.id)
    age_runs(store, finished[:2], "end_time", timedelta(days=30))
    pruned = cli("prune", "--older-than", "7d", "--db", db_url)
    assert pruned.code == 0, pruned.err
    assert len(store.history.runs(task="done")) == 1

    (row,) = cli("tasks", "--json", "--db", db_url).json()["tasks"]
    assert (row["success_count"], row["pruned_success_count"]) == (3, 2)
    header, line = cli("tasks", "--db", db_url).out.splitlines()
    end = header.index("success_count") + len("success_count")  # a right-aligned column
    assert line[:end].split()[-1] == "3"

    overdue = store.now() - timedelta(seconds=60)
    stmt = t.update().where(t.c.name == "done").values(next_start_time=overdue)
    store.db.write("overdue", lambda conn: conn.execute(stmt))
    (late,) = cli("status", "--json", "--db", db_url).json()["late"]["tasks"]
    assert (late["name"], late["success_count"], late["fail_count"]) == ("done", 3, 0)


def test_status_names_a_node_that_holds_due_work_it_neither_runs_nor_hands_back(
    cli: Cli, store: Store, db_url: str
) -> None:
    from tests.store.conftest import make_pending
    from tests.store.test_progress import _claim, _due_ago

    register(store, "node-a")
    register(store, "node-b")
    runs = _claim(store, "node-a", make_pending(store, "stalled", fires=2))
    _due_ago(store, [r.id for r in runs], 15)
    doc = cli("status", "--json", "--db", db_url).json()
    assert {row["node_id"]: row["held_due"] for row in doc["nodes"]} == {
        "node-a": 2,
        "node-b": 0,
    }
    text = cli("status", "--db", db_url).out
    assert (
        "node node-a is unhealthy: it holds 2 run(s) CLAIMED more than 10s past due, neither "
        "started nor handed back"
    ) in text
    assert "node node-b is unhealthy" not in text
