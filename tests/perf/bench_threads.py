"""Where a bench trial's node CPU goes, by thread role: one ``easyjob bench`` trial run in this
process, every node thread's CPU read from ``/proc/PID/task/TID/schedstat`` mid-second before
the trial window's first fire second and after its last (by the name easyjob gives each
thread: loader, dispatch, planner, worker ...), summed over the nodes and divided by the
runs in the window.

``py-spy``'s samples mislead for this: a thread waiting for a lock with a timeout, or for the
GIL, counts as active; the kernel's count is CPU. Used for issue 25's goal 4 (4 nodes
against 1 at half load: docs/performance.md, "Each second's runs spread over the nodes").

Usage::

    python -m tests.perf.bench_threads --db sqlite:////tmp/t.db --nodes 4 --tasks 150
    python -m tests.perf.bench_threads --db sqlite:////tmp/t.db --nodes 1 --tasks 150

The database must hold no tasks but earlier bench ones (a SQLite file is made anew).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory

from easyjob.bench.trial import TrialConfig, run_trial
from tests.perf.idle_cost import threads_of
from tests.perf.peers.cpu import children

Sample = dict[str, tuple[int, int]]  # role -> (CPU ns, voluntary context switches)


def _sample(pids: list[int]) -> Sample:
    ns: Counter[str] = Counter()
    wakes: Counter[str] = Counter()
    for pid in pids:
        for name, cpu, switches in threads_of(pid).values():
            ns[name] += cpu
            wakes[name] += switches
    return {name: (ns[name], wakes[name]) for name in ns}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=150)
    parser.add_argument("--duration", type=float, default=20)
    args = parser.parse_args(argv)
    if args.db.startswith("sqlite:///"):
        Path(args.db.removeprefix("sqlite:///")).unlink(missing_ok=True)
    samples: list[Sample] = []

    def sample_window(start: datetime, end: datetime) -> None:
        def at(moment: datetime) -> None:  # SQLite's time is this machine's clock
            time.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))
            samples.append(_sample(children(os.getpid(), "easyjob")))  # the nodes

        def both() -> None:  # mid-second before and after the window's fire seconds
            at(start - timedelta(seconds=0.5))
            at(end + timedelta(seconds=0.5))

        threading.Thread(target=both, daemon=True).start()

    config = TrialConfig(db=args.db, nodes=args.nodes, tasks=args.tasks, duration=args.duration)
    with TemporaryDirectory() as workdir:
        figures = run_trial(config, Path(workdir), lambda line: None, on_window=sample_window)
    if len(samples) < 2:
        print("the window's samples were not both taken")
        return 1
    before, after = samples
    runs = max(1, figures.window_runs)
    seconds = max(1.0, args.duration)
    print(
        f"{args.nodes} node(s) x {args.tasks} tasks: {figures.window_runs} runs in the window, "
        f"node CPU {figures.window_cpu_ms_per_run} ms/run (the bench's figure)"
    )
    total = 0.0
    rows = []
    for name, (ns, switches) in after.items():
        was_ns, was_switches = before.get(name, (0, 0))
        per_run = (ns - was_ns) / 1e6 / runs
        total += per_run
        rows.append((per_run, name, (switches - was_switches) / seconds))
    for per_run, name, wakes in sorted(rows, reverse=True):
        if per_run >= 0.001:
            print(f"  {name:12} {per_run:6.3f} ms/run  {wakes:6.0f} wakes/s")
    print(f"  {'threads':12} {total:6.3f} ms/run")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
