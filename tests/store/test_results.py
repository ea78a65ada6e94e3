"""A run's result and traceback columns, on each real database."""

from __future__ import annotations

import re
from pathlib import Path

from easyjob.core.outcome import RESULT_LIMIT, TRACEBACK_LIMIT, encode_result, failed
from easyjob.core.states import RunStatus
from easyjob.store import Store
from tests.store.conftest import make_pending
from tests.store.test_lifecycle import _claim_start

DOC = Path(__file__).resolve().parents[2] / "docs" / "schema.md"


def test_results_and_notes_are_written_with_the_successes_of_a_batch(store: Store) -> None:
    ids = make_pending(store, "job", fires=4)
    runs = [_claim_start(store, "node-a", run_id) for run_id in ids]
    big, _ = encode_result("é" * (RESULT_LIMIT // 2 - 1))  # 2 bytes each: just fits
    results = {runs[0].id: {"rows": 3, "names": ["ä", "b"]}, runs[1].id: big}
    notes = {runs[2].id: "result not stored: a set is not JSON-serializable"}
    assert store.runs.finish_many(runs, results, notes) == {r.id for r in runs}
    rows = {r.id: r for r in store.history.runs(task="job")}
    assert [(rows[r.id].status, rows[r.id].result, rows[r.id].error_msg) for r in runs] == [
        (RunStatus.SUCCESS, {"rows": 3, "names": ["ä", "b"]}, None),
        (RunStatus.SUCCESS, big, None),
        (RunStatus.SUCCESS, None, "result not stored: a set is not JSON-serializable"),
        (RunStatus.SUCCESS, None, None),
    ]


def test_a_fenced_success_writes_no_result(store: Store) -> None:
    (run_id,) = make_pending(store)
    running = _claim_start(store, "node-a", run_id)
    assert store.runs.fail(running, "timed out after 1s", retry_in=None)
    assert store.runs.finish_many([running], {running.id: {"late": True}}) == set()
    (row,) = store.history.runs(task="job")
    assert (row.status, row.result, row.error_msg) == (RunStatus.FAILED, None, "timed out after 1s")


def _deep(n: int) -> None:
    if n:
        _deeper(n - 1)  # alternating frames: Python shortens only repeats of one frame
    raise ValueError("bad input " + "ü" * 50)


def _deeper(n: int) -> None:
    _deep(n)


def test_a_failure_stores_its_message_and_its_long_traceback(store: Store) -> None:
    try:
        _deep(300)  # a traceback longer than the cap
    except ValueError as err:
        outcome = failed(err)
    assert outcome.traceback is not None and len(outcome.traceback) == TRACEBACK_LIMIT
    (run_id,) = make_pending(store)
    running = _claim_start(store, "node-a", run_id)
    assert store.runs.fail(running, outcome.error or "", retry_in=None, traceback=outcome.traceback)
    (row,) = store.history.runs(task="job")
    assert row.error_msg == "ValueError: bad input " + "ü" * 50
    assert row.traceback == outcome.traceback
    assert row.traceback.startswith("Traceback (most recent call last):")
    assert re.search(r"\n\.\.\. \d+ characters cut \.\.\.\n", row.traceback)
    assert row.traceback.endswith("ValueError: bad input " + "ü" * 50)
