"""Rows written per run, by kind of write: where a run's rows go.

The nodes count the rows each store write wrote, by table and by status inserted
(:class:`easyjob.store.database.Counters`, ``rows_by_write.WRITE.TABLE.STATUS``); the bench
names the kinds a run's life is made of from them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from easyjob.core.store_values import ROWS_BY_WRITE
from easyjob.store import RUNS_TABLE, TASKS_TABLE

__all__ = ["KINDS", "rows_by_kind"]

_ADVANCES = ("advance_tasks", "advance_task")

#: (write, table, status inserted) -> kind; ``*`` matches any status
_KIND_OF: dict[tuple[str, str, str], str] = {
    **{(w, RUNS_TABLE, "PENDING"): "fire insert" for w in _ADVANCES},
    **{(w, RUNS_TABLE, "RUNNING"): "fire insert started" for w in _ADVANCES},
    **{(w, RUNS_TABLE, "MISSED"): "gap summary insert" for w in _ADVANCES},
    **{(w, TASKS_TABLE, "*"): "task-row advance" for w in _ADVANCES},
    ("claim_runs", RUNS_TABLE, "*"): "claim",
    ("claim_next_runs", RUNS_TABLE, "*"): "claim",
    ("runs_running", RUNS_TABLE, "*"): "start",
    ("claim_started_runs", RUNS_TABLE, "*"): "claim-and-start",
    ("runs_success", RUNS_TABLE, "*"): "end",
    ("run_failed", RUNS_TABLE, "*"): "end",
    ("miss_pending", RUNS_TABLE, "*"): "miss_pending",
    ("close_missed", RUNS_TABLE, "*"): "close unstarted",
    ("close_skipped", RUNS_TABLE, "*"): "close unstarted",
    ("runs_released", RUNS_TABLE, "*"): "release",
}

#: every kind, in the order of a run's life
KINDS = (
    "fire insert",
    "fire insert started",
    "gap summary insert",
    "task-row advance",
    "claim",
    "start",
    "claim-and-start",
    "end",
    "miss_pending",
    "close unstarted",
    "release",
    "other",
)


def kind_of(write: str, table: str, status: str) -> str:
    """The kind of a store *write*'s rows in *table* (inserted with *status*, or ``""``)."""
    return _KIND_OF.get((write, table, status)) or _KIND_OF.get((write, table, "*"), "other")


def rows_by_kind(counters: Mapping[str, float]) -> dict[str, int]:
    """Rows written by kind (:data:`KINDS`, only those written) from counters keyed
    ``rows_by_write.WRITE.TABLE.STATUS``."""
    rows: Counter[str] = Counter()
    for key, value in counters.items():
        if key.startswith(ROWS_BY_WRITE):
            write, table, status = key.removeprefix(ROWS_BY_WRITE).split(".")
            rows[kind_of(write, table, status)] += int(value)
    return {kind: rows[kind] for kind in KINDS if rows[kind]}
