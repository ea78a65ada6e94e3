"""Jobs for the admission tests (tests/cluster/test_admission.py), loaded by every node of
such a cluster; each node declares only the tasks named in its environment, so the nodes of
one cluster can carry different code (node pools, a rolling deploy that adds a task).

``EASYJOB_ADMISSION_TASKS`` (comma-separated, required) names what this node declares:

- ``every_second``: a cron task firing every second;
- ``other_second``: another every-second task (the code of the nodes that lack the first);
- ``on_demand``: a manual-only task;
- ``fan``: the manual-only parent ``fan`` and its four children ``fan_child_0`` ... 3, each
  taking ``EASYJOB_ADMISSION_CHILD_SECONDS`` (default 1);
- ``everywhere``: a broadcast task firing every second.

Each run appends a line to the ledger (tests/cluster/recording.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from easyjob import TaskContext, scheduled
from tests.cluster.recording import record

FAN_CHILDREN = 4


def every_second(ctx: TaskContext) -> None:
    record(ctx)


def other_second(ctx: TaskContext) -> None:
    record(ctx)


def on_demand(ctx: TaskContext) -> None:
    record(ctx)


def fan(ctx: TaskContext) -> None:
    record(ctx)


def fan_child(ctx: TaskContext) -> None:
    record(ctx, "started")
    time.sleep(float(os.environ.get("EASYJOB_ADMISSION_CHILD_SECONDS", "1")))
    record(ctx, "finished")


def everywhere(ctx: TaskContext) -> None:
    record(ctx)


def _fan() -> None:
    scheduled(name="fan")(fan)
    for i in range(FAN_CHILDREN):
        scheduled(parent="fan", name=f"fan_child_{i}")(fan_child)


GROUPS: dict[str, Callable[[], object]] = {
    "every_second": lambda: scheduled("* * * * * *", name="every_second")(every_second),
    "other_second": lambda: scheduled("* * * * * *", name="other_second")(other_second),
    "on_demand": lambda: scheduled(name="on_demand")(on_demand),
    "fan": _fan,
    "everywhere": lambda: scheduled("* * * * * *", name="everywhere", broadcast=True)(everywhere),
}


def _declared() -> list[str]:
    names = [n for n in os.environ.get("EASYJOB_ADMISSION_TASKS", "").split(",") if n]
    unknown = sorted(set(names) - set(GROUPS))
    if not names or unknown:
        raise ValueError(
            f"EASYJOB_ADMISSION_TASKS must name some of {sorted(GROUPS)}, "
            f"got {os.environ.get('EASYJOB_ADMISSION_TASKS')!r}"
        )
    return names


for _name in _declared():
    GROUPS[_name]()
