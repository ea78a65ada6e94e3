"""The fixed cost of a node: CPU, wakes and database statements per second of idle (or
lightly loaded) node processes, per thread (issue 25, goal 4).

Each trial starts ``--nodes`` real node processes (``python -P -m easyjob run``, default
settings unless options follow ``--``) of one checkout on a fresh database, on
``tests/perf/idle_jobs.py`` (``--tasks`` tasks that never fire in the trial, ``--every``
tasks firing each second across the cluster), waits ``--settle`` seconds, then measures a
window of ``--duration`` seconds:

- per thread (by the name easyjob gives it, ``/proc/PID/task/*/comm``, less ``ej-`` and a
  worker's number; ``python`` is the main thread): CPU ms per second (from
  ``/proc/PID/task/TID/schedstat``, in ns) and wakes per second (voluntary context switches:
  each time the thread blocked, on a timer, a lock or a socket);
- per node: the total over its threads less the HTTP endpoint's (``--http`` is how the
  statements are read: ``easyjob_db_round_trips_total`` scraped just before and just after
  the window, outside it), statements and commits per second;
- on PostgreSQL, the server's CPU ms per second (all its processes), shared by the nodes.

With several ``--checkout`` directories the checkouts take turns, round after round (A B,
then B A, ...), each on a fresh database, and the medians per checkout close the report.

Usage::

    python -m tests.perf.idle_cost --db sqlite --nodes 4 --duration 30
    python -m tests.perf.idle_cost --db postgresql --nodes 4 --every 20 --rounds 2 \\
        --checkout /work/wt/base --checkout .
    python -m tests.perf.idle_cost --db sqlite -- --heartbeat 1   # settings for every node
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from easyjob.bench.server_cpu import find_server, listening_ports, tree_cpu_s
from easyjob.threads import PREFIX
from tests.cluster.harness import samples
from tests.perf.bench_ab import Databases, revision

JOBS = Path(__file__).with_name("idle_jobs.py")
_HTTP = "http"  # the endpoint's thread (see easyjob.observe.endpoint)


@dataclass
class Sample:
    """One node process at one moment: per thread id, its name, CPU ns and wakes."""

    threads: dict[int, tuple[str, int, int]]
    trips: dict[str, float]


@dataclass
class NodeFigures:
    """One node's window, per second."""

    cpu_ms: float
    statements: float
    commits: float
    threads: dict[str, tuple[float, float]] = field(default_factory=dict)  # ms/s, wakes/s


def _thread_name(comm: str) -> str:
    """The role of a thread: its name less easyjob's prefix and a trailing number (worker
    threads)."""
    name = comm.strip().removeprefix(PREFIX)
    return re.sub(r"[-_]?\d+$", "", name) or name


def threads_of(pid: int) -> dict[int, tuple[str, int, int]]:
    """Per live thread of process *pid*: name, CPU ns so far, voluntary context switches."""
    found = {}
    root = Path(f"/proc/{pid}/task")
    for task in root.iterdir():
        try:
            comm = (task / "comm").read_text()
            ns = int((task / "schedstat").read_text().split()[0])
            status = (task / "status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        wakes = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M)[1])  # type: ignore[index]
        found[int(task.name)] = (_thread_name(comm), ns, wakes)
    return found


def scrape(base: str) -> dict[str, float]:
    """The node's database round trips so far, by kind (statement, commit)."""
    found = samples(base, timeout=10)
    return {
        dict(labels)["kind"]: value
        for (name, labels), value in found.items()
        if name == "easyjob_db_round_trips_total"
    }


def figures(before: Sample, after: Sample, seconds: float) -> NodeFigures:
    """A node's window between two samples."""
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for tid, (name, ns, wakes) in after.threads.items():
        ns0, wakes0 = before.threads.get(tid, (name, 0, 0))[1:]  # a new thread: all of it
        by_name[name][0] += (ns - ns0) / 1e6 / seconds
        by_name[name][1] += (wakes - wakes0) / seconds
    cpu = sum(ms for name, (ms, _) in by_name.items() if name != _HTTP)
    return NodeFigures(
        cpu_ms=cpu,
        statements=(after.trips["statement"] - before.trips["statement"]) / seconds,
        commits=(after.trips["commit"] - before.trips["commit"]) / seconds,
        threads={name: (ms, wakes) for name, (ms, wakes) in by_name.items()},
    )


def _served(proc: subprocess.Popen[bytes], deadline: float) -> str:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"node {proc.pid} exited at start; see its log")
        if ports := listening_ports(proc.pid):
            return f"http://127.0.0.1:{min(ports)}"
        time.sleep(0.05)
    raise RuntimeError(f"node {proc.pid} served no HTTP within 60 s")


@dataclass
class Trial:
    nodes: list[NodeFigures]
    server_ms: float | None


def trial(root: Path, url: str, args: argparse.Namespace, workdir: Path) -> Trial:
    """One window of ``args.nodes`` nodes of the checkout at *root* on database *url*."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "IDLE_COST_TASKS": str(args.tasks),
        "IDLE_COST_EVERY": str(args.every),
    }
    procs, logs = [], []
    try:
        for i in range(args.nodes):
            argv = [sys.executable, "-P", "-m", "easyjob", "--log-level", "WARNING", "run"]
            argv += [str(JOBS), "--db", url, "--node-id", f"idle-{i}", "--http", "127.0.0.1:0"]
            log = (workdir / f"node-{i}.log").open("wb")
            logs.append(log)
            procs.append(
                subprocess.Popen([*argv, *args.node], env=env, stdout=log, stderr=subprocess.STDOUT)
            )
        deadline = time.monotonic() + 60
        bases = [_served(proc, deadline) for proc in procs]
        time.sleep(args.settle)
        server, _ = find_server(url)
        trips = [scrape(base) for base in bases]
        server_before = tree_cpu_s(server) if server else None
        before = [Sample(threads_of(p.pid), t) for p, t in zip(procs, trips, strict=True)]
        started = time.monotonic()
        time.sleep(args.duration)
        threads = [threads_of(p.pid) for p in procs]
        seconds = time.monotonic() - started
        server_after = tree_cpu_s(server) if server else None
        after = [Sample(t, scrape(base)) for t, base in zip(threads, bases, strict=True)]
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"node {proc.pid} exited during the window; see {workdir}")
        server_ms = None
        if server_before is not None and server_after is not None:
            server_ms = (server_after - server_before) * 1000 / seconds
        return Trial(
            [figures(b, a, seconds) for b, a in zip(before, after, strict=True)], server_ms
        )
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for log in logs:
            log.close()


def _roles(trials: list[Trial]) -> list[str]:
    seen: dict[str, float] = defaultdict(float)
    for t in trials:
        for node in t.nodes:
            for name, (ms, _) in node.threads.items():
                seen[name] += ms
    return sorted(seen, key=lambda name: -seen[name])


def report(label: str, t: Trial, roles: list[str]) -> None:
    """One trial: a line per node, then the mean node, per thread ms/s and wakes/s."""
    print(
        f"\n{label}: CPU ms/s, statements/s, commits/s per node"
        + (f"; PostgreSQL server {t.server_ms:.2f} ms/s" if t.server_ms is not None else "")
    )
    head = "| node | CPU ms/s | statements/s | commits/s | " + " | ".join(roles) + " |"
    print(head)
    print("|---" * (4 + len(roles)) + "|")
    for i, node in enumerate(t.nodes):
        cells = [
            f"{node.threads[r][0]:.2f} / {node.threads[r][1]:.1f}" if r in node.threads else "-"
            for r in roles
        ]
        print(
            f"| {i} | {node.cpu_ms:.2f} | {node.statements:.2f} | {node.commits:.2f} | "
            + " | ".join(cells)
            + " |"
        )


def mean_node(t: Trial) -> dict[str, float]:
    """The mean node of a trial, flattened: totals and per thread ms/s and wakes/s."""
    n = len(t.nodes)
    out = {
        "CPU ms/s": sum(x.cpu_ms for x in t.nodes) / n,
        "statements/s": sum(x.statements for x in t.nodes) / n,
        "commits/s": sum(x.commits for x in t.nodes) / n,
        "wakes/s": sum(w for x in t.nodes for name, (_, w) in x.threads.items() if name != _HTTP)
        / n,
    }
    if t.server_ms is not None:
        out["server ms/s per node"] = t.server_ms / n
    for x in t.nodes:
        for name, (ms, wakes) in x.threads.items():
            out[f"{name} ms/s"] = out.get(f"{name} ms/s", 0.0) + ms / n
            out[f"{name} wakes/s"] = out.get(f"{name} wakes/s", 0.0) + wakes / n
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite", help="sqlite, postgresql or a server URL")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--duration", type=float, default=30.0, help="window, seconds")
    parser.add_argument("--settle", type=float, default=8.0, help="seconds before the window")
    parser.add_argument("--tasks", type=int, default=5, help="tasks that never fire")
    parser.add_argument("--every", type=int, default=0, help="tasks firing every second")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--checkout", type=Path, action="append", default=[], help="checkouts to compare"
    )
    parser.add_argument("node", nargs="*", help="easyjob run options for every node (after --)")
    args = parser.parse_args(argv)
    roots = {chr(ord("A") + i): p.resolve() for i, p in enumerate(args.checkout or [Path(".")])}
    for label, root in roots.items():
        print(f"{label} = {root} ({revision(root)})")
    settings = " ".join(args.node) or "default settings"
    print(
        f"{args.nodes} node(s) on {args.db}, {args.tasks} idle task(s), {args.every} every "
        f"second, {settings}; window {args.duration:g} s after {args.settle:g} s"
    )
    results: dict[str, list[Trial]] = {label: [] for label in roots}
    with tempfile.TemporaryDirectory(prefix="easyjob-idle-cost-") as scratch:
        databases = Databases(args.db, Path(scratch))
        try:
            for round_ in range(1, args.rounds + 1):
                labels = list(roots)
                shift = (round_ - 1) % len(labels)
                for label in labels[shift:] + labels[:shift]:
                    t = trial(roots[label], databases.fresh(), args, Path(scratch) / label)
                    results[label].append(t)
                    report(f"{label}{round_}", t, _roles([t]))
                    if _roles([t]) == ["python"]:  # a checkout before easyjob.threads
                        print(f"({label} names no threads: its figures are the whole process's)")
        finally:
            databases.close()
    print("\nThe mean node, medians over the rounds (thread: ms/s, wakes/s):")
    keys: list[str] = []
    means = {label: [mean_node(t) for t in trials] for label, trials in results.items()}
    for rows in means.values():
        for row in rows:
            keys += [k for k in row if k not in keys]
    print("| figure | " + " | ".join(roots) + " |")
    print("|---" * (1 + len(roots)) + "|")
    for key in keys:
        cells = []
        for label in roots:
            values = [row.get(key, 0.0) for row in means[label]]
            cells.append(f"{statistics.median(values):.2f}")
        print(f"| {key} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
