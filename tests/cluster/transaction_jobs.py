"""Jobs for tests/cluster/test_caller_transaction.py: ``ordered``, a manual-only task that
takes the trigger argument ``order`` and writes it to the ledger (tests/cluster/recording.py)
as the line's event, so a test tells which trigger ran."""

from __future__ import annotations

from easyjob import TaskContext, scheduled
from tests.cluster.recording import record


@scheduled("0 0 1 1 *", name="ordered", accepts=("order",), overlap="allow")
def ordered(ctx: TaskContext, order: str) -> None:
    record(ctx, order)
