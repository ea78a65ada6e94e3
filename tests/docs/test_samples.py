"""Every Python sample and every `easyjob ...` command in the docs runs.

Python blocks are executed as modules (their tasks go to a fresh registry). Shell blocks:
each line that starts with ``easyjob`` runs through ``main()`` against a SQLite database
holding the quickstart's tasks (any ``--db`` is pointed there); ``easyjob run`` starts a real
node process, waits until it is live, and stops it with SIGTERM. Other shell lines (pip,
sqlite3) and configuration files are not commands of ours.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import pytest

from easyjob.cli import main
from easyjob.core.admission import Catalog
from easyjob.loading import load_jobs
from easyjob.registry import default_registry
from easyjob.store import Store
from tests.cluster.harness import wait_until
from tests.rig.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def blocks(lang: str) -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for i, match in enumerate(BLOCK.finditer(doc.read_text())):
            if match.group(1) == lang:
                found.append((f"{doc.name}#{i}", match.group(2)))
    return found


#: docs/embedding.md's mounting samples start a node and configure a framework when imported.
MOUNTED = ('"""flask_app.py:', '"""wsgi.py:', '"""fastapi_app.py:')

QUICKSTART = next(code for name, code in blocks("python") if name.startswith("quickstart"))


@pytest.fixture
def clean_registry() -> Iterator[None]:
    default_registry.clear()
    yield
    default_registry.clear()


@pytest.mark.parametrize(("where", "code"), blocks("python"), ids=[n for n, _ in blocks("python")])
def test_python_samples_run(where: str, code: str, clean_registry: None) -> None:
    if code.startswith(MOUNTED):
        pytest.skip("a mounting sample: tests/docs/test_mounting.py runs it in its own process")
    namespace = {"__name__": "docs_sample"}
    exec(compile(code, where, "exec"), namespace)
    if "@scheduled" in code:
        assert len(default_registry) > 0
        default_registry.resolved()


def _commands() -> list[tuple[str, str]]:
    commands = []
    for where, code in blocks("sh"):
        for line in code.splitlines():
            if line.startswith("easyjob ") or line.startswith(".venv/bin/easyjob "):
                commands.append((where, line.removeprefix(".venv/bin/")))
    return commands


DOCS_NODE = "docs-node"


@pytest.fixture
def docs_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_registry: None) -> str:
    (tmp_path / "jobs.py").write_text(QUICKSTART)
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path}/easyjob.db"
    monkeypatch.setenv("EASYJOB_DB", url)
    load_jobs(["jobs.py"])  # the quickstart's tasks, as a node registers them
    store = Store.open(url, create=True)
    # a node runs them (as in the quickstart): `easyjob trigger` then exits 0; its code also
    # allows the function of the runtime schedule below (@runnable)
    specs = default_registry.resolved()
    catalog = Catalog({spec.name: spec.func for spec in specs}, frozenset({"jobs:nightly_report"}))
    store.nodes.register(
        DOCS_NODE, host="docs", pid=1, weight=1, strategy="default", workers=1, catalog=catalog
    )
    store.tasks.upsert(specs)
    # docs/cli.md's trigger and schedule samples: a task added at run time
    store.schedules.add("reports", "jobs:nightly_report", every="1h", accepts=["day"])
    # docs/cli.md's and policies.md's calendar samples: the days they remove or list
    store.calendars.add("holidays", date(2030, 12, 24), date(2030, 12, 26), "Christmas")
    store.close()
    default_registry.clear()
    return url


def _point_at(argv: list[str], url: str) -> list[str]:
    out = []
    args = iter(argv)
    for arg in args:
        if arg == "--db":
            next(args)
            out += ["--db", url]
        else:
            out.append(f"--db={url}" if arg.startswith("--db=") else arg)
    return out


@pytest.mark.parametrize(("where", "line"), _commands(), ids=[f"{w}:{c}" for w, c in _commands()])
def test_cli_samples_run(
    where: str,
    line: str,
    docs_db: str,
    clean_registry: None,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    argv = _point_at(shlex.split(line)[1:], docs_db)
    if argv[0] in ("run", "dashboard") and "--http" in argv:  # a free port, not the docs' one
        argv[argv.index("--http") + 1] = f"127.0.0.1:{free_port()}"
    if argv[0] == "dashboard":
        _serve(argv, "/")
        return
    if argv[0] == "run":
        _run_a_node(argv, docs_db)
        return
    if argv[0] == "cancel":  # the docs' run id stands for a run of this database
        store = Store.open(docs_db)
        try:
            argv[1] = str(store.tasks.trigger(store.tasks.all()[0].name))
        finally:
            store.close()
    if argv[0] == "bench":  # a database of its own, and a trial small enough for a test
        bench_db = f"sqlite:///{tmp_path}/bench.db"
        if "--claim-mode skip_locked" in line:  # PostgreSQL only: a real one
            server = request.getfixturevalue("postgres_server")
            bench_db = server.create_database(f"ej_docs_bench_{uuid.uuid4().hex[:8]}")
        argv = [
            *_point_at(argv, bench_db),
            "--nodes",
            "2",
            "--tasks",
            "3",
            "--duration",
            "2",
            "--max-tasks",
            "6",
            "--idle-tasks",
            "10",
            "--no-probe",
            "--workdir",
            str(tmp_path / "bench"),
        ]
    assert main(argv) == 0, f"{where}: `{line}` failed"


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


def _serve(argv: list[str], path: str) -> None:
    """Start a serving command (``dashboard``), wait for *path* to answer 200, SIGTERM it."""
    url = f"http://{argv[argv.index('--http') + 1]}{path}"
    with Path("serve.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "easyjob", *argv], stdout=log, stderr=subprocess.STDOUT
        )
        try:
            wait_until(
                f"{url} to answer 200", lambda: proc.poll() is not None or _status(url) == 200, 30
            )
            assert proc.poll() is None, Path("serve.log").read_text()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _run_a_node(argv: list[str], url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EASYJOB_HEARTBEAT": "0.2", "EASYJOB_POLL": "0.1"}
    store = Store.open(url)
    with Path("node.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "easyjob", *argv], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            wait_until(
                "the node to be live",
                lambda: (
                    proc.poll() is not None
                    or [
                        n
                        for n in store.nodes.live(timedelta(seconds=5))[1]
                        if n.node_id != DOCS_NODE
                    ]
                ),
                30,
            )
            assert proc.poll() is None, Path("node.log").read_text()
            if "--http" in argv:
                url = f"http://{argv[argv.index('--http') + 1]}/healthz"
                wait_until("/healthz to answer 200", lambda: _status(url) == 200, 30)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            store.close()
