"""Minute-burst peer benchmark: Huey (``SqliteHuey``, one consumer) beside easyjob on SQLite.

Usage (from the repository root, with the project's virtualenv)::

    python -m tests.perf.peers.run_burst --schedules 12000 --minutes 2 --easyjob-nodes 1 4

M tasks each run every minute. One after another, each on a fresh SQLite file: easyjob with
each ``--easyjob-nodes`` count (``tests.perf.minute_burst``: the bench's nodes at default
settings; a warm-up minute, then ``--minutes`` measured minutes), then Huey
(``worker_huey.py`` in its own virtualenv, created with pip from the package index like the
other peers': ``run_peers.ensure_venv``; Huey is never a dependency of easyjob). Huey's first
periodic read (at its consumer's start) is its warm-up and the next ``--minutes`` are measured.

Per measured minute, for both: runs, the drain time (the last start of the minute's fires minus
their fire time), start lateness p50/p99 and the CPU over the minute's cycle (from 1 s before
the fire to 59 s after: the process(es), SQLite's work included) per run. Huey's fire time is
when its scheduler read the periodic tasks (it counts its minutes from the consumer's start,
not on the wall clock's minute: see ``worker_huey``); easyjob's is the cron's minute.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.cluster.harness import sleep_until
from tests.perf.minute_burst import run_burst
from tests.perf.peers.cpu import proc_cpu
from tests.perf.peers.ledger import percentile
from tests.perf.peers.run_peers import Peer, ensure_venv

HERE = Path(__file__).resolve().parent
HUEY = Peer(
    name="huey",
    venv="huey",
    worker="worker_huey.py",
    processes=1,
    requirements=(("huey==3.5.4",), ("huey==3.5.*",)),
)
#: a cycle's CPU is read this long before its fire, and 60 s later
LEAD_S = 1.0
STOP_GRACE_S = 30.0


def _say(text: str) -> None:
    print(f"burst peers: {text}", file=sys.stderr, flush=True)


def minutes_from_ledger(
    lines: Iterable[str], schedules: int, skip: int = 1
) -> list[dict[str, Any]]:
    """Per burst (the runs sharing one fire time, in order), after the first *skip*: runs,
    missing and duplicate jobs, drain seconds and lateness p50/p99 (ms), from ledger lines
    ``job fire start pid`` (``peerjob.record``)."""
    bursts: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for line in lines:
        parts = line.split()
        if len(parts) != 4:
            continue
        job, fire, start, _ = parts
        delay = (datetime.fromisoformat(start) - datetime.fromisoformat(fire)).total_seconds()
        bursts[fire].append((job, delay))
    found = []
    for fire in sorted(bursts)[skip:]:
        runs = bursts[fire]
        late = sorted(s for _, s in runs)
        jobs = {job for job, _ in runs}
        drain = late[-1]
        found.append(
            {
                "minute": fire,
                "runs": len(runs),
                "missing": schedules - len(jobs),
                "duplicates": len(runs) - len(jobs),
                "drain_s": round(drain, 2),
                "late_p50_ms": round(1000 * percentile(late, 0.5), 1),
                "late_p99_ms": round(1000 * percentile(late, 0.99), 1),
                "drain_runs_per_s": round(len(runs) / drain, 1) if drain > 0 else None,
            }
        )
    return found


def run_huey(
    python: Path, *, schedules: int, minutes: int, workdir: Path, period: float = 60.0
) -> dict[str, Any]:
    """Huey's consumer through a warm-up minute and *minutes* measured ones; the figures.
    *period*: seconds between Huey's periodic reads (60, Huey's; shorter in a smoke test)."""
    run_dir = Path(tempfile.mkdtemp(prefix="huey-", dir=workdir))
    ledger = run_dir / "ledger.txt"
    stop_at = time.time() + period * (minutes + 1.5)  # the last burst has half a period
    argv = [str(python), str(HERE / HUEY.worker), "run", "--db", str(run_dir / "huey.db")]
    argv += ["--schedules", str(schedules), "--ledger", str(ledger), "--stop-at", str(stop_at)]
    argv += ["--period", str(period)]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    out_path = run_dir / "worker.out"
    _say(f"huey: {schedules:,} periodic tasks, {minutes + 1} minutes")
    with out_path.open("wb") as out, (run_dir / "worker.err").open("wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
    try:
        started = _first_json(out_path, proc, deadline=time.time() + 120)["started"]
        cpu = []
        for k in range(1, minutes + 1):
            begin = started + period * k - LEAD_S
            sleep_until(begin, time.time)
            first = proc_cpu(proc.pid)
            sleep_until(begin + period, time.time)
            cpu.append(proc_cpu(proc.pid) - first)
        proc.wait(timeout=max(0.0, stop_at - time.time()) + STOP_GRACE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    per_minute = minutes_from_ledger(ledger.read_text().splitlines(), schedules)[:minutes]
    for row, spent in zip(per_minute, cpu, strict=False):
        row["cpu_s"] = round(spent, 3)
        row["cpu_ms_per_run"] = round(1000 * spent / row["runs"], 3) if row["runs"] else None
    info = _last_json(out_path)
    error = None if proc.returncode == 0 else (run_dir / "worker.err").read_text()[-2000:]
    return {
        "peer": "huey",
        "processes": 1,
        "schedules": schedules,
        "minutes": per_minute,
        "settings": {k: v for k, v in info.items() if k not in ("versions", "pid")},
        "versions": info.get("versions"),
        "error": error,
    }


def _first_json(path: Path, proc: subprocess.Popen[bytes], deadline: float) -> dict[str, Any]:
    while time.time() < deadline:
        with contextlib.suppress(OSError, ValueError, IndexError):
            found = json.loads(path.read_text().splitlines()[0])
            if isinstance(found, dict):
                return found
        if proc.poll() is not None:
            raise RuntimeError(f"the huey worker exited with {proc.returncode}")
        time.sleep(0.1)
    raise RuntimeError("the huey worker did not start within its deadline")


def _last_json(path: Path) -> dict[str, Any]:
    for line in reversed(path.read_text().splitlines()):
        with contextlib.suppress(ValueError):
            found = json.loads(line)
            if isinstance(found, dict) and "versions" in found:
                return found
    return {}


def run(
    *,
    schedules: int,
    minutes: int,
    easyjob_nodes: Sequence[int] = (1, 4),
    huey: bool = True,
    cache_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """easyjob with each node count, then Huey; one report each (``peer`` names which)."""
    python = ensure_venv(HUEY, cache_dir) if huey else None
    workdir = Path(tempfile.mkdtemp(prefix="easyjob-burst-peers-"))
    results: list[dict[str, Any]] = []
    try:
        for nodes in easyjob_nodes:
            scratch = workdir / f"easyjob-{nodes}"
            scratch.mkdir()
            found = run_burst(
                f"sqlite:///{scratch / 'burst.db'}",
                tasks=schedules,
                nodes=nodes,
                minutes=minutes,
                workdir=scratch / "nodes",
            )
            for row in found["minutes"]:
                row["cpu_ms_per_run"] = row["node_ms_per_run"]
            results.append({"peer": "easyjob", "processes": nodes, **found})
        if python is not None:
            results.append(run_huey(python, schedules=schedules, minutes=minutes, workdir=workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def format_table(results: Sequence[dict[str, Any]]) -> str:
    """One line per measured minute of each report, and Huey's CPU per run as the target."""
    head = f"{'scheduler':<18}{'runs':>7}{'miss':>6}{'drain s':>9}{'p50 ms':>9}{'p99 ms':>9}"
    lines = [head + f"{'runs/s':>9}{'cpu ms/run':>12}"]
    for result in results:
        label = f"{result['peer']} ({result['processes']} proc)"
        for row in result["minutes"]:
            cells = [row["runs"], row["missing"], row["drain_s"], row["late_p50_ms"]]
            cells += [row["late_p99_ms"], row["drain_runs_per_s"], row.get("cpu_ms_per_run")]
            widths = (7, 6, 9, 9, 9, 9, 12)
            line = f"{label:<18}" + "".join(
                ("-" if c is None else str(c)).rjust(w) for c, w in zip(cells, widths, strict=True)
            )
            lines.append(line)
        if result.get("error"):
            lines.append(f"  error: {result['error'].strip().splitlines()[-1]}")
    huey = [r for r in results if r["peer"] == "huey"]
    costs = [m["cpu_ms_per_run"] for r in huey for m in r["minutes"] if m.get("cpu_ms_per_run")]
    if costs:
        lines.append(f"target (goal 5): easyjob cpu ms/run <= Huey's ({min(costs)}-{max(costs)})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.perf.peers.run_burst", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--schedules", type=int, default=12_000, metavar="M")
    parser.add_argument("--minutes", type=int, default=2, help="measured minutes (default 2)")
    parser.add_argument("--easyjob-nodes", type=int, nargs="*", default=[1, 4], metavar="N")
    parser.add_argument("--no-huey", dest="huey", action="store_false")
    parser.add_argument("--venv-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="JSON on stdout, table on stderr")
    args = parser.parse_args(argv)
    if args.schedules < 1 or args.minutes < 1 or any(n < 1 for n in args.easyjob_nodes):
        parser.error("--schedules, --minutes and --easyjob-nodes must be at least 1")
    results = run(
        schedules=args.schedules,
        minutes=args.minutes,
        easyjob_nodes=args.easyjob_nodes,
        huey=args.huey,
        cache_dir=args.venv_dir,
    )
    print(format_table(results), file=sys.stderr)
    if args.json:
        print(json.dumps(results))
    failed = [r for r in results if r.get("error") or not r["minutes"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
