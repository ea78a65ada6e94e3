"""Jobs for the jitter and calendar cluster tests (tests/cluster/test_calendars.py).

- ``jittered``: every 2 s, each fire due up to 1.5 s after its fire time.
- ``holiday``: every second in ``EASYJOB_TEST_CAL_TZ``, skipping the days of calendar
  ``today``.
- ``later``: every second, skipping the days of calendar ``later`` (added while it runs).
- ``unknown_calendar``: every second, naming a calendar that never exists.
"""

from __future__ import annotations

import os

from easyjob import TaskContext, scheduled
from tests.cluster.recording import record


@scheduled("*/2 * * * * *", name="jittered", jitter=1.5)
def jittered(ctx: TaskContext) -> None:
    record(ctx)


@scheduled(
    "* * * * * *", name="holiday", tz=os.environ.get("EASYJOB_TEST_CAL_TZ", "UTC"), exclude="today"
)
def holiday(ctx: TaskContext) -> None:
    record(ctx)


@scheduled("* * * * * *", name="later", exclude="later")
def later(ctx: TaskContext) -> None:
    record(ctx)


@scheduled("* * * * * *", name="unknown_calendar", exclude="absent")
def unknown_calendar(ctx: TaskContext) -> None:
    record(ctx)
