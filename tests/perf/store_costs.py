"""The store's own cost per run, without nodes: CPU and wall microseconds per run of each
step of a fire's life (read due tasks, plan, advance, read pending, claim, start, finish),
on batches of N every-second tasks, for R rounds.

Usage: ``python -m tests.perf.store_costs URL [N] [R]`` (a database of its own: the tables
are created and tasks named ``cost-*`` registered).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from easyjob.core.cron import CronSchedule
from easyjob.core.planner import plan_advance
from easyjob.core.records import Advance, TaskRow, TaskSpec
from easyjob.store import Store


def _plan(
    due: list[TaskRow], schedule: CronSchedule, now: datetime, horizon: datetime
) -> list[Advance]:
    return [plan_advance(task, schedule, now, horizon)[0] for task in due]


def main(argv: list[str]) -> int:
    url = argv[0]
    size = int(argv[1]) if len(argv) > 1 else 500
    rounds = int(argv[2]) if len(argv) > 2 else 10
    store = Store.open(url, create=True)
    specs = [
        TaskSpec(name=f"cost-{i}", func="costs:noop", cron="* * * * * *", overlap="allow")  # type: ignore[arg-type]
        for i in range(size)
    ]
    store.tasks.upsert(specs)
    schedule = CronSchedule.parse("* * * * * *")
    spent: dict[str, list[float]] = {}

    def timed(step: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        result = fn(*args, **kwargs)
        total = spent.setdefault(step, [0.0, 0.0])
        total[0] += time.process_time() - cpu
        total[1] += time.perf_counter() - wall
        return result

    start = store.db.now()
    finished = 0
    for i in range(rounds):
        # round i plays second i of the schedule: the rounds run faster than the clock, and
        # with the clock's time each round after the first found nothing due (empty batches)
        now = start + timedelta(seconds=i)
        horizon = now + timedelta(seconds=1.5)
        due = timed("due", store.tasks.due, horizon, size)
        advances: list[Advance] = timed("plan", _plan, due, schedule, now, horizon)
        timed("advance", store.tasks.advance, "costs", advances)
        pending = timed("pending", store.runs.pending, horizon, size)
        runs = timed("claim", store.runs.claim, "costs", pending)
        started = timed("start", store.runs.start_many, runs, exclusive=set())
        finished += len(timed("finish", store.runs.finish_many, list(started.values())))
    store.close()
    if finished < size * rounds:
        raise SystemExit(f"only {finished} of {size * rounds} runs finished: short batches")
    per_run = finished
    for step, (cpu, wall) in spent.items():
        cpu_us, wall_us = cpu * 1e6 / per_run, wall * 1e6 / per_run
        print(f"{step:8s} cpu {cpu_us:7.1f} us/run   wall {wall_us:7.1f} us/run")
    cpu_us = sum(cpu for cpu, _ in spent.values()) * 1e6 / per_run
    print(f"total    cpu {cpu_us:7.1f} us/run ({size} runs per batch, {rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
