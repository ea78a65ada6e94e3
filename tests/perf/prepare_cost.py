"""PostgreSQL server CPU per run of the store's hot path (plan a fire, read pending, claim,
start, finish), prepared statements off (easyjob's default) against on (psycopg's default
threshold, ``?prepare_threshold=5``), in alternating trials.

CPU time of the backends serving the trial (from /proc: the database must run on this host),
not wall time, so other processes on a busy machine move the figures little.

Usage: ``python -m tests.perf.prepare_cost APP_URL ADMIN_URL [ROUNDS] [RUNS]``: APP_URL is a
database of its own (tables created, tasks ``t0``..``t9`` registered); ADMIN_URL may read
``pg_stat_activity``.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from easyjob.core.records import Run
from easyjob.store import Store
from tests.store.conftest import make_pending

_TICK = os.sysconf("SC_CLK_TCK")
_FIRES = 20


def _backends(admin: str, database: str) -> dict[int, float]:
    """CPU seconds so far of every backend connected to *database*, by pid."""
    url = make_url(admin).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as conn:
        sql = "SELECT pid FROM pg_stat_activity WHERE datname = %s"
        pids = [row[0] for row in conn.execute(sql, [database])]
    cpu = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICK
    return cpu


def trial(url: str, admin: str, runs: int) -> tuple[float, float]:
    """(server CPU ms, client CPU ms) per run of *runs* runs through one connection."""
    store = Store.open(url, create=True, pool_size=1)
    database = str(make_url(url).database)
    done = 0
    before, client = _backends(admin, database), time.process_time()
    for i in range(runs // _FIRES):
        ids = set(make_pending(store, f"t{i % 10}", fires=_FIRES))
        horizon = store.now() + timedelta(days=1)
        pending = [c for c in store.runs.pending(horizon, 1000) if c.id in ids]
        for run in store.runs.claim("node-a", pending):
            started = store.runs.start(run)
            assert isinstance(started, Run), started
            store.runs.finish(started)
            done += 1
    client = time.process_time() - client
    after = _backends(admin, database)
    store.close()
    server = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
    return server * 1000 / done, client * 1000 / done


def main(argv: list[str]) -> int:
    url, admin = argv[0], argv[1]
    rounds = int(argv[2]) if len(argv) > 2 else 3
    runs = int(argv[3]) if len(argv) > 3 else 2000
    joiner = "&" if "?" in url else "?"
    for round_ in range(1, rounds + 1):
        for label, variant in (
            ("off (default)", url),
            ("on (threshold 5)", url + joiner + "prepare_threshold=5"),
        ):
            server, client = trial(variant, admin, runs)
            figures = f"server {server:.3f} ms/run  client {client:.3f} ms/run"
            print(f"round {round_} {label:17s} {figures}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
