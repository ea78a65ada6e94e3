"""Node rows, heartbeats and liveness judged in database time."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from easyjob.core.admission import Catalog
from easyjob.core.states import NodeStatus
from easyjob.errors import NodeIdInUseError
from easyjob.store import Store
from easyjob.store.schema import node_table as n


def _register(store: Store, node: str, **kw: int) -> None:
    store.nodes.register(
        node,
        host="h",
        pid=os.getpid(),
        weight=kw.get("weight", 1),
        strategy="default",
        workers=2,
        clock_offset_ms=kw.get("offset", 0),
    )


def _age(store: Store, node: str, seconds: float) -> None:
    def write(conn: sa.Connection) -> None:
        (at,) = conn.execute(sa.select(n.c.heartbeat_at).where(n.c.node_id == node)).one()
        conn.execute(
            n.update()
            .where(n.c.node_id == node)
            .values(heartbeat_at=at - timedelta(seconds=seconds))
        )

    store.db.write("age", write)


def test_a_node_30s_off_is_live_by_database_time(store: Store) -> None:
    _register(store, "skewed", offset=30_000)
    beat = store.nodes.heartbeat("skewed", clock_offset_ms=30_000, claimed=5, completed=4)
    assert beat.accepted and not beat.revived
    now, live = store.nodes.live(timedelta(seconds=3))
    assert [(x.node_id, x.clock_offset_ms, x.claimed_count) for x in live] == [
        ("skewed", 30_000, 5)
    ]
    assert timedelta(0) <= live[0].age < timedelta(seconds=3)
    assert abs((beat.db_time - now).total_seconds()) < 3


def test_liveness_follows_heartbeat_age(store: Store) -> None:
    _register(store, "a")
    _register(store, "b")
    _age(store, "b", 10)
    _, live = store.nodes.live(timedelta(seconds=3))
    assert [x.node_id for x in live] == ["a"]
    _, everyone = store.nodes.all()
    ages = {x.node_id: x.age for x in everyone}
    assert timedelta(seconds=10) <= ages["b"] < timedelta(seconds=13)
    store.nodes.heartbeat("b", clock_offset_ms=0, claimed=0, completed=0)
    assert [x.node_id for x in store.nodes.live(timedelta(seconds=3))[1]] == ["a", "b"]


def test_members_are_the_live_nodes_and_the_dead_not_marked_yet(store: Store) -> None:
    """One read: the live RUNNING nodes, and the RUNNING or STOPPING ones silent for the
    threshold (those mark_dead marks); a STOPPED or DEAD row is neither."""
    for node in ("a", "stale", "stopping", "stale-stopping", "stopped", "dead"):
        _register(store, node)
    for node in ("stopping", "stale-stopping"):
        store.nodes.set_status(node, NodeStatus.STOPPING)
    store.nodes.set_status("stopped", NodeStatus.STOPPED)
    store.db.write(
        "dead",
        lambda conn: conn.execute(
            n.update().where(n.c.node_id == "dead").values(status=str(NodeStatus.DEAD))
        ),
    )
    for node in ("stale", "stale-stopping", "stopped", "dead"):
        _age(store, node, 10)
    members = store.nodes.members(timedelta(seconds=3))
    assert [x.node_id for x in members.live] == ["a"]
    assert members.stale == ["stale", "stale-stopping"]
    assert abs((members.db_time - store.now()).total_seconds()) < 3
    store.nodes.mark_dead(timedelta(seconds=3))
    assert store.nodes.members(timedelta(seconds=3)).stale == []


def test_dead_mark_and_revival(store: Store) -> None:
    _register(store, "a")
    _register(store, "fresh")
    _age(store, "a", 10)
    assert store.nodes.mark_dead(timedelta(seconds=3)) == 1  # idle or not, stale is dead
    assert [x.status for x in store.nodes.all()[1]] == [NodeStatus.DEAD, NodeStatus.RUNNING]
    assert store.nodes.mark_dead(timedelta(seconds=3)) == 0
    beat = store.nodes.heartbeat("a", clock_offset_ms=0, claimed=0, completed=0)
    assert beat.accepted and beat.revived
    assert store.nodes.all()[1][0].status == NodeStatus.RUNNING


def test_stopped_node_heartbeat_is_refused_and_id_can_be_reused(store: Store) -> None:
    _register(store, "a")
    store.nodes.set_status("a", NodeStatus.STOPPED)
    assert not store.nodes.heartbeat("a", clock_offset_ms=0, claimed=0, completed=0).accepted
    (row,) = store.nodes.all()[1]
    assert row.status == NodeStatus.STOPPED and row.stopped_at is not None
    _register(store, "a")
    (row,) = store.nodes.all()[1]
    assert (row.status, row.stopped_at) == (NodeStatus.RUNNING, None)


def test_a_live_node_id_cannot_be_taken_but_a_crashed_ones_can(store: Store) -> None:
    _register(store, "a")
    dead_after = timedelta(seconds=3)
    with pytest.raises(NodeIdInUseError, match="node id 'a' is in use by a live node"):
        store.nodes.register(
            "a", host="h2", pid=2, weight=1, strategy="default", workers=1, dead_after=dead_after
        )
    _age(store, "a", 10)
    store.nodes.register(
        "a", host="h2", pid=2, weight=1, strategy="default", workers=1, dead_after=dead_after
    )
    (row,) = store.nodes.all()[1]
    assert (row.host, row.status, row.age < dead_after) == ("h2", NodeStatus.RUNNING, True)


def test_a_heartbeat_writes_the_nodes_health_and_clears_it(store: Store) -> None:
    _register(store, "a")
    beat = {"clock_offset_ms": 0, "claimed": 0, "completed": 0}
    store.nodes.heartbeat("a", **beat, health="loop_failing: every step failed: loader" * 40)
    (row,) = store.nodes.all()[1]
    assert row.health is not None and row.health.startswith("loop_failing: every step failed")
    assert len(row.health) == 1000  # capped to the column
    store.nodes.heartbeat("a", **beat)
    assert store.nodes.all()[1][0].health is None


def test_a_node_publishes_its_catalog_once_per_distinct_code(store: Store) -> None:
    code = Catalog({"a": "app.jobs:a"}, frozenset({"app.jobs:report"}))
    for node in ("n1", "n2"):  # same code: one catalog row, named by both
        store.nodes.register(
            node, host="h", pid=1, weight=1, strategy="default", workers=1, catalog=code
        )
    rows = {n.node_id: n.catalog for n in store.nodes.all()[1]}
    assert rows == {"n1": code.digest, "n2": code.digest}
    assert store.nodes.catalogs([code.digest, "missing"]) == {code.digest: code}
    assert store.nodes.catalogs([]) == {}


_FAKETIME = next(
    (
        p
        for p in (
            "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
            "/usr/lib/faketime/libfaketime.so.1",
        )
        if Path(p).exists()
    ),
    None,
)
_HEARTBEAT = """
import sys
from datetime import datetime, UTC
from easyjob.store import Store
store = Store.open(sys.argv[1])
store.nodes.register("faked", host="h", pid=1, weight=1, strategy="default", workers=1)
beat = store.nodes.heartbeat("faked", clock_offset_ms=0, claimed=0, completed=0)
print((datetime.now(UTC) - beat.db_time).total_seconds())
"""


@pytest.mark.skipif(_FAKETIME is None and not os.environ.get("CI"), reason="libfaketime missing")
def test_a_process_whose_clock_is_30s_behind_stays_live(store: Store, db_url: str) -> None:
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite has no clock of its own: its 'now' is the calling process's clock")
    assert _FAKETIME is not None, "libfaketime is required in CI (make deps installs it)"
    env = {**os.environ, "LD_PRELOAD": _FAKETIME, "FAKETIME": "-30s"}
    out = subprocess.run(
        [sys.executable, "-c", _HEARTBEAT, db_url],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    skew = float(out.stdout.strip().splitlines()[-1])
    assert -40 < skew < -20  # the child's clock really was 30 s behind the database's
    _, live = store.nodes.live(timedelta(seconds=3))
    assert [x.node_id for x in live] == ["faked"]
