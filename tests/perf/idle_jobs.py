"""The job module of ``tests/perf/idle_cost.py``'s nodes: ``IDLE_COST_TASKS`` tasks that
never fire during a trial (5 by default), and ``IDLE_COST_EVERY`` tasks firing every second
(0 by default: an idle node). Loaded by path, so it imports only ``easyjob``."""

from __future__ import annotations

import os

from easyjob import scheduled


def noop() -> None:
    """Does nothing: what is measured is the node around it."""


for _i in range(int(os.environ.get("IDLE_COST_TASKS", "5"))):
    scheduled("0 0 1 1 *", name=f"idle-{_i}")(noop)
for _i in range(int(os.environ.get("IDLE_COST_EVERY", "0"))):
    scheduled("* * * * * *", name=f"every-{_i}", overlap="allow")(noop)
