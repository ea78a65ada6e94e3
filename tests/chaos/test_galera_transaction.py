"""A trigger inside the caller's transaction on a MariaDB Galera cluster: the store on one
member and the application's transaction on another are one database (see
tests/store/test_caller_transaction.py for the rules on each database). Galera is
installed by `make chaos` only, so this runs there."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from easyjob import control
from easyjob.core.records import TaskSpec
from easyjob.store import Store
from tests.cluster.harness import wait_until
from tests.conftest import FAST_RETRY
from tests.rig.galera import GaleraCluster
from tests.store.test_caller_transaction import FUNC, app_engine, runs

pytestmark = [pytest.mark.chaos, pytest.mark.slow_chaos]


def test_galera_members_are_one_database(galera_cluster: GaleraCluster) -> None:
    """The store on one member, the application's transaction on another."""
    first, second, _ = galera_cluster.create_database("shop")
    store = Store.open(first, create=True, retry=FAST_RETRY)
    store.tasks.upsert([TaskSpec(name="m", func=FUNC, accepts=("order",))])
    app = app_engine(second)

    def task_there() -> bool:  # the second member applies the first's commit a moment later
        with app.connect() as conn:
            return bool(conn.scalar(sa.text("SELECT count(*) FROM easy_job_task")))

    try:
        wait_until("the task on the second member", task_there, 10)
        with app.begin() as conn:
            run_id = control.trigger(store, "m", kwargs={"order": 1}, connection=conn)
        with app.connect() as conn:
            conn.begin()
            control.trigger(store, "m", kwargs={"order": 2}, connection=conn)
            conn.rollback()
        wait_until("the committed run on the first member", lambda: runs(store), 10)
        assert runs(store) == [(run_id, 1)]
    finally:
        app.dispose()
        store.close()
