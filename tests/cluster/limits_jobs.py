"""Jobs for the max_running and priority tests (tests/cluster/test_limits.py); every one is
manual-only (fired by the tests' triggers) and appends its start and end to the ledger.

- ``capped``: at most two RUNNING across the cluster (overlap ``allow``, ``max_running=2``),
  taking ``EASYJOB_LIMITS_SECONDS`` (default 1.5);
- ``capped_skip``: the same with overlap ``skip``: a run that finds two running is SKIPPED;
- ``blocker``: takes ``EASYJOB_LIMITS_BLOCK_SECONDS`` (default 2), to fill a node's worker;
- ``low`` and ``high``: priority 0 and 10, each taking 0.2 s.
"""

from __future__ import annotations

import os
import time

from easyjob import TaskContext, scheduled
from tests.cluster.recording import record


def _work(ctx: TaskContext, seconds: float) -> None:
    record(ctx, "started")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.02)
    record(ctx, "finished")


SECONDS = float(os.environ.get("EASYJOB_LIMITS_SECONDS", "1.5"))
BLOCK_SECONDS = float(os.environ.get("EASYJOB_LIMITS_BLOCK_SECONDS", "2"))


@scheduled(name="capped", overlap="allow", max_running=2)
def capped(ctx: TaskContext) -> None:
    _work(ctx, SECONDS)


@scheduled(name="capped_skip", overlap="skip", max_running=2)
def capped_skip(ctx: TaskContext) -> None:
    _work(ctx, SECONDS)


@scheduled(name="blocker")
def blocker(ctx: TaskContext) -> None:
    _work(ctx, BLOCK_SECONDS)


@scheduled(name="low", overlap="allow", priority=0)
def low(ctx: TaskContext) -> None:
    _work(ctx, 0.2)


@scheduled(name="high", overlap="allow", priority=10)
def high(ctx: TaskContext) -> None:
    _work(ctx, 0.2)
