"""A real node process names its threads for the operating system: ``/proc/PID/task/*/comm``
(what ``top -H``, ``ps -L`` and py-spy show) lists each role, not ``python`` (Linux only)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.cluster.harness import Cluster, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl: Linux"),
]

#: The node's own threads (the main thread is the interpreter's, and keeps its name; the
#: event thread runs only when a hook is declared, and tests/node/test_outcomes.py has one).
ROLES = {
    "ej-heartbeat", "ej-loader", "ej-planner", "ej-recovery", "ej-pruner", "ej-health",
    "ej-cancels", "ej-dispatch", "ej-http", "ej-worker-1",
}  # fmt: skip


def comms(pid: int) -> list[str]:
    """The kernel's name of each live thread of process *pid*, the main thread first."""
    names = []
    for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda p: int(p.name)):
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # the thread ended meanwhile
            continue
    return names


def descendants(pid: int) -> set[int]:
    """Every live process under *pid* (children, their children ...)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def test_a_node_names_each_thread_for_the_operating_system(db_url: str, tmp_path: Path) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("thread names are the node's: the database does not matter here")
    with Cluster(db_url, tmp_path, ticks=1) as cluster:
        node = cluster.start("names-0", executor="process", http="127.0.0.1:0")
        cluster.wait_live()
        wait_until("a tick to run", lambda: cluster.ledger(), 30)
        pid = node.proc.pid
        try:
            wait_until("every role's thread", lambda: set(comms(pid)) >= ROLES, 30)
        except AssertionError as err:
            raise AssertionError(f"{err}: {comms(pid)}") from None
        main, *others = comms(pid)
        assert not main.startswith("ej-")  # the process keeps the name ps and pgrep know
        assert [name for name in others if not name.startswith("ej-")] == []  # none unnamed
        children = [comms(child)[:1] for child in descendants(pid)]
        assert ["ej-child"] in children, children  # the process executor's job runner
