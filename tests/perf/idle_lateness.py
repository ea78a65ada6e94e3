"""Start lateness of an idle node on every database (issue 25, goal 5: p99 at most 10 ms).

One ``easyjob bench --nodes 1 --tasks 10 --duration 60 --no-probe`` trial (defaults; change
them after ``--``) on a fresh SQLite file, and on a PostgreSQL and a MariaDB server of the
test rig's own (``tests/rig``: loopback, a free port, stopped at the end), one after the
other; prints each trial's start lateness (p50, p95, p99, max), rows and CPU per run.

Usage::

    python -m tests.perf.idle_lateness
    python -m tests.perf.idle_lateness --db sqlite postgresql -- --tasks 10 --duration 30
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.rig.servers import DatabaseServer, MariaDBServer, PostgresServer

SERVERS: dict[str, type[DatabaseServer]] = {
    "postgresql": PostgresServer,
    "mariadb": MariaDBServer,
}
BENCH = ["--nodes", "1", "--tasks", "10", "--duration", "60", "--no-probe"]


@contextmanager
def database(kind: str, scratch: Path) -> Iterator[str]:
    """The URL of a fresh database of *kind*, its server stopped afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{scratch / 'idle.db'}"
        return
    server = SERVERS[kind]()
    server.start()
    try:
        yield server.create_database("idle_lateness")
    finally:
        server.close()


def trial(url: str, bench: list[str]) -> dict[str, Any]:
    """One ``easyjob bench`` trial on *url*: its JSON's first trial."""
    argv = [sys.executable, "-m", "easyjob", "bench", "--db", url, *bench, "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout)["trials"][0]
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", nargs="+", default=["sqlite", *SERVERS], choices=["sqlite", *SERVERS]
    )
    parser.add_argument("bench", nargs="*", help="easyjob bench options (after --)")
    args = parser.parse_args(argv)
    print("database    p50 ms  p95 ms  p99 ms  max ms  rows/run  CPU ms/run")
    for kind in args.db:
        with tempfile.TemporaryDirectory() as tmp, database(kind, Path(tmp)) as url:
            found = trial(url, args.bench or BENCH)
        late = found["lateness_ms"]
        print(
            f"{kind:10} {late['p50']:7.1f} {late['p95']:7.1f} {late['p99']:7.1f} "
            f"{late['max']:7.1f} {found['rows_per_run']:9.2f} "
            f"{found['window_cpu_ms_per_run']:11.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
