"""In-process node tests: the loader, timetable and dispatcher of real nodes, stepped by the
test under a FakeClock, on a real SQLite file whose database time is that clock.

Nothing sleeps: the test moves the clock and steps the parts. Jobs run on a
:class:`ManualPool`, where they wait until the test lets them return, so a "slow" job is
one the test keeps running while it moves the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from easyjob import FakeClock, NodeConfig, scheduled
from easyjob.core.records import HistoryRow
from easyjob.core.states import RunStatus
from easyjob.events import Hook
from easyjob.node.node import Node
from easyjob.registry import Registry
from easyjob.store import Store
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t

START = datetime(2030, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC)  # half a second before a fire


class ManualPool(Executor):
    """Jobs wait here until :meth:`finish` runs them, on the test's thread."""

    def __init__(self) -> None:
        self.queued: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.queued.append((fn, args))
        done: Future[Any] = Future()
        done.set_result(None)
        return done

    def finish(self, keep: Callable[[str], bool] = lambda name: False) -> int:
        """Let every queued job return but those of tasks *keep* says to keep running."""
        go = [(fn, args) for fn, args in self.queued if not keep(args[0].task_name)]
        self.queued = [(fn, args) for fn, args in self.queued if keep(args[0].task_name)]
        for fn, args in go:
            fn(*args)
        return len(go)

    def running(self) -> list[str]:
        return [args[0].task_name for _, args in self.queued]


class Rig:
    """One node's parts on a fake clock; :meth:`tick` is a moment of a node's life."""

    def __init__(
        self,
        tmp: Path,
        registry: Registry,
        pool: Executor | None = None,
        listeners: Sequence[Hook] = (),
        metrics: bool = False,
        background: bool = False,
        clock: FakeClock | None = None,
        **config: Any,
    ) -> None:
        """*clock*: another rig's, for nodes that share one database (and its time)."""
        self.clock = clock or FakeClock(START)
        self.store = Store.open(f"sqlite:///{tmp / 'node.db'}", create=True, clock=self.clock)
        self.pool = ManualPool()
        config = {"node_id": "n1", "poll": 1.0, **config}
        self.node = Node(
            self.store,
            NodeConfig(**config),
            registry=registry,
            clock=self.clock,
            pool=pool or self.pool,
            listeners=listeners,
            metrics=metrics,
        )
        self.node.prepare(background=background)  # background: the test registers the tasks
        self.keep: Callable[[str], bool] = lambda name: False

    def tick(self, seconds: float = 0.0) -> None:
        """Move the clock, then do what the node's threads would: heartbeat, load (until
        the loader has nothing more at once), dispatch, let jobs return, write outcomes,
        deliver events to hooks (unless the test started the event thread)."""
        if seconds:
            self.clock.advance(seconds)
        node = self.node
        node.heartbeat.step()
        for _ in range(50):
            if node.planner.step() != 0.0:
                break
        for _ in range(50):
            if node.loader.step() != 0.0:
                break
        quiet = 0  # rounds in a row that handed no job over (a round may hand one next)
        for _ in range(100):
            node.dispatcher.step()
            quiet = 0 if self.pool.finish(self.keep) else quiet + 1
            if quiet == 2:
                break
        node.dispatcher.step()
        if not node.hooks.alive():
            node.hooks.drain()

    def run_for(self, seconds: float, step: float = 0.1) -> None:
        for _ in range(round(seconds / step)):
            self.tick(step)

    def history(self, task: str) -> list[HistoryRow]:
        return sorted(
            self.store.history.runs(task=task, limit=100_000), key=lambda r: (r.fire_time, r.id)
        )

    def statuses(self, task: str) -> dict[RunStatus, int]:
        out: dict[RunStatus, int] = {}
        for row in self.history(task):
            out[row.status] = out.get(row.status, 0) + 1
        return out

    def lateness_ms(self, task: str) -> list[float]:
        return [
            (r.start_time - r.fire_time).total_seconds() * 1000
            for r in self.history(task)
            if r.start_time is not None
        ]

    def sql(self, text: str) -> None:
        self.store.db.write("test sql", lambda conn: conn.execute(sa.text(text)))

    def age_pending(self, seconds: float, *, cursors: bool = False) -> None:
        """Move every PENDING run's due and fire time back by *seconds*; with *cursors*,
        every task's ``next_start_time`` too (as if the clock had moved on that much while
        every node was down)."""
        delta = timedelta(seconds=seconds)

        def age(conn: sa.Connection) -> None:
            if cursors:
                for row in conn.execute(sa.select(t.c.id, t.c.next_start_time)).all():
                    if row.next_start_time is not None:
                        conn.execute(
                            t.update()
                            .where(t.c.id == row.id)
                            .values(next_start_time=row.next_start_time - delta)
                        )
            rows = conn.execute(
                sa.select(d.c.id, d.c.fire_time, d.c.due_time).where(d.c.status == "PENDING")
            ).all()
            for row in rows:
                conn.execute(
                    d.update()
                    .where(d.c.id == row.id)
                    .values(fire_time=row.fire_time - delta, due_time=row.due_time - delta)
                )

        self.store.db.write("age", age)


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
def rig(tmp_path: Path, registry: Registry) -> Iterator[Callable[..., Rig]]:
    made: list[Rig] = []

    def make(**config: Any) -> Rig:
        made.append(Rig(tmp_path, registry, **config))
        return made[-1]

    yield make
    for rig_ in made:
        rig_.store.close()


def task(registry: Registry, name: str, cron: str = "* * * * * *", **options: Any) -> None:
    """Declare a no-op task *name* in *registry*."""

    def job() -> None:
        pass

    job.__qualname__ = name
    scheduled(cron, name=name, registry=registry, **options)(job)
