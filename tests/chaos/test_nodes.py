"""Scenarios 2-4: node processes crash (kill -9), freeze (SIGSTOP) and are stopped (SIGTERM)
while they hold work; 5 tasks fire every second throughout.

Dead threshold 1.5 s (runner.SETTINGS); ``slow`` runs 2 s and is triggered by the fault
steps, so each fault hits a node that holds a running job.
"""

from __future__ import annotations

import pytest

from tests.chaos.conftest import Chaos
from tests.chaos.runner import (
    SETTINGS,
    Scenario,
    Step,
    each,
    kill9_claimed,
    kill9_mid_run,
    restart_last_killed,
    sigstop,
    sigterm,
)

pytestmark = [pytest.mark.chaos, pytest.mark.cluster]
slow_tier = pytest.mark.slow_chaos
DEAD_S = SETTINGS.dead_threshold_s
ENV = {"EASYJOB_CHAOS_SLOW_SECONDS": "2"}


def test_kill_9_mid_run(chaos: Chaos) -> None:
    report = chaos(
        Scenario(
            "kill -9 mid-run",
            ticks=5,
            env=ENV,
            steps=(Step(1, kill9_mid_run("slow")),),
            duration_s=5,
            settle_s=3,
        )
    )
    assert report.duplicated_allowed >= 1  # the slow job ran again elsewhere
    assert report.max_failover_s is not None


@slow_tier
def test_kill_9_between_claim_and_start(chaos: Chaos) -> None:
    # node-2 polls every 2 s, so it claims fires up to 4 s ahead and holds them CLAIMED.
    report = chaos(
        Scenario(
            "kill -9 claimed, not started",
            ticks=5,
            steps=(Step(1, kill9_claimed("node-2")),),
            node_options={"node-2": {"poll": "2"}},
            duration_s=6,
            settle_s=3,
        )
    )
    assert report.max_failover_s is not None  # its claims were taken over and ran


@slow_tier
def test_kill_9_and_restart_under_the_same_id(chaos: Chaos) -> None:
    # Back before the dead threshold: the new incarnation must not adopt the old claims.
    chaos(
        Scenario(
            "kill -9, restart same id",
            nodes=2,
            ticks=5,
            env=ENV,
            steps=(Step(1, each(kill9_mid_run("slow"), restart_last_killed())),),
            duration_s=6,
            settle_s=3,
        )
    )


@pytest.mark.parametrize(
    "factor",
    [pytest.param(0.5, marks=slow_tier), 2, pytest.param(10, marks=slow_tier)],
    ids=["0.5x", "2x", "10x"],
)
def test_sigstop_for_a_multiple_of_the_dead_threshold(chaos: Chaos, factor: float) -> None:
    pause = factor * DEAD_S
    report = chaos(
        Scenario(
            f"SIGSTOP {factor:g}x dead threshold",
            ticks=5,
            env=ENV,
            steps=(Step(1, sigstop(pause, task="slow")),),
            duration_s=1 + pause + 2,
            settle_s=3,
        )
    )
    if factor < 1:
        assert report.max_failover_s is None  # nobody took over: the pause was too short


@slow_tier
@pytest.mark.parametrize("twice", [False, True], ids=["once", "twice"])
def test_sigterm_mid_run(chaos: Chaos, twice: bool) -> None:
    chaos(
        Scenario(
            "SIGTERM twice mid-run" if twice else "SIGTERM mid-run",
            ticks=5,
            env={"EASYJOB_CHAOS_SLOW_SECONDS": "3"},
            steps=(Step(1, sigterm(task="slow", twice=twice)),),
            duration_s=6,
            settle_s=3,
        )
    )
