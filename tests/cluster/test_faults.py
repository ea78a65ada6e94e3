"""Faults that operators, deployments and jobs cause (issue 12), with real node processes.

Settings (harness.FAST): heartbeat 0.2 s, dead after 5 heartbeats (1 s), poll 0.1 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from easyjob.core.records import HistoryRow
from easyjob.core.states import RunStatus, TaskStatus
from easyjob.store.schema import node_table as n
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t
from tests.cluster.harness import Cluster, duplicates, wait_until
from tests.cluster.test_cluster import expected_fires
from tests.rig.backends import only_backends

pytestmark = pytest.mark.cluster

NEW_CRON = "*/1 * * * * ?"  # the same fires as "* * * * * *", another text


def _sql(cluster: Cluster, stmt: sa.Executable) -> None:
    cluster.store.db.write("test_edit", lambda conn: conn.execute(stmt))


def _every_fire_once(cluster: Cluster, tasks: list[str], seconds: int, timeout: float) -> None:
    """Every fire of *tasks* in the next *seconds* (from 2 s on) succeeds, and none twice."""
    start = cluster.store.db.now().replace(microsecond=0) + timedelta(seconds=2)
    window = [
        (name, f)
        for name in tasks
        for f in expected_fires(start, start + timedelta(seconds=seconds))
    ]

    def done() -> bool:
        ok = {(r.task_name, r.fire_time) for r in cluster.runs() if r.status == RunStatus.SUCCESS}
        return all(key in ok for key in window)

    wait_until(f"every fire of {tasks} in {seconds} s to succeed", done, seconds + timeout)
    assert duplicates([(e.task, e.fire_time) for e in cluster.ledger() if e.task in tasks]) == {}


def test_a_rolling_deploy_that_changes_a_cron_and_a_backdated_schedule_keep_it_running(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path, ticks=5) as cluster:
        for i in range(3):
            cluster.start(f"old-{i}")
        cluster.wait_live()
        ticks = [f"tick-{i}" for i in range(5)]
        _every_fire_once(cluster, ticks, 2, 20)
        for i in range(3):  # one by one, old and new code side by side meanwhile
            cluster.nodes[f"old-{i}"].signal(signal.SIGTERM)
            assert cluster.nodes[f"old-{i}"].wait(30) == 0
            cluster.start_with(f"new-{i}", {}, env={"EASYJOB_TEST_TICK_CRON": NEW_CRON})
            cluster.wait_live(f"new-{i}")
            _every_fire_once(cluster, ticks, 2, 20)
        assert {task.cron_expr for task in cluster.store.tasks.all() if task.name in ticks} == {
            NEW_CRON
        }
        # an operator moves tick-0's schedule 5 s back: its fires there already have rows
        now = cluster.store.db.now()
        _sql(
            cluster,
            t.update()
            .where(t.c.name == "tick-0")
            .values(next_start_time=now - timedelta(seconds=5)),
        )
        _every_fire_once(cluster, ticks, 3, 20)
        cluster.stop_all()
        assert {cluster.node_status(f"new-{i}") for i in range(3)} == {"STOPPED"}


def test_past_max_recoveries_a_run_whose_node_died_is_not_run_again(
    db_url: str, tmp_path: Path
) -> None:
    """With --max-recoveries 0 the run whose node died while running it is not run again:
    it ends FAILED, naming the cause, and nodes restarted afterwards do not take it back.
    (At the default, 1, it is run once more in a child process, where it fails without
    taking a node down: tests/cluster/test_contagion.py.)"""
    with Cluster(db_url, tmp_path) as cluster:
        for i in range(3):
            cluster.start(f"node-{i}", **{"max-recoveries": "0"})
        cluster.wait_live()
        cluster.store.tasks.trigger("poison")

        def ended() -> list[object]:
            return [r for r in cluster.runs("poison") if r.status == RunStatus.FAILED]

        (failed,) = wait_until("the poison run to end FAILED", ended, 60)
        dead = [node for node in cluster.nodes.values() if not node.alive]
        assert len(dead) == 1 and all(node.wait(5) == 1 for node in dead)
        assert f"its node died while running it once (last: {dead[0].node_id})" in (
            failed.error_msg or ""
        )
        assert (failed.attempt, failed.recoveries) == (1, 1)
        assert [r.status for r in cluster.runs("poison")] == [RunStatus.FAILED]
        assert [e.event for e in cluster.ledger() if e.task == "poison"] == ["started"]
        for node in dead:
            cluster.start(f"{node.node_id}-again", **{"max-recoveries": "0"})
        cluster.wait_live(*(f"{node.node_id}-again" for node in dead))
        survivor_and_restarted = [n for n in cluster.nodes.values() if n.alive]
        # three dead thresholds: time enough for any recovery of it to happen
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            assert len(cluster.runs("poison")) == 1
            time.sleep(0.1)
        assert all(node.alive for node in survivor_and_restarted)
        assert task_fail_count(cluster, "poison") == 1
        cluster.stop_all()


def task_fail_count(cluster: Cluster, name: str) -> int:
    return cluster.store.tasks.get(name).fail_count


def test_a_day_backdated_every_second_task_costs_no_row_for_its_gap(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path, ticks=2) as cluster:
        for i in range(2):
            cluster.start(f"node-{i}")
        cluster.wait_live()
        _every_fire_once(cluster, ["tick-0", "tick-1"], 1, 20)
        now = cluster.store.db.now()
        edited = time.monotonic()
        _sql(
            cluster,
            t.update().where(t.c.name == "tick-0").values(next_start_time=now - timedelta(days=1)),
        )

        def gaps() -> list[HistoryRow]:  # the day's fires: carried by the row after them
            return [r for r in cluster.runs("tick-0") if r.missed_from is not None]

        (carrying,) = wait_until("the row carrying the gap", gaps, 10)
        assert time.monotonic() - edited < 5
        assert carrying.missed_from is not None
        assert carrying.missed_from <= now - timedelta(days=1) + timedelta(seconds=1)
        assert carrying.fire_time > now - timedelta(minutes=2)
        assert carrying.missed_count is None, "too many to count"
        _every_fire_once(cluster, ["tick-0", "tick-1"], 2, 20)
        assert len(gaps()) == 1
        assert not [r for r in cluster.runs("tick-0") if r.status == RunStatus.MISSED]
        cluster.stop_all()


_AT_ONCE = """
import sys, time
from easyjob.cli import main
start = float(sys.argv[1])
time.sleep(max(0.0, start - time.time()))  # all processes leave this line together
sys.exit(main(sys.argv[2:]))
"""


def test_ten_init_db_runs_and_nodes_at_once_on_an_empty_database(
    db_url: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    start = time.time() + 4.0  # every interpreter has imported easyjob by then
    procs = []
    for i in range(10):
        argv = ["init-db", "--db", db_url]
        if i % 2:
            argv = ["run", str(Path(__file__).with_name("jobs.py")), "--db", db_url]
            argv += ["--node-id", f"node-{i}", "--heartbeat", "0.2", "--poll", "0.1"]
        cmd = [sys.executable, "-c", _AT_ONCE, str(start), *argv]
        with (tmp_path / f"p{i}.log").open("wb") as log:
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
    try:
        for i, proc in enumerate(procs):
            if i % 2 == 0:
                assert proc.wait(60) == 0, (tmp_path / f"p{i}.log").read_text()
        with Cluster(db_url, tmp_path) as cluster:
            for i in range(1, 10, 2):
                cluster.nodes[f"node-{i}"] = _Adopted(f"node-{i}", procs[i], tmp_path / f"p{i}.log")
            cluster.wait_live()
            assert len(cluster.store.tasks.all()) > 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = _exit_codes(procs, 30)
        failed = {i: (tmp_path / f"p{i}.log").read_text() for i, code in enumerate(codes) if code}
        assert not failed, failed


def _exit_codes(procs: list[subprocess.Popen[bytes]], timeout: float) -> list[int]:
    """Each process's exit code, every one waited for (killed after *timeout* s), before
    anything is asserted: a process left running outlives its test, and its ``Popen``'s
    ResourceWarning, raised when it is collected, fails whichever test runs then."""
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(proc.wait())
    return codes


class _Adopted:
    """A node process started outside the harness, seen by Cluster.wait_live."""

    def __init__(self, node_id: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.node_id, self.proc, self.log_path = node_id, proc, log

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        pass


@only_backends("sqlite")
def test_a_module_loaded_by_name_or_by_path_is_one_task(db_url: str, tmp_path: Path) -> None:
    app = tmp_path / "myapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "tick.py").write_text(
        "from easyjob import scheduled\n\n\n"
        "@scheduled('* * * * * *')\n"
        "def send_email(ctx):\n    pass\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    procs = []
    for node_id, target in (("by-name", "myapp.tick"), ("by-path", "myapp/tick.py")):
        argv = [
            sys.executable,
            "-m",
            "easyjob",
            "run",
            target,
            "--db",
            db_url,
            "--node-id",
            node_id,
        ]
        with (tmp_path / f"{node_id}.log").open("wb") as log:
            procs.append(
                subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
            )
    try:
        with Cluster(db_url, tmp_path) as cluster:
            for proc, node_id in zip(procs, ("by-name", "by-path"), strict=True):
                cluster.nodes[node_id] = _Adopted(node_id, proc, tmp_path / f"{node_id}.log")
            cluster.wait_live()
            tasks = cluster.store.tasks.all()
            assert [(task.name, task.func) for task in tasks] == [
                ("myapp.tick.send_email", "myapp.tick:send_email")
            ]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        assert _exit_codes(procs, 30) == [0, 0]


@only_backends("sqlite")
def test_what_cannot_run_is_said_once_and_stopped(db_url: str, tmp_path: Path) -> None:
    """A broken cron in the table is reported once, not once per poll, and costs the other
    tasks nothing; a parent cycle written with SQL is refused at run time; a task row
    inserted with SQL that points at a registered function does not run."""
    with Cluster(db_url, tmp_path, ticks=2) as cluster:
        node = cluster.start("node-0")
        cluster.wait_live()
        _every_fire_once(cluster, ["tick-0", "tick-1"], 1, 20)
        _sql(cluster, t.update().where(t.c.name == "tick-0").values(cron_expr="garbage"))
        chain_a = cluster.store.tasks.get("chain_a")
        _sql(cluster, t.update().where(t.c.id == chain_a.id).values(pid=chain_a.id))
        now = cluster.store.db.now()
        tick = cluster.store.tasks.get("tick-1")
        _sql(
            cluster,
            t.insert().values(
                name="intruder",
                func=tick.func,
                cron_expr="* * * * * *",
                tz="UTC",
                status=str(TaskStatus.ACTIVE),
                next_start_time=now,
                version=0,
                misfire="fire_once",
                misfire_grace_ms=60000,
                overlap="serial",
                retries=0,
                retry_delay_ms=1000,
                kwargs={"n": 99},
                create_time=now,
                update_time=now,
                seen_time=now,
            ),
        )
        cluster.store.tasks.trigger("chain_a")

        def said() -> list[str]:
            return [line for line in node.log().splitlines() if "'garbage'" in line]

        # read once its fires written ahead have run (an edit by SQL forgets none of them)
        wait_until("the broken cron to be reported", said, 30)
        _every_fire_once(cluster, ["tick-1"], 3, 20)  # 30 polls with the broken row in the table
        errors = said()
        assert len(errors) == 1, errors
        assert "task 'tick-0' is not planned" in errors[0]
        runs = wait_until(
            "chain_a's run and its refused child", lambda: _two(cluster.runs("chain_a")), 10
        )
        assert sorted(r.status for r in runs) == [RunStatus.SKIPPED, RunStatus.SUCCESS]
        assert "parent cycle" in (
            next(r for r in runs if r.status == RunStatus.SKIPPED).error_msg or ""
        )
        assert cluster.runs("intruder") == []
        assert [e for e in cluster.ledger() if e.task == "intruder"] == []
        assert len(cluster.runs("chain_a")) == 2
        cluster.stop_all()


def _two(runs: list[object]) -> list[object] | None:
    return runs if len(runs) >= 2 else None


@only_backends("sqlite", "postgresql")
def test_nodes_prune_old_history_and_old_node_rows_by_themselves(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path) as cluster:
        old = cluster.store.db.now() - timedelta(hours=2)
        node = cluster.start("node-0", retention="1h")
        cluster.wait_live()
        task = cluster.store.tasks.get("slow")
        rows = [
            {
                "task_id": task.id,
                "fire_time": old,
                "due_time": old,
                "status": str(RunStatus.SUCCESS),
                "triggered_by": "manual",
                "attempt": 1,
                "end_time": old + timedelta(seconds=i),
                "create_time": old,
            }
            for i in range(1200)
        ]
        recent = cluster.store.db.now()
        rows.append({**rows[0], "fire_time": recent, "end_time": recent})
        _sql(cluster, d.insert().values(rows))
        _sql(
            cluster,
            n.insert().values(
                node_id="long-gone",
                host="h",
                pid=1,
                status="STOPPED",
                started_at=old,
                heartbeat_at=old,
                stopped_at=old,
            ),
        )
        wait_until("the old rows to be pruned", lambda: len(cluster.runs("slow")) == 1, 30)
        assert cluster.runs("slow")[0].end_time == recent
        assert "long-gone" not in {row.node_id for row in cluster.store.nodes.all()[1]}
        assert "pruned" in node.log()
        cluster.stop_all()
