"""Next-fire cost: easyjob's CronSchedule against croniter's own get_next, in one run.

For each expression and zone, ROUNDS rounds each time a batch of easyjob calls and the
same batch done by croniter, back to back, alternating which goes first; the table shows
the median microseconds per call of each and the median of the per-round ratios, so a
noisy moment on a shared machine hits both sides of a ratio alike. Not a test.

- ``next_after``: ``CronSchedule.next_after(t)`` against ``croniter.get_next(start_time=t)``;
- ``fires_between``: the fires in a one-hour window against croniter stepping through it.

croniter is given naive wall times (its cheapest path; it does no time zone work), so the
Europe/Berlin rows charge easyjob's DST handling to easyjob alone. Every round uses other
start instants, so no memo or cache of easyjob's answers.

Run: .venv/bin/python tests/perf/cron_cost.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from croniter import croniter

from easyjob.core.cron import CronSchedule

CASES = [  # (easyjob expression, dialect, croniter expression, croniter seconds first)
    ("*/5 * * * *", None, "*/5 * * * *", False),
    ("0 0/10 * * * ?", "unix", "0 0/10 * * * ?", True),
    ("*/10 * * * * *", "unix", "*/10 * * * * *", True),
    ("0 30 9 * * MON-FRI", "unix", "0 30 9 * * MON-FRI", True),
    ("0 0 1 1 *", None, "0 0 1 1 *", False),
    ("0 0 12 L * ?", "quartz", "0 0 12 L * *", True),
    ("0 0 0 ? * 6#3", "quartz", "0 0 0 * * 5#3", True),
]
ZONES = ("UTC", "Europe/Berlin")
ROUNDS = 9
N = 400  # calls per batch (next_after)
N_WINDOWS = 50  # calls per batch (fires_between: a seconds-level window holds 360 fires)
WINDOW = timedelta(hours=1)
BASE = datetime(2026, 3, 1, tzinfo=UTC)  # the batches span March, with Berlin's spring gap


def starts(round_: int, calls: int) -> list[datetime]:
    """Distinct start instants for one round, descending (so no memo of the last fire helps)."""
    offset = timedelta(seconds=round_ * 0.37 + 0.5)
    return [BASE + offset + timedelta(seconds=7919 * i) for i in reversed(range(calls))]


def timed(batch: Callable[[list[datetime]], object], points: list[datetime]) -> float:
    began = time.perf_counter()
    batch(points)
    return (time.perf_counter() - began) / len(points) * 1e6


def compare(
    ours: Callable[[list[datetime]], object],
    theirs: Callable[[list[datetime]], object],
    calls: int,
) -> tuple[float, float, float]:
    """(croniter us, easyjob us, ratio): medians over interleaved rounds."""
    mine, other, ratios = [], [], []
    for round_ in range(ROUNDS):
        points = starts(round_, calls)
        naive = [p.replace(tzinfo=None) for p in points]
        if round_ % 2:
            a = timed(ours, points)
            b = timed(theirs, naive)
        else:
            b = timed(theirs, naive)
            a = timed(ours, points)
        mine.append(a)
        other.append(b)
        ratios.append(a / b)
    return statistics.median(other), statistics.median(mine), statistics.median(ratios)


def main() -> None:
    print(f"{ROUNDS} interleaved rounds of {N} (next_after) or {N_WINDOWS} calls; medians")
    header = f"{'expression':22} {'tz':14} {'call':13} {'croniter us':>11} {'easyjob us':>10}"
    print(f"{header} {'ratio':>6}")
    worst = 0.0
    for expr, dialect, their_expr, seconds_first in CASES:
        itr = croniter(their_expr, BASE.replace(tzinfo=None), second_at_beginning=seconds_first)

        def their_next(points: list[datetime], itr: croniter = itr) -> None:
            for p in points:
                itr.get_next(datetime, start_time=p)

        def their_window(points: list[datetime], itr: croniter = itr) -> None:
            for p in points:
                end = p + WINDOW
                itr.set_current(p - timedelta(microseconds=1), force=True)
                while itr.get_next(datetime) <= end:
                    pass

        for tz in ZONES:
            schedule = CronSchedule.parse(expr, tz, dialect)

            def our_next(points: list[datetime], s: CronSchedule = schedule) -> None:
                for p in points:
                    s.next_after(p)

            def our_window(points: list[datetime], s: CronSchedule = schedule) -> None:
                for p in points:
                    s.fires_between(p, p + WINDOW)

            for call, ours, theirs, calls in (
                ("next_after", our_next, their_next, N),
                ("fires_between", our_window, their_window, N_WINDOWS),
            ):
                cost_theirs, cost_ours, ratio = compare(ours, theirs, calls)
                worst = max(worst, ratio)
                print(
                    f"{expr:22} {tz:14} {call:13} {cost_theirs:11.1f} {cost_ours:10.1f} "
                    f"{ratio:6.2f}"
                )
    print(f"highest ratio: {worst:.2f} (the issue's limit: 1.5)")


if __name__ == "__main__":
    main()
