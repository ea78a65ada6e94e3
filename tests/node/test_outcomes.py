"""What a run leaves behind: async jobs run, results stored, failures readable, events
delivered to hooks off the dispatcher thread (stepped under a fake clock, see conftest)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from easyjob import EventKind, RunEvent, TaskContext, scheduled
from easyjob.core.outcome import RESULT_LIMIT
from easyjob.core.states import RunStatus
from easyjob.errors import TaskDefinitionError
from easyjob.logs import JsonFormatter
from easyjob.observe.prometheus import NodeMetrics
from easyjob.registry import Registry
from tests.cluster.harness import wait_until
from tests.node.conftest import START, Rig, task

AT_1S = "1 0 0 * * *"  # 00:00:01: one fire, half a second after the rig's start
ran: list[str] = []
events: list[RunEvent] = []
started = threading.Event()
cancelled = threading.Event()


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    for seen in (ran, events):
        seen.clear()
    started.clear()
    cancelled.clear()
    yield


async def async_job(ctx: TaskContext) -> dict[str, Any]:
    await asyncio.sleep(0)
    ran.append(ctx.task_name)
    return {"run": ctx.run_id, "tuple": (1, 2)}


async def hangs() -> None:
    started.set()
    try:
        await asyncio.sleep(20)  # cancelled at its 2 s timeout; bounded so a failure ends
    finally:
        cancelled.set()


def sync_returning_coroutine() -> Any:
    return async_job(TaskContext("wrapped", START, "n1", 1, 0))


VALUES: dict[str, Any] = {
    "dict": {"rows": 3, "ok": True},
    "none": None,
    "zero": 0,
    "set": {1, 2},
    "nan": float("nan"),
    "big": "x" * (RESULT_LIMIT + 1),
}


def returns(which: str) -> Any:
    return VALUES[which]


def broken() -> None:
    raise ValueError("bad input")


def record(event: RunEvent) -> None:
    events.append(event)


def explodes(event: RunEvent) -> None:
    raise RuntimeError("the alerting service is down")


def _run_once(node: Rig) -> None:
    node.tick()
    node.tick(0.5)


def test_an_async_job_runs_to_completion_and_its_result_is_stored(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    scheduled(AT_1S, name="a", registry=registry)(async_job)
    node = rig()
    _run_once(node)
    (row,) = node.history("a")
    assert ran == ["a"], "the coroutine's body ran"
    assert (row.status, row.result, row.error_msg) == (
        RunStatus.SUCCESS,
        {"run": row.id, "tuple": [1, 2]},
        None,
    )


def test_an_awaitable_returned_by_a_plain_function_is_run_too(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    scheduled(AT_1S, name="w", registry=registry)(sync_returning_coroutine)
    node = rig()
    _run_once(node)
    assert ran == ["wrapped"]
    assert [r.status for r in node.history("w")] == [RunStatus.SUCCESS]


def test_a_timeout_cancels_an_async_job_and_frees_its_worker(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    scheduled(AT_1S, name="h", timeout=2, registry=registry)(hangs)
    pool = ThreadPoolExecutor(2)
    node = rig(pool=pool)
    try:
        _run_once(node)
        wait_until("the job to start on its worker", started.is_set, 10)
        node.tick(2.0)  # past its timeout: FAILED now, and its task cancelled
        assert cancelled.wait(10), "the coroutine was cancelled"
        dispatcher = node.node.dispatcher

        def freed() -> bool:
            dispatcher.step()
            return dispatcher.counts()["running"] == 0

        wait_until("its worker to be given back", freed, 10)
        assert dispatcher.counts()["stuck"] == 0
        (row,) = node.history("h")
        assert (row.status, row.error_msg) == (RunStatus.FAILED, "timed out after 2s")
    finally:
        pool.shutdown(wait=True)


@pytest.mark.parametrize(
    ("which", "stored", "note"),
    [
        ("dict", {"rows": 3, "ok": True}, None),
        ("none", None, None),
        ("zero", 0, None),
        ("set", None, "result not stored: a set is not JSON-serializable"),
        ("nan", None, "result not stored: a float is not JSON-serializable"),
        ("big", None, f"result not stored: {RESULT_LIMIT + 3} bytes of JSON, over the limit"),
    ],
)
def test_a_return_value_is_stored_when_it_is_json_and_small_else_noted(
    rig: Callable[..., Rig], registry: Registry, which: str, stored: Any, note: str | None
) -> None:
    scheduled(AT_1S, name="r", kwargs={"which": which}, registry=registry)(returns)
    node = rig()
    _run_once(node)
    (row,) = node.history("r")
    assert (row.status, row.result) == (RunStatus.SUCCESS, stored)
    if note is None:
        assert row.error_msg is None
    else:
        assert (row.error_msg or "").startswith(note), row.error_msg


def test_a_failure_stores_type_and_message_and_the_traceback_and_logs_it(
    rig: Callable[..., Rig], registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    scheduled(AT_1S, name="b", registry=registry)(broken)
    node = rig()
    caplog.set_level(logging.DEBUG, logger="easyjob")
    _run_once(node)
    (row,) = node.history("b")
    assert (row.status, row.error_msg) == (RunStatus.FAILED, "ValueError: bad input")
    assert row.traceback is not None
    assert row.traceback.startswith("Traceback (most recent call last):")
    assert 'raise ValueError("bad input")' in row.traceback
    assert row.traceback.endswith("ValueError: bad input")
    (logged,) = [r for r in caplog.records if "failed (attempt 1)" in r.getMessage()]
    assert logged.levelno == logging.ERROR  # no retry left
    assert logged.getMessage().endswith(": ValueError: bad input")
    doc = json.loads(JsonFormatter().format(logged))
    assert doc["task"] == "b" and doc["run_id"] == row.id
    assert 'raise ValueError("bad input")' in doc["exc_info"]


def test_a_success_is_logged_at_debug(
    rig: Callable[..., Rig], registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    task(registry, "ok", AT_1S)
    node = rig()
    caplog.set_level(logging.DEBUG, logger="easyjob")
    _run_once(node)
    (row,) = node.history("ok")
    (logged,) = [r for r in caplog.records if "succeeded in" in r.getMessage()]
    assert logged.levelno == logging.DEBUG and logged.run_id == row.id  # type: ignore[attr-defined]


def test_hooks_hear_of_success_and_of_a_failure_only_after_its_retries(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    scheduled(AT_1S, name="b", retries=1, retry_delay=1, on_failure=record, registry=registry)(
        broken
    )
    scheduled(AT_1S, name="r", kwargs={"which": "dict"}, on_success=record, registry=registry)(
        returns
    )
    node = rig()
    _run_once(node)
    assert [(e.kind, e.task_name) for e in events] == [(EventKind.SUCCESS, "r")]
    assert events[0].result == {"rows": 3, "ok": True} and events[0].node_id == "n1"
    node.tick(1.0)  # the retry fails too: now the failure is final
    assert [(e.kind, e.task_name, e.attempt) for e in events[1:]] == [(EventKind.FAILURE, "b", 2)]
    failure = events[1]
    assert failure.error == "ValueError: bad input"
    assert isinstance(failure.exception, ValueError)
    assert failure.traceback is not None and "raise ValueError" in failure.traceback


def test_a_failing_hook_is_logged_and_the_next_one_still_runs(
    rig: Callable[..., Rig], registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    task(registry, "s", on_success=explodes)
    node = rig(listeners=[record])
    node.run_for(3, step=0.5)
    assert len(events) >= 2 and {e.kind for e in events} == {EventKind.SUCCESS}
    assert node.node.hooks.failed == len(events)
    failures = [r for r in caplog.records if r.name == "easyjob.events"]
    assert failures and "the alerting service is down" in str(failures[0].exc_info[1])  # type: ignore[index]
    assert node.statuses("s").get(RunStatus.SUCCESS, 0) == len(events)


def test_hooks_run_off_the_dispatcher_thread_and_never_hold_up_its_writes(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    release = threading.Event()
    threads: set[str] = set()

    def slow(event: RunEvent) -> None:
        threads.add(threading.current_thread().name)
        release.wait(30)
        events.append(event)

    task(registry, "t")
    node = rig(listeners=[slow])
    node.node.hooks.start()
    try:
        node.run_for(5, step=0.5)  # the first event's hook blocks all along
        assert node.statuses("t").get(RunStatus.SUCCESS, 0) == 5
        assert events == []
    finally:
        release.set()
        node.node.hooks.stop()
    assert len(events) == 5 and threads == {"ej-events"}


def test_missed_runs_are_reported_with_how_many(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "m", "* * * * * *", misfire="skip", misfire_grace=1, overlap="skip")
    task(registry, "m2", "* * * * * *", misfire="skip", misfire_grace=1, overlap="skip")
    node = rig(listeners=[record], lookahead=10.0, metrics=True)
    node.tick()  # runs claimed ahead (overlap skip) wait in the timetable...
    assert node.node.dispatcher.counts()["waiting"] == 2
    node.tick(120)  # ...and the node stalled for two minutes: it closes what it held...
    node.tick(1)  # ...and then plans the gap (not while the task's due runs waited)
    node.tick(1)
    recorded = sum(r.missed_fires for n in ("m", "m2") for r in node.history(n))
    reported = [e for e in events if e.kind == EventKind.MISSED]
    assert sum(e.count for e in reported) == recorded > 100
    # easyjob_misfires counts every fire missed: the gaps planned, the runs marked MISSED in
    # bulk (the events without a run id) and the runs closed where they waited
    metrics = node.node.metrics
    assert isinstance(metrics, NodeMetrics)
    counted = sum(
        s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == "easyjob_misfires_total"
    )
    assert counted == recorded
    assert all(e.task_name in ("m", "m2") and e.error for e in reported)
    closed_at_start = {e.run_id for e in reported if e.run_id is not None}
    assert len(closed_at_start) >= 2, "each run closed where it waited is its own event"
    assert any(e.run_id is None and e.count > 1 for e in reported), "a planned gap: one event"


def test_a_recovered_run_is_reported(rig: Callable[..., Rig], registry: Registry) -> None:
    scheduled("0 0 * * * *", name="t", on_recovered=record, registry=registry)(broken)
    node = rig()
    node.sql(
        "CREATE TRIGGER no_end BEFORE UPDATE OF status ON easy_job_task_detail "
        "WHEN NEW.status = 'FAILED' BEGIN SELECT RAISE(ABORT, 'injected permanent error'); END"
    )
    node.clock.advance(3599.5)
    _run_once(node)  # its failure cannot be written: the node forgets the run
    node.sql("DROP TRIGGER no_end")
    assert node.node.recovery.sweep_orphans() == 0
    assert node.node.recovery.sweep_orphans() == 1
    node.tick()
    (event,) = events
    old, new = node.history("t")[:2]
    assert (event.kind, event.run_id, event.new_run_id) == (EventKind.RECOVERED, old.id, new.id)


def test_a_hook_that_is_not_callable_is_refused(registry: Registry) -> None:
    with pytest.raises(TaskDefinitionError, match=r"on_failure must be a callable.*'oops'"):
        scheduled(AT_1S, name="x", on_failure="oops", registry=registry)(broken)  # type: ignore[arg-type]


def test_registering_after_a_node_started_is_an_error_naming_the_function(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "first")
    node = rig()
    with pytest.raises(TaskDefinitionError) as err:
        scheduled(AT_1S, name="late", registry=registry)(broken)
    assert str(err.value).startswith(
        "@scheduled on tests.node.test_outcomes:broken: task 'late' "
        "(tests.node.test_outcomes:broken) added after node n1 started with this registry"
    )
    node.node.stop()
    scheduled(AT_1S, name="late", registry=registry)(broken)  # a stopped node released it
    assert "late" in registry.names()


def test_a_generator_function_is_refused_at_decoration(registry: Registry) -> None:
    def gen() -> Iterator[int]:
        yield 1

    gen.__qualname__ = "gen"
    with pytest.raises(TaskDefinitionError, match="is a generator function"):
        scheduled(AT_1S, name="g", registry=registry)(gen)


def test_a_backlog_marked_missed_in_bulk_is_reported_per_task(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "once", "*/5 * * * * *", misfire_grace=1, on_missed=record)
    node = rig(lookahead=60.0)
    node.tick()  # fires for the next minute written and claimed...
    node.node.dispatcher.close(0)  # ...then the node dies with them in hand
    node.sql("UPDATE easy_job_task_detail SET status = 'PENDING', node_id = NULL")
    node.age_pending(120)  # two minutes later, the next incarnation finds the backlog
    node = rig(node_id="n2", lookahead=2.0)
    node.tick()
    missed = [r for r in node.history("once") if r.status == RunStatus.MISSED]
    assert len(missed) >= 10 and [e.kind for e in events] == [EventKind.MISSED]
    (event,) = events
    assert (event.task_name, event.node_id, event.run_id, event.count) == (
        "once",
        "n2",
        None,
        len(missed),
    )


@pytest.mark.parametrize("max_recoveries", [1, 0])
def test_a_dead_nodes_run_is_reported_recovered_or_failed_for_good(
    rig: Callable[..., Rig], registry: Registry, max_recoveries: int
) -> None:
    task(registry, "t", AT_1S, on_recovered=record, on_failure=record)
    dead = rig(node_id="dead")
    dead.keep = lambda name: True  # its job runs on when the node dies
    _run_once(dead)
    alive = rig(node_id="alive", max_recoveries=max_recoveries)
    alive.run_for(10, step=1.0)  # ten seconds of its own heartbeats: "dead" is silent
    alive.node.recovery.step()
    alive.tick()
    (event,) = events
    first = alive.history("t")[0]
    if max_recoveries:
        assert (event.kind, event.run_id, event.node_id) == (EventKind.RECOVERED, first.id, "alive")
        assert event.new_run_id == alive.history("t")[1].id
        assert alive.history("t")[1].status == RunStatus.SUCCESS
    else:
        assert (event.kind, event.run_id, first.status) == (
            EventKind.FAILURE,
            first.id,
            RunStatus.FAILED,
        )
        assert (event.error or "").startswith("its node died while running it (last: dead)")
