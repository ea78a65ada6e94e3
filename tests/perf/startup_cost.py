"""Start-up cost of a large catalogue (issue 25, goals 2 and 6).

Three measurements, each in fresh processes:

- ``import N``: a generated job module of N ``@scheduled`` tasks: seconds to import it
  (its ``.pyc`` compiled beforehand) and the RSS it adds, per task.
- ``held URL N``: what a node holds per declared task, beyond the user's own function: the
  RSS of one ``easyjob run`` (restarted, its tasks registered) on a module of N ``@scheduled``
  tasks, less that of one on the same module with one task and N - 1 plain functions.
- ``first URL N [NODES] [EVERY]``: ``easyjob run`` of NODES nodes (1) on a job module of N
  tasks, of which EVERY (1) fire every second and the rest never during the trial: seconds
  from starting the processes to the first run of each node, the node's log line saying its
  tasks are registered, and each node's RSS then. Run twice on the same database: the first
  start registers every task, the second (``restart``) finds them all unchanged.

Usage::

    python -m tests.perf.startup_cost import 100000
    python -m tests.perf.startup_cost first sqlite:////tmp/s.db 100000
    python -m tests.perf.startup_cost first postgresql+psycopg://u:pw@127.0.0.1:5432/db 100000
    python -m tests.perf.startup_cost first sqlite:////tmp/s4.db 6000 4 6000
    python -m tests.perf.startup_cost held sqlite:////tmp/h.db 100000

The database must hold no other tasks; ``first`` deletes every easyjob row before its first
start (not before the restart). The nodes log at ``$STARTUP_LOG_LEVEL`` (default ``INFO``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

#: Every process here may write and read bytecode: a deployment imports its job modules from
#: their ``.pyc``, and compiling 100,000 functions from source costs seconds and ~4 KB each.
BYTECODE_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

LEVEL = os.environ.get("STARTUP_LOG_LEVEL", "INFO")

_JOB = """
def _first():
    path = os.path.join(_MARKS, str(os.getpid()))
    if not os.path.exists(path):
        with open(path, "w") as out:
            out.write(repr(time.time()))
"""


def write_jobs(folder: Path, tasks: int, every: int, *, plain: bool = False) -> str:
    """A job module of *tasks* module-level functions, the first *every* of them firing each
    second (each notes its process's first run in ``$STARTUP_MARKS``); returns its name.
    With *plain*, only those *every* are tasks: the rest are plain functions."""
    name = f"startup_jobs_{tasks}_{every}{'_plain' if plain else ''}"
    lines = [
        "import os, time",
        "from easyjob import scheduled",
        "_MARKS = os.environ.get('STARTUP_MARKS', '/tmp')",
        _JOB,
    ]
    for i in range(tasks):
        cron = "* * * * * *" if i < every else "0 0 1 1 *"
        body = "_first()" if i < every else "pass"
        decorator = "" if plain and i >= every else f'@scheduled("{cron}")\n'
        lines.append(f"{decorator}def t{i}(ctx):\n    {body}\n")
    (folder / f"{name}.py").write_text("\n".join(lines))
    subprocess.run(
        [sys.executable, "-c", f"import {name}"], cwd=folder, check=True, env=BYTECODE_ENV
    )
    return name


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def measure_import(tasks: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        name = write_jobs(Path(tmp), tasks, 0)
        code = (
            "import time, easyjob, os\n"
            "def rss():\n"
            "    return int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0]"
            ".split()[1])\n"
            "r0 = rss(); t0 = time.perf_counter(); c0 = time.process_time()\n"
            f"import {name}\n"
            "t1 = time.perf_counter(); c1 = time.process_time()\n"
            "print(f'{t1 - t0:.2f} {c1 - c0:.2f} {rss() - r0}')\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp,
            check=True,
            capture_output=True,
            text=True,
            env=BYTECODE_ENV,
        )
        seconds, cpu, kb = out.stdout.split()
        print(
            f"import of {tasks} tasks: {seconds} s ({cpu} s CPU), RSS +{int(kb) / 1024:.0f} MB "
            f"({int(kb) * 1024 / tasks:.0f} B per task)"
        )


def _init_db(url: str) -> None:
    """Create easyjob's tables at *url* if they are missing (``easyjob init-db``)."""
    subprocess.run(
        [sys.executable, "-m", "easyjob", "init-db", "--db", url], check=False, capture_output=True
    )


def _clear(url: str) -> None:
    engine = sa.create_engine(url)
    meta = sa.MetaData()
    meta.reflect(engine)
    with engine.begin() as conn:
        for table in reversed(meta.sorted_tables):
            if table.name.startswith("easy_job_") and table.name != "easy_job_schema":
                conn.execute(table.delete())
    engine.dispose()


def _seen(log: Path, began: float, later: bool) -> dict[str, float]:
    """Seconds from *began* to the node's log lines: ``started`` (its threads run) and
    ``registered`` (every task stored; before this change, registration preceded the start)."""
    seen: dict[str, float] = {}
    for line in log.read_text().splitlines():
        match = re.search(r"(\d\d):(\d\d):(\d\d)[.,](\d+)", line)
        kind = "started" if " started: " in line else "registered" if "registered " in line else ""
        if match and kind and kind not in seen:
            h, m, sec, frac = match.groups()
            day = time.strftime("%Y-%m-%d", time.gmtime(began))
            at = time.mktime(time.strptime(f"{day} {h}:{m}:{sec}", "%Y-%m-%d %H:%M:%S"))
            seen[kind] = at - time.timezone + float(f"0.{frac}") - began
    if "registered" not in seen and "started" in seen and not later:
        seen["registered"] = seen["started"]
    return seen


def _start(url: str, folder: Path, module: str, nodes: int, label: str) -> list[int]:
    """Start *nodes* nodes on *module* and print when each ran its first run, started and
    registered its tasks; returns their RSS (KB) then."""
    marks = folder / f"marks-{label}"
    marks.mkdir()
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    env = {**BYTECODE_ENV, "STARTUP_MARKS": str(marks), "PYTHONPATH": path}
    command = [sys.executable, "-m", "easyjob", "run", module, "--db", url, "--log-level", LEVEL]
    # whether the code measured registers after it starts (and logs when it is done)
    probe = "import importlib.util as u; print(bool(u.find_spec('easyjob.node.registrar')))"
    found = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=folder, capture_output=True, text=True
    )
    later = found.stdout.strip() == "True"
    began = time.time()
    logs = [folder / f"{label}-{i}.log" for i in range(nodes)]
    procs = [
        subprocess.Popen(command, env=env, cwd=folder, stderr=log.open("w"), text=True)
        for log in logs
    ]
    rss: dict[int, int] = {}
    firsts: dict[int, float] = {}
    deadline = began + 180
    try:
        while time.time() < deadline:
            firsts = {int(p.name): float(p.read_text() or 0) for p in marks.iterdir()}
            seen = [_seen(log, began, later) for log in logs]
            if all(p.pid in firsts for p in procs) and all(
                "registered" in s and s["registered"] > 0 for s in seen
            ):
                break
            if any(p.poll() is not None for p in procs):
                raise SystemExit(f"a node exited: {logs[0].read_text()[-2000:]}")
            time.sleep(0.05)
        time.sleep(0.5)
        firsts = {int(p.name): float(p.read_text() or 0) for p in marks.iterdir()}
        rss = {p.pid: _rss_kb(p.pid) for p in procs}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)
    for p, log in zip(procs, logs, strict=True):
        first = firsts.get(p.pid)
        seen = _seen(log, began, later)
        print(
            f"  {label}: node {p.pid}:",
            f"first run {first - began:.2f} s ({first - began - seen.get('started', 0):.2f} s "
            "after its start),"
            if first
            else "no run within 180 s,",
            f"started {seen.get('started', -1):.2f} s,",
            f"registered {seen.get('registered', -1):.2f} s,",
            f"RSS {rss.get(p.pid, 0) / 1024:.0f} MB",
        )
    return [rss.get(p.pid, 0) for p in procs]


def measure_first(url: str, tasks: int, nodes: int, every: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        module = write_jobs(folder, tasks, every)
        _init_db(url)
        _clear(url)
        print(f"{url.split(':')[0]}: {nodes} node(s) x {tasks} tasks, {every} firing each second")
        _start(url, folder, module, nodes, "first start")
        _start(url, folder, module, nodes, "restart")


def measure_held(url: str, tasks: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _init_db(url)
        held: dict[bool, int] = {}
        for plain in (False, True):
            module = write_jobs(folder, tasks, 1, plain=plain)
            _clear(url)
            label = "1 task and plain functions" if plain else "declared"
            print(f"{url.split(':')[0]}: 1 node, {tasks} functions, {label}")
            _start(url, folder, module, 1, f"first start {plain}")
            held[plain] = _start(url, folder, module, 1, f"restart {plain}")[0]
        per_task = (held[False] - held[True]) * 1024 / (tasks - 1)
        print(
            f"held per declared task (restarts' RSS {held[False] / 1024:.0f} MB against "
            f"{held[True] / 1024:.0f} MB): {per_task:.0f} B"
        )


def main(argv: list[str]) -> int:
    if argv[:1] == ["held"]:
        if int(argv[2]) < 2:
            raise SystemExit("held: N must be at least 2 (one task beside N - 1 functions)")
        measure_held(argv[1], int(argv[2]))
        return 0
    if argv[:1] == ["import"]:
        measure_import(int(argv[1]))
        return 0
    if argv[:1] == ["first"]:
        nodes = int(argv[3]) if len(argv) > 3 else 1
        every = int(argv[4]) if len(argv) > 4 else 1
        measure_first(argv[1], int(argv[2]), nodes, every)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
