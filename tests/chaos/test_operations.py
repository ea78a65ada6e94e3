"""Scenario 14: a rolling deploy that changes the ticks' cron text; scenario 15: a job that
kills its process. 3 nodes, 5 tasks firing every second throughout (issue 12).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import ledger
from tests.chaos.catalog import TICK_CRON
from tests.chaos.conftest import Chaos
from tests.chaos.operations import PoisonOutcome, deploy, expect_tick_cron, poison
from tests.chaos.runner import Scenario, Step, each

pytestmark = [pytest.mark.chaos, pytest.mark.cluster, pytest.mark.slow_chaos]
NEW_CRON = "*/1 * * * * ?"  # the same fires as TICK_CRON, another text
NEW = {"EASYJOB_CHAOS_TICK_CRON": NEW_CRON}
OLD = {"EASYJOB_CHAOS_TICK_CRON": TICK_CRON}


def test_rolling_deploy_with_a_changed_cron(chaos: Chaos) -> None:
    # node-2 first comes back with the old code (a straggler replica): the row takes the old
    # cron back until node-2 starts with the new code; no fire is lost or doubled meanwhile.
    report = chaos(
        Scenario(
            "rolling deploy, cron text changed",
            ticks=5,
            steps=(
                Step(1, deploy("node-0", NEW)),
                Step(3, deploy("node-1", NEW)),
                Step(5, each(deploy("node-2", OLD), expect_tick_cron(TICK_CRON))),
                Step(7, each(deploy("node-2", NEW), expect_tick_cron(NEW_CRON))),
            ),
            duration_s=9,
            settle_s=3,
        )
    )
    assert report.duplicated == 0
    assert [f.split("@")[0] for f in report.faults] == ["sigterm"] * 4


@pytest.mark.parametrize("backoff_s", [0.0, 2.0], ids=["restart-at-once", "restart-after-2s"])
def test_a_job_that_kills_its_process(chaos: Chaos, tmp_path: Path, backoff_s: float) -> None:
    # max_recoveries 1 (the default): run once, then once more after its node died, in a
    # child process (a recovered run always is), which dies instead of a node: FAILED.
    # Restarted at once, the killed node takes its predecessor's run back itself; restarted
    # after 2 s (past the 1.5 s dead threshold), a peer has taken it over. Either stays up.
    outcome = PoisonOutcome()
    report = chaos(
        Scenario(
            f"poison job (os._exit), supervisor restart after {backoff_s:g} s",
            ticks=5,
            steps=(Step(1, poison(outcome, backoff_s)),),
            duration_s=6,
            settle_s=4,  # more than two dead thresholds: time for any further recovery
        )
    )
    assert [code for _, code in outcome.killed] == [1]
    assert outcome.failed is not None
    assert outcome.failed.error_msg == "its process exited with code 1 before the job returned"
    assert (outcome.failed.attempt, outcome.failed.recoveries) == (2, 1)
    ran = ledger.executions(ledger.read(tmp_path / "ledger.txt"))
    assert len([e for e in ran if e.task == "poison"]) == 2
    assert [f.split("@")[0] for f in report.faults] == ["crash"]
