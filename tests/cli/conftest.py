"""CLI fixtures: ``cli(...)`` runs ``main`` in-process; ``store`` is a fresh schema per backend."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from easyjob.cli import main
from easyjob.core.admission import Catalog
from easyjob.core.records import Run, TaskSpec
from easyjob.store import Store
from easyjob.store.schema import task_detail_table as d


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


Cli = Callable[..., Result]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """``cli("status", "--json")``: run ``main`` and return its exit code, stdout, stderr."""

    def run(*argv: str) -> Result:
        capsys.readouterr()
        code = main(list(argv))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """``main`` configures the root logger; give the next test the logging it had before."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)


YEARLY = "0 0 0 1 1 *"  # never due during a test: lag and due-ness come from aged rows only


def yearly(*names: str) -> list[TaskSpec]:
    return [TaskSpec(name=name, func="tests.jobs:noop", cron=YEARLY) for name in names]


def register(
    store: Store, node_id: str, *, offset_ms: int = 0, catalog: Catalog | None = None
) -> None:
    """A live node; with *catalog*, what its code declares (without, a node of an earlier
    release, which published none)."""
    store.nodes.register(
        node_id, host="host-a", pid=42, weight=1, strategy="default", workers=4, catalog=catalog
    )
    if offset_ms:
        store.nodes.heartbeat(node_id, clock_offset_ms=offset_ms, claimed=0, completed=0)


def start_manual_run(store: Store, task: str, node_id: str = "node-a") -> Run:
    """Trigger *task*, then claim and start that run on *node_id*: a RUNNING run."""
    run_id = store.tasks.trigger(task)
    horizon = store.now() + timedelta(days=1)
    candidates = [c for c in store.runs.pending(horizon, 1000) if c.id == run_id]
    (claimed,) = store.runs.claim(node_id, candidates)
    running = store.runs.start(claimed)
    assert isinstance(running, Run)
    return running


def age_runs(store: Store, run_ids: list[int], column: str, by: timedelta) -> None:
    """Move *column* of these runs *by* into the past (rows age; nothing sleeps)."""

    def write(conn: sa.Connection) -> None:
        rows = conn.execute(sa.select(d.c.id, d.c[column]).where(d.c.id.in_(run_ids))).all()
        for run_id, value in rows:
            conn.execute(d.update().where(d.c.id == run_id).values({column: value - by}))

    store.db.write("age_runs", write)
