"""Where a run is called (``executor_for``): the one rule, table-tested."""

from __future__ import annotations

from dataclasses import replace

import pytest

from easyjob.core.records import TaskSpec
from easyjob.core.states import Trigger
from easyjob.node.executor import executor_for
from easyjob.registry import Registered
from tests.unit.test_timetable import run


def _entry(executor: str | None) -> Registered:
    return Registered(TaskSpec(name="t1", func="m:t1"), print, False, executor=executor)


@pytest.mark.parametrize(
    ("trigger", "declared", "default", "isolable", "where"),
    [
        (Trigger.CRON, None, "thread", True, "thread"),
        (Trigger.CRON, None, "process", True, "process"),
        (Trigger.CRON, "process", "thread", True, "process"),
        (Trigger.CRON, "thread", "process", True, "thread"),
        (Trigger.MANUAL, "process", "thread", False, "process"),
        (Trigger.RETRY, None, "thread", True, "thread"),
        # a run whose node died while running it: isolated whatever the task and node say
        (Trigger.RECOVERY, None, "thread", True, "process"),
        (Trigger.RECOVERY, "thread", "thread", True, "process"),
        # ... but for a function no child can import by its name
        (Trigger.RECOVERY, None, "thread", False, "thread"),
    ],
)
def test_executor_for(
    trigger: Trigger, declared: str | None, default: str, isolable: bool, where: str
) -> None:
    subject = replace(run(1, 0), triggered_by=trigger)
    assert executor_for(subject, _entry(declared), default, isolable=isolable) == where
