"""Wall and CPU time per SQLite write transaction with easyjob's WAL settings (checkpoint
every 256 pages, WAL kept to 1 MiB) against SQLite's defaults (1,000 pages, no limit), in
alternating trials on a real file system.

Usage: ``python -m tests.perf.sqlite_checkpoint_cost [DIR] [ROUNDS] [WRITES]`` (DIR: where
the scratch databases go, default /var/tmp).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from unittest import mock

import sqlalchemy as sa

from easyjob.store.database import Database
from easyjob.store.dialects import sqlite

_SETTINGS = {"easyjob (256 pages, 1 MiB)": (256, 1 << 20), "SQLite defaults": (1000, -1)}


def trial(where: str, pages: int, limit: int, writes: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per transaction rewriting 4 rows of 512 bytes."""
    scratch = tempfile.mkdtemp(dir=where)
    with (
        mock.patch.object(sqlite, "WAL_AUTOCHECKPOINT_PAGES", pages),
        mock.patch.object(sqlite, "WAL_SIZE_LIMIT", limit),
    ):
        db = Database.open(f"sqlite:///{scratch}/cost.db")
        try:
            return _writes(db, writes)
        finally:
            db.dispose()
            shutil.rmtree(scratch, ignore_errors=True)


def _writes(db: Database, writes: int) -> tuple[float, float]:
    create = "CREATE TABLE churn (id INTEGER PRIMARY KEY, body TEXT)"
    db.write("create", lambda c: c.exec_driver_sql(create))
    insert = sa.text("INSERT INTO churn VALUES (:id, '')")
    db.write("rows", lambda c: c.execute(insert, [{"id": r} for r in range(4)]))
    update = sa.text("UPDATE churn SET body = :body WHERE id = :id")
    wall, cpu = time.monotonic(), time.process_time()
    for i in range(writes):
        rows = [{"body": f"{i:08d}" * 64, "id": r} for r in range(4)]
        db.write("churn", lambda c, rows=rows: c.execute(update, rows))
    return (time.monotonic() - wall) * 1000 / writes, (time.process_time() - cpu) * 1000 / writes


def main(argv: list[str]) -> int:
    where = argv[0] if argv else "/var/tmp"
    rounds = int(argv[1]) if len(argv) > 1 else 4
    writes = int(argv[2]) if len(argv) > 2 else 1500
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in _SETTINGS}
    for _ in range(rounds):
        for name, (pages, limit) in _SETTINGS.items():
            results[name].append(trial(where, pages, limit, writes))
    for name, figures in results.items():
        walls = ", ".join(f"{w:.2f}" for w, _ in figures)
        cpu = statistics.median(c for _, c in figures)
        wall = statistics.median(w for w, _ in figures)
        print(f"{name:27s} wall ms/write {walls} (median {wall:.2f}), CPU {cpu:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
