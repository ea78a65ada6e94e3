"""A node restarted after an outage (issue 25): how much it runs in its first seconds back.

One ``easyjob run`` node on a fresh SQLite file, N tasks every second (default 500), runs
``--up`` seconds (it writes fires ahead), is stopped for ``--down`` seconds, and runs again
``--after`` seconds. Prints the runs that succeeded before and after the outage, the rows by
status, and whether the restarted node's planner said it was behind (paced). With ``--a``
and ``--b`` (checkouts or exports), each way in turn.

Usage::

    python -m tests.perf.outage_restart --tasks 500
    python -m tests.perf.outage_restart --tasks 500 --a /tmp/exp/A --b .
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.perf.startup_cost import _seen, write_jobs


def _succeeded(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        query = "SELECT count(*) FROM easy_job_task_detail WHERE status = 'SUCCESS'"
        return int(conn.execute(query).fetchone()[0])


def _run(
    env: dict[str, str], cwd: str, url: str, module: str, seconds: float, log: Path
) -> tuple[float, float]:
    """Run a node *seconds*; returns its first run's time after its spawn and after its log
    said it started (nan: none)."""
    command = [sys.executable, "-P", "-m", "easyjob", "run", module, "--db", url]
    with log.open("w") as out:
        spawned = time.time()
        proc = subprocess.Popen([*command, "--log-level", "INFO"], env=env, cwd=cwd, stderr=out)
        time.sleep(seconds)
        proc.terminate()
        proc.wait(timeout=60)
    mark = Path(env["STARTUP_MARKS"]) / str(proc.pid)
    first = float(mark.read_text()) - spawned if mark.exists() else float("nan")
    return first, first - _seen(log, spawned, True).get("started", float("nan"))


def trial(label: str, tree: str, tasks: int, up: float, down: float, after: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        module = write_jobs(folder, tasks, tasks)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join((tree, tmp)), "STARTUP_MARKS": tmp}
        db = folder / "outage.db"
        url = f"sqlite:///{db}"
        init = [sys.executable, "-P", "-m", "easyjob", "init-db", "--db", url]
        subprocess.run(init, env=env, cwd=tmp, check=True, capture_output=True)
        _run(env, tmp, url, module, up, folder / "before.log")
        before = _succeeded(db)
        time.sleep(down)
        first, after_start = _run(env, tmp, url, module, after, folder / "after.log")
        ran = _succeeded(db) - before
        with sqlite3.connect(db) as conn:
            query = "SELECT status, count(*) FROM easy_job_task_detail GROUP BY status"
            rows = dict(conn.execute(query).fetchall())
        paced = "planner: the cluster misses" in (folder / "after.log").read_text()
        print(
            f"{label}: {tasks} tasks: {before} runs in {up:g} s before, {ran} in the {after:g} s "
            f"after {down:g} s down (at most {tasks * after:.0f}); paced after: {paced}; "
            f"rows {rows}; first run back {first:.2f} s after spawn, {after_start:.2f} s after "
            "its start",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--up", type=float, default=10.0)
    parser.add_argument("--down", type=float, default=15.0)
    parser.add_argument("--after", type=float, default=8.0)
    parser.add_argument("--a", help="a checkout or export to measure (with --b)")
    parser.add_argument("--b", help="the other checkout or export")
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parents[2])
    trees = {"A": args.a, "B": args.b} if args.a and args.b else {"this": here}
    for label, tree in trees.items():
        trial(label, str(Path(tree).resolve()), args.tasks, args.up, args.down, args.after)


if __name__ == "__main__":
    main()
