"""How long ``easyjob upgrade-db`` takes from release 1 with N run rows (docs/deployment.md).

    PYTHONPATH=. .venv/bin/python tests/perf/upgrade_time.py sqlite:////tmp/m.db 200000

The URL must name an empty database; the rows are those of tests/store/upgrade_rows.py plus
N SUCCESS runs of one task.
"""

from __future__ import annotations

import sys
import time

import sqlalchemy as sa

from easyjob.store import upgrade_schema
from tests.store.upgrade_rows import create_old, fill


def main(url: str, runs: int) -> None:
    engine = sa.create_engine(url)
    create_old(engine, 1)
    fill(engine, 1)
    with engine.begin() as conn:
        task = conn.exec_driver_sql("SELECT id FROM easy_job_task WHERE name = 'jobs.a'").scalar()
        rows = [
            {
                "t": task,
                "f": f"2031-01-{1 + i // 86400 % 28:02d} {i // 3600 % 24:02d}:"
                f"{i // 60 % 60:02d}:{i % 60:02d}.{i // 2419200:06d}",
            }
            for i in range(runs)
        ]
        conn.execute(
            sa.text(
                "INSERT INTO easy_job_task_detail (task_id, fire_time, due_time, node_id, status, "
                "triggered_by, attempt, create_time, end_time) "
                "VALUES (:t, :f, :f, 'n1', 'SUCCESS', 'cron', 1, :f, :f)"
            ),
            rows,
        )
    engine.dispose()
    started = time.monotonic()
    before, after = upgrade_schema(url)
    took = time.monotonic() - started
    print(f"{runs} runs upgraded from schema version {before} to {after} in {took:.2f} s")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
