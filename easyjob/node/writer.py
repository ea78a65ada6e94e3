"""The one writer of a node's run states: claim, start, success, failure, timeout, release,
close, miss.

Every transition of a run this node makes goes through it: the loader's claims and the
misses the admission rule decides for PENDING runs (:meth:`claim`, :meth:`claim_started`,
:meth:`miss_pending`), the recovery thread's takeovers (:meth:`recover`), and everything
after, which only the dispatcher thread writes (at
shutdown, the thread that stops the node, once the dispatcher thread has ended). Every write is
version-checked by the store (a fenced write changes nothing and says so) and retried on
transient errors by the store's one retry policy, which is bounded. A write that still
fails (the database stayed down past that deadline, or the error is permanent) is given
up: it is logged with the runs it concerned and reported as ``None``. The dispatcher then
forgets those runs; the database still says this node holds them, and the node's orphan
sweep takes them back as new attempts (at least once: a run whose function returned but
whose success could not be written runs again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from easyjob.core.admission import facts_of, start_deadline
from easyjob.core.outcome import Outcome
from easyjob.core.records import Candidate, HeldRun, Run
from easyjob.core.states import RunStatus
from easyjob.logs import ContextLogger, run_context
from easyjob.store.contract import Starts, Store

__all__ = ["RunWriter"]

T = TypeVar("T")

#: How many runs of a batch closed by policy the log names one by one (then a count).
_TOLD = 5


class RunWriter:
    """See the module docstring."""

    def __init__(self, store: Store, node_id: str) -> None:
        self._store = store
        self._node_id = node_id
        self._log = ContextLogger(logging.getLogger("easyjob.worker"), {"node_id": node_id})
        self.given_up = 0  # writes abandoned to the orphan sweep
        self.succeeded = 0  # runs this node wrote SUCCESS (what it runs: the pace's floor)

    def claim(self, candidates: Sequence[Candidate]) -> list[Run]:
        """PENDING -> CLAIMED for this node (see ``RunStore.claim``): the runs won. An error
        is raised to the loader, which tries again at its next poll (nothing is held yet)."""
        return self._store.runs.claim(self._node_id, candidates)

    def claim_next(self, horizon: datetime, limit: int, exclude: Collection[int]) -> list[Run]:
        """The ``skip_locked`` mode's locking claim of the next due runs (see
        ``RunStore.claim_next``)."""
        return self._store.runs.claim_next(self._node_id, horizon, limit, exclude)

    def claim_started(
        self, candidates: Sequence[Candidate], *, exclusive: Collection[int] = ()
    ) -> list[Run]:
        """PENDING -> RUNNING for this node in one write (see ``RunStore.claim_started``),
        each run only before its admission deadline in database time."""
        return self._store.runs.claim_started(
            self._node_id, candidates, exclusive=exclusive, deadlines=_deadlines(candidates)
        )

    def miss_pending(self, runs: Mapping[int, tuple[int, str]]) -> set[int]:
        """PENDING -> MISSED, ``id -> (version, reason)``: misses the admission rule decided
        (see ``RunStore.miss_pending``); the ids written."""
        return self._store.runs.miss_pending(runs)

    def recover(
        self,
        runs: Sequence[HeldRun],
        *,
        reason: str | None = None,
        max_recoveries: int | None = None,
        gave_up: list[int] | None = None,
        recovered: list[tuple[HeldRun, int]] | None = None,
    ) -> list[int]:
        """CLAIMED/RUNNING of a dead node (or an orphan of this one) -> ABANDONED, with a
        new attempt, or FAILED past *max_recoveries* (see ``RunStore.recover``): the recovery
        thread's and the start-up's takeovers. The ids of the new attempts."""
        return self._store.runs.recover(
            runs,
            self._node_id,
            reason=reason,
            max_recoveries=max_recoveries,
            gave_up=gave_up,
            recovered=recovered,
        )

    def start(self, runs: Sequence[Run], exclusive: set[int]) -> Starts | None:
        """CLAIMED -> RUNNING for *runs* in one statement (see ``RunStore.start_many``)."""
        deadlines = _deadlines(runs)
        return self._write(
            runs,
            "start",
            lambda: self._store.runs.start_many(runs, exclusive=exclusive, deadlines=deadlines),
        )

    def succeed(self, done: Sequence[tuple[Run, Outcome, float]]) -> set[int] | None:
        """RUNNING -> SUCCESS for the runs of *done* ``(run, outcome, seconds)``, with their
        results; the ids written (the others were fenced). Each is logged at DEBUG."""
        runs = [run for run, _, _ in done]
        results = {run.id: o.result for run, o, _ in done if o.result is not None}
        notes = {run.id: o.note for run, o, _ in done if o.note is not None}
        won = self._write(
            runs,
            "record the success of",
            lambda: self._store.runs.finish_many(runs, results, notes),
        )
        self.succeeded += len(won or ())
        if won and (notes or self._log.isEnabledFor(logging.DEBUG)):
            for run, outcome, seconds in done:
                if run.id not in won:
                    continue
                if outcome.note is not None:
                    self.say(logging.INFO, run, "succeeded in %.3fs; %s", seconds, outcome.note)
                else:
                    self.say(logging.DEBUG, run, "succeeded in %.3fs", seconds)
        return won

    def fail(
        self,
        run: Run,
        error: str,
        *,
        traceback: str | None = None,
        exception: BaseException | None = None,
    ) -> bool | None:
        """RUNNING -> FAILED with *error* (``Type: message``) and *traceback*, and its next
        attempt if it has retries left. Logged at WARNING when retried, else at ERROR, with
        the traceback of *exception* (a JSON log carries it as ``exc_info``)."""
        retry_in = None
        if run.attempt <= run.retries:
            retry_in = timedelta(milliseconds=run.retry_delay_ms) * (2 ** (run.attempt - 1))
        won = self._write(
            [run],
            "record the failure of",
            lambda: self._store.runs.fail(run, error, retry_in=retry_in, traceback=traceback),
        )
        if won:
            self.say(
                logging.WARNING if retry_in else logging.ERROR,
                run,
                "failed (attempt %d)%s: %s",
                run.attempt,
                f", retry in {retry_in}" if retry_in else "",
                error,
                exc_info=exception,
            )
        elif won is False:
            self.fenced(run)
        return won

    def release(self, runs: Sequence[Run], why: str) -> set[int] | None:
        """CLAIMED -> PENDING in one statement: any node may claim *runs* again."""
        store = self._store.runs
        won = self._write(runs, "release", lambda: store.release_many(runs))
        if won:
            if len(runs) == 1:
                self.say(logging.INFO, runs[0], "released (%s)", why)
            else:
                self._log.info("released %d run(s) (%s)", len(won), why)
        return won

    def close(
        self, runs: Sequence[Run], status: RunStatus, reasons: Mapping[int, str]
    ) -> set[int] | None:
        """CLAIMED -> MISSED or SKIPPED, each run with its reason (misfire or overlap
        policy), in one statement; returns the ids closed (None: the write was given up)."""
        store = self._store.runs
        won = self._write(
            runs, f"close as {status}", lambda: store.close_many(runs, status, reasons)
        )
        if won is None:
            return None
        for run in runs[:_TOLD]:
            if run.id in won:
                self.say(logging.INFO, run, "%s", reasons[run.id])
            else:
                self.say(logging.WARNING, run, "could not be closed as %s (fenced)", status)
        if len(runs) > _TOLD:
            self._log.info("... and %d more run(s) closed as %s", len(runs) - _TOLD, status)
        return won

    def fenced(self, run: Run) -> None:
        self.say(
            logging.WARNING,
            run,
            "its outcome was fenced: it was taken over, timed out or paused meanwhile",
        )

    def _write(self, runs: Sequence[Run], what: str, write: Callable[[], T]) -> T | None:
        try:
            return write()
        except Exception:
            self.given_up += len(runs)
            ids = ", ".join(str(r.id) for r in runs[:20]) + (" ..." if len(runs) > 20 else "")
            self._log.exception(
                "could not %s run(s) %s; giving up: this node forgets them and its orphan "
                "sweep takes them back",
                what,
                ids,
            )
            return None

    def say(self, level: int, run: Run, msg: str, *args: object, **kwargs: Any) -> None:
        extra = run_context(run.task_name, run.fire_time, run.id, run.attempt)
        self._log.log(
            level, f"run %s of %s: {msg}", run.id, run.task_name, *args, extra=extra, **kwargs
        )


def _deadlines(runs: Sequence[Candidate | Run]) -> dict[int, datetime]:
    """Each run's :func:`~easyjob.core.admission.start_deadline`, for those that have one."""
    found = {run.id: start_deadline(facts_of(run)) for run in runs}
    return {run_id: at for run_id, at in found.items() if at is not None}
