"""Next-fire cost: easyjob's CronSchedule.next_after against croniter's own get_next.

Prints microseconds per call (median of 5 runs) for a mix of expressions; not a test.
Run: .venv/bin/python tests/perf/cron_cost.py
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta

from croniter import croniter

from easyjob.core.cron import CronSchedule

CASES = [  # (easyjob expression, dialect, croniter expression, croniter seconds first)
    ("*/5 * * * *", None, "*/5 * * * *", False),
    ("0 0/10 * * * ?", "unix", "0 0/10 * * * ?", True),
    ("0 30 9 * * MON-FRI", "unix", "0 30 9 * * MON-FRI", True),
    ("0 0 1 1 *", None, "0 0 1 1 *", False),
    ("0 0 12 L * ?", "quartz", "0 0 12 L * *", True),
    ("0 0 0 ? * 6#3", "quartz", "0 0 0 * * 5#3", True),
]
N = 2000


def per_call(fn: object, starts: list[datetime]) -> float:
    runs = []
    for _ in range(5):
        began = time.perf_counter()
        for start in starts:
            fn(start)  # type: ignore[operator]
        runs.append((time.perf_counter() - began) / len(starts) * 1e6)
    return statistics.median(runs)


def main() -> None:
    base = datetime(2026, 5, 1, tzinfo=UTC)
    # Distinct starts, descending, so neither easyjob's memo (the last pair of fires) nor
    # its lru_cache answers: every call computes.
    starts = [base + timedelta(seconds=7919 * i + 0.5) for i in reversed(range(N))]
    naive = [s.replace(tzinfo=None) for s in starts]
    print(f"{'expression':28} {'tz':14} {'croniter us':>11} {'easyjob us':>11} {'ratio':>6}")
    for expr, dialect, theirs, seconds_first in CASES:
        itr = croniter(theirs, base.replace(tzinfo=None), second_at_beginning=seconds_first)
        cost_croniter = per_call(lambda s, itr=itr: itr.get_next(datetime, start_time=s), naive)
        for tz in ("UTC", "Europe/Berlin"):
            schedule = CronSchedule.parse(expr, tz, dialect)
            cost = per_call(schedule.next_after, starts)
            print(
                f"{expr:28} {tz:14} {cost_croniter:11.1f} {cost:11.1f} {cost / cost_croniter:6.2f}"
            )


if __name__ == "__main__":
    main()
