"""The rolling-upgrade rule (docs/deployment.md, Upgrading) with real node processes of two
releases on one database: nodes of the previous release keep running through ``easyjob
upgrade-db`` and beside the new release's nodes, every fire once; and a node accepts a newer
schema whose ``compatible_from`` allows it, and refuses one that does not.

The previous release is an export of :data:`PREVIOUS_RELEASE` from git, run with its own
``PYTHONPATH``: bump it to the last commit of the release before a schema change
(docs/architecture.md, Changing the schema).
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from easyjob.core.states import RunStatus
from easyjob.store import Store
from easyjob.store.schema import COMPATIBLE_FROM_VERSION, SCHEMA_VERSION
from tests.cluster.harness import FAST, JOBS, NodeProcess, duplicates, wait_until
from tests.cluster.test_cluster import expected_fires

pytestmark = pytest.mark.cluster

#: The last commit of schema version 6 (landed in stop 30), before version 7's addition.
PREVIOUS_RELEASE = "695be59"
ROOT = Path(__file__).resolve().parents[2]
TICKS = 5
NEXT = SCHEMA_VERSION + 1
WINDOW_S = 8


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's ``easyjob`` package, exported from git."""
    out = tmp_path_factory.mktemp("previous-release")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS_RELEASE, "easyjob"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def _env(tmp_path: Path, code: Path | None) -> dict[str, str]:
    """Node environment; *code* first on the path runs that release's easyjob (the
    processes start with ``python -P``: else the working directory, this checkout, would
    come first on the path and every "previous release" process would run this code)."""
    path = [str(code)] if code is not None else []
    return {
        **os.environ,
        "EASYJOB_TEST_LEDGER": str(tmp_path / "ledger.txt"),
        "EASYJOB_TEST_TICKS": str(TICKS),
        "PYTHONPATH": os.pathsep.join([*path, str(ROOT)]),
    }


def _easyjob(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "easyjob", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _node(node_id: str, db_url: str, env: dict[str, str], tmp_path: Path) -> NodeProcess:
    argv = [
        sys.executable,
        "-P",
        "-m",
        "easyjob",
        "run",
        JOBS,
        "--db",
        db_url,
        "--node-id",
        node_id,
    ]
    for key, value in FAST.items():
        argv += [f"--{key}", value]
    return NodeProcess(node_id, argv, env, tmp_path / f"{node_id}.log")


def _ledger(tmp_path: Path) -> list[tuple[str, str, str]]:
    path = tmp_path / "ledger.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(task, fire, node) for task, fire, node, *_ in (line.split(" ") for line in lines)]


def _every_fire_once(store: Store, nodes: list[NodeProcess], tmp_path: Path) -> dict[str, int]:
    """Wait for every tick fire of a window to succeed, stop the nodes, check that each ran
    once; returns the fires in the window each node ran."""
    wait_until("the nodes to run fires", lambda: _ledger(tmp_path), 60)
    start = store.now().replace(microsecond=0) + timedelta(seconds=2)
    end = start + timedelta(seconds=WINDOW_S - 1)
    window = {(f"tick-{i}", f) for i in range(TICKS) for f in expected_fires(start, end)}

    def done() -> bool:
        for node in nodes:
            assert node.alive, f"{node.node_id} exited:\n{node.log()[-3000:]}"
        runs = store.history.runs(status=RunStatus.SUCCESS, limit=1_000_000)
        return window <= {(r.task_name, r.fire_time) for r in runs}

    wait_until("every fire in the window to succeed", done, WINDOW_S + 60)
    for node in nodes:
        node.signal(15)
    for node in nodes:
        assert node.wait(60) == 0, node.log()[-3000:]
        assert "Traceback" not in node.log(), node.log()[-3000:]
    ledger = _ledger(tmp_path)
    assert duplicates([(task, fire) for task, fire, _ in ledger]) == {}
    shown = {(t, f.isoformat()): t for t, f in window}
    ran = [node for task, fire, node in ledger if (task, fire) in shown]
    assert len(ran) == len(window)
    return {node.node_id: ran.count(node.node_id) for node in nodes}


def _version_of(package: Path) -> int:
    """The schema version a release's code declares (its easyjob/store/schema.py)."""
    text = (package / "easyjob/store/schema.py").read_text()
    (line,) = [x for x in text.splitlines() if x.startswith("SCHEMA_VERSION = ")]
    return int(line.split("=")[1])


def test_previous_release_nodes_through_upgrade_db(
    db_url: str, tmp_path: Path, previous_release: Path
) -> None:
    """Additive migrations (COMPATIBLE_FROM_VERSION at most the previous release's version):
    its nodes keep running through upgrade-db and beside the new release's, every fire once.
    Otherwise: a short stop, and a previous-release node refuses the upgraded tables."""
    previous = _version_of(previous_release)
    old_env, new_env = _env(tmp_path, previous_release), _env(tmp_path, None)
    made = _easyjob(old_env, "init-db", "--db", db_url)
    assert made.returncode == 0, made.stderr
    old = _node("old-1", db_url, old_env, tmp_path)
    nodes, started = [old], [old]
    try:
        wait_until("the old node to run fires", lambda: _ledger(tmp_path), 60)
        if previous < COMPATIBLE_FROM_VERSION:
            nodes.remove(old)
            old.signal(15)
            assert old.wait(60) == 0
        upgraded = _easyjob(new_env, "upgrade-db", "--db", db_url)  # while the old node runs
        assert upgraded.returncode == 0, upgraded.stderr
        assert upgraded.stdout == (
            f"easyjob tables are schema version {SCHEMA_VERSION} already: nothing to upgrade\n"
            if previous == SCHEMA_VERSION
            else f"easyjob tables upgraded from schema version {previous} to {SCHEMA_VERSION}\n"
        )
        store = Store.open(db_url)
        try:
            with store.db.engine.connect() as conn:
                meta = dict(conn.execute(sa.text("SELECT name, value FROM easy_job_meta")).all())
            assert meta == {
                "schema_version": str(SCHEMA_VERSION),
                "compatible_from": str(COMPATIBLE_FROM_VERSION),
            }
            if previous < COMPATIBLE_FROM_VERSION:
                refused = _easyjob(old_env, "run", JOBS, "--db", db_url)
                assert refused.returncode == 3, refused.stderr
                return
            nodes.append(_node("new-1", db_url, new_env, tmp_path))
            started.append(nodes[-1])
            ran = _every_fire_once(store, nodes, tmp_path)
            assert ran["old-1"] > 0 and ran["new-1"] > 0, ran
        finally:
            store.close()
    finally:
        for node in started:
            node.close()


def _newer_schema(db_url: str, compatible_from: int) -> None:
    """What an additive migration to the next version does: a new table, a new column with
    a default, and the meta rows."""
    store = Store.open(db_url, create=True)
    try:
        with store.db.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE easy_job_future (id INTEGER PRIMARY KEY)")
            conn.exec_driver_sql(
                "ALTER TABLE easy_job_task ADD COLUMN future INTEGER DEFAULT 0 NOT NULL"
            )
            conn.exec_driver_sql(
                f"UPDATE easy_job_meta SET value = '{NEXT}' WHERE name = 'schema_version'"
            )
            conn.exec_driver_sql(
                f"UPDATE easy_job_meta SET value = '{compatible_from}' "
                "WHERE name = 'compatible_from'"
            )
    finally:
        store.close()


def test_nodes_run_on_a_newer_compatible_schema(db_url: str, tmp_path: Path) -> None:
    _newer_schema(db_url, compatible_from=SCHEMA_VERSION)
    env = _env(tmp_path, None)
    nodes = [_node(f"node-{i}", db_url, env, tmp_path) for i in range(2)]
    store = Store.open(db_url)
    try:
        ran = _every_fire_once(store, nodes, tmp_path)
        assert sum(ran.values()) == TICKS * WINDOW_S
        assert f"newer than this easyjob's {SCHEMA_VERSION} and compatible with it" in (
            nodes[0].log()
        )
    finally:
        store.close()
        for node in nodes:
            node.close()


def test_a_node_refuses_a_newer_schema_it_is_not_compatible_with(
    db_url: str, tmp_path: Path
) -> None:
    _newer_schema(db_url, compatible_from=NEXT)
    done = _easyjob(_env(tmp_path, None), "run", JOBS, "--db", db_url)
    assert done.returncode == 3
    assert done.stderr.splitlines()[-1].endswith(
        f"are schema version '{NEXT}', this easyjob needs version {SCHEMA_VERSION}, and version "
        f"{NEXT} runs only code of version {NEXT} or later (its compatible_from): upgrade "
        "easyjob on this host"
    )
