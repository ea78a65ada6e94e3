"""Triggers inside the caller's own transaction, with real node processes on each
database: a run whose caller rolls back never runs, even while due and polled for; one whose
caller commits runs once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

import easyjob
from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster

JOBS = str(Path(__file__).with_name("transaction_jobs.py"))


def test_a_rolled_back_trigger_never_runs_and_a_committed_one_runs_once(
    db_url: str, tmp_path: Path
) -> None:
    connect_args = {"prepare_threshold": None} if db_url.startswith("postgresql") else {}
    app = sa.create_engine(db_url, connect_args=connect_args)  # the application's engine
    with Cluster(db_url, tmp_path, jobs=JOBS) as cluster:
        cluster.start("node-0")
        cluster.start("node-1")
        cluster.wait_live()

        def ran(order: str) -> bool:
            return any(e.event == order for e in cluster.ledger())

        def trigger(order: str, conn: sa.Connection | None = None) -> int:
            kwargs = {"order": order}
            return easyjob.trigger(cluster.store, "ordered", kwargs=kwargs, connection=conn)

        with app.connect() as conn:
            conn.begin()
            trigger("rolled-back", conn)
            if app.dialect.name != "sqlite":  # on SQLite the caller holds the write lock
                # due now and uncommitted: the nodes poll past it and run a later trigger
                trigger("probe-1")
                wait_until("the later trigger to run", lambda: ran("probe-1"), 30)
                assert not ran("rolled-back")
            conn.rollback()
        with app.begin() as conn:
            committed = trigger("committed", conn)
        wait_until("the committed trigger to run", lambda: ran("committed"), 30)
        trigger("probe-2")
        wait_until("a trigger after it to run", lambda: ran("probe-2"), 30)
        cluster.stop_all()

        events = Counter(e.event for e in cluster.ledger())
        assert events["committed"] == 1 and events["rolled-back"] == 0
        orders = [(r.kwargs or {}).get("order") for r in cluster.runs("ordered")]
        assert "rolled-back" not in orders and orders.count("committed") == 1
        (row,) = [r for r in cluster.runs("ordered") if r.id == committed]
        assert row.status == RunStatus.SUCCESS
    app.dispose()
