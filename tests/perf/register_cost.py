"""What registering a large catalogue costs (issue 25, goals 2 and 6): ``TaskStore.register``
of N tasks on a fresh database (a first start: every row inserted) and again (a restart:
every row read, none written), on SQLite and the test rig's PostgreSQL, in fresh processes.
Wall seconds and the process's CPU seconds (the PostgreSQL server's work is in the wall
time only). With ``--a``/``--b`` (checkouts or exports), each way alternately.

Usage::

    python -m tests.perf.register_cost --tasks 100000
    python -m tests.perf.register_cost --tasks 100000 --a /tmp/exp/A --b . --rounds 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.perf.startup_cost import write_jobs
from tests.rig.servers import PostgresServer

#: Run in a fresh process whose easyjob is the checkout measured: import the job module
#: (its decorations fill the default registry), then register its specs once.
_REGISTER = """
import sys, time
from easyjob.registry import default_registry
from easyjob.store import Database, Store
__import__(sys.argv[2])
specs = [r.spec for r in default_registry.tasks().values()]
store = Store(Database.open(sys.argv[1]))
wall, cpu = time.perf_counter(), time.process_time()
written = store.tasks.register(specs)
print(f"{len(specs)} {written} {time.perf_counter() - wall:.2f} {time.process_time() - cpu:.2f}")
"""


def _fresh_sqlite(folder: Path, label: str) -> str:
    path = folder / f"{label}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return f"sqlite:///{path}"


def measure(trees: dict[str, str], tasks: int, rounds: int) -> None:
    pg = PostgresServer()
    pg.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            module = write_jobs(folder, tasks, 1)
            print("| way | database | start | tasks | written | wall s | CPU s |")
            print("|---|---|---|---|---|---|---|")
            for _ in range(rounds):
                for label, tree in trees.items():
                    path = os.pathsep.join((tree, str(folder)))
                    env = {**os.environ, "PYTHONPATH": path}
                    for db in ("sqlite", "postgresql"):
                        if db == "sqlite":
                            url = _fresh_sqlite(folder, label)
                        else:
                            name = f"register_{label.lower()}"
                            pg.drop_database(name)
                            url = pg.create_database(name)
                        subprocess.run(
                            [sys.executable, "-P", "-m", "easyjob", "init-db", "--db", url],
                            env=env,
                            cwd=tmp,
                            capture_output=True,
                            check=True,
                        )
                        for start in ("first start", "restart"):
                            out = subprocess.run(
                                [sys.executable, "-P", "-c", _REGISTER, url, module],
                                env=env,
                                cwd=tmp,
                                capture_output=True,
                                text=True,
                                check=True,
                            )
                            count, written, wall, cpu = out.stdout.split()
                            print(
                                f"| {label} | {db} | {start} | {count} | {written} | {wall} "
                                f"| {cpu} |",
                                flush=True,
                            )
    finally:
        pg.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--a", help="a checkout or export to measure (with --b)")
    parser.add_argument("--b", help="the other checkout or export")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parents[2])
    trees = {"A": args.a, "B": args.b} if args.a and args.b else {"this": here}
    measure({k: str(Path(v).resolve()) for k, v in trees.items()}, args.tasks, args.rounds)


if __name__ == "__main__":
    main()
