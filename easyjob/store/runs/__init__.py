"""Statements on ``easy_job_task_detail``: claiming runs and every later transition.

Implements :class:`easyjob.store.contract.RunStore`; the fencing protocol (what a claim
returns, what a version check fences, what a retried write that may have landed reports) is
specified there.

The statements live in one module per role: :mod:`~easyjob.store.runs.reads`,
:mod:`~easyjob.store.runs.claims`, :mod:`~easyjob.store.runs.transitions` (with the fencing
checks of :mod:`~easyjob.store.runs.fencing`), :mod:`~easyjob.store.runs.recovery`,
:mod:`~easyjob.store.runs.misfire`, :mod:`~easyjob.store.runs.chains` (children of a fire),
:mod:`~easyjob.store.runs.attempts` (a retry's or a recovery's new row) and
:mod:`~easyjob.store.runs.started` (fires a behind planner writes already started).
"""

from __future__ import annotations

from easyjob.core.store_values import BLOCKED, Blocked
from easyjob.store.database import Database
from easyjob.store.runs.claims import RunClaims
from easyjob.store.runs.misfire import RunMisfires, skip_unstarted
from easyjob.store.runs.reads import RunReads
from easyjob.store.runs.recovery import RunRecovery
from easyjob.store.runs.transitions import RunTransitions

__all__ = ["BLOCKED", "Blocked", "RunStore", "skip_unstarted"]


class RunStore(RunReads, RunClaims, RunTransitions, RunRecovery, RunMisfires):
    """Runs: claimable PENDING rows, held CLAIMED/RUNNING rows, and finished history."""

    def __init__(self, db: Database) -> None:
        self._db = db
