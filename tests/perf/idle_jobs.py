"""The job module of ``tests/perf/idle_cost.py``'s nodes: ``IDLE_COST_TASKS`` tasks that
never fire during a trial (5 by default), and ``IDLE_COST_EVERY`` tasks firing every second
(0 by default: an idle node). Loaded by path, so it imports only ``easyjob``.

Python 3.11 does not give its threads' names to the operating system, so every thread's
``/proc/PID/task/TID/comm`` reads ``python``: imported before the node starts its threads,
this module makes each thread started afterwards set its own (``prctl(PR_SET_NAME)``, the
name less ``easyjob-``, 15 bytes at most), once, as it starts."""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from easyjob import scheduled

_PR_SET_NAME = 15
_libc = ctypes.CDLL(None, use_errno=True)
_bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]


def _named(self: threading.Thread) -> Any:
    _libc.prctl(_PR_SET_NAME, self.name.removeprefix("easyjob-").encode()[:15], 0, 0, 0)
    return _bootstrap(self)


threading.Thread._bootstrap_inner = _named  # type: ignore[attr-defined]


def noop() -> None:
    """Does nothing: what is measured is the node around it."""


for _i in range(int(os.environ.get("IDLE_COST_TASKS", "5"))):
    scheduled("0 0 1 1 *", name=f"idle-{_i}")(noop)
for _i in range(int(os.environ.get("IDLE_COST_EVERY", "0"))):
    scheduled("* * * * * *", name=f"every-{_i}", overlap="allow")(noop)
