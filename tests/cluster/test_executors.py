"""The same job matrix under each executor, with real node processes: what the database
records (status, result, error, traceback, shards) is the same on a thread and in a child
process; a task declared ``executor="process"`` runs in a child on a thread node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster

MATRIX = ("m_sync", "m_async", "m_value", "m_raises", "m_sharded", "m_timeout")
ENDED = (RunStatus.SUCCESS, RunStatus.FAILED)


def _recorded(cluster: Cluster, since: int) -> dict[tuple[str, int], tuple[Any, ...]]:
    """What the database says of each matrix run with an id above *since*, by (task, shard):
    the parts that do not depend on the node (ids, times and file paths left out)."""
    rows = [r for r in cluster.runs() if r.id > since and r.task_name in MATRIX]
    found = {}
    for row in rows:
        tb = row.traceback or ""
        found[(row.task_name, row.shard)] = (
            row.status,
            row.attempt,
            row.shards,
            row.error_msg,
            tb.splitlines()[-1] if tb else None,
            f"in {row.task_name}" in tb,
            {k: v for k, v in row.result.items() if k != "fire"} if row.result else row.result,
        )
    return found


def _run_matrix(cluster: Cluster, executor: str) -> dict[tuple[str, int], tuple[Any, ...]]:
    since = max((r.id for r in cluster.runs()), default=0)
    node = cluster.start_with(f"node-{executor}", {"executor": executor})
    cluster.wait_live(node.node_id)
    for task in MATRIX:
        cluster.store.tasks.trigger(task)

    def ended() -> bool:
        runs = [r for r in cluster.runs() if r.id > since and r.task_name in MATRIX]
        return len(runs) == len(MATRIX) + 2 and all(r.status in ENDED for r in runs)

    wait_until(f"the matrix to end under the {executor} executor", ended, 30)
    found = _recorded(cluster, since)
    node.signal(__import__("signal").SIGTERM)
    assert node.wait(20) == 0, node.log()[-3000:]
    return found


def test_every_executor_records_the_same_matrix(db_url: str, tmp_path: Path) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("the executor is the node's: the database does not matter here")
    with Cluster(db_url, tmp_path, env={"EASYJOB_TEST_MATRIX": "1"}) as cluster:
        on_threads = _run_matrix(cluster, "thread")
        in_children = _run_matrix(cluster, "process")
    assert in_children == on_threads
    assert on_threads == {
        ("m_sync", 0): (RunStatus.SUCCESS, 1, 1, None, None, False, None),
        ("m_async", 0): (
            RunStatus.SUCCESS,
            1,
            1,
            None,
            None,
            False,
            {"awaited": True, "attempt": 1},
        ),
        ("m_value", 0): (RunStatus.SUCCESS, 1, 1, None, None, False, {"n": 7, "task": "m_value"}),
        ("m_raises", 0): (
            RunStatus.FAILED,
            1,
            1,
            "ValueError: matrix failure of m_raises",
            "ValueError: matrix failure of m_raises",
            True,
            None,
        ),
        **{
            ("m_sharded", shard): (
                RunStatus.SUCCESS,
                1,
                3,
                None,
                None,
                False,
                {"shard": shard, "shards": 3},
            )
            for shard in range(3)
        },
        ("m_timeout", 0): (RunStatus.FAILED, 1, 1, "timed out after 0.5s", None, False, None),
    }
    ledger = [(e.task, e.event) for e in cluster.ledger() if e.task == "m_sharded"]
    assert sorted(ledger) == sorted(2 * [("m_sharded", f"shard-{i}-of-3") for i in range(3)])


def test_a_task_declared_process_runs_in_a_child_on_a_thread_node(
    db_url: str, tmp_path: Path
) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("the executor is the node's: the database does not matter here")
    with Cluster(db_url, tmp_path, ticks=1, env={"EASYJOB_TEST_MATRIX": "1"}) as cluster:
        node = cluster.start("node-0")  # the default executor: thread
        cluster.wait_live()
        cluster.store.tasks.trigger("m_kills")
        (run,) = wait_until(
            "m_kills to fail",
            lambda: [r for r in cluster.runs("m_kills") if r.status == RunStatus.FAILED],
            30,
        )
        assert run.error_msg == "its process exited with code 3 before the job returned"
        ticks = len([e for e in cluster.ledger() if e.task == "tick-0"])
        wait_until(
            "ticks after",
            lambda: len([e for e in cluster.ledger() if e.task == "tick-0"]) > ticks + 2,
            10,
        )
        assert node.alive
