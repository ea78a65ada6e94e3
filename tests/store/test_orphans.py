"""A node takes back the runs the database says it holds but it no longer knows of (a claim
or start whose COMMIT landed while every retry failed): seen twice at the same version,
never one it knows, never one that moved."""

from __future__ import annotations

import logging
from datetime import timedelta

import sqlalchemy as sa

from easyjob.clock import FakeClock
from easyjob.core.config import NodeConfig
from easyjob.core.states import RunStatus, Trigger
from easyjob.node.liveness import Liveness
from easyjob.node.membership import Membership
from easyjob.node.recovery import Recoverer
from easyjob.node.writer import RunWriter
from easyjob.store import Store
from easyjob.store.schema import task_detail_table as d
from tests.store.conftest import make_pending
from tests.store.test_claims import _candidates


def _recoverer(store: Store, known: set[int], **options: int) -> Recoverer:
    config = NodeConfig(node_id="node-a", heartbeat=1.0, dead_after=3, **options)
    liveness = Liveness(FakeClock(), 1.0, timedelta(seconds=3))
    log = logging.LoggerAdapter(logging.getLogger("test"), {})
    return Recoverer(
        store, config, liveness, Membership(), log, lambda: set(known), RunWriter(store, "node-a")
    )


def _rows(store: Store) -> list[tuple[int, str, int, str]]:
    def read(conn: sa.Connection) -> list[tuple[int, str, int, str]]:
        query = sa.select(d.c.id, d.c.status, d.c.attempt, d.c.triggered_by).order_by(d.c.id)
        return [tuple(row) for row in conn.execute(query)]  # type: ignore[misc]

    return store.db.read("test", read)


def test_an_orphan_seen_twice_is_taken_back_as_a_new_attempt(store: Store) -> None:
    ids = make_pending(store, fires=3)
    claimed = store.runs.claim("node-a", _candidates(store, ids))
    assert store.runs.start(claimed[1]) is not None
    known = {claimed[0].id}  # the node knows run 0; runs 1 (RUNNING) and 2 are orphans
    sweeper = _recoverer(store, known)
    assert sweeper.sweep_orphans() == 0  # first sighting: only suspected
    assert sweeper.sweep_orphans() == 2
    rows = {row[0]: row for row in _rows(store)}
    assert rows[claimed[0].id][1] == "CLAIMED"
    assert rows[claimed[1].id][1] == rows[claimed[2].id][1] == str(RunStatus.ABANDONED)
    new = [row for row in rows.values() if row[0] not in ids]
    assert sorted((r[1], r[2], r[3]) for r in new) == [
        ("PENDING", 2, str(Trigger.RECOVERY)),
        ("PENDING", 2, str(Trigger.RECOVERY)),
    ]


def test_a_run_that_moved_between_sweeps_is_left_alone(store: Store) -> None:
    ids = make_pending(store, fires=1)
    (claimed,) = store.runs.claim("node-a", _candidates(store, ids))
    sweeper = _recoverer(store, set())
    assert sweeper.sweep_orphans() == 0
    store.runs.start(claimed)  # e.g. the dispatcher had it after all and started it
    assert sweeper.sweep_orphans() == 0  # new version: suspected afresh, not taken
    assert [row[1] for row in _rows(store)] == ["RUNNING"]


def test_another_nodes_runs_are_not_orphans(store: Store) -> None:
    ids = make_pending(store, fires=1)
    store.runs.claim("node-b", _candidates(store, ids))
    sweeper = _recoverer(store, set())
    assert sweeper.sweep_orphans() == 0
    assert sweeper.sweep_orphans() == 0
    assert [row[1] for row in _rows(store)] == ["CLAIMED"]


def test_orphans_are_found_behind_a_full_node_s_known_runs(store: Store) -> None:
    """The sweep reads past every run the node may know of (``workers`` of them), however
    small the batch: an orphan with a higher id than a full node's runs is still found."""
    ids = make_pending(store, fires=4)
    claimed = store.runs.claim("node-a", _candidates(store, ids))
    known = {run.id for run in claimed[:3]}
    sweeper = _recoverer(store, known, workers=3, batch=1)
    assert sweeper.sweep_orphans() == 0
    assert sweeper.sweep_orphans() == 1
    assert [row[1] for row in _rows(store)][:4] == ["CLAIMED"] * 3 + [str(RunStatus.ABANDONED)]
