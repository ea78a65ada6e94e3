"""Jitter and calendars in one node's planner, loader and dispatcher, stepped under a fake
clock on real SQLite (see conftest): jittered runs start at their due time, never before,
and their jitter is measured apart from their lateness; a calendar's days are skipped with
one row per stretch; the calendars are read again only when one changed."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import date, timedelta

import pytest
from prometheus_client import generate_latest

from easyjob.core.admission import jitter_of
from easyjob.core.states import RunStatus
from easyjob.node.calendars import Calendars
from easyjob.observe.prometheus import NodeMetrics
from easyjob.registry import Registry
from tests.node.conftest import START, Rig, task

S = timedelta(seconds=1)


def test_jittered_runs_start_at_their_due_time_never_before(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "spread", "*/10 * * * * *", jitter=7)
    node = rig(metrics=True)
    node.run_for(65, step=0.05)
    task_id = node.store.tasks.get("spread").id
    runs = [r for r in node.history("spread") if r.status == RunStatus.SUCCESS]
    assert [r.fire_time for r in runs] == [START - 0.5 * S + k * 10 * S for k in range(1, 7)]
    jitters = []
    for run in runs:
        jitter = jitter_of(task_id, run.fire_time, 7000)
        assert run.due_time == run.fire_time + jitter
        assert run.jitter_ms == jitter // timedelta(milliseconds=1)
        assert run.start_time is not None
        assert run.due_time <= run.start_time < run.due_time + 0.1 * S  # not early, not late
        jitters.append(jitter.total_seconds())
    assert len(set(jitters)) == len(jitters) and max(jitters) > 1  # drawn per fire
    metrics = node.node.metrics
    assert isinstance(metrics, NodeMetrics)
    text = generate_latest(metrics.registry).decode()
    assert 'easyjob_run_jitter_seconds_count{task="spread"} 6.0' in text
    assert f'easyjob_run_jitter_seconds_sum{{task="spread"}} {sum(jitters)}' in text
    # lateness is counted from the due time: every start within the first bucket
    assert 'easyjob_run_lateness_seconds_bucket{le="0.1",task="spread"} 6.0' in text


def test_a_fire_that_draws_no_jitter_records_zero_not_null(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    # jitter of 2 ms: about half the fires draw 0 ms, which is a jitter (the task has one),
    # not the NULL of a row without jitter
    task(registry, "tiny", "*/10 * * * * *", jitter=0.002)
    node = rig()
    node.run_for(65, step=0.05)
    task_id = node.store.tasks.get("tiny").id
    runs = [r for r in node.history("tiny") if r.status == RunStatus.SUCCESS]
    drawn = [jitter_of(task_id, r.fire_time, 2) // timedelta(milliseconds=1) for r in runs]
    assert [r.jitter_ms for r in runs] == drawn
    assert len(runs) == 6 and 0 in drawn


def test_a_calendar_day_is_skipped_with_one_row_and_the_next_day_runs(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    # START is 2030-01-01 00:00:00.5 UTC; in Tokyo it is 09:00 on the 1st: the day excluded
    # ends at 15:00 UTC
    task(registry, "hourly", "0 0 * * * *", tz="Asia/Tokyo", exclude="holidays")
    node = rig()
    node.store.calendars.add("holidays", date(2030, 1, 1), date(2030, 1, 1))
    node.run_for(16 * 3600, step=600)
    rows = node.history("hourly")
    skipped = [r for r in rows if r.status == RunStatus.SKIPPED]
    (gap,) = skipped
    assert (gap.fire_time, gap.last_fire_time, gap.missed_count) == (
        START - 0.5 * S + 3600 * S,
        START - 0.5 * S + 14 * 3600 * S,
        14,
    )
    ran = [r.fire_time for r in rows if r.status == RunStatus.SUCCESS]
    assert ran == [START - 0.5 * S + 15 * 3600 * S, START - 0.5 * S + 16 * 3600 * S]


def test_calendars_are_read_again_only_when_one_changed(
    rig: Callable[..., Rig], registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    task(registry, "a", exclude="holidays")
    task(registry, "b", exclude="absent")
    node = rig()
    store = node.store
    tasks = store.tasks.all()
    log = logging.LoggerAdapter(logging.getLogger("easyjob.test"), {})
    calendars = Calendars(store, log)

    def statements() -> int:
        return store.counters()["statements"]

    store.calendars.add("holidays", date(2030, 1, 1), date(2030, 1, 2))
    before = statements()
    store.calendars.version()
    one = statements() - before  # what one read costs (its statement and transaction)
    before = statements()
    calendars.refresh(tasks)
    assert statements() - before == 2 * one  # the version, then the days
    a, b = sorted(tasks, key=lambda t: t.name)
    assert calendars.days(a) == ((date(2030, 1, 1), date(2030, 1, 2)),)
    for _ in range(5):
        before = statements()
        calendars.refresh(tasks)
        assert statements() - before == one  # the version only
    store.calendars.add("holidays", date(2030, 2, 1), date(2030, 2, 1))
    calendars.refresh(tasks)
    assert calendars.days(a) == (
        (date(2030, 1, 1), date(2030, 1, 2)),
        (date(2030, 2, 1), date(2030, 2, 1)),
    )
    # a calendar that does not exist excludes nothing, warned about once
    with caplog.at_level(logging.WARNING, "easyjob.test"):
        assert calendars.days(b) is None
        assert calendars.days(b) is None
    assert [r.getMessage() for r in caplog.records].count(
        "task 'b' excludes the days of calendar 'absent', which does not exist: its fires "
        "run until it does (easyjob calendar add absent DAY)"
    ) == 1
    store.calendars.add("absent", date(2030, 3, 1), date(2030, 3, 1))
    calendars.refresh(tasks)
    assert calendars.days(b) == ((date(2030, 3, 1), date(2030, 3, 1)),)
