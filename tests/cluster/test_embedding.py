"""A node embedded in a process: real threads, real time, a real SQLite file (see
docs/embedding.md). Run off the main thread, stopped from other threads, as a context
manager; started once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from easyjob import EasyJobError, Node, NodeConfig, Registry, Store, TaskDefinitionError, scheduled
from easyjob.core.states import NodeStatus, RunStatus
from tests.cluster.harness import wait_until


def noop() -> int:
    return 7


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store.open(f"sqlite:///{tmp_path}/embedded.db", create=True)
    yield store
    store.close()


def _node(store: Store, node_id: str = "app-1") -> Node:
    registry = Registry()
    scheduled("* * * * * *", name="every_second", registry=registry)(noop)
    config = NodeConfig(node_id=node_id, heartbeat=0.2, poll=0.2, shutdown_grace=5)
    return Node(store, config, registry=registry)


def _succeeded(store: Store) -> bool:
    return bool(store.history.runs(task="every_second", status=RunStatus.SUCCESS))


def _status(store: Store, node_id: str) -> NodeStatus:
    return next(n.status for n in store.nodes.all()[1] if n.node_id == node_id)


def test_run_works_off_the_main_thread_and_stops_when_told(store: Store) -> None:
    node = _node(store)
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            node.run()  # no signal handler off the main thread
        except BaseException as err:
            failures.append(err)

    thread = threading.Thread(target=serve, name="app-thread")
    thread.start()
    wait_until("a run to succeed", lambda: failures or _succeeded(store), 20)
    assert failures == []
    node.stop()
    thread.join(20)
    assert not thread.is_alive() and failures == []
    assert _status(store, "app-1") == NodeStatus.STOPPED
    (run,) = store.history.runs(task="every_second", status=RunStatus.SUCCESS, limit=1)
    assert run.result == 7


def test_signal_handlers_off_the_main_thread_are_refused(store: Store) -> None:
    node = _node(store)
    raised: list[BaseException] = []

    def serve() -> None:
        try:
            node.run(install_signals=True)
        except EasyJobError as err:
            raised.append(err)

    thread = threading.Thread(target=serve)
    thread.start()
    thread.join(20)
    assert [str(e) for e in raised] == [
        "Node.run(install_signals=True) must be called from the main thread: Python only "
        "delivers signals there (call run() or start()/stop() elsewhere)"
    ]
    assert store.nodes.all()[1] == []  # refused before anything was registered


def test_a_context_manager_starts_and_stops_the_node(store: Store) -> None:
    with _node(store) as node:
        assert _status(store, "app-1") == NodeStatus.RUNNING
        wait_until("a run to succeed", lambda: _succeeded(store), 20)
    assert _status(store, "app-1") == NodeStatus.STOPPED
    with pytest.raises(EasyJobError, match="node app-1 was started already; a node starts once"):
        node.start()


def test_stop_from_many_threads_at_once_stops_the_node_once(store: Store) -> None:
    node = _node(store)
    node.start()
    with pytest.raises(EasyJobError, match="was started already"):
        node.start()
    wait_until("a run to succeed", lambda: _succeeded(store), 20)
    go = threading.Barrier(4)
    returned: list[NodeStatus] = []

    def stop() -> None:
        go.wait()
        node.stop()
        returned.append(_status(store, "app-1"))  # every caller returns once it is stopped

    threads = [threading.Thread(target=stop) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert returned == [NodeStatus.STOPPED] * 4


def test_a_start_that_failed_leaves_the_registry_open_and_may_be_retried(store: Store) -> None:
    registry = Registry()
    scheduled(parent="missing", name="orphan", registry=registry)(noop)
    node = Node(store, NodeConfig(node_id="app-2"), registry=registry)
    for _ in range(2):  # the same error again, not "started already"
        with pytest.raises(TaskDefinitionError, match="unknown parent task 'missing'"):
            node.start()
    scheduled("* * * * * *", name="missing", registry=registry)(noop)  # not refused
    with node:
        assert _status(store, "app-2") == NodeStatus.RUNNING
    assert _status(store, "app-2") == NodeStatus.STOPPED
