"""The CPU the nodes and the database server spend over a trial's window, sampled from
``/proc`` (:mod:`~easyjob.bench.server_cpu`) at its start and end on a thread of its own."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from easyjob.bench.server_cpu import find_server, process_cpu_s, tree_cpu_s

__all__ = ["CpuWindow", "WindowCpu", "locate_server"]


@dataclass(frozen=True)
class WindowCpu:
    """CPU seconds over the window: all nodes together, and the database server (None when
    it could not be read: *db_note* says why, or which process was read)."""

    nodes_s: float | None
    db_s: float | None
    db_note: str


def locate_server(url: str, pid: int | None) -> tuple[int | None, str]:
    """The database server's pid: *pid* when given (``--db-pid``) and alive, else the process
    listening on the URL's loopback port; None and the reason when there is none to read."""
    if pid is None:
        return find_server(url)
    if tree_cpu_s(pid) is None:
        return None, f"--db-pid {pid}: no such process readable here"
    return pid, f"pid {pid} (--db-pid)"


class CpuWindow:
    """Reads the CPU of *node_pids* and of the server *db_pid* (its process tree) at two
    monotonic moments, then :meth:`close` gives the differences."""

    def __init__(self, node_pids: list[int], db_pid: int | None, db_note: str) -> None:
        self._node_pids = node_pids
        self._db_pid = db_pid
        self._db_note = db_note
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._readings: list[tuple[float | None, float | None]] = []

    def start(self, begin: float, end: float) -> None:
        """Sample at monotonic times *begin* and *end*."""
        self._thread = threading.Thread(
            target=self._sample, args=(begin, end), name="bench-cpu", daemon=True
        )
        self._thread.start()

    def _sample(self, begin: float, end: float) -> None:
        for moment in (begin, end):
            if self._stop.wait(max(0.0, moment - time.monotonic())):
                return
            self._readings.append(self._read())

    def _read(self) -> tuple[float | None, float | None]:
        nodes = [process_cpu_s(pid) for pid in self._node_pids]
        total = None if None in nodes else sum(n or 0.0 for n in nodes)
        return total, tree_cpu_s(self._db_pid) if self._db_pid is not None else None

    def close(self) -> WindowCpu:
        """Stop sampling; the CPU between the two readings (None where one is missing: the
        window did not end, or a process was gone)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        note = self._db_note
        if len(self._readings) < 2:
            return WindowCpu(None, None, note)
        (nodes0, db0), (nodes1, db1) = self._readings
        if self._db_pid is not None and (db0 is None or db1 is None):
            note = f"the database process {self._db_pid} was gone before the window ended"
        return WindowCpu(_diff(nodes0, nodes1), _diff(db0, db1), note)


def _diff(first: float | None, last: float | None) -> float | None:
    return None if first is None or last is None else round(last - first, 3)
