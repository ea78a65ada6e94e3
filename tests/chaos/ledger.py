"""What the jobs wrote outside the database: one line per event, appended with O_APPEND.

Line format (shared with ``tests/cluster/jobs.py``)::

    TASK FIRE_TIME_ISO NODE ATTEMPT RUN_ID EVENT UNIX_TIME

``EVENT`` is ``ran`` (an instant job), or ``started``/``finished`` (a job that takes time).
An *execution* is one run id whose job began (``ran`` or ``started``): the user function was
called. The times are the job's wall clock; every node runs on this one host.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

__all__ = ["Execution", "Line", "append", "executions", "read"]

BEGIN = ("ran", "started")


@dataclass(frozen=True)
class Line:
    task: str
    fire_time: datetime
    node: str
    attempt: int
    run_id: int
    event: str
    at: float


@dataclass(frozen=True)
class Execution:
    """One call of a user function: run *run_id* (attempt *attempt* of fire
    (*task*, *fire_time*)) began on *node* at wall time *at*; *finished* is False when the
    job wrote ``started`` but never ``finished`` (it was killed or is still running)."""

    task: str
    fire_time: datetime
    node: str
    attempt: int
    run_id: int
    at: float
    finished: bool

    @property
    def key(self) -> tuple[str, datetime]:
        return (self.task, self.fire_time)


def format_line(
    task: str, fire_time: datetime, node: str, attempt: int, run_id: int, event: str
) -> str:
    return f"{task} {fire_time.isoformat()} {node} {attempt} {run_id} {event} {time.time():.6f}\n"


def append(path: str | Path, line: str) -> None:
    """Append one line atomically (one ``write`` on an O_APPEND descriptor)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(path: str | Path) -> list[Line]:
    """Every complete line of the ledger at *path* (none if it does not exist)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    lines = []
    for raw in text.splitlines():
        parts = raw.split(" ")
        if len(parts) != 7:  # a line being written by a node killed mid-write
            continue
        task, fire, node, attempt, run_id, event, at = parts
        fire_time = datetime.fromisoformat(fire)
        lines.append(Line(task, fire_time, node, int(attempt), int(run_id), event, float(at)))
    return lines


def executions(lines: list[Line]) -> list[Execution]:
    """One :class:`Execution` per run id that began, in the order they began."""
    finished = {line.run_id for line in lines if line.event == "finished"}
    seen: set[int] = set()
    out = []
    for line in sorted(lines, key=lambda item: item.at):
        if line.event not in BEGIN or line.run_id in seen:
            continue
        seen.add(line.run_id)
        done = line.event == "ran" or line.run_id in finished
        out.append(
            Execution(
                line.task, line.fire_time, line.node, line.attempt, line.run_id, line.at, done
            )
        )
    return out
