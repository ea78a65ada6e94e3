"""trigger, pause, resume and prune change the database, and say what they did."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from easyjob.core.states import RunStatus, TaskStatus, Trigger
from easyjob.store import Store
from easyjob.store.schema import task_table as t
from tests.cli.conftest import Cli, age_runs, register, start_manual_run, yearly


def test_trigger_makes_a_pending_manual_run(cli: Cli, store: Store, db_url: str) -> None:
    register(store, "node-a")
    store.tasks.upsert(yearly("report"))  # what node-a's code declares
    result = cli("trigger", "report", "--db", db_url)
    assert result.code == 0
    (run,) = store.history.runs(task="report")
    assert result.out == f"triggered report: run {run.id}\n"
    assert (run.status, run.triggered_by, run.node_id) == (
        RunStatus.PENDING,
        Trigger.MANUAL,
        None,
    )
    doc = cli("trigger", "report", "--json", "--db", db_url).json()
    assert doc == {"task": "report", "run_id": doc["run_id"], "runnable": True}
    assert [r.id for r in store.history.runs(task="report")] == [doc["run_id"], run.id]


def test_trigger_of_a_task_no_live_node_registered_warns_with_exit_5(
    cli: Cli, store: Store, db_url: str
) -> None:
    store.tasks.upsert(yearly("orphan"))  # registered once, by a node that is gone
    register(store, "node-a")  # the live node started later, without it in its code
    result = cli("trigger", "orphan", "--db", db_url)
    (run,) = store.history.runs(task="orphan")
    assert (result.code, result.out) == (5, f"triggered orphan: run {run.id}\n")
    assert result.err == (
        f"easyjob: warning: no live node can run task 'orphan': run {run.id} waits PENDING "
        "until a node whose code declares it (or allows its function with @runnable) starts "
        "(see `easyjob tasks`, in_code)\n"
    )
    assert run.status == RunStatus.PENDING  # made all the same: a node may start with it
    assert cli("tasks", "--json", "--db", db_url).json()["tasks"][0]["in_code"] is False


def test_a_100k_character_name_is_cut_in_the_error(cli: Cli, store: Store, db_url: str) -> None:
    name = "x" * 100_000
    result = cli("trigger", name, "--db", db_url)
    assert result.code == 4
    assert result.err == f"easyjob: no task named '{'x' * 199}... (100000 characters)\n"


def test_pause_and_resume_set_the_task_status(cli: Cli, store: Store, db_url: str) -> None:
    (before,) = store.tasks.upsert(yearly("report"))
    paused = cli("pause", "report", "--db", db_url)
    assert (paused.code, paused.out) == (0, "report is PAUSED\n")
    row = store.tasks.get("report")
    assert (row.status, row.version) == (TaskStatus.PAUSED, before.version + 1)
    resumed = cli("resume", "report", "--json", "--db", db_url)
    assert (resumed.code, resumed.json()) == (0, {"task": "report", "status": "ACTIVE"})
    assert store.tasks.get("report").status == TaskStatus.ACTIVE


def test_a_finished_task_is_neither_paused_nor_resumed(cli: Cli, store: Store, db_url: str) -> None:
    store.tasks.upsert(yearly("once"))
    stmt = t.update().where(t.c.name == "once").values(status=str(TaskStatus.FINISHED))
    store.db.write("finish", lambda conn: conn.execute(stmt))
    for command in ("pause", "resume"):
        result = cli(command, "once", "--db", db_url)
        assert (result.code, result.err) == (
            2,
            "easyjob: task 'once' is FINISHED: its schedule will never fire again\n",
        )
    assert store.tasks.get("once").status == TaskStatus.FINISHED


def _finished_runs(store: Store, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        run = start_manual_run(store, "report")
        assert store.runs.finish(run)
        ids.append(run.id)
    return ids


def test_prune_deletes_old_finished_runs_in_batches(cli: Cli, store: Store, db_url: str) -> None:
    store.tasks.upsert(yearly("report"))
    old = _finished_runs(store, 5)
    failed = start_manual_run(store, "report")
    assert store.runs.fail(failed, "boom", retry_in=None)
    recent = _finished_runs(store, 1)
    pending = store.tasks.trigger("report")
    age_runs(store, [*old, failed.id], "end_time", timedelta(days=31))
    age_runs(store, [pending], "create_time", timedelta(days=90))  # old, but not finished

    result = cli("prune", "--older-than", "30d", "--batch", "2", "--db", db_url)
    assert result.code == 0
    assert result.err.splitlines() == [
        "pruned 2 runs...",
        "pruned 4 runs...",
        "pruned 6 runs...",
    ]
    assert result.out == "pruned 6 runs that ended more than 30d ago\n"
    left = store.history.runs()
    assert sorted(run.id for run in left) == sorted([*recent, pending])

    again = cli("prune", "--older-than", "1d12h", "--json", "--db", db_url)
    assert (again.code, again.err, again.json()) == (
        0,
        "",
        {"deleted": 0, "older_than_s": 129600.0},
    )


def test_prune_takes_its_age_from_the_environment(
    cli: Cli, store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.tasks.upsert(yearly("report"))
    (run_id,) = _finished_runs(store, 1)
    age_runs(store, [run_id], "end_time", timedelta(hours=3))
    monkeypatch.setenv("EASYJOB_DB", db_url)
    monkeypatch.setenv("EASYJOB_PRUNE_OLDER_THAN", "2h")
    result = cli("prune")
    assert (result.code, result.out) == (0, "pruned 1 run that ended more than 2h ago\n")
    assert store.history.runs() == []
    assert store.db.read("count", lambda conn: conn.scalar(sa.select(sa.func.count(t.c.id)))) == 1
