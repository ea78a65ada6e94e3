"""How ``easyjob status`` (and ``tasks``/``history`` with filters) scale with the catalogue:
N tasks registered through the store (a tenth of them overdue, some with failed runs), then
each command timed in-process, with its output size.

Usage: ``python -m tests.perf.status_scale URL [N]`` (a database of its own: the tables are
created and tasks named ``scale-*`` registered; default N 100000).
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from datetime import timedelta

import sqlalchemy as sa

from easyjob.cli import main as cli_main
from easyjob.core.records import TaskSpec
from easyjob.store import Store
from easyjob.store.schema import task_table as t

YEARLY = "0 0 0 1 1 *"


def _catalogue(store: Store, size: int) -> None:
    if store.db.read("count", lambda c: c.scalar(sa.select(sa.func.count()).select_from(t))):
        return
    specs = [TaskSpec(name=f"scale-{i:06d}", func="scale:noop", cron=YEARLY) for i in range(size)]
    store.tasks.upsert(specs)
    overdue = store.db.now() - timedelta(minutes=5)
    late = t.update().where(t.c.name.like("scale-%0")).values(next_start_time=overdue)
    store.db.write("overdue", lambda conn: conn.execute(late))
    for i in range(0, min(size, 2000), 7):
        run_id = store.tasks.trigger(f"scale-{i:06d}")
        horizon = store.db.now() + timedelta(days=1)
        candidates = [c for c in store.runs.pending(horizon, 5000) if c.id == run_id]
        (claimed,) = store.runs.claim("scale-node", candidates)
        started = store.runs.start(claimed)
        assert started is not None and not isinstance(started, str)
        store.runs.fail(started, "ValueError: boom", retry_in=None)  # type: ignore[arg-type]


def _timed(*argv: str) -> tuple[float, int, int, int]:
    out = io.StringIO()
    began = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = cli_main(list(argv))
    spent = time.perf_counter() - began
    text = out.getvalue()
    return code, spent, text.count("\n"), len(text.encode())


def main(argv: list[str]) -> int:
    url = argv[0]
    size = int(argv[1]) if len(argv) > 1 else 100_000
    store = Store.open(url, create=True)
    began = time.perf_counter()
    _catalogue(store, size)
    print(f"catalogue of {size} tasks ready in {time.perf_counter() - began:.1f}s")
    store.close()
    for argv_ in (
        ("status",),
        ("status", "--json"),
        ("tasks",),
        ("tasks", "--limit", "50"),
        ("tasks", "--task", "scale-0999*"),
        ("history", "--status", "FAILED", "--limit", "20"),
    ):
        code, spent, lines, size_b = _timed(*argv_, "--db", url)
        if code:  # e.g. an option this version does not have
            print(f"{' '.join(argv_):45} exit code {code}")
            continue
        print(f"{' '.join(argv_):45} {spent:7.2f}s {lines:8d} lines {size_b:11,d} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
