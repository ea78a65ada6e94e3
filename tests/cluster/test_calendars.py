"""Jitter and calendars with real node processes, on each database: a task excluded today
is skipped with one recorded gap row; a jittered task's runs start at fire + jitter, on
whichever node, never early."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from easyjob.core.admission import jitter_of
from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster

JOBS = str(Path(__file__).with_name("calendar_jobs.py"))
#: UTC+14: its today is often not UTC's, so the day is the task's zone's
TZ = "Pacific/Kiritimati"
NODES = ("node-0", "node-1", "node-2")


def test_a_task_excluded_today_is_skipped_with_one_gap_row(db_url: str, tmp_path: Path) -> None:
    env = {"EASYJOB_TEST_CAL_TZ": TZ}
    with Cluster(db_url, tmp_path, env=env, jobs=JOBS) as cluster:
        store = cluster.store
        today = store.now().astimezone(ZoneInfo(TZ)).date()
        store.calendars.add("today", today, today + timedelta(days=1), "test")
        for node in NODES:
            cluster.start(node, **{"plan-ahead": "3"})
        cluster.wait_live()

        def ran(task: str, after: datetime | None = None) -> list[datetime]:
            return [
                e.fire_time
                for e in cluster.ledger()
                if e.task == task and (after is None or e.fire_time >= after)
            ]

        wait_until(
            "the unknown calendar's task to run", lambda: len(ran("unknown_calendar")) >= 3, 30
        )
        wait_until("the task 'later' to run", lambda: len(ran("later")) >= 3, 30)
        # a calendar added while the nodes run: read again (its version changed), and the
        # fires planned from then on skip it
        store.calendars.add("later", today - timedelta(days=1), today + timedelta(days=2))

        def skipped(task: str) -> list[object]:
            return [r for r in cluster.runs(task) if r.status == RunStatus.SKIPPED]

        wait_until("the task 'later' to be skipped", lambda: skipped("later"), 30)
        ledger_len = len(cluster.ledger())
        wait_until("three more seconds of runs", lambda: len(cluster.ledger()) > ledger_len + 6, 30)
        cluster.stop_all()

        # never ran, one SKIPPED row for the whole stretch, to the end of tomorrow in TZ
        assert ran("holiday") == []
        (row,) = cluster.runs("holiday")
        end = datetime.combine(today + timedelta(days=2), time(0), ZoneInfo(TZ)).astimezone(UTC)
        assert row.status == RunStatus.SKIPPED
        assert row.last_fire_time == end - timedelta(seconds=1)
        assert row.missed_count is None  # more than the planner counts (5000 fires)
        assert row.error_msg is not None and "excluded by calendar 'today'" in row.error_msg
        assert f"({TZ})" in row.error_msg
        # the calendar added later: one gap row, and no run of a fire after its start
        (gap,) = skipped("later")
        assert ran("later", gap.fire_time) == []
        # a calendar that does not exist excludes nothing, and a node says so
        assert len(ran("unknown_calendar")) >= 6
        logs = "".join(cluster.nodes[node].log() for node in NODES)
        assert "calendar 'absent', which does not exist" in logs


def test_jittered_runs_start_at_fire_plus_jitter_never_early(db_url: str, tmp_path: Path) -> None:
    with Cluster(db_url, tmp_path, jobs=JOBS) as cluster:
        for node in NODES:
            cluster.start(node)
        cluster.wait_live()

        def done() -> list[object]:
            return [r for r in cluster.runs("jittered") if r.status == RunStatus.SUCCESS]

        wait_until("8 jittered runs", lambda: len(done()) >= 8, 60)
        cluster.stop_all()
        task_id = cluster.store.tasks.get("jittered").id
        started = {e.run_id: e for e in cluster.ledger() if e.task == "jittered"}
        runs = [r for r in cluster.runs("jittered") if r.id in started]
        assert len(runs) >= 8
        jitters = set()
        for run in runs:
            jitter = jitter_of(task_id, run.fire_time, 1500)
            assert run.due_time - run.fire_time == jitter, run
            assert run.jitter_ms == jitter // timedelta(milliseconds=1)
            entry = started[run.id]
            # the job's clock (this host's) at its start against the due time (the
            # database's; same host): never before it, even by a clock tick
            early = run.due_time.timestamp() - entry.at
            assert early <= 0.005, (run.id, run.node_id, early)
            assert -early < 1.0, (run.id, run.node_id, -early)  # and not late for it
            jitters.add(jitter)
        assert len(jitters) >= 4  # drawn per fire, not once per task
        assert len({r.fire_time for r in runs}) == len(runs)  # each fire once
