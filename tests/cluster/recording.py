"""The ledger of runs that cluster test jobs append to, outside the database.

Each run appends one line, so the tests can count what really ran, not just what the
database says ran (see :meth:`tests.cluster.harness.Cluster.ledger`).
"""

from __future__ import annotations

import os
import time

from easyjob import TaskContext

#: ``EASYJOB_TEST_LEDGER``: the ledger file, set by the harness.
LEDGER = os.environ.get("EASYJOB_TEST_LEDGER", "ledger.txt")


def record(ctx: TaskContext, event: str = "ran") -> None:
    """Append ``task fire_time node attempt run_id event wall_time`` for this run."""
    line = (
        f"{ctx.task_name} {ctx.fire_time.isoformat()} {ctx.node_id} {ctx.attempt} "
        f"{ctx.run_id} {event} {time.time():.6f}\n"
    )
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
