"""Health means progress (``easyjob.node.health``): the rule, on a fake clock."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from prometheus_client import generate_latest

from easyjob import FakeClock
from easyjob.node.health import Health
from easyjob.observe.endpoint import Probe, check
from easyjob.observe.prometheus import NodeMetrics

LOG = logging.LoggerAdapter(logging.getLogger("easyjob.node"))


def _count(metrics: NodeMetrics, cause: str) -> float:
    value = metrics.registry.get_sample_value("easyjob_unhealthy_total", {"cause": cause})
    assert value is not None, generate_latest(metrics.registry).decode()
    return value


def test_a_loop_failing_on_every_step_past_the_stated_time_is_unhealthy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    metrics = NodeMetrics("n1")
    health = Health(clock, 6.0, LOG, metrics)
    assert _count(metrics, "loop_failing") == 0 and _count(metrics, "due_work_held") == 0
    caplog.set_level(logging.INFO, "easyjob.node")
    health.step("loader", ok=False)
    clock.advance(5.0)
    health.step("loader", ok=False)
    health.step("planner", ok=True)
    assert health.problems() == []
    clock.advance(1.5)
    health.step("loader", ok=False)
    problems = health.problems()
    assert problems == [
        "loop_failing: every step failed: loader for 6.5s (more than 6s); see the log"
    ]
    health.step("loader", ok=False)
    assert _count(metrics, "loop_failing") == 1  # once per change, not per step
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"node unhealthy (loop_failing): {problems[0].split(': ', 1)[1]}"]
    health.step("loader", ok=True)
    assert health.problems() == []
    assert caplog.records[-1].getMessage() == "node healthy again: loop_failing resolved"
    health.step("loader", ok=False)  # a new run of failures starts the clock again
    clock.advance(3.0)
    assert health.problems() == []


def test_due_work_held_is_unhealthy_and_readyz_says_why() -> None:
    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    metrics = NodeMetrics("n1")
    health = Health(clock, 6.0, LOG, metrics)
    probe = Probe(
        threads=lambda: {"loader": True},
        heartbeat_age_s=lambda: 0.1,
        dead_after_s=6.0,
        stopping=lambda: False,
        problems=health.problems,
    )
    assert check(probe, ready=True)[0]
    health.held_due(2)
    ok, body = check(probe, ready=True)
    assert not ok and body["reason"] == (
        "no progress: due_work_held: 2 run(s) held CLAIMED here more than 10s past due, "
        "neither started nor handed back"
    )
    assert check(probe)[0]  # /healthz: alive, so not to be restarted for it
    assert _count(metrics, "due_work_held") == 1
    health.held_due(0)
    assert check(probe, ready=True)[0]
