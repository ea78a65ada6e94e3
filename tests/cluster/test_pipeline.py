"""The run pipeline with real node processes: a slow serial task beside a quick one at
default settings, a cluster back from an outage, and a pause with runs claimed ahead."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from easyjob.core.states import RunStatus, TaskStatus
from easyjob.node.dispatcher import LEAD
from easyjob.node.loader import CLAIM_LEAD
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t
from tests.cluster.harness import Cluster, duplicates, wait_until

pytestmark = pytest.mark.cluster


def test_a_slow_serial_task_does_not_starve_a_quick_one_at_default_settings(
    db_url: str, tmp_path: Path
) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("one node's pipeline: the database does not matter here")
    with Cluster(db_url, tmp_path, ticks=1, env={"EASYJOB_TEST_SLOW_TICK": "1"}) as cluster:
        cluster.start_with("node-0", {}, fast=False)  # default settings, no flag
        cluster.wait_live()
        begin = cluster.store.db.now().replace(microsecond=0) + timedelta(seconds=2)
        end = begin + timedelta(seconds=39)
        wait_until(
            "40 s of fires",
            lambda: cluster.store.db.now() > end + timedelta(seconds=3),
            60,
        )
        cluster.stop_all()
        quick = [e for e in cluster.ledger() if e.task == "tick-0" and begin <= e.fire_time <= end]
        assert sorted({e.fire_time for e in quick}) == [
            begin + timedelta(seconds=i) for i in range(40)
        ], "the quick task ran every fire"
        assert not duplicates((e.task, e.fire_time) for e in quick)
        late = sorted(e.at - e.fire_time.timestamp() for e in quick)
        assert late[int(len(late) * 0.99) - 1] < 1.0, late[-5:]
        slow = sorted(e.fire_time for e in cluster.ledger() if e.task == "slow_tick")
        assert slow == sorted(set(slow)) and len(slow) >= 14  # one at a time, every 2.5 s
        starts = [e.at for e in cluster.ledger() if e.task == "slow_tick"]
        assert starts == sorted(starts), "serial fires start in fire order"


def test_a_cluster_back_from_five_minutes_down_runs_each_fire_once_task_once(
    db_url: str, tmp_path: Path
) -> None:
    env = {"EASYJOB_TEST_TICK_GRACE": "1"}
    with Cluster(db_url, tmp_path, ticks=3, env=env) as cluster:
        for i in range(2):
            cluster.start(f"node-{i}")
        cluster.wait_live()
        wait_until("a few fires", lambda: len(cluster.ledger()) >= 6, 20)
        cluster.stop_all()
        # The outage: every clock moves on 5 minutes; here the rows move back instead.
        shift = timedelta(minutes=5)

        def back(conn: sa.Connection) -> None:
            for table, columns in ((t, ("next_start_time",)), (d, ("fire_time", "due_time"))):
                rows = conn.execute(sa.select(table.c.id, *(table.c[c] for c in columns)))
                for row in rows.all():
                    if any(v is None for v in row[1:]):
                        continue
                    values = {c: v - shift for c, v in zip(columns, row[1:], strict=True)}
                    conn.execute(table.update().where(table.c.id == row.id).values(**values))

        cluster.store.db.write("outage", back)
        returned = cluster.store.db.now()
        for i in range(2):
            cluster.start(f"node-{i}-after")
        cluster.wait_live("node-0-after", "node-1-after")
        wait_until(
            "every task's fires after the return",
            lambda: all(
                any(e.task == f"tick-{i}" and e.fire_time > returned for e in cluster.ledger())
                for i in range(3)
            ),
            20,
        )
        cluster.stop_all()
        for i in range(3):
            runs = sorted(cluster.runs(f"tick-{i}"), key=lambda r: r.fire_time)
            # the gap is carried by the row of the fire due at the return (which may be
            # MISSED on its own: superseded, when its successor came due before it started)
            (gap,) = [
                r
                for r in runs
                if r.missed_from is not None
                and r.create_time > returned
                and (r.missed_count or 0) >= 290
            ]
            assert gap.missed_from is not None and gap.missed_from < returned
            assert gap.last_fire_time is None, "the 5 minutes' fires are no row of their own"
            ran = [r for r in runs if r.status == RunStatus.SUCCESS and r.fire_time > returned]
            assert ran and all(r.fire_time >= gap.fire_time for r in ran)
            assert ran[0].fire_time <= gap.fire_time + timedelta(seconds=2), "it ran at once"
        ran_all = [r for r in cluster.runs() if r.status == RunStatus.SUCCESS]
        assert not duplicates((r.task_name, r.fire_time) for r in ran_all)  # shifted: not ledger


def test_a_pause_stops_runs_claimed_ahead(db_url: str, tmp_path: Path) -> None:
    with Cluster(db_url, tmp_path, ticks=1) as cluster:
        cluster.start("node-0", lookahead="5", **{"overdue-grace": "1"})
        cluster.wait_live()

        def ahead() -> list[object]:  # fires not started yet: PENDING (to be claimed and
            # started at their time), or CLAIMED (one waiting behind a run of the node)
            waiting = (RunStatus.PENDING, RunStatus.CLAIMED)
            return [r for r in cluster.runs("tick-0") if r.status in waiting]

        held = wait_until("runs written ahead", ahead, 20)
        cluster.store.tasks.set_status("tick-0", TaskStatus.PAUSED)
        paused = cluster.store.db.now()
        last = sorted(r.fire_time for r in held)[:3][-1] + timedelta(seconds=1)
        wait_until("three of those fire times to pass", lambda: cluster.store.db.now() > last, 10)
        cluster.stop_all()
        runs = cluster.runs("tick-0")
        # a run is written RUNNING up to LEAD (or CLAIM_LEAD, claimed and started in one
        # write) before its fire: one due that soon after the pause may have been started
        # already, and goes on, as any run already RUNNING
        paused += max(LEAD, CLAIM_LEAD)
        assert not [r for r in runs if r.start_time is not None and r.start_time > paused]
        # those not due yet were deleted by the pause; one claimed or due was SKIPPED
        skipped = [r for r in runs if r.status == RunStatus.SKIPPED]
        assert {r.error_msg for r in skipped} <= {"task paused before it started"}
        assert not [r for r in runs if r.status in (RunStatus.PENDING, RunStatus.CLAIMED)]
        assert not [e for e in cluster.ledger() if e.fire_time > paused]
