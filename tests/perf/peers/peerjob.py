"""The no-op job the peers run, and its ledger (stdlib only: imported inside the peer venvs).

The worker scripts import this file as the top-level module ``peerjob`` (their own directory is
``sys.path[0]``), so the peers store the job reference ``peerjob:aps4_job`` /
``peerjob:aps3_job`` and every process of a peer resolves it to this same module.

Each execution appends one line to the ledger with a single ``write`` on an ``O_APPEND`` file
descriptor (atomic for lines this short, so processes sharing the file never interleave)::

    <job id> <scheduled fire time, ISO UTC> <actual start, ISO UTC, microseconds> <pid>

The actual start time is taken first thing in the job function.
"""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime

#: Per-thread scheduled fire time, set by the APScheduler 3 executor right before it calls the
#: job function for that fire time (see ``worker_aps3.FireTimeThreadPoolExecutor``).
fire_time = threading.local()

_fd: int | None = None
_pid = os.getpid()


def open_ledger(path: str) -> None:
    global _fd, _pid
    _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    _pid = os.getpid()


def record(job_id: str, fire: datetime, start: datetime) -> None:
    if _fd is None:
        raise RuntimeError("ledger not opened: call peerjob.open_ledger(path) first")
    line = (
        f"{job_id} {fire.astimezone(UTC).isoformat(timespec='microseconds')} "
        f"{start.isoformat(timespec='microseconds')} {_pid}\n"
    )
    os.write(_fd, line.encode())


def aps4_job(job_id: str) -> None:
    """APScheduler 4: the job's own ``scheduled_fire_time`` (from ``current_job``)."""
    start = datetime.now(UTC)
    from apscheduler import current_job  # the peer's venv only; cached after the first call

    record(job_id, current_job.get().scheduled_fire_time, start)


def aps3_job(job_id: str) -> None:
    """APScheduler 3: the run time the executor is running this call for (thread-local)."""
    start = datetime.now(UTC)
    record(job_id, fire_time.value, start)
