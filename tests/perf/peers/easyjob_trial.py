"""easyjob's side of the peer benchmark: one ``easyjob bench`` trial, reported in the peers' keys.

The trial is :func:`easyjob.bench.trial.run_trial` unchanged (the same code as ``easyjob bench``):
N node processes with M no-op tasks on ``* * * * * *`` (every task fires every second, all on
the same second, like the peers' schedules), figures from ``easy_job_task_detail``. Its window
is set to the peers': ``warmup`` seconds, then ``floor(duration - warmup)`` whole seconds of
fires; the trial waits 3 s past the window's last fire second before it stops the nodes (the
peers' ``--drain`` default). What still differs is where the warm-up starts: at process launch
for a peer (its schedules were stored beforehand); for easyjob once every node is live with its
tasks registered (nodes register their tasks at start) and no fire is overdue by more than 2 s
(the trial waits for its start-up backlog to clear, up to 300 s).

``run_trial`` tells its window through ``on_window`` (fire seconds, database time) before
the window begins; the nodes' and the database server's CPU is sampled from ``/proc`` at
those bounds (the database runs on this machine, on the same clock).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from easyjob.bench.metrics import TrialFigures
from easyjob.bench.trial import TrialConfig, run_trial
from tests.perf.peers.cpu import children, proc_cpu, tree_cpu
from tests.perf.peers.report import failed

__all__ = ["SETTLE_S", "figures_report", "run_easyjob"]

#: Seconds ``run_trial`` waits past the window's last fire second before it stops the nodes.
SETTLE_S = 3.0
NOTE_EVERY_S = 5.0


def _say(message: str) -> None:
    print(f"peers: easyjob: {message}", file=sys.stderr, flush=True)


class _WindowCpu:
    """Samples the nodes' and the database server's CPU at the trial's window bounds."""

    def __init__(self, run_dir: Path, server_pid: int | None):
        self._marker = str(run_dir)
        self._server_pid = server_pid
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_note = 0.0
        self.figures: dict[str, Any] = {}

    def window(self, first: datetime, last: datetime) -> None:
        """The trial's window: fires from *first* to *last* (whole seconds) are measured."""
        bounds = (first.timestamp(), last.timestamp() + 1)
        self._thread = threading.Thread(target=self._sample, args=bounds, daemon=True)
        self._thread.start()

    def progress(self, text: str) -> None:
        now = time.time()
        if now >= self._next_note:
            self._next_note = now + NOTE_EVERY_S
            _say(text)

    def _wait_until(self, moment: float) -> bool:
        return not self._stop.wait(max(0.0, moment - time.time()))

    def _sample(self, start: float, end: float) -> None:
        if not self._wait_until(start):
            return
        pids = children(os.getpid(), self._marker)
        cpu0 = {pid: proc_cpu(pid) for pid in pids}
        db0 = tree_cpu(self._server_pid) if self._server_pid else None
        load0 = os.getloadavg()[0]
        if not self._wait_until(end):
            return
        cpu1 = {pid: proc_cpu(pid) for pid in pids}
        db1 = tree_cpu(self._server_pid) if self._server_pid else None
        self.figures = {
            "cpu_window_s": [round(cpu1[pid] - cpu0[pid], 2) for pid in pids],
            "db_cpu_window_s": None if db0 is None or db1 is None else round(db1 - db0, 2),
            "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
        }

    def close(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        return self.figures


def figures_report(figures: TrialFigures, base: dict[str, Any]) -> dict[str, Any]:
    """A trial's figures in the peers' keys (``runs``: fires of the window run, each once)."""
    report = dict(base)
    report.update(
        window_s=round(figures.window_s),
        expected=figures.expected,
        executions=figures.runs + figures.duplicates,
        runs=figures.runs,
        runs_per_s=figures.runs_per_s,
        missed=figures.missed,
        duplicates=figures.duplicates,
        lateness_ms=dict(figures.lateness_ms),
        cpu_s=[round(cpu, 2) for cpu in figures.cpu_s_per_node.values()],
        claims_lost=figures.claims_lost,
        round_trips_per_run=figures.round_trips_per_run,
        stale_at_end=figures.stale_at_end,
    )
    return report


def _node_logs(run_dir: Path) -> str:
    tails = []
    for log in sorted(run_dir.glob("node-*.log")):
        lines = log.read_text(errors="replace").strip().splitlines()
        if lines:
            tails.append(f"{log.name}: " + "\n".join(line[:400] for line in lines[-3:]))
    return "\n".join(tails)


def _versions() -> dict[str, str]:
    found = {"easyjob": version("easyjob")}
    head = subprocess.run(
        ["git", "describe", "--always", "--dirty"],
        cwd=Path(__file__).resolve().parent,
        capture_output=True,
        text=True,
        check=False,
    )
    if head.returncode == 0:
        found["git"] = head.stdout.strip()
    return found


def run_easyjob(
    url: str,
    *,
    backend: str,
    schedules: int,
    duration: float,
    warmup: float = 5.0,
    nodes: int = 4,
    workers: int | None = None,
    strategy: str = "default",
    claim_mode: str = "optimistic",
    workdir: Path,
    server_pid: int | None = None,
) -> dict[str, Any]:
    """Run one trial against a fresh database and report it. Never raises for a trial error."""
    seconds = math.floor(duration - warmup)
    config = TrialConfig(
        db=url,
        nodes=nodes,
        tasks=schedules,
        duration=float(seconds),
        warmup=warmup,
        workers=workers,  # None: the nodes' default, like every other setting here
        strategy=strategy,
        claim_mode=claim_mode,
    )
    run_dir = Path(tempfile.mkdtemp(prefix="easyjob-", dir=workdir))
    base: dict[str, Any] = {
        "peer": "easyjob",
        "backend": backend,
        "schedules": schedules,
        "processes": nodes,
        "duration_s": duration,
        "settings": {
            "nodes": nodes,
            "workers": config.workers or "default",
            "poll": config.poll,
            "heartbeat": config.heartbeat,
            "strategy": strategy,
            "claim_mode": claim_mode,
        },
        "versions": _versions(),
        "workdir": str(run_dir),
    }
    _say(f"{nodes} nodes on {backend} with {schedules} tasks ({config.workers} workers each)")
    sampler = _WindowCpu(run_dir, server_pid)
    try:
        figures = run_trial(config, run_dir, sampler.progress, on_window=sampler.window)
    except Exception as exc:  # reported as easyjob's error row, like a peer's
        sampler.close()
        return failed(base, f"{type(exc).__name__}: {exc}\n{_node_logs(run_dir)}".strip())
    report = figures_report(figures, base)
    report.update(sampler.close())
    window_cpu = report.get("cpu_window_s")
    per_run = 1000 * sum(window_cpu) / figures.runs if window_cpu and figures.runs else None
    report["cpu_ms_per_run"] = None if per_run is None else round(per_run, 2)
    report["error"] = None
    return report
