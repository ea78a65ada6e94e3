"""The statements of ``easyjob bench``: reading a trial's runs and the claim-rate probe.

The bench measures the store from outside; its reads are here so that it, like every other
caller, uses the store's API only. The probe's claim is a bare copy of the claim's SQL shape,
kept apart from :class:`~easyjob.store.runs.RunStore` on purpose: it measures what the
database can do for that pattern, not easyjob.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from easyjob.core.states import RunStatus, Trigger
from easyjob.errors import ConfigError
from easyjob.store.database import Database
from easyjob.store.engine import database_time, db_now
from easyjob.store.expressions import at_versions
from easyjob.store.schema import node_table, task_detail_table, task_table

__all__ = ["BenchStore"]

d = task_detail_table
t = task_table

#: Task names the bench owns: its trial tasks and its probe's.
_OWN = ("bench-%", "probe-%")


class BenchStore:
    """Reads and writes of the benchmark, on a database of its own."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def reset(self) -> None:
        """Delete every task, run and node, after checking that every task is the bench's
        own (named ``bench-*`` or ``probe-*``); raises ConfigError naming how many are not."""

        def write(conn: sa.Connection) -> None:
            others = conn.scalar(
                sa.select(sa.func.count())
                .select_from(t)
                .where(*(~t.c.name.like(pattern) for pattern in _OWN))
            )
            if others:
                raise ConfigError(
                    f"the database holds {others} task(s) that are not benchmark tasks: "
                    "run `easyjob bench` against a database of its own"
                )
            conn.execute(d.delete())
            conn.execute(t.delete())
            conn.execute(node_table.delete())

        self._db.write("bench_reset", write)

    def succeeded(self, start: datetime, end: datetime) -> list[tuple[int, datetime, datetime]]:
        """``(task id, fire time, start time)`` of every SUCCESS run of a ``bench-*`` task
        whose fire time is in [*start*, *end*]."""

        def read(conn: sa.Connection) -> list[tuple[int, datetime, datetime]]:
            query = (
                sa.select(d.c.task_id, d.c.fire_time, d.c.start_time)
                .join_from(d, t, t.c.id == d.c.task_id)
                .where(
                    d.c.status == str(RunStatus.SUCCESS),
                    d.c.fire_time >= start,
                    d.c.fire_time <= end,
                    t.c.name.like("bench-%"),
                )
            )
            return [(row[0], row[1], row[2]) for row in conn.execute(query)]

        return self._db.read("bench_runs", read)

    def succeeded_since(self, start: datetime) -> int:
        """How many runs fired at or after *start* have succeeded."""

        def read(conn: sa.Connection) -> int:
            query = sa.select(sa.func.count()).where(
                d.c.status == str(RunStatus.SUCCESS), d.c.fire_time >= start
            )
            return int(conn.scalar(query) or 0)

        return self._db.read("bench_progress", read)

    def task_count(self) -> int:
        """How many tasks are registered."""

        def read(conn: sa.Connection) -> int:
            return int(conn.scalar(sa.select(sa.func.count()).select_from(t)) or 0)

        return self._db.read("bench_tasks", read)

    def misses(self, start: datetime, end: datetime) -> tuple[int, int]:
        """Of the MISSED rows of ``bench-*`` tasks whose fire time is in [*start*, *end*]:
        how many were written as runs first and marked MISSED later (an insert and a write
        or more each), and how many are summary rows written MISSED by the planner (each
        for one fire or a gap of them)."""

        def read(conn: sa.Connection) -> tuple[int, int]:
            query = (
                sa.select(
                    sa.func.sum(sa.case((d.c.version > 0, 1), else_=0)),
                    sa.func.sum(sa.case((d.c.version == 0, 1), else_=0)),
                )
                .join_from(d, t, t.c.id == d.c.task_id)
                .where(
                    d.c.status == str(RunStatus.MISSED),
                    d.c.fire_time >= start,
                    d.c.fire_time <= end,
                    t.c.name.like("bench-%"),
                )
            )
            after_insert, summaries = conn.execute(query).one()
            return int(after_insert or 0), int(summaries or 0)

        return self._db.read("bench_misses", read)

    def overdue(self, by: timedelta) -> int:
        """How many runs are PENDING or CLAIMED more than *by* past their due time
        (database time)."""

        def read(conn: sa.Connection) -> int:
            cutoff = database_time(conn) - by
            query = sa.select(sa.func.count()).where(
                d.c.status.in_([str(RunStatus.PENDING), str(RunStatus.CLAIMED)]),
                d.c.due_time < cutoff,
            )
            return int(conn.scalar(query) or 0)

        return self._db.read("bench_backlog", read)

    def stale(self) -> int:
        """How many runs are PENDING or CLAIMED for longer than their task's misfire grace
        (database time): 0 when the misfire policy kept up with what the cluster could not
        run. One count per distinct grace."""

        def read(conn: sa.Connection) -> int:
            now = database_time(conn)
            graces = conn.scalars(sa.select(t.c.misfire_grace_ms).distinct()).all()
            held = d.c.status.in_([str(RunStatus.PENDING), str(RunStatus.CLAIMED)])
            counts = (
                conn.scalar(
                    sa.select(sa.func.count())
                    .select_from(d.join(t, t.c.id == d.c.task_id))
                    .where(
                        held,
                        t.c.misfire_grace_ms == grace,
                        d.c.due_time < now - timedelta(milliseconds=grace),
                    )
                )
                for grace in graces
            )
            return sum(int(count or 0) for count in counts)

        return self._db.read("bench_stale", read)

    def seed_probe(self, task_id: int, rows: int) -> int:
        """Replace the runs of task *task_id* by *rows* PENDING runs with consecutive ids;
        returns the first id."""

        def write(conn: sa.Connection) -> int:
            conn.execute(d.delete().where(d.c.task_id == task_id))
            epoch = datetime(2000, 1, 1, tzinfo=UTC)
            values = [
                {
                    "task_id": task_id,
                    "fire_time": epoch,
                    "due_time": epoch,
                    "status": str(RunStatus.PENDING),
                    "triggered_by": str(Trigger.MANUAL),
                    "attempt": i + 1,
                    "create_time": epoch,
                }
                for i in range(rows)
            ]
            conn.execute(d.insert(), values)
            return int(conn.scalar(sa.select(sa.func.min(d.c.id)).where(d.c.task_id == task_id)))

        return self._db.write("probe_seed", write)

    def probe_claim(self, first_id: int, count: int, node_id: str) -> int:
        """One probe claim: read the PENDING rows with ids in [*first_id*, *first_id* +
        *count*), then one batch version-checked UPDATE of the claim's shape that bumps their
        version and leaves them PENDING (the pool never runs dry); returns the rows updated."""

        def write(conn: sa.Connection) -> int:
            rows = conn.execute(
                sa.select(d.c.id, d.c.version).where(
                    d.c.id.between(first_id, first_id + count - 1),
                    d.c.status == str(RunStatus.PENDING),
                )
            ).all()
            if not rows:
                return 0
            expected = {row.id: row.version for row in rows}
            stmt = (
                d.update()
                .where(at_versions(d, expected), d.c.status == str(RunStatus.PENDING))
                .values(version=d.c.version + 1, node_id=node_id, claim_time=db_now())
            )
            return int(conn.execute(stmt).rowcount)

        return self._db.write("probe_claim", write)
