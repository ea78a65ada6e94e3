"""Database time as a node bounds it (``Liveness.db_now``), anchored by its heartbeat, on
each real database server."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import sqlalchemy as sa

from easyjob import NodeConfig
from easyjob.clock import SystemClock
from easyjob.node.heartbeat import Heartbeater
from easyjob.node.liveness import Liveness
from easyjob.node.membership import Membership
from easyjob.store import Store
from easyjob.store.schema import node_table

SLOW_WRITE_S = 0.2


def test_database_time_is_anchored_by_a_read_not_by_the_heartbeat_write(store: Store) -> None:
    """The heartbeat write reads the database time, then updates the node row and commits:
    an anchor taken from it trailed the server by the update and commit (~3 ms on
    PostgreSQL and MariaDB, here made 200 ms), and so did every start. The bound comes from
    a read of its own, after the write."""
    if store.db.backend.local_clock:
        pytest.skip("sqlite: database time is the node's own clock")
    config = NodeConfig(node_id="beating")
    store.nodes.register(
        "beating", host="here", pid=1, weight=1, strategy="default", workers=config.workers
    )

    def slow_update(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().startswith(f"UPDATE {node_table.name}"):
            time.sleep(SLOW_WRITE_S)  # after the write read the time, before it commits

    sa.event.listen(store.db.engine, "after_cursor_execute", slow_update)
    clock = SystemClock()
    liveness = Liveness(clock, config.heartbeat, config.dead_threshold)
    log = logging.LoggerAdapter(logging.getLogger("test"), {})
    beats = Heartbeater(store, config, clock, liveness, Membership(), lambda: (0, 0, 0), log)
    beats.step()
    sa.event.remove(store.db.engine, "after_cursor_execute", slow_update)
    bound, actual = liveness.db_now(), store.now()
    assert bound <= actual  # a lower bound
    assert (actual - bound).total_seconds() < SLOW_WRITE_S / 2, actual - bound
