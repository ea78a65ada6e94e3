"""``chaos``: play a scenario on this test's database, print its report, assert no invariant
broke. Every scenario test takes ``db_url``/``db_server``, so it runs once per backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.checker import Report, check
from tests.chaos.runner import Scenario, play
from tests.rig.servers import DatabaseServer

Chaos = Callable[[Scenario], Report]


@pytest.fixture
def chaos(db_url: str, db_server: DatabaseServer | None, tmp_path: Path) -> Chaos:
    def run(scenario: Scenario) -> Report:
        report = play(scenario, db_url, db_server, tmp_path)
        figures = {k: v for k, v in report.as_dict().items() if k != "examples"}
        print(f"\n{figures}")
        broken = check(report)
        assert broken == [], "\n".join(broken) + f"\n(node logs and ledger in {tmp_path})"
        return report

    return run
