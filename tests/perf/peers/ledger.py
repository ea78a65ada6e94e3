"""Measurements from a peer's ledger, computed independently of the peer (stdlib only).

A ledger line is ``<job id> <scheduled fire ISO> <actual start ISO> <pid>`` (see ``peerjob``).
Only fires scheduled inside the steady-state window ``[start, end)`` (whole epoch seconds) count:

- ``expected``: jobs x window seconds (every job fires every whole second);
- ``executions``: ledger lines whose fire time is in the window (duplicates included);
- ``runs``: expected (job, fire time) pairs of the window with at least one line: the fires
  actually run, each counted once (easyjob's bench counts the same way);
- ``runs_per_s``: ``runs`` over the window's seconds: the sustained rate. Duplicates and missed
  fires earn nothing, so a scheduler is never credited with the rate it was offered;
- ``missed``: expected pairs with no line at all (``expected - runs``);
- ``duplicates``: executions beyond the first of the same (job, fire time);
- ``unexpected``: executions in the window whose (job, fire time) was not expected (an unknown
  job, or a fire time off the whole second): never a hit;
- ``lateness_ms``: actual start minus scheduled fire time over all executions in the window,
  nearest-rank percentiles p50/p95/p99 and the max, in milliseconds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (0.0 for none)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _micros(iso: str) -> int:
    moment = datetime.fromisoformat(iso)
    if moment.tzinfo is None:
        raise ValueError(f"naive timestamp in ledger: {iso!r}")
    return round(moment.timestamp() * 1_000_000)


@dataclass
class LedgerStats:
    window_start: int
    window_end: int
    expected: int = 0
    executions: int = 0
    runs: int = 0
    missed: int = 0
    duplicates: int = 0
    unexpected: int = 0
    lines: int = 0
    bad_lines: int = 0
    lateness_ms: dict[str, float] = field(default_factory=dict)
    runs_by_pid: dict[str, int] = field(default_factory=dict)

    @property
    def window_s(self) -> int:
        return self.window_end - self.window_start

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.window_s if self.window_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "expected": self.expected,
            "executions": self.executions,
            "runs": self.runs,
            "runs_per_s": round(self.runs_per_s, 1),
            "missed": self.missed,
            "duplicates": self.duplicates,
            "unexpected": self.unexpected,
            "lateness_ms": self.lateness_ms,
            "runs_by_pid": self.runs_by_pid,
            "ledger_lines": self.lines,
        }


def analyze(lines: Iterable[str], job_ids: Sequence[str], start: int, end: int) -> LedgerStats:
    """Measure the runs of fires scheduled in ``[start, end)`` (epoch seconds)."""
    stats = LedgerStats(window_start=start, window_end=end)
    jobs = set(job_ids)
    seconds = max(0, end - start)
    stats.expected = len(jobs) * seconds
    lo, hi = start * 1_000_000, end * 1_000_000
    seen: Counter[tuple[str, int]] = Counter()
    lateness: list[float] = []
    by_pid: Counter[str] = Counter()
    for line in lines:
        parts = line.split()
        if not parts:
            continue
        stats.lines += 1
        try:
            job_id, fire_iso, start_iso, pid = parts
            fire, began = _micros(fire_iso), _micros(start_iso)
        except ValueError:
            stats.bad_lines += 1
            continue
        if not lo <= fire < hi:
            continue
        stats.executions += 1
        by_pid[pid] += 1
        lateness.append((began - fire) / 1000.0)
        if job_id in jobs and fire % 1_000_000 == 0:
            seen[(job_id, fire)] += 1
        else:
            stats.unexpected += 1
    stats.runs = len(seen)
    stats.missed = stats.expected - stats.runs
    stats.duplicates = sum(count - 1 for count in seen.values())
    lateness.sort()
    stats.lateness_ms = {
        "p50": round(percentile(lateness, 0.50), 1),
        "p95": round(percentile(lateness, 0.95), 1),
        "p99": round(percentile(lateness, 0.99), 1),
        "max": round(lateness[-1], 1) if lateness else 0.0,
    }
    stats.runs_by_pid = dict(sorted(by_pid.items()))
    return stats


def analyze_file(path: Path, job_ids: Sequence[str], start: int, end: int) -> LedgerStats:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return analyze(f, job_ids, start, end)
    except FileNotFoundError:  # no job ever ran
        return analyze([], job_ids, start, end)
