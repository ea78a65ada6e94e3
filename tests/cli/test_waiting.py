"""``easyjob dashboard`` and ``easyjob run --http`` started before the tables exist, or
before ``easyjob upgrade-db`` ran: they wait (bounded by --schema-wait) with one clear log
line, answering /healthz 200 and /readyz 503 meanwhile, then serve."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from easyjob.bench.server_cpu import listening_ports
from easyjob.cli import main
from easyjob.store.engine import create_engine
from tests.cluster.harness import JOBS, wait_until
from tests.store.upgrade_rows import create_old, fill


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:  # a server closing (the node's waiting answers before its own)
        return 0, ""


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "easyjob", *argv], stdout=out, stderr=subprocess.STDOUT
        )


def _port_answering(proc: subprocess.Popen[bytes], path: str, status: int) -> int:
    """The port of *proc* whose *path* answers *status* (its servers bind port 0)."""

    def found() -> int | None:
        assert proc.poll() is None, f"exited with {proc.returncode}"
        for port in listening_ports(proc.pid):
            if _get(port, path)[0] == status:
                return port
        return None

    return wait_until(f"{path} answering {status}", found, 60)


def _waiting_reason(port: int, expected: str) -> str:
    """/readyz's reason once it names *expected* (it says "starting" before the first try);
    /readyz answers 503 all along."""

    def reason() -> str | None:
        status, body = _get(port, "/readyz")
        assert status == 503, body
        text: str = json.loads(body)["reason"]
        return text if expected in text else None

    return wait_until(f"/readyz naming {expected!r}", reason, 30)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(60)


def test_the_dashboard_waits_for_the_tables_then_serves(db_url: str, tmp_path: Path) -> None:
    log = tmp_path / "dashboard.log"
    proc = _start(["dashboard", "--db", db_url, "--http", "127.0.0.1:0"], log)
    try:
        port = _port_answering(proc, "/healthz", 200)
        reason = _waiting_reason(port, "the easyjob tables are missing")
        assert "run `easyjob init-db`" in reason
        assert _get(port, "/")[0] == 503
        wait_until("the waiting line", lambda: "waiting for the database" in log.read_text(), 30)

        assert main(["init-db", "--db", db_url]) == 0  # a node, or an operator, creates them
        wait_until("ready", lambda: _get(port, "/readyz")[0] == 200, 30)
        assert _get(port, "/")[0] == 200
        assert _get(port, "/healthz")[0] == 200
        assert _stop(proc) == 0
    finally:
        proc.kill()
        proc.wait(10)
    lines = log.read_text().splitlines()
    waiting = [line for line in lines if "waiting for the database" in line]
    assert len(waiting) == 1, lines  # one line per reason, not one per try
    assert "WARNING easyjob.cli waiting for the database (up to 300 s more): " in waiting[0]


def test_the_wait_is_bounded_by_schema_wait(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/none.db"
    started = time.monotonic()
    argv = ["dashboard", "--db", db, "--http", "127.0.0.1:0", "--schema-wait", "2s"]
    done = subprocess.run(
        [sys.executable, "-m", "easyjob", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert done.returncode == 3
    assert done.stderr.splitlines()[-1] == (
        f"easyjob: the easyjob tables are missing in '{db}': run `easyjob init-db`"
    )
    assert "waiting for the database (up to 2 s more)" in done.stderr
    assert 2.0 <= took < 30


def test_a_node_with_http_waits_for_upgrade_db(db_url: str, tmp_path: Path) -> None:
    engine = create_engine(db_url)
    try:
        create_old(engine, 3)
        fill(engine, 3)
    finally:
        engine.dispose()
    log = tmp_path / "node.log"
    proc = _start(["run", JOBS, "--db", db_url, "--http", "127.0.0.1:0"], log)
    try:
        waiting = _port_answering(proc, "/healthz", 200)
        assert "schema version '3'" in _waiting_reason(waiting, "run `easyjob upgrade-db`")

        assert main(["upgrade-db", "--db", db_url]) == 0
        _port_answering(proc, "/metrics", 200)  # the node's own endpoint: it runs
        assert _stop(proc) == 0
    finally:
        proc.kill()
        proc.wait(10)
    text = log.read_text()
    assert "run `easyjob upgrade-db`" in text
    assert "serving /metrics, /healthz and /readyz" in text


def test_a_waiting_dashboard_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "dashboard.log"
    db = f"sqlite:///{tmp_path}/none.db"
    proc = _start(["dashboard", "--db", db, "--http", "127.0.0.1:0"], log)
    try:
        port = _port_answering(proc, "/healthz", 200)
        _waiting_reason(port, "the easyjob tables are missing")
        assert _stop(proc) == 0
    finally:
        proc.kill()
        proc.wait(10)
