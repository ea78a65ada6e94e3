"""Each node's planner pace, second by second, in a saturated cluster (issue 25, goal 3).

The rows a saturated cluster writes per run now vary from trial to trial with the planners'
pacing (docs/performance.md, "A gap costs no row"): fires written ahead or before a planner
is behind are then missed, or a planner paced too far writes too little. This starts
``easyjob bench``'s nodes (default settings, every task every second) on a fresh database,
scrapes every node's ``/metrics`` once a second, and prints per node and second: whether
its planner is behind and at what rate (``easyjob_planner_behind``, ``easyjob_planner_rate``),
the fires it wrote (``easyjob_fires_written_total``), the runs its loader marked MISSED
where they waited (the ``miss_pending`` rows of ``easyjob_db_rows_written_by_write_total``:
fires written, then missed), the runs it started and the claim races it lost; then each
node's totals.

Usage::

    python -m tests.perf.pace_trace --db sqlite --nodes 4 --tasks 3000 --duration 30
    python -m tests.perf.pace_trace --db postgresql --nodes 4 --tasks 3000 --duration 30

``sqlite`` is a fresh file in a temporary folder, ``postgresql`` a fresh database on a
server of the test rig (as ``tests.perf.bench_ab``); a URL names a server where a fresh
database is made.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from easyjob.bench.trial import TrialConfig, start_nodes, stop_nodes, wait_live
from easyjob.store import Store
from tests.cluster.harness import samples, sleep_until, total
from tests.perf.bench_ab import Databases

#: The per-node figures read from /metrics each second: (column, metric, is a counter).
COLUMNS = (
    ("behind", "easyjob_planner_behind", False),
    ("rate", "easyjob_planner_rate", False),
    ("written/s", "easyjob_fires_written_total", True),
    ("missed/s", "easyjob_db_rows_written_by_write_total", True),
    ("started/s", "easyjob_runs_started_total", True),
    ("lost/s", "easyjob_claims_lost_total", True),
)


def trace(db: str, nodes: int, tasks: int, duration: float, workdir: Path) -> None:
    store = Store.open(db, create=True)
    try:
        store.bench.reset()
        config = TrialConfig(db, nodes=nodes, tasks=tasks, duration=duration)
        procs, urls = start_nodes(config, workdir)
        try:
            wait_live(store, config, procs)
            _print(urls, duration)
        finally:
            stop_nodes(procs, workdir)
    finally:
        store.close()


def _print(urls: list[str], duration: float) -> None:
    header = "  ".join(f"{name:>9}" for name, _, _ in COLUMNS)
    print(f"{'t':>4} {'node':>4}  {header}")
    before = [_read(url) for url in urls]
    first = before
    start = time.monotonic()
    for second in range(1, int(duration) + 1):
        sleep_until(start + second)
        now = [_read(url) for url in urls]
        for i, (old, new) in enumerate(zip(before, now, strict=True)):
            cells = [
                (new[name] - old[name]) if counter else new[name] for name, _, counter in COLUMNS
            ]
            print(f"{second:>4} {i:>4}  " + "  ".join(f"{c:>9.1f}" for c in cells))
        before = now
    print("totals over the trace, per node:")
    for i, (old, new) in enumerate(zip(first, before, strict=True)):
        written = new["written/s"] - old["written/s"]
        missed = new["missed/s"] - old["missed/s"]
        started = new["started/s"] - old["started/s"]
        print(
            f"node {i}: wrote {written:,.0f} fires, started {started:,.0f} runs, marked "
            f"{missed:,.0f} MISSED ({missed / max(missed + started, 1):.2f} of what it dealt with)"
        )


def _read(url: str) -> dict[str, float]:
    found = samples(url, timeout=10.0)
    read = {name: total(found, metric) for name, metric, _ in COLUMNS}
    # the runs its loader marked MISSED where they waited PENDING (the pace's signal), not
    # the fires of the gaps its planner recorded (easyjob_misfires_total counts both)
    read["missed/s"] = sum(
        value
        for (sample, labels), value in found.items()
        if sample == "easyjob_db_rows_written_by_write_total"
        and ("write", "miss_pending") in labels
    )
    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="sqlite", help="sqlite, postgresql or a server URL")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--logs", type=Path, help="keep the nodes' logs in this folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pace-trace-") as scratch:
        folder = Path(scratch)
        databases = Databases(args.db, folder)
        try:
            nodes = args.logs or folder / "nodes"
            trace(databases.fresh(), args.nodes, args.tasks, args.duration, nodes)
        finally:
            databases.close()


if __name__ == "__main__":
    main()
