"""The bench's /proc readers: CPU of real processes, and the database server found by its port."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from easyjob.bench.server_cpu import (
    children,
    find_server,
    listening_pid,
    process_cpu_s,
    tree_cpu_s,
)
from easyjob.bench.window import WindowSampler, locate_server
from tests.rig.servers import DatabaseServer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")

# A parent that runs one child until it has used 0.3 s of CPU and reaps it, then starts a
# child that spins until stdin closes, prints its pid, and waits for stdin to close.
_PARENT = """
import subprocess, sys
spin = "import time\\nwhile time.process_time() < {limit}: pass"
subprocess.run([sys.executable, "-c", spin.format(limit=0.3)], check=True)
busy = subprocess.Popen([sys.executable, "-c", spin.format(limit=1e9)])
print(busy.pid, flush=True)
sys.stdin.read()
busy.kill()
busy.wait()
"""


def _until(condition: Callable[[], bool], what: str, deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {deadline_s} s: {what}")
        time.sleep(0.05)


@pytest.fixture
def parent() -> Iterator[tuple[subprocess.Popen[str], int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        yield proc, int(proc.stdout.readline())
    finally:
        proc.stdin.close()
        proc.wait(10)
        proc.stdout.close()


def test_process_cpu_of_a_busy_process_grows(parent: tuple[subprocess.Popen[str], int]) -> None:
    _, busy = parent
    first = process_cpu_s(busy)
    assert first is not None
    _until(lambda: (process_cpu_s(busy) or 0.0) >= first + 0.2, "the busy child's CPU grew")


def test_tree_cpu_counts_reaped_and_live_children(
    parent: tuple[subprocess.Popen[str], int],
) -> None:
    proc, busy = parent
    assert children(proc.pid) == [busy]
    own = process_cpu_s(proc.pid)
    assert own is not None and own < 0.3  # the parent itself only waits
    tree = tree_cpu_s(proc.pid)
    assert tree is not None and tree >= 0.3  # the reaped child's 0.3 s (cutime)
    _until(
        lambda: (tree_cpu_s(proc.pid) or 0.0) >= tree + 0.2,
        "the parent's tree CPU grew with its live busy child",
    )


def test_a_process_that_is_gone_reads_as_none() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    pid = int(done.stdout)
    assert (process_cpu_s(pid), tree_cpu_s(pid)) == (None, None)
    assert locate_server("sqlite:///x.db", pid) == (
        None,
        f"--db-pid {pid}: no such process readable here",
    )


def test_listening_pid_finds_the_process_on_a_port() -> None:
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            "print(s.getsockname()[1], flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stdin is not None
    try:
        port = int(server.stdout.readline())
        assert listening_pid(port) == server.pid
        assert find_server(f"postgresql://u@127.0.0.1:{port}/db") == (
            server.pid,
            f"pid {server.pid}, listening on port {port}",
        )
    finally:
        server.stdin.close()
        server.wait(10)
        server.stdout.close()
    with socket.socket() as sock:  # a port nobody listens on (bound, not listening)
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
        assert listening_pid(free) is None
        assert find_server(f"mysql+pymysql://u@localhost:{free}/db")[1] == (
            f"no process found listening on port {free} "
            "(or its /proc/PID/fd is not readable by this user): give --db-pid"
        )


def test_find_server_says_why_not() -> None:
    assert find_server("sqlite:///bench.db") == (
        None,
        "SQLite runs inside the nodes: its CPU is part of theirs",
    )
    assert find_server("postgresql://u@db.example.com/x") == (
        None,
        "the database host 'db.example.com' is not loopback: give --db-pid if it runs here",
    )


def test_the_database_server_is_found_by_its_port_and_its_cpu_grows_with_queries(
    db_url: str, db_server: DatabaseServer | None
) -> None:
    pid, note = find_server(db_url)
    if db_server is None:
        assert pid is None and "SQLite" in note
        return
    if not db_server.managed:
        pytest.skip("an external server: its process may not be on this machine")
    assert pid == db_server.pid
    before = tree_cpu_s(pid)
    assert before is not None
    window = WindowSampler([], [], pid, note)
    now = time.monotonic()
    window.start(now, now + 3600)  # the end is set by close(): only the first reading

    engine = sa.create_engine(db_url)
    try:

        def queries_cost_cpu() -> bool:
            with engine.connect() as conn:  # PostgreSQL: a backend per connection
                for _ in range(300):
                    conn.execute(sa.text("SELECT COUNT(*) FROM (SELECT 1 AS x UNION SELECT 2) t"))
            engine.dispose()  # the backend exits; its CPU moves to the postmaster's cutime
            return (tree_cpu_s(pid) or 0.0) > before

        _until(queries_cost_cpu, f"{db_server.backend} server CPU grew with queries")
    finally:
        engine.dispose()
    assert window.close().db_cpu_s is None  # the window never ended: no figure, not a wrong one
