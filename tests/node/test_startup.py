"""Start-up does not wait for the catalogue (issue 25, goal 2): a node runs the tasks already
stored while its registration of the rest is held back."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

from easyjob import FakeClock, scheduled
from easyjob.core.states import RunStatus
from easyjob.node.node import SYNC_TASKS
from easyjob.registry import Registry
from easyjob.store import Store
from tests.node.conftest import START, Rig

_CATALOGUE = 2 * SYNC_TASKS  # registered in the background


def ready(ctx: object) -> None:
    """The task stored before the node starts (every second)."""


def idle(ctx: object) -> None:
    """The catalogue's other tasks (never due during the test)."""


def _registry() -> Registry:
    registry = Registry()
    scheduled("* * * * * *", name="ready", registry=registry)(ready)
    for i in range(_CATALOGUE):
        scheduled("0 0 1 1 *", name=f"idle-{i}", registry=registry)(idle)
    return registry


def test_a_node_runs_a_stored_task_while_its_catalogue_is_not_registered(tmp_path: Path) -> None:
    registry = _registry()
    first = Store.open(f"sqlite:///{tmp_path / 'node.db'}", create=True, clock=FakeClock(START))
    first.tasks.register([spec for spec in registry.resolved() if spec.name == "ready"])
    first.close()

    rig = Rig(tmp_path, registry, background=True)  # its registrar is not started: held back
    rig.run_for(3)

    assert rig.statuses("ready").get(RunStatus.SUCCESS, 0) >= 2
    assert [task.name for task in rig.store.tasks.all()] == ["ready"]
    assert not rig.node.wait_registered(0)
    rig.node.registrar.register()
    assert rig.node.wait_registered(0)
    assert len(rig.store.tasks.all()) == _CATALOGUE + 1
    assert rig.node.registrar.written == _CATALOGUE  # "ready" was stored unchanged


def test_a_restarted_node_writes_no_task_row_of_its_unchanged_catalogue(tmp_path: Path) -> None:
    registry = _registry()
    Rig(tmp_path, registry, node_id="n1").store.close()  # registers all, in its thread
    rig = Rig(tmp_path, registry, node_id="n2")
    assert rig.node.wait_registered(0)
    assert rig.node.registrar.written == 0
    assert rig.store.counters().get("rows_written.easy_job_task", 0) == 0


def test_a_registration_refused_in_the_background_stops_the_node(tmp_path: Path) -> None:
    registry = _registry()
    scheduled("* * * * * *", name="taken", registry=registry)(ready)
    first = Store.open(f"sqlite:///{tmp_path / 'node.db'}", create=True, clock=FakeClock(START))
    first.schedules.add("taken", "tests.node.test_startup:idle", every="1m")
    first.close()
    rig = Rig(tmp_path, registry, background=True)
    rig.node.registrar.start()
    assert rig.node.registrar.wait(60)
    assert not rig.node.wait_registered(0)
    assert "'taken' exists as a schedule added at run time" in str(rig.node.registrar.error)
    assert rig.store.tasks.get("taken").origin == "runtime"


def test_a_small_catalogue_is_registered_before_the_node_runs(tmp_path: Path) -> None:
    registry = Registry()
    for i in range(SYNC_TASKS):
        scheduled("0 0 1 1 *", name=f"idle-{i}", registry=registry)(idle)
    rig = Rig(tmp_path, registry, background=True)
    assert rig.node.wait_registered(0)
    assert len(rig.store.tasks.all()) == SYNC_TASKS


def test_a_task_registered_in_the_background_is_planned_at_once_not_a_poll_later(
    tmp_path: Path,
) -> None:
    """The planner is woken as each chunk of the catalogue is stored: a first start's tasks
    waited for its next poll (4 nodes x 6,000 tasks on SQLite: their first fires written 1.1
    s after the first tasks were). Here the poll is an hour: the planner's thread takes its
    first round (nothing registered yet), then the registration."""
    rig = Rig(tmp_path, _registry(), background=True, poll=3600.0)
    planner = rig.node.planner
    stepped = threading.Event()
    planner.progress = lambda name, ok: stepped.set()
    planner.start()
    try:
        assert stepped.wait(60)
        stepped.clear()
        rig.node.registrar.register()
        assert stepped.wait(60), "the planner was not woken by the registration"
        assert rig.store.runs.pending(START + timedelta(hours=1), 100, set())
    finally:
        planner.stop(60)
