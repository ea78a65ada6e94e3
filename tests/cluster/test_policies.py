"""Retries, timeouts and overlap policies, on a real node process."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from easyjob.core.states import RunStatus, Trigger
from tests.cluster.harness import Cluster, Entry, wait_until

pytestmark = pytest.mark.cluster


def test_retries_back_off_exponentially_and_each_attempt_is_a_row(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path) as cluster:
        cluster.start("node-0")
        cluster.wait_live()
        cluster.store.tasks.trigger("flaky")
        wait_until(
            "attempt 3 to succeed",
            lambda: any(r.status == RunStatus.SUCCESS for r in cluster.runs("flaky")),
            20,
        )
        cluster.stop_all()
        runs = sorted(cluster.runs("flaky"), key=lambda r: r.attempt)
        assert [(r.attempt, r.status, r.triggered_by) for r in runs] == [
            (1, RunStatus.FAILED, Trigger.MANUAL),
            (2, RunStatus.FAILED, Trigger.RETRY),
            (3, RunStatus.SUCCESS, Trigger.RETRY),
        ]
        assert "RuntimeError: attempt 1 fails on purpose" in (runs[0].error_msg or "")
        assert len({r.fire_time for r in runs}) == 1
        waits = [(runs[i + 1].due_time - runs[i].end_time).total_seconds() for i in (0, 1)]  # type: ignore[operator]
        assert 0.19 <= waits[0] < 0.35 and 0.39 <= waits[1] < 0.55, waits  # 0.2 s, then 0.4 s


def test_a_timeout_fails_the_run_and_sets_the_cancellation_flag(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path) as cluster:
        node = cluster.start("node-0")
        cluster.wait_live()
        cluster.store.tasks.trigger("overrun")
        wait_until(
            "the job to see its cancellation",
            lambda: any(e.event == "cancelled" for e in cluster.ledger()),
            20,
        )
        wait_until("the late outcome to be fenced", lambda: "outcome was fenced" in node.log(), 10)
        cluster.stop_all()
        (run,) = cluster.runs("overrun")
        assert (run.status, run.error_msg) == (RunStatus.FAILED, "timed out after 0.5s")
        assert 0.5 <= (run.end_time - run.start_time).total_seconds() < 1.0  # type: ignore[operator]
        assert [e.event for e in cluster.ledger()] == ["started", "cancelled"]


def _intervals(entries: list[Entry]) -> list[tuple[float, float]]:
    starts: dict[int, float] = {}
    spans = []
    for e in entries:
        if e.event == "started":
            starts[e.run_id] = e.at
        elif e.event == "finished" and e.run_id in starts:
            spans.append((starts[e.run_id], e.at))
    return sorted(spans)


def _overlaps(spans: list[tuple[float, float]]) -> int:
    return sum(1 for a, b in pairwise(spans) if b[0] < a[1])


@pytest.mark.parametrize("overlap", ["serial", "skip", "allow"])
def test_overlap_policies(overlap: str, db_url: str, tmp_path: Path) -> None:
    with Cluster(db_url, tmp_path, env={"EASYJOB_TEST_OVERLAP": overlap}) as cluster:
        cluster.start("node-0")
        cluster.start("node-1")
        cluster.wait_live()
        wait_until(
            "six runs of the 1.5 s job to finish",
            lambda: len(_intervals(cluster.ledger())) >= 6,
            30,
        )
        cluster.stop_all()
        spans = _intervals(cluster.ledger())
        statuses = {r.status for r in cluster.runs("long")}
        if overlap == "allow":
            assert _overlaps(spans) > 0
        else:
            assert _overlaps(spans) == 0, spans
        if overlap == "skip":
            assert RunStatus.SKIPPED in statuses
            skipped = [r for r in cluster.runs("long") if r.status == RunStatus.SKIPPED]
            assert skipped[0].error_msg == "skipped: the previous run is still running"
        else:
            assert RunStatus.SKIPPED not in statuses
