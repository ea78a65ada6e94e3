"""The bad-input table for `easyjob run`: each mistake gets a clear message naming it, exit
code 2 or 3, and leaves what the database already holds exactly as it was."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from easyjob.cli import main
from easyjob.core.records import TaskSpec
from easyjob.registry import default_registry
from easyjob.store import Store
from easyjob.store.schema import node_table, task_table

_names = itertools.count()

GOOD = "from easyjob import scheduled\n\n@scheduled('* * * * * *')\ndef ok():\n    pass\n"
CASES = [
    (
        "invalid cron",
        "@scheduled('61 * * * *')\ndef f(): pass",
        "invalid cron expression '61 * * * *': minute field '61' is out of range",
    ),
    (
        "unknown time zone",
        "@scheduled('@hourly', tz='Mars/Olympus')\ndef f(): pass",
        "unknown time zone 'Mars/Olympus'",
    ),
    (
        "unknown parent",
        "@scheduled(parent='nobody')\ndef f(): pass",
        "unknown parent task 'nobody'",
    ),
    (
        "cyclic parents",
        "@scheduled('@hourly', parent='g')\ndef f(): pass\n@scheduled(parent='f')\ndef g(): pass",
        "task parents form a cycle",
    ),
    (
        "a parent list that is not a list of tasks",
        "@scheduled(parent=['g', 3])\ndef f(): pass",
        "parent 3 in ['g', 3] is not a task name",
    ),
    (
        "unknown parent of a join",
        "@scheduled('@hourly')\ndef g(): pass\n@scheduled(parent=['g', 'nobody'])\ndef f(): pass",
        "unknown parent task 'nobody'",
    ),
    (
        "cyclic parents through a join",
        "@scheduled('@hourly')\ndef g(): pass\n@scheduled(parent=['g', 'h'])\ndef f(): pass\n"
        "@scheduled(parent='f')\ndef h(): pass",
        "task parents form a cycle",
    ),
    (
        "parents of a join on different schedules",
        "@scheduled('@hourly')\ndef g(): pass\n@scheduled('@daily')\ndef h(): pass\n"
        "@scheduled(parent=['g', 'h'])\ndef f(): pass",
        "its parents fire at different times",
    ),
    (
        "duplicate name",
        "@scheduled('@hourly', name='x')\ndef f(): pass\n"
        "@scheduled('@hourly', name='x')\ndef g(): pass",
        "duplicate task name 'x'",
    ),
    (
        "one function name defined twice in a module",
        "@scheduled('@hourly')\ndef a(): pass\n\n@scheduled('@daily')\ndef a(): pass",
        "is defined twice in ",
    ),
    (
        "non-JSON kwargs",
        "@scheduled('@hourly', kwargs={'n': {1, 2}})\ndef f(n): pass",
        "kwargs must be JSON",
    ),
    ("a module that fails to import", "import not_a_module_anywhere", "cannot import job module"),
]


@pytest.fixture
def existing(db_url: str) -> Iterator[tuple[Store, list[dict[str, object]]]]:
    store = Store.open(db_url, create=True)
    store.tasks.upsert([TaskSpec(name="kept", func="app:kept", cron="*/5 * * * * *")])
    yield store, _tasks(store)
    store.close()


def _tasks(store: Store) -> list[dict[str, object]]:
    def read(conn: sa.Connection) -> list[dict[str, object]]:
        return [dict(r) for r in conn.execute(sa.select(task_table)).mappings()]

    return store.db.read("tasks", read)


def _nodes(store: Store) -> int:
    query = sa.select(sa.func.count()).select_from(node_table)
    return int(store.db.read("nodes", lambda conn: conn.scalar(query)))


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    default_registry.clear()
    yield
    default_registry.clear()


def _module(tmp_path: Path, body: str) -> str:
    path = tmp_path / f"bad_jobs_{next(_names)}.py"
    path.write_text("from easyjob import scheduled\n" + body + "\n")
    return str(path)


@pytest.mark.parametrize(("case", "body", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_job_modules(
    case: str,
    body: str,
    message: str,
    existing: tuple[Store, list[dict[str, object]]],
    db_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, before = existing
    assert main(["run", _module(tmp_path, body), "--db", db_url]) == 2, case
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("easyjob: ") and message in last, last
    assert _tasks(store) == before
    assert _nodes(store) == 0


def _refused(
    existing: tuple[Store, list[dict[str, object]]],
    db_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
) -> str:
    """``easyjob run`` of a good job module with *flags*: exit 2, nothing stored or changed.
    Returns what it wrote to stderr."""
    store, before = existing
    path = tmp_path / f"good_jobs_flags_{next(_names)}.py"
    path.write_text(GOOD)
    assert main(["run", str(path), "--db", db_url, *flags]) == 2
    assert _tasks(store) == before and _nodes(store) == 0
    return capsys.readouterr().err


def test_unknown_strategy(
    existing: tuple[Store, list[dict[str, object]]],
    db_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = _refused(existing, db_url, tmp_path, capsys, ["--strategy", "fastest"])
    assert "unknown strategy 'fastest': use one of 'default', 'id_hash'" in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--claim-mode", "pessimistic"],
            "claim mode must be one of optimistic, skip_locked, got 'pessimistic'",
        ),
        (
            ["--claim-mode", "skip_locked", "--strategy", "id_hash"],
            "claim mode skip_locked hands runs out first come, first served and cannot follow "
            "strategy 'id_hash': use strategy 'default' or claim mode 'optimistic'",
        ),
    ],
    ids=["unknown", "with a strategy that picks"],
)
def test_bad_claim_mode(
    existing: tuple[Store, list[dict[str, object]]],
    db_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    message: str,
) -> None:
    assert message in _refused(existing, db_url, tmp_path, capsys, flags)


def test_skip_locked_off_postgresql(
    existing: tuple[Store, list[dict[str, object]]],
    db_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, _ = existing
    if store.skip_locked:
        pytest.skip(f"offered on {store.server}")
    err = _refused(existing, db_url, tmp_path, capsys, ["--claim-mode", "skip_locked"])
    name = store.server.split()[0]
    assert f"claim mode skip_locked is offered on PostgreSQL only, not on {name} " in err
    assert "use claim mode 'optimistic'" in err


def test_a_live_node_id_in_use(
    existing: tuple[Store, list[dict[str, object]]],
    db_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, _ = existing
    store.nodes.register("busy", host="h", pid=1, weight=1, strategy="default", workers=1)
    path = tmp_path / "good_jobs_busy.py"
    path.write_text(GOOD)
    argv = [
        "run",
        str(path),
        "--db",
        db_url,
        "--node-id",
        "busy",
        "--heartbeat",
        "0.5",
        "--dead-after",
        "2",
    ]
    # The other node keeps heartbeating (every 20 ms, 50 times inside the 1 s dead threshold,
    # so even a stalled beat or two keeps it fresh) while this one waits 1.5 s for it to go
    # stale, then gives up.
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.02):
            store.nodes.heartbeat("busy", clock_offset_ms=0, claimed=0, completed=0)

    beater = threading.Thread(target=beat)
    beater.start()
    try:
        assert main(argv) == 2
    finally:
        stop.set()
        beater.join()
    assert "node id 'busy' is in use by a live node" in capsys.readouterr().err
    (row,) = store.nodes.all()[1]
    assert (row.node_id, row.host) == ("busy", "h")
