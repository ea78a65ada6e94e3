"""Scenario 1: three nodes race for 300 one-off fires due at the same instant, while 20
tasks fire every second. Every fire runs exactly once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.chaos.conftest import Chaos
from tests.chaos.runner import Play, Scenario, Step

pytestmark = [pytest.mark.chaos, pytest.mark.cluster]


def three_hundred_at_once(play: Play) -> None:
    play.insert_oneoffs(300, play.db_now() + timedelta(seconds=1.5))


def test_contention_300_fires_due_at_once_plus_20_every_second(chaos: Chaos) -> None:
    report = chaos(
        Scenario(
            "contention",
            nodes=3,
            ticks=20,
            steps=(Step(0.5, three_hundred_at_once),),
            duration_s=5,
            settle_s=1,
        )
    )
    assert report.expected >= 300 + 20 * 5
    assert report.duplicated == 0
