"""Rows of nodes, tasks and runs keyed by the tables' column names, plus derived facts.

A row holds every column of its database table (``task_name`` for a run's task) plus a few
derived ones: a node's heartbeat ``age_s`` and ``held`` runs; a task's ``parent`` name,
``schedule`` (what makes it fire, :func:`~easyjob.views.text.schedule_text`), ``next_fire``,
``lag_s``, ``pending`` runs, ``in_code`` (a live node can run it, see
:class:`~easyjob.views.code.LiveCode`) and ``success_count``; a run's ``duration_s`` and, for
an ABANDONED run, ``taken_by`` (the node of the attempt that took it over). The CLI prints
them as tables or JSON and the dashboard as HTML; neither computes a fact of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from enum import Enum
from typing import Any

from easyjob.core.records import HistoryRow, NodeRow, TaskRow
from easyjob.core.states import RunStatus, TaskStatus
from easyjob.core.store_values import Backlog
from easyjob.views.code import LiveCode
from easyjob.views.text import schedule_text

__all__ = ["Row", "counted", "node_rows", "records", "run_rows", "task_rows"]

Row = dict[str, Any]


def _columns(record: Any) -> Row:
    row = {}
    for field in fields(record):
        value = getattr(record, field.name)
        row[field.name] = value.value if isinstance(value, Enum) else value
    return row


def node_rows(nodes: Iterable[NodeRow], held: Mapping[str, int]) -> list[Row]:
    """Node rows with ``age_s`` (heartbeat age in database time) and ``held`` (runs this
    node has CLAIMED or RUNNING)."""
    rows = []
    for node in nodes:
        row = _columns(node)
        del row["age"]
        rows.append({**row, "age_s": node.age_s, "held": held.get(node.node_id, 0)})
    return rows


def records(items: Iterable[Any]) -> list[Row]:
    """Rows of dataclass records, one column per field."""
    return [_columns(item) for item in items]


def counted(counts: Mapping[str, int], order: Iterable[str] = ()) -> str:
    """``3 RUNNING, 1 DEAD``: *counts* in *order* first, then the others by name; ``none``."""
    keys = [k for k in order if counts.get(k)] + sorted(set(counts) - set(order))
    return ", ".join(f"{counts[k]} {k}" for k in keys if counts[k]) or "none"


def task_rows(
    tasks: Iterable[TaskRow],
    db_now: datetime,
    backlog: Mapping[int, Backlog],
    code: LiveCode,
    next_fires: Mapping[int, datetime] | None = None,
    parents: Mapping[int, Sequence[int]] | None = None,
) -> list[Row]:
    """Task rows with ``parent`` (the parent task's name; a join's first parent),
    ``parents`` (every parent's name: a join's from *parents*, by task id), ``schedule``,
    ``pending`` (runs due and not yet claimed), ``next_fire``, ``lag_s`` and ``in_code``.
    ``next_fire``: the task's earliest fire not started, the earlier of its earliest
    unstarted cron run (*next_fires*, by task id) and ``next_start_time`` (its planning
    cursor). ``lag_s``: how long the oldest unstarted fire has been due, in database time:
    the earlier of ``next_start_time`` and the oldest due PENDING run, 0 when nothing is
    late; None for a PAUSED task, whose fires wait on purpose. ``in_code``: whether a live
    node can run it (:meth:`LiveCode.runs`). A task that left every node's code stays in
    the table, flagged ``in_code`` false, and is never deleted automatically."""
    tasks = list(tasks)
    names = {task.id: task.name for task in tasks}
    rows = []
    for task in tasks:
        waiting = backlog.get(task.id)
        due = [task.next_start_time] if task.next_start_time is not None else []
        if waiting is not None:
            due.append(waiting.oldest_due)
        if task.status == TaskStatus.PAUSED:
            lag: float | None = None
        else:
            lag = max([0.0, *((db_now - t).total_seconds() for t in due)])
        row = _columns(task)
        row["parent"] = names.get(task.pid) if task.pid is not None else None
        ids = (parents or {}).get(task.id) or ([task.pid] if task.pid is not None else [])
        row["parents"] = [names.get(i, f"task {i}") for i in ids]
        row["schedule"] = schedule_text(task, " and ".join(row["parents"]) or None)
        written = (next_fires or {}).get(task.id)
        row["next_fire"] = min(
            (x for x in (written, task.next_start_time) if x is not None), default=None
        )
        row["lag_s"] = lag
        row["pending"] = waiting.runs if waiting else 0
        row["in_code"] = code.runs(task)
        rows.append(row)
    return rows


def run_rows(
    runs: Iterable[HistoryRow], takeovers: Mapping[int, tuple[int, str | None]] | None = None
) -> list[Row]:
    """Run rows with ``duration_s`` (end minus start, for runs that started and ended),
    ``jitter_s`` (the fire's jitter: due after its fire time by that; None without),
    ``late_s`` (start after due time: lateness, measured apart from the jitter),
    ``missed`` (how many fires the row records MISSED: its own, a summary's, or the gap
    before its fire that it carries; see :attr:`HistoryRow.missed_fires`) and
    ``taken_by``: for an ABANDONED run, the node of the attempt that took it over (from
    *takeovers*, :meth:`~easyjob.store.contract.ViewStore.takeovers`; None while unclaimed).
    An ABANDONED run's ``error_msg`` is completed with that attempt and its node."""
    rows = []
    for run in runs:
        row = _columns(run)
        start, end = run.start_time, run.end_time
        row["duration_s"] = (end - start).total_seconds() if start and end else None
        row["jitter_s"] = run.jitter_ms / 1000 if run.jitter_ms is not None else None
        row["late_s"] = max(0.0, (start - run.due_time).total_seconds()) if start else None
        row["missed"] = run.missed_fires
        row["taken_by"] = None
        after = (takeovers or {}).get(run.id)
        if run.status == RunStatus.ABANDONED and after is not None:
            new_id, node = after
            row["taken_by"] = node
            took = f"run {new_id} (attempt {run.attempt + 1}) " + (
                f"taken by node {node}" if node else "not claimed yet"
            )
            row["error_msg"] = f"lost by node {run.node_id}: {run.error_msg}; {took}"
        rows.append(row)
    return rows
