"""The dashboard's run page shows a jittered run's due time, its jitter and its lateness
apart, and the gap of missed fires a run's row carries."""

from __future__ import annotations

import re
from datetime import timedelta

from easyjob.core.records import Advance, PlannedFire, TaskSpec
from easyjob.observe.http import HttpServer
from easyjob.store import Store
from easyjob.web.app import Dashboard
from tests.web.test_dashboard import get


def test_the_run_page_shows_the_jitter_apart_from_the_lateness(store: Store) -> None:
    spec = TaskSpec("spread", "tests.jobs:noop", cron="* * * * * *", jitter=timedelta(seconds=9))
    (task,) = store.tasks.upsert([spec])
    assert task.next_start_time is not None
    fire = task.next_start_time
    planned = PlannedFire(fire, jitter=timedelta(milliseconds=4250))
    advance = Advance(task.id, task.version, fire + timedelta(seconds=1), (planned,))
    assert store.tasks.advance("p", [advance]) == [task.id]
    (run,) = store.history.runs(task="spread")
    body = _run_page(store, run.id)
    jitter = re.search(r'<td id="run-jitter">([^<]*)</td>', body)
    late = re.search(r'<td id="run-late">([^<]*)</td>', body)
    assert jitter is not None and late is not None, body[-3000:]
    assert (jitter.group(1), late.group(1)) == ("4.2s", "-")  # not started: no lateness yet


def test_the_run_page_shows_the_gap_its_row_carries(store: Store) -> None:
    spec = TaskSpec("busy", "tests.jobs:noop", cron="* * * * * *")
    (task,) = store.tasks.upsert([spec])
    assert task.next_start_time is not None
    first = task.next_start_time
    fire = first + timedelta(seconds=3)
    planned = PlannedFire(fire, missed_count=3, missed_from=first)
    advance = Advance(task.id, task.version, fire + timedelta(seconds=1), (planned,))
    assert store.tasks.advance("p", [advance]) == [task.id]
    (run,) = store.history.runs(task="busy")
    assert (run.missed_from, run.missed_count, run.missed_fires) == (first, 3, 3)
    body = _run_page(store, run.id)
    missed = re.search(r'<td colspan="5" id="run-missed">([^<]*)</td>', body)
    assert missed is not None, body[-3000:]
    assert missed.group(1).startswith("3 fires, before this one, from ")


def _run_page(store: Store, run_id: int) -> str:
    """The dashboard's page of run *run_id* (HTTP 200)."""
    server = HttpServer(("127.0.0.1", 0), Dashboard(store).wsgi(), name="dashboard-test")
    server.start()
    try:
        status, body = get(f"{server.url}/run?id={run_id}")
    finally:
        server.close()
    assert status == 200
    return body
