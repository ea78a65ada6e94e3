"""CPU of making the records the hot reads make per row: a claim's :class:`Run`, the pending
read's :class:`Candidate` (from rows of their columns, as read), and a run's start
(``Run.bumped``). In this process, no database: the least of 5 repeats of 50,000.

Usage (from the repository root; ``PYTHONPATH=EXPORT python -P -m ...`` for another
checkout)::

    python -m tests.perf.record_cost
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from easyjob.core.states import RunStatus
from easyjob.store.runs import reads

REPEATS = 50_000
#: A stored value per column made an enum, and the columns a plain run leaves NULL.
_ENUMS = {"status": "RUNNING", "triggered_by": "cron", "overlap": "serial", "misfire": "fire_once"}
_NULL = {"anchor_time", "starts_at", "ends_at", "pid", "timeout_ms", "target_node"}
_NULL |= {"trigger_kwargs", "trigger_priority", "max_running", "every_ms"}


def row_of(columns: Sequence[Any]) -> tuple[Any, ...]:
    """A row of *columns* as a plain run's read gives it."""
    return tuple(_ENUMS.get(c.key, None if c.key in _NULL else 1) for c in columns)


def least_us(make: Callable[[], object]) -> float:
    """Microseconds of CPU per call of *make*: the least of 5 repeats."""
    best = []
    for _ in range(5):
        began = time.thread_time()
        for _ in range(REPEATS):
            make()
        best.append((time.thread_time() - began) / REPEATS * 1e6)
    return min(best)


def main() -> int:
    run_row, candidate_row = row_of(reads._RUN_COLUMNS), row_of(reads._CANDIDATE_COLUMNS)
    run = reads._run(run_row)
    print(f"Run from a row: {least_us(lambda: reads._run(run_row)):.2f} us")
    print(f"Candidate from a row: {least_us(lambda: reads._candidate(candidate_row)):.2f} us")
    print(f"Run.bumped: {least_us(lambda: run.bumped(RunStatus.SUCCESS)):.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
