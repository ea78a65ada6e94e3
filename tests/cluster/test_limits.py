"""max_running and priority with real node processes: three nodes never run more than a
task's limit at once (read from the runs' start and end times in the database), and a
saturated node starts high-priority runs first while the low ones still run."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from easyjob.core.records import HistoryRow
from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster

JOBS = str(Path(__file__).with_name("limits_jobs.py"))


def most_at_once(runs: list[HistoryRow]) -> int:
    """The most of *runs* RUNNING at one instant, from their start and end times (an end at
    the instant of a start counts as before it)."""
    edges: list[tuple[datetime, int]] = []
    for r in runs:
        assert r.start_time is not None and r.end_time is not None, r
        edges += [(r.start_time, 1), (r.end_time, -1)]
    most = now = 0
    for _, step in sorted(edges):
        now += step
        most = max(most, now)
    return most


def test_three_nodes_never_run_more_than_max_running_at_once(db_url: str, tmp_path: Path) -> None:
    """Eight runs of ``capped`` (max_running=2, 1.5 s each) and six of ``capped_skip``
    triggered at once on three nodes of two workers each (six workers, three times the
    limit): every ``capped`` run runs, never more than two at once, and two do run side by
    side; of ``capped_skip`` two run and the rest are SKIPPED, saying why."""
    with Cluster(db_url, tmp_path, jobs=JOBS) as cluster:
        for i in range(3):
            cluster.start(f"node-{i}", workers="2")
        cluster.wait_live()
        for _ in range(8):
            cluster.store.tasks.trigger("capped")
        for _ in range(6):
            cluster.store.tasks.trigger("capped_skip")
        wait_until(
            "every capped run to end",
            lambda: all(r.status == RunStatus.SUCCESS for r in cluster.runs("capped")),
            60,
        )
        wait_until(
            "every capped_skip run to end",
            lambda: all(
                r.status in (RunStatus.SUCCESS, RunStatus.SKIPPED)
                for r in cluster.runs("capped_skip")
            ),
            30,
        )
        cluster.stop_all()
        capped = cluster.runs("capped")
        assert len(capped) == 8
        assert most_at_once(capped) == 2
        assert len({r.node_id for r in capped}) >= 2  # the limit held across nodes
        skip = cluster.runs("capped_skip")
        ran = [r for r in skip if r.status == RunStatus.SUCCESS]
        skipped = [r for r in skip if r.status == RunStatus.SKIPPED]
        assert most_at_once(ran) <= 2 and len(ran) >= 2 and len(ran) + len(skipped) == 6
        assert {r.error_msg for r in skipped} == {
            "skipped: 2 run(s) of its task are running (max_running 2)"
        }


def test_a_saturated_node_starts_high_priority_runs_first_and_the_low_ones_still_run(
    db_url: str, tmp_path: Path
) -> None:
    """One node, one worker, held by ``blocker``; meanwhile six ``low`` runs (priority 0)
    and then three ``high`` ones (priority 10) come due. Once the worker is free the three
    high runs start first, though due last, and then every low one runs."""
    with Cluster(db_url, tmp_path, jobs=JOBS) as cluster:
        cluster.start("node-0", workers="1")
        cluster.wait_live()
        cluster.store.tasks.trigger("blocker")
        wait_until(
            "the blocker to run",
            lambda: any(r.status == RunStatus.RUNNING for r in cluster.runs("blocker")),
            20,
        )
        for _ in range(6):
            cluster.store.tasks.trigger("low")
        for _ in range(3):
            cluster.store.tasks.trigger("high")
        (blocker,) = cluster.runs("blocker")
        wait_until(
            "every low run to end",
            lambda: [r.status for r in cluster.runs("low")] == [RunStatus.SUCCESS] * 6,
            60,
        )
        cluster.stop_all()
        (blocker,) = cluster.runs("blocker")
        high, low = cluster.runs("high"), cluster.runs("low")
        assert [r.status for r in high] == [RunStatus.SUCCESS] * 3
        assert max(r.due_time for r in low) < min(r.due_time for r in high)  # due last
        assert blocker.end_time is not None
        assert all(r.due_time < blocker.end_time for r in low + high)  # all waited for it
        last_high = max(r.start_time for r in high if r.start_time is not None)
        first_low = min(r.start_time for r in low if r.start_time is not None)
        assert last_high < first_low
