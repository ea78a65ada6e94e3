"""What the nodes and the database server spend over a trial's window: CPU read from
``/proc`` (:mod:`~easyjob.bench.server_cpu`) and the nodes' database counters read from
their ``/metrics``, sampled at the window's start and end on a thread of its own."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from easyjob.bench.server_cpu import find_server, process_cpu_s, tree_cpu_s
from easyjob.core.store_values import ROWS_BY_WRITE
from easyjob.threads import NamedThread

__all__ = ["WindowReadings", "WindowSampler", "locate_server", "node_counters"]

#: ``/metrics`` series read per node -> the key of ``Counters.snapshot()`` they count
_SERIES = {
    ("easyjob_db_round_trips_total", "statement"): "statements",
    ("easyjob_db_round_trips_total", "commit"): "commits",
}
_ROWS = "easyjob_db_rows_written_total"
_BY_WRITE = "easyjob_db_rows_written_by_write_total"
_FINISHED = "easyjob_runs_finished_total"  # by task and outcome: summed


@dataclass(frozen=True)
class WindowReadings:
    """Over the window: CPU seconds of all nodes together and of the database server (None
    when it could not be read: *db_note* says why, or which process was read), and the
    nodes' counters summed (``finished``: runs whose function returned; ``statements``,
    ``commits``, ``rows_written.TABLE``, ``rows_by_write.WRITE.TABLE.STATUS``; empty when a
    node's ``/metrics`` could not be read)."""

    nodes_cpu_s: float | None
    db_cpu_s: float | None
    db_note: str
    counters: dict[str, float] = field(default_factory=dict)


def locate_server(url: str, pid: int | None) -> tuple[int | None, str]:
    """The database server's pid: *pid* when given (``--db-pid``) and alive, else the process
    listening on the URL's loopback port; None and the reason when there is none to read."""
    if pid is None:
        return find_server(url)
    if tree_cpu_s(pid) is None:
        return None, f"--db-pid {pid}: no such process readable here"
    return pid, f"pid {pid} (--db-pid)"


def node_counters(metrics_url: str) -> dict[str, float] | None:
    """A node's runs finished and database counters from its ``/metrics`` (keys as in
    :class:`WindowReadings`), or None when it does not answer."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == _FINISHED:
                found["finished"] = found.get("finished", 0.0) + sample.value
            elif sample.name == _ROWS:
                found[f"rows_written.{sample.labels['table']}"] = sample.value
            elif sample.name == _BY_WRITE:
                labels = sample.labels
                write = f"{labels['write']}.{labels['table']}.{labels['status']}"
                found[ROWS_BY_WRITE + write] = sample.value
            key = _SERIES.get((sample.name, sample.labels.get("kind", "")))
            if key is not None:
                found[key] = sample.value
    return found


_Reading = tuple[float | None, float | None, dict[str, float] | None]


class WindowSampler:
    """Reads the CPU of *node_pids*, that of the server *db_pid* (its process tree) and the
    counters at *metrics_urls* at two monotonic moments; :meth:`close` gives the differences."""

    def __init__(
        self,
        node_pids: Sequence[int],
        metrics_urls: Sequence[str],
        db_pid: int | None,
        db_note: str,
    ) -> None:
        self._node_pids = list(node_pids)
        self._urls = list(metrics_urls)
        self._db_pid = db_pid
        self._db_note = db_note
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._readings: list[_Reading] = []

    def start(self, begin: float, end: float) -> None:
        """Sample at monotonic times *begin* and *end*."""
        self._thread = NamedThread("bench-window", self._sample, begin, end)
        self._thread.start()

    def _sample(self, begin: float, end: float) -> None:
        for moment in (begin, end):
            if self._stop.wait(max(0.0, moment - time.monotonic())):
                return
            self._readings.append(self._read())

    def _read(self) -> _Reading:
        cpu = [process_cpu_s(pid) for pid in self._node_pids]
        nodes = None if None in cpu else sum(c or 0.0 for c in cpu)
        db = tree_cpu_s(self._db_pid) if self._db_pid is not None else None
        counters: Counter[str] | None = Counter()
        for url in self._urls:
            found = node_counters(url)
            if found is None or counters is None:
                counters = None
                continue
            counters.update(found)
        return nodes, db, None if counters is None else dict(counters)

    def close(self) -> WindowReadings:
        """Stop sampling; what was spent between the two readings (None, or no counters,
        where a reading is missing: the window did not end, or a process did not answer)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        note = self._db_note
        if len(self._readings) < 2:
            return WindowReadings(None, None, note)
        (nodes0, db0, counts0), (nodes1, db1, counts1) = self._readings
        if self._db_pid is not None and (db0 is None or db1 is None):
            note = f"the database process {self._db_pid} was gone before the window ended"
        counters = {}
        if counts0 is not None and counts1 is not None:
            counters = {key: counts1[key] - counts0.get(key, 0.0) for key in counts1}
        return WindowReadings(_diff(nodes0, nodes1), _diff(db0, db1), note, counters)


def _diff(first: float | None, last: float | None) -> float | None:
    return None if first is None or last is None else round(last - first, 3)
