"""``easyjob bench`` of two checkouts, alternating, in one session: CPU per run, before and after.

Each trial runs ``python -P -m easyjob bench ... --json`` with ``PYTHONPATH`` set to one
checkout (``-P``: the working directory is not put first on the path, so the checkout named
is the code that runs, in the bench and in its node processes), on a fresh database of its
own, the checkouts taking turns (A B, then B A, ...; with ``--also`` more checkouts C, D ...
to bisect, each round starting one further along) so that a machine whose load drifts moves
all alike. Printed per trial, and as medians per checkout: runs/s, missed fires, p99
lateness, claim races lost, the nodes' CPU per run (over the window, and over the nodes'
life), statements per run, and on PostgreSQL the server's CPU per run and its committed
transactions per run (from ``pg_stat_database``, over the trial's life: a statement run
outside a transaction is one).

Usage::

    python -m tests.perf.bench_ab --a /work/wt/base --b . --db sqlite --rounds 3
    python -m tests.perf.bench_ab --a /work/wt/base --b . --db postgresql --rounds 3

``--db postgresql`` starts a PostgreSQL of its own on a free port (tests/rig) and stops it at
the end; any other value than ``sqlite`` is a server URL whose user may create databases.
The bench's own options follow ``--`` (default ``--nodes 4 --tasks 300 --duration 15
--no-probe``). ``make bench-ab BASE=DIR`` runs both databases.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

DEFAULT_BENCH = ["--nodes", "4", "--tasks", "300", "--duration", "15", "--no-probe"]
_FIGURES = (
    ("runs/s", "runs_per_s", 1),
    ("missed", "missed", 0),
    ("p99 ms", "p99", 0),
    ("lost", "claims_lost", 0),
    ("node ms/run", "window_cpu_ms_per_run", 3),
    ("life ms/run", "cpu_ms_per_run", 3),
    ("st/run", "window_statements_per_run", 3),
    ("db ms/run", "db_cpu_ms_per_run", 3),
    ("xact/run", "xact_per_run", 3),
    ("rows/run", "rows_per_run", 2),
    ("run rows", "run_rows_per_run", 2),
    ("task rows", "task_rows_per_run", 2),
    ("missed after insert/run", "after_insert_per_run", 2),
)


def _psycopg_url(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Databases:
    """A fresh database per trial: a SQLite file, or a PostgreSQL database."""

    def __init__(self, db: str, scratch: Path) -> None:
        self._db, self._scratch, self._count = db, scratch, 0
        self._server: Any = None
        self._admin: str | None = None
        if db == "postgresql":
            from tests.rig.servers import PostgresServer

            self._server = PostgresServer()
            self._server.start()
            self._admin = self._server.admin_url
        elif db != "sqlite":
            self._admin = db

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    def fresh(self) -> str:
        self._count += 1
        name = f"ab_{os.getpid()}_{self._count}"
        if self._admin is None:
            return f"sqlite:///{self._scratch / (name + '.db')}"
        if self._server is not None:
            return str(self._server.create_database(name))
        with psycopg.connect(_psycopg_url(self._admin), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return str(make_url(self._admin).set(database=name))

    def xacts(self, url: str) -> int | None:
        """Transactions committed and rolled back in *url*'s database so far."""
        if self._admin is None:
            return None
        database = make_url(url).database
        with psycopg.connect(_psycopg_url(self._admin), autocommit=True) as conn:
            row = conn.execute(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                [database],
            ).fetchone()
        return None if row is None else int(row[0])

    def runs(self, url: str) -> int:
        """Runs finished in *url*'s database (the bench's rows, left after its trial)."""
        with psycopg.connect(_psycopg_url(url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM easy_job_task_detail WHERE status = 'SUCCESS'"
            ).fetchone()
        return int(row[0]) if row else 0


def trial(root: Path, url: str, bench: list[str], workdir: Path) -> dict[str, Any]:
    """One ``easyjob bench`` of the checkout at *root*; its first trial's figures."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    argv = [sys.executable, "-P", "-m", "easyjob", "bench", "--db", url, "--json"]
    argv += [*bench, "--workdir", str(workdir)]
    done = subprocess.run(
        argv, env=env, cwd=workdir.parent, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench failed ({done.returncode}): {done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout)["trials"][0]
    figures["p99"] = figures["lateness_ms"]["p99"]
    figures["after_insert_per_run"] = figures.get("missed_after_insert", 0) / max(
        1, figures.get("window_runs") or figures["runs"]
    )
    return figures


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="easyjob-bench-ab-") as path:
        yield Path(path)


def revision(root: Path) -> str:
    """*root*'s commit, and whether its files differ from it."""
    git = ["git", "-C", str(root)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    commit = head.stdout.strip() or "not a git checkout"
    return commit + (" with changes" if dirty.stdout.strip() else "")


def _row(label: str, figures: dict[str, Any]) -> str:
    cells = []
    for _, key, digits in _FIGURES:
        value = figures.get(key)
        cells.append("-" if value is None else f"{value:.{digits}f}")
    return f"| {label} | " + " | ".join(cells) + " |"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", type=Path, required=True, help="checkout A (the base)")
    parser.add_argument("--b", type=Path, default=Path("."), help="checkout B (this one)")
    parser.add_argument(
        "--also", type=Path, action="append", default=[], help="checkouts C, D ... (bisecting)"
    )
    parser.add_argument("--db", default="sqlite", help="sqlite, postgresql or a server URL")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("bench", nargs="*", help="easyjob bench options (after --)")
    args = parser.parse_args(argv)
    bench = args.bench or DEFAULT_BENCH
    paths = [args.a, args.b, *args.also]
    roots = {chr(ord("A") + i): path.resolve() for i, path in enumerate(paths)}
    for label, root in roots.items():
        print(f"{label} = {root} ({revision(root)})")
    print(f"easyjob bench {' '.join(bench)} on {args.db}")
    print("| trial | " + " | ".join(name for name, _, _ in _FIGURES) + " |")
    print("|---" * (len(_FIGURES) + 1) + "|")
    results: dict[str, list[dict[str, Any]]] = {label: [] for label in roots}
    with _scratch() as scratch:
        databases = Databases(args.db, scratch)
        try:
            for round_ in range(1, args.rounds + 1):
                # each round in another order: A B C, B C A, ... (two: A B, B A)
                labels = list(roots)
                shift = (round_ - 1) % len(labels)
                order = labels[shift:] + labels[:shift]
                for label in order:
                    url = databases.fresh()
                    before = databases.xacts(url)
                    started = time.monotonic()
                    figures = trial(roots[label], url, bench, scratch / f"wd-{label}")
                    if before is not None:
                        time.sleep(1.5)  # the server's statistics are flushed within a second
                        after = databases.xacts(url)
                        runs = databases.runs(url)
                        if after is not None and runs:
                            figures["xact_per_run"] = (after - before) / runs
                    results[label].append(figures)
                    took = time.monotonic() - started
                    print(_row(f"{label}{round_} ({took:.0f} s)", figures), flush=True)
                    kinds = figures.get("rows_per_run_by_kind")
                    if kinds:  # a checkout whose bench reports rows by kind of write
                        split = ", ".join(f"{k} {n:.2f}" for k, n in kinds.items())
                        print(f"|   rows/run by write: {split} |", flush=True)
        finally:
            databases.close()
    for label in roots:
        medians = {}
        for _, key, _ in _FIGURES:
            values = [f[key] for f in results[label] if f.get(key) is not None]
            medians[key] = statistics.median(values) if values else None
        print(_row(f"{label} median", medians))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
