"""CPU of one ``easyjob`` command line call: ``--version``, ``--help`` and ``trigger`` (on a
SQLite file with one task), each run *N* times as a child process; the median of the child's
user + system CPU (``resource.getrusage(RUSAGE_CHILDREN)`` before and after each run).

Usage: ``python -m tests.perf.cli_cost [N] [EASYJOB]`` (default 15 runs; EASYJOB, the console
script, default the one beside this interpreter).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from easyjob.core.records import TaskSpec
from easyjob.store import Store
from tests.perf.startup_cost import BYTECODE_ENV


def cpu_of(argv: list[str]) -> float:
    """User + system CPU seconds of running *argv* to its end (its exit code is not judged:
    a trigger with no live node exits 5). The calls may write and read bytecode, as an
    installed easyjob's do (:data:`~tests.perf.startup_cost.BYTECODE_ENV`): with
    ``PYTHONDONTWRITEBYTECODE`` set, a checkout without ``.pyc`` files compiled every module
    at every call (``trigger`` 0.86-0.94 s of CPU, against 0.68 s, 2026-11-28)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=BYTECODE_ENV
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str]) -> int:
    runs = int(argv[0]) if argv else 15
    script = argv[1] if len(argv) > 1 else str(Path(sys.executable).with_name("easyjob"))
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{os.path.join(tmp, 'cli.db')}"
        store = Store.open(url, create=True)
        store.tasks.upsert([TaskSpec("hello", "tests.jobs:noop", cron="0 0 1 1 *")])
        store.close()
        for name, args in (
            ("--version", ["--version"]),
            ("--help", ["--help"]),
            ("trigger", ["trigger", "hello", "--db", url]),
        ):
            cpu_of([script, *args])  # a first call writes the bytecode it lacks
            spent = sorted(cpu_of([script, *args]) for _ in range(runs))
            print(
                f"easyjob {name}: median {statistics.median(spent):.3f} s CPU, "
                f"min {spent[0]:.3f}, max {spent[-1]:.3f} over {runs} runs"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
