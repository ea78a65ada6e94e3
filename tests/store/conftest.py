"""Store fixtures: a fresh schema on each of sqlite, postgresql and mariadb."""

from __future__ import annotations

from datetime import timedelta

from easyjob.core.records import Advance, PlannedFire, TaskSpec
from easyjob.store import Store


def every_second(name: str = "job", **kwargs: object) -> TaskSpec:
    return TaskSpec(name=name, func="tests.jobs:noop", cron="* * * * * *", **kwargs)  # type: ignore[arg-type]


def make_pending(store: Store, name: str = "job", fires: int = 1) -> list[int]:
    """Register *name* and write *fires* PENDING runs for it; returns their run ids."""
    (task,) = store.tasks.upsert([every_second(name)])
    assert task.next_start_time is not None
    times = [task.next_start_time + timedelta(seconds=i) for i in range(fires)]
    advance = Advance(
        task.id,
        task.version,
        times[-1] + timedelta(seconds=1),
        tuple(PlannedFire(t) for t in times),
    )
    assert store.tasks.advance("materializer", [advance]) == [task.id]
    horizon = times[-1] + timedelta(seconds=1)
    return [c.id for c in store.runs.pending(horizon, 1000) if c.task_id == task.id]
