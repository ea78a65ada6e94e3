"""Peer benchmark: easyjob, APScheduler 4 and APScheduler 3.11 in one run, on one database.

Usage (from the repository root, with the project's virtualenv)::

    python -m tests.perf.peers.run_peers --db-backend postgresql --schedules 200 1000 \\
        --duration 20 --json

For each schedule count M, one after another and each on a fresh database (or SQLite file) of
the same backend: easyjob (``easyjob_trial``: the ``easyjob bench`` trial with
``--easyjob-nodes`` nodes, default 4; skipped with ``--no-easyjob``), then each peer. One table
follows (``report.compare``): easyjob's figures beside each peer's, the ratio of the sustained
rates and issue 5's targets; ``--json`` prints ``{"easyjob": [...], "peers": [...]}`` on stdout
and the table on stderr.

Each peer runs in its own virtualenv under a cache directory (default ``.perf-venvs/`` in the
repository root, or ``$EASYJOB_PEERS_VENVS``, or ``--venv-dir``), created on first use with pip
from the package index and reused while its requirements are unchanged. Nothing here is a
runtime dependency of easyjob: the peers are installed only into those virtualenvs.

- ``apscheduler4``: ``apscheduler==4.0.0a6`` (with ``anyio==4.9.0``: with a newer anyio no job
  runs) and TWO schedulers (processes) sharing one ``SQLAlchemyDataStore``.
- ``apscheduler3``: ``apscheduler==3.11.3`` (or the newest 3.11.x if that is not available) in
  ONE process with an ``SQLAlchemyJobStore``: APScheduler 3 cannot share a job store.

Huey, whose periodic tasks fire at most once a minute, is the peer of ``run_burst`` (minute
bursts) instead, with the same virtualenvs (``ensure_venv``).

Both register M no-op jobs firing every second, all on the same second (easyjob's
``* * * * * *``), and every execution appends a line to a ledger (``peerjob.py``). The figures
are computed from the ledger alone (``ledger.py``) over the steady-state window: the fires
scheduled in the ``--duration`` minus ``--warmup`` whole seconds (default 20 - 5 = 15) that
begin at the first whole second ``--warmup`` seconds after the peer's processes were launched.
The peer keeps running until ``--drain`` seconds (default 3, as easyjob's trial) past the
window's last fire second so that late fires of the window can still start; a fire of the
window that has not started by then counts as missed (so does a fire folded into a later one by
the peer's coalescing). ``runs`` counts the fires of the window that ran, each once, and
``runs_per_s`` is that over the window's seconds, for easyjob and the peers alike. CPU is
measured per process (``cpu_s``: the whole life of the process; ``cpu_window_s``: during the
window, from ``/proc/PID/stat``), and for a database server this script started, the server's
CPU during the window (``db_cpu_window_s``).

With ``--db-backend postgresql|mariadb`` the server is started here (``tests.rig.servers``) and
each run gets a fresh database; ``sqlite`` uses a fresh file per run; ``--db URL`` uses an
existing database for every run (the peers' setup steps clear their own tables first, and
easyjob's trial clears the easyjob tables).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from tests.cluster.harness import sleep_until
from tests.perf.peers.cpu import proc_cpu, tree_cpu
from tests.perf.peers.easyjob_trial import SETTLE_S, run_easyjob
from tests.perf.peers.ledger import analyze_file
from tests.perf.peers.report import compare, failed, format_table

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[2]
DEFAULT_VENV_DIR = REPO_ROOT / ".perf-venvs"
VENV_DIR_ENV = "EASYJOB_PEERS_VENVS"
BACKENDS = ("sqlite", "postgresql", "mariadb")
SETUP_TIMEOUT = 600.0
STOP_GRACE = 20.0
DRIVERS = ("psycopg[binary]", "pymysql")


@dataclass(frozen=True)
class Peer:
    name: str
    venv: str
    worker: str
    processes: int
    #: Alternative requirement sets, tried in order until one installs.
    requirements: tuple[tuple[str, ...], ...]

    @property
    def label(self) -> str:
        return f"{self.name} ({self.processes} proc)"


PEERS: dict[str, Peer] = {
    "apscheduler4": Peer(
        name="apscheduler4",
        venv="apscheduler4",
        worker="worker_aps4.py",
        processes=2,
        # sqlalchemy[asyncio]: 4.0.0a6 imports sqlalchemy.ext.asyncio, which needs greenlet
        # (SQLAlchemy 2.1 no longer installs greenlet by itself).
        requirements=(("apscheduler==4.0.0a6", "anyio==4.9.0", "sqlalchemy[asyncio]", *DRIVERS),),
    ),
    "apscheduler3": Peer(
        name="apscheduler3",
        venv="apscheduler3",
        worker="worker_aps3.py",
        processes=1,
        requirements=(
            ("apscheduler==3.11.3", "sqlalchemy", *DRIVERS),
            ("apscheduler==3.11.*", "sqlalchemy", *DRIVERS),
        ),
    ),
}
ALIASES = {"aps4": "apscheduler4", "aps3": "apscheduler3"}


def _say(message: str) -> None:
    print(f"peers: {message}", file=sys.stderr, flush=True)


# -- virtualenvs ---------------------------------------------------------------------------


def venv_dir() -> Path:
    return Path(os.environ.get(VENV_DIR_ENV) or DEFAULT_VENV_DIR)


def ensure_venv(peer: Peer, cache_dir: Path | None = None) -> Path:
    """The Python of ``peer``'s virtualenv, created (or recreated) and installed if needed."""
    cache = (cache_dir or venv_dir()).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    home = cache / peer.venv
    python = home / "bin" / "python"
    stamp = home / ".easyjob-peer.json"
    with (cache / f".{peer.venv}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be installing the same venv
        try:
            done = json.loads(stamp.read_text())
        except (OSError, ValueError):
            done = None
        wanted = [list(reqs) for reqs in peer.requirements]
        if done and done.get("requirements") in wanted and python.exists():
            return python
        errors = []
        for reqs in peer.requirements:
            shutil.rmtree(home, ignore_errors=True)
            _say(f"creating {home} with {' '.join(reqs)} (first use: this takes a while)")
            subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
            install = subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *reqs],
                capture_output=True,
                text=True,
                check=False,
            )
            if install.returncode == 0:
                stamp.write_text(json.dumps({"requirements": list(reqs)}))
                return python
            errors.append(f"{' '.join(reqs)}:\n{install.stderr[-2000:]}")
        shutil.rmtree(home, ignore_errors=True)
        raise RuntimeError(f"cannot install {peer.name}:\n" + "\n".join(errors))


# -- databases -----------------------------------------------------------------------------


class Databases:
    """Hands out one fresh database URL per peer run for a backend, or a given URL."""

    def __init__(self, backend: str | None, url: str | None, workdir: Path) -> None:
        if url:
            backend = backend or _backend_of(url)
        if backend not in BACKENDS:
            raise SystemExit(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
        self.backend = backend
        self.url = url
        self.workdir = workdir
        self.server: Any = None
        self._count = 0

    def __enter__(self) -> Databases:
        if self.url is None and self.backend != "sqlite":
            from tests.rig.servers import MariaDBServer, PostgresServer

            cls = PostgresServer if self.backend == "postgresql" else MariaDBServer
            why = cls.missing()
            if why:
                raise SystemExit(f"cannot start {self.backend}: {why}")
            _say(f"starting a {self.backend} server")
            self.server = cls()
            try:
                self.server.start()
            except BaseException:
                self.server.close()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def new(self, label: str) -> str:
        if self.url:
            return self.url
        self._count += 1
        name = f"peer_{label}_{os.getpid()}_{self._count}"
        if self.backend == "sqlite":
            return f"sqlite:///{self.workdir / (name + '.db')}"
        url: str = self.server.create_database(name)
        return url

    def server_pid(self) -> int | None:
        if self.server is not None and self.server.running:
            pid: int = self.server.pid
            return pid
        return None


def _backend_of(url: str) -> str:
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    return {"postgres": "postgresql", "mysql": "mariadb"}.get(scheme, scheme)


# -- one peer run --------------------------------------------------------------------------


def _wait_all(procs: Sequence[subprocess.Popen[bytes]], deadline: float) -> dict[int, float]:
    """Reap the processes (SIGKILL after ``deadline``); CPU seconds of each, from wait4."""
    cpu: dict[int, float] = {}
    pending = {p.pid: p for p in procs if p.returncode is None}
    while pending:
        for pid, proc in list(pending.items()):
            try:
                got, status, usage = os.wait4(pid, os.WNOHANG)
            except ChildProcessError:
                pending.pop(pid)
                continue
            if got:
                proc.returncode = os.waitstatus_to_exitcode(status)
                cpu[pid] = usage.ru_utime + usage.ru_stime
                pending.pop(pid)
        if pending and time.time() > deadline:
            for pid in pending:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = math.inf
        if pending:
            time.sleep(0.05)
    return cpu


_EXCEPTION_LINE = re.compile(r"^[\s|+]*((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)\b.*)")


def _tail(path: Path, lines: int = 6) -> str:
    """The last exception line of a worker's log, else its last lines; shortened."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    found = [m.group(1) for m in map(_EXCEPTION_LINE.match, text.splitlines()) if m]
    picked = found[-1:] or text.strip().splitlines()[-lines:]
    return "\n".join(line[:400] for line in picked)


def run_peer(
    peer: Peer,
    python: Path,
    url: str,
    *,
    backend: str,
    schedules: int,
    duration: float,
    warmup: float = 5.0,
    drain: float = 3.0,
    workdir: Path,
    server_pid: int | None = None,
    aps4_broker: str = "auto",
    processes: int | None = None,
) -> dict[str, Any]:
    """Set up and run one peer, then measure it from its ledger. Never raises for a peer error."""
    nprocs = processes or peer.processes
    run_dir = Path(tempfile.mkdtemp(prefix=f"{peer.name}-", dir=workdir))
    ledger = run_dir / "ledger.txt"
    worker = str(HERE / peer.worker)
    base: dict[str, Any] = {
        "peer": peer.name,
        "backend": backend,
        "schedules": schedules,
        "processes": nprocs,
        "duration_s": duration,
    }
    extra = ["--broker", aps4_broker] if peer.name == "apscheduler4" else []
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)

    _say(f"{peer.name} on {backend}: adding {schedules} schedules")
    try:
        setup = subprocess.run(
            [str(python), worker, "setup", "--db", url, "--schedules", str(schedules)],
            capture_output=True,
            text=True,
            timeout=SETUP_TIMEOUT,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return failed(base, f"setup did not finish within {SETUP_TIMEOUT:.0f} s")
    if setup.returncode != 0:
        return failed(base, "setup failed:\n" + setup.stderr.strip()[-3000:])

    t0 = time.time()
    start = math.ceil(t0 + warmup)
    window = (start, start + math.floor(duration - warmup))
    stop_at = window[1] - 1 + drain  # drain seconds past the window's last fire second
    argv = [str(python), worker, "run", "--db", url, "--ledger", str(ledger)]
    argv += ["--stop-at", f"{stop_at:.3f}", *extra]
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for i in range(nprocs):
            out = run_dir / f"worker{i}.out"
            err = run_dir / f"worker{i}.err"
            logs.append((out, err))
            with out.open("wb") as fo, err.open("wb") as fe:
                procs.append(
                    subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe, env=env)
                )
        _say(
            f"{peer.name} on {backend}: {nprocs} process(es) running "
            f"{stop_at - t0:.0f} s (window {window[1] - window[0]} s)"
        )
        sleep_until(window[0], time.time)
        load0 = os.getloadavg()[0]
        cpu0 = {p.pid: proc_cpu(p.pid) for p in procs}
        db0 = tree_cpu(server_pid) if server_pid else None
        next_note = time.time() + 5
        while time.time() < window[1]:
            sleep_until(min(window[1], next_note), time.time)
            if time.time() >= next_note:
                next_note += 5
                _say(f"{peer.name}: {_count_lines(ledger)} runs so far, t={time.time() - t0:.0f}s")
        cpu1 = {p.pid: proc_cpu(p.pid) for p in procs}
        db1 = tree_cpu(server_pid) if server_pid else None
        load1 = os.getloadavg()[0]
        cpu_total = _wait_all(procs, stop_at + STOP_GRACE)
    finally:
        for p in procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait()

    job_ids = [f"j{i}" for i in range(schedules)]
    stats = analyze_file(ledger, job_ids, *window)
    result = dict(base)
    result.update(stats.as_dict())
    result["cpu_s"] = [round(cpu_total.get(p.pid, 0.0), 2) for p in procs]
    result["cpu_window_s"] = [round(cpu1[p.pid] - cpu0[p.pid], 2) for p in procs]
    window_cpu = sum(result["cpu_window_s"])
    result["cpu_ms_per_run"] = round(1000 * window_cpu / stats.runs, 2) if stats.runs else None
    result["db_cpu_window_s"] = None if db0 is None or db1 is None else round(db1 - db0, 2)
    result["load_avg_1m"] = [round(load0, 2), round(load1, 2)]  # machine load: window start, end
    infos = []
    for p, (out, err) in zip(procs, logs, strict=True):
        info = _last_json(out)
        if info:
            infos.append(info)
        if p.returncode != 0:
            result.setdefault("errors", []).append(
                f"process {p.pid} exited with {p.returncode}:\n{_tail(err)}"
            )
        elif stats.runs == 0 and _tail(err):
            result.setdefault("errors", []).append(f"process {p.pid} log:\n{_tail(err)}")
    setup_info = _last_json_text(setup.stdout)
    setup_versions = setup_info.get("versions") if isinstance(setup_info, dict) else None
    result["versions"] = infos[0]["versions"] if infos else setup_versions
    if infos:
        result["settings"] = {k: v for k, v in infos[0].items() if k not in ("versions", "pid")}
    result["error"] = "\n".join(result.get("errors", [])) or None
    result.pop("errors", None)
    result["workdir"] = str(run_dir)
    return result


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0


def _last_json(path: Path) -> dict[str, Any] | None:
    try:
        found = _last_json_text(path.read_text(errors="replace"))
    except OSError:
        return None
    return found if isinstance(found, dict) else None


def _last_json_text(text: str) -> Any:
    for line in reversed(text.strip().splitlines()):
        with contextlib.suppress(ValueError):
            return json.loads(line)
    return None


# -- the whole benchmark -------------------------------------------------------------------


@dataclass(frozen=True)
class EasyjobSide:
    """How easyjob runs beside the peers: ``easyjob bench``'s trial with these settings."""

    nodes: int = 4
    #: Worker threads per node; ``None``: the nodes' default (easyjob runs at default
    #: settings unless told otherwise).
    workers: int | None = None
    strategy: str = "default"
    claim_mode: str = "optimistic"

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"easyjob needs at least one node, not {self.nodes!r}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"easyjob needs at least one worker per node, not {self.workers!r}")


def window_notes(duration: float, warmup: float, drain: float) -> list[str]:
    """Footnotes saying how the window was measured, and where easyjob's trial differs."""
    seconds = math.floor(duration - warmup)
    notes = [
        f"window: the fires of {seconds} whole seconds, from {warmup:g} s after start; a fire"
        f" counts if it started before the stop, {drain:g} s after the window's last second"
        " (a peer's once its job started, easyjob's once its success was recorded)",
        "start: a peer's clock starts when its processes are launched (schedules stored"
        " beforehand); easyjob's once all its nodes are live (they register their tasks at"
        " start) and its start-up backlog has cleared (no fire overdue by more than 2 s)",
        "lateness: peers from their ledger (this machine's clock), easyjob from start_time -"
        " fire_time (database time; the database runs on this machine)",
        "cpu ms/run: the scheduler processes' CPU during the window per run;"
        " db cpu s: the database server's CPU during the window (none for SQLite: in-process)",
    ]
    if drain != SETTLE_S:
        notes.append(f"NOT ALIGNED: easyjob's trial stops {SETTLE_S:g} s after it (fixed)")
    return notes


def run(
    *,
    backend: str | None = None,
    db: str | None = None,
    schedules: Sequence[int] = (10,),
    duration: float = 20.0,
    peers: Sequence[str] = tuple(PEERS),
    warmup: float = 5.0,
    drain: float = 3.0,
    cache_dir: Path | None = None,
    aps4_broker: str = "auto",
    aps4_processes: int | None = None,
    keep: bool = False,
    easyjob: EasyjobSide | None = None,
) -> list[dict[str, Any]]:
    """Run easyjob (if given) and each peer for each schedule count, one after another, each
    on a fresh database; the per-run reports (easyjob's have ``peer`` ``"easyjob"``)."""
    if duration <= warmup:
        raise ValueError(f"duration ({duration} s) must exceed the warm-up ({warmup} s)")
    chosen = [PEERS[ALIASES.get(name, name)] for name in peers]
    pythons: dict[str, Path | str] = {}
    for peer in chosen:
        try:
            pythons[peer.name] = ensure_venv(peer, cache_dir)
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            pythons[peer.name] = f"no virtualenv: {exc}"  # reported as this peer's error
    workdir = Path(tempfile.mkdtemp(prefix="easyjob-peers-"))
    results = []
    try:
        with Databases(backend, db, workdir) as dbs:
            for m in schedules:
                if easyjob is not None:
                    results.append(
                        run_easyjob(
                            dbs.new("easyjob"),
                            backend=dbs.backend,
                            schedules=m,
                            duration=duration,
                            warmup=warmup,
                            nodes=easyjob.nodes,
                            workers=easyjob.workers,
                            strategy=easyjob.strategy,
                            claim_mode=easyjob.claim_mode,
                            workdir=workdir,
                            server_pid=dbs.server_pid(),
                        )
                    )
                for peer in chosen:
                    procs = aps4_processes if peer.name == "apscheduler4" else None
                    python = pythons[peer.name]
                    if isinstance(python, str):
                        base = {"peer": peer.name, "backend": dbs.backend, "schedules": m}
                        results.append(failed(base, python))
                        continue
                    results.append(
                        run_peer(
                            peer,
                            python,
                            dbs.new(peer.venv),
                            backend=dbs.backend,
                            schedules=m,
                            duration=duration,
                            warmup=warmup,
                            drain=drain,
                            workdir=workdir,
                            server_pid=dbs.server_pid(),
                            aps4_broker=aps4_broker,
                            processes=procs,
                        )
                    )
    finally:
        if keep:
            _say(f"kept ledgers and logs under {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
            for result in results:
                result.pop("workdir", None)
    return results


# -- command line --------------------------------------------------------------------------


def _interrupt(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.perf.peers.run_peers",
        description="Run easyjob's bench trial, APScheduler 4 and APScheduler 3.11 with the same "
        "schedules and measurements on the same database backend (each peer in its own "
        "virtualenv) and print one table with the ratios.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--db-backend", choices=BACKENDS, help="start this database here")
    where.add_argument("--db", metavar="URL", help="use this (SQLAlchemy URL) database")
    parser.add_argument("--schedules", type=int, nargs="+", default=[10], metavar="M")
    parser.add_argument("--duration", type=float, default=20.0, metavar="S")
    parser.add_argument("--warmup", type=float, default=5.0, metavar="S")
    parser.add_argument("--drain", type=float, default=3.0, metavar="S")
    parser.add_argument(
        "--peers", default=",".join(PEERS), help="comma-separated: apscheduler4,apscheduler3"
    )
    parser.add_argument(
        "--aps4-broker",
        choices=["auto", "local", "psycopg"],
        default="auto",
        help="APScheduler 4's event broker (auto: psycopg on PostgreSQL, else local)",
    )
    parser.add_argument(
        "--aps4-processes", type=int, default=None, help="APScheduler 4 schedulers (default 2)"
    )
    parser.add_argument(
        "--venv-dir", type=Path, default=None, help=f"default ${VENV_DIR_ENV} or .perf-venvs/"
    )
    parser.add_argument(
        "--no-easyjob",
        dest="easyjob",
        action="store_false",
        help="run the peers only (and print their table without ratios)",
    )
    parser.add_argument("--easyjob-nodes", type=int, default=4, metavar="N", help="default 4")
    parser.add_argument(
        "--easyjob-workers",
        type=int,
        default=None,
        metavar="N",
        help="worker threads per node (default: the nodes' default setting)",
    )
    parser.add_argument("--easyjob-strategy", default="default", help="default: default")
    parser.add_argument(
        "--easyjob-claim-mode",
        default="optimistic",
        choices=["optimistic", "skip_locked"],
        help="default: optimistic (skip_locked: PostgreSQL only)",
    )
    parser.add_argument("--keep", action="store_true", help="keep ledgers and worker logs")
    parser.add_argument("--json", action="store_true", help="JSON on stdout, table on stderr")
    args = parser.parse_args(argv)
    peers = [name.strip() for name in args.peers.split(",") if name.strip()]
    for name in peers:
        if ALIASES.get(name, name) not in PEERS:
            parser.error(f"unknown peer {name!r}: use {', '.join(PEERS)}")
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)  # clean up servers and workers
    try:
        side = EasyjobSide(
            args.easyjob_nodes, args.easyjob_workers, args.easyjob_strategy, args.easyjob_claim_mode
        )
        results = run(
            backend=args.db_backend,
            db=args.db,
            schedules=args.schedules,
            duration=args.duration,
            peers=peers,
            warmup=args.warmup,
            drain=args.drain,
            cache_dir=args.venv_dir,
            aps4_broker=args.aps4_broker,
            aps4_processes=args.aps4_processes,
            keep=args.keep,
            easyjob=side if args.easyjob else None,
        )
    except ValueError as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:
        _say("interrupted: workers and database server stopped")
        return 130
    ours = [r for r in results if r["peer"] == "easyjob"]
    theirs = [r for r in results if r["peer"] != "easyjob"]
    if ours:
        notes = window_notes(args.duration, args.warmup, args.drain)
        table = compare(ours, theirs, notes)
    else:
        table = format_table(theirs)
    if args.json:
        print(table, file=sys.stderr)
        print(json.dumps({"easyjob": ours, "peers": theirs}, indent=2))
    else:
        print(table)
    return 1 if any(r.get("error") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
