"""The dispatcher: the one thread that starts this node's runs and writes their outcomes.

Claimed runs wait in the :class:`~easyjob.node.timetable.Timetable` until their time;
worker threads only ever hold running jobs. Runs the loader claimed and started in one
write (within LEAD of their due time, a worker free for each) take their worker slot at
once and are called at their due time. Each round of the thread (:meth:`step`):

1. writes the outcomes of jobs that returned (successes in one batch, failures one by
   one); their workers came free when the functions returned (the runs stay held here
   until their outcomes are written);
2. writes a timeout for each job past its task's timeout: the run is FAILED (or retried)
   at once and its cancellation flag set; the thread cannot be killed, so it keeps its
   worker, counted as *stuck*, until the function returns;
3. starts the runs whose time comes within :data:`LEAD`, in one version-checked batch
   written that much ahead (the write is off the start's path: each function is called
   at its run's due time, never before), each as the admission rule says
   (:func:`easyjob.core.admission.admit`: MISSED when superseded by a later fire due by
   its schedule, or past its grace under ``skip``; handed back when its task is not this
   node's code), and, when its task is busy, :func:`~easyjob.core.admission.on_busy`
   (``serial`` waits, ``skip`` is SKIPPED);
4. hands back (version-checked release) runs that are due but found no free worker
   within the node's overdue grace, so that another node may take them.

All run-state writes go through one :class:`~easyjob.node.writer.RunWriter`. Once a
success, a final failure or a miss is written, its event goes to the node's
:class:`~easyjob.node.hooks.Hooks` (delivered on their own thread).
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from easyjob.clock import Clock
from easyjob.core.admission import (
    Verdict,
    admit,
    exclusive,
    facts_of,
    held_reason,
    misfire,
    on_busy,
)
from easyjob.core.config import NodeConfig
from easyjob.core.outcome import Outcome
from easyjob.core.records import Run
from easyjob.core.states import RunStatus, Trigger
from easyjob.events import EventKind, RunEvent
from easyjob.node.executor import CancelFlag, JobRunner
from easyjob.node.hooks import Hooks
from easyjob.node.liveness import Liveness
from easyjob.node.timetable import Room, Timetable
from easyjob.node.writer import RunWriter
from easyjob.observe.metrics import NO_METRICS, Metrics
from easyjob.registry import Registered
from easyjob.store.contract import BLOCKED, Store
from easyjob.threads import NamedThread

__all__ = ["Dispatcher"]

log = logging.getLogger("easyjob.dispatcher")

#: How far ahead of their due time runs are written RUNNING. The function is called at the
#: due time; the write (a few ms on an idle database, more while another write of the node
#: holds SQLite's lock) is done by then. A run whose write outlasts this starts when the
#: write returns, late by the difference.
LEAD = timedelta(milliseconds=20)

#: How far ahead of its due time a run started ahead goes to its worker thread, which
#: then waits for that time itself: the hand-off between threads (a few ms when several
#: runs are due together) is off the start's path too.
HANDOFF = timedelta(milliseconds=5)


@dataclass
class _Active:
    """A run whose function is running here."""

    run: Run
    deadline: float | None  # monotonic; None: no timeout
    cancel: CancelFlag = field(default_factory=CancelFlag)
    timed_out: bool = False


class Dispatcher:
    """See the module docstring. :meth:`room`, :meth:`reserve`, :meth:`submit` and
    :meth:`held_ids` are for the loader, the planner and the recovery thread; everything
    else happens on the dispatcher thread (or in :meth:`step`, which tests call directly
    under a fake clock)."""

    def __init__(
        self,
        store: Store,
        config: NodeConfig,
        clock: Clock,
        liveness: Liveness,
        tasks: dict[str, Registered],
        *,
        pool: Executor | None = None,
        on_free: Callable[[bool, int], None] | None = None,
        on_busy: Callable[[], None] | None = None,
        metrics: Metrics = NO_METRICS,
        runnable: Mapping[str, Registered] | None = None,
        hooks: Hooks | None = None,
        parents: frozenset[str] = frozenset(),
    ) -> None:
        self._clock = clock
        self._node_id = config.node_id
        self.hooks = hooks if hooks is not None else Hooks({})
        self._metrics = metrics
        self._liveness = liveness
        self._grace = timedelta(seconds=config.overdue_grace_s)
        self._retry = timedelta(seconds=min(config.poll, 0.5))
        self._room = Room(lookahead_s=config.lookahead_s, max_held=config.max_held)
        self._behind = timedelta(seconds=config.poll)  # see Timetable.room
        # told as each job returns (a worker came free), and when a run that may have
        # children succeeded (they are written due now)
        self._on_free = on_free
        self._on_busy = on_busy  # told when a job starts while none ran (the cancel watch)
        #: tasks this node's code declares a child of (resolved names): their successes
        #: write child runs
        self._parents = parents
        self._lock = threading.Condition()
        self._table = Timetable(config.workers)
        self._outcomes: list[tuple[Run, Outcome, float]] = []
        self._releasing: list[tuple[datetime, int, Run]] = []  # written RUNNING, due later
        self._active: dict[int, _Active] = {}
        self._poked = False
        self._closed = False
        self.writer = RunWriter(store, config.node_id)
        self.jobs = JobRunner(
            config.node_id,
            tasks,
            clock,
            config.workers,
            self._returned,
            pool,
            runnable,
            isolation=config.executor,
        )
        self.claimed = 0
        self.completed = 0
        self._thread = NamedThread("dispatch", self._loop)

    # -- for the loader and the recovery thread -----------------------------------------

    def room(self) -> int:
        """How many more runs this node should claim now (0 once it is stopping)."""
        behind = self._liveness.db_now() - self._behind
        with self._lock:
            if self._closed:
                return 0
            return self._table.room(self._room, self._clock.monotonic(), behind)

    def startable(self, by: datetime) -> int:
        """Workers free at database time *by* once the runs waiting here and due by then
        have taken theirs (0 once the node is stopping): how many runs due by then could
        start here at once, kept for no one (see :meth:`reserve`)."""
        with self._lock:
            return 0 if self._closed else self._table.startable(by)

    def reserve(self, most: int, by: datetime) -> int:
        """Keep up to *most* of the workers free at database time *by* (once the runs
        waiting here and due by then have taken theirs) for runs the caller is about to
        write started (the loader's claim and start, a behind planner's fires written
        started), and return how many (0 once the node is stopping): no other thread
        counts them free until :meth:`submit` with ``reserved`` gives them back (to the
        runs submitted, the rest free again). So the loader and the planner never both
        start a run on the same free worker."""
        with self._lock:
            if self._closed or most <= 0:
                return 0
            taken = min(most, self._table.startable(by))
            self._table.reserved += taken
            return taken

    def tasks_held(self) -> set[int]:
        """Tasks with a run here (waiting, running or ending)."""
        with self._lock:
            return self._table.tasks_held()

    def exclusive_waiting(self) -> set[int]:
        """Exclusive tasks with a run waiting here: not to be claimed more of."""
        with self._lock:
            return self._table.exclusive_tasks_waiting()

    def held_ids(self) -> set[int]:
        with self._lock:
            return self._table.held_ids()

    def waiting_runs(self) -> list[Run]:
        """The runs claimed here and not started yet."""
        with self._lock:
            return self._table.waiting_runs()

    def give_back(self, run_ids: list[int], why: str) -> list[Run]:
        """Hand back (version-checked release) the runs of *run_ids* still waiting here;
        returns those released."""
        with self._lock:
            runs = self._table.take_back(run_ids)
        if not runs:
            return []
        won = self.writer.release(runs, why)
        return [r for r in runs if won is not None and r.id in won]

    def counts(self) -> dict[str, int]:
        """Runs waiting, running, ending (returned, outcome not written yet) and stuck now;
        writes given up so far."""
        with self._lock:
            table = self._table
            return {
                "waiting": table.waiting,
                "running": table.running,
                "ending": table.ending,
                "stuck": table.stuck,
                "given_up": self.writer.given_up,
            }

    def load(self) -> tuple[int, int, int]:
        """Runs held (waiting, running or ending), running, and stuck now."""
        now = self.counts()
        return now["waiting"] + now["running"] + now["ending"], now["running"], now["stuck"]

    def alive(self) -> bool:
        """Whether the dispatcher thread runs (or has not been started yet)."""
        return self._thread.is_alive() or not self._thread.ident

    def running_ids(self) -> set[int]:
        """Runs whose function runs here now (at most one per worker)."""
        with self._lock:
            return set(self._active)

    def cancel(self, run_id: int) -> Run | None:
        """Set the cancellation flag of run *run_id* if its function runs here (the run was
        cancelled on request): a thread's job sees ``ctx.cancelled``, a child is killed.
        Returns the run, or None."""
        with self._lock:
            active = self._active.get(run_id)
        if active is None or active.cancel.is_set():
            return None
        active.cancel.set()
        return active.run

    def submit(self, runs: list[Run], reserved: int = 0) -> None:
        """Hold *runs* (just claimed) until their time; those claimed RUNNING (claimed and
        started in one write) take a worker slot now and are called at their due time.
        *reserved* workers (:meth:`reserve`) are given back first: the runs take them."""
        begun = [r for r in runs if r.status == RunStatus.RUNNING]
        held = [r for r in runs if r.status != RunStatus.RUNNING]
        with self._lock:
            self._table.reserved -= reserved
            closed = self._closed
            if not closed:
                self.claimed += len(runs)
                self._table.add(held, self._liveness.db_now())
                for run in begun:
                    self._table.begin(run)
                    heapq.heappush(self._releasing, (run.due_time, run.id, run))
                self._poke()
        if closed and held:
            self.writer.release(held, "the node is stopping")
        if closed and begun:  # cannot happen: the loader stops before the dispatcher closes
            log.error(
                "%d run(s) claimed RUNNING after the dispatcher closed; left to recovery",
                len(begun),
            )

    # -- the thread ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                delay = self.step()
            except Exception:
                log.exception("dispatcher round failed; trying again shortly")
                delay = self._retry.total_seconds()
            with self._lock:
                if self._closed:
                    return
                if not self._poked:
                    self._lock.wait(delay)
                self._poked = False

    def _poke(self) -> None:
        self._poked = True
        self._lock.notify_all()

    def _returned(self, run: Run, outcome: Outcome, seconds: float) -> None:
        """A job's function returned (on its worker thread): its worker is free for the
        next run now, while this thread writes the outcome (the run stays held until
        then)."""
        with self._lock:
            self._table.returned(run.id, seconds)
            self._outcomes.append((run, outcome, seconds))
            self._poke()
        if self._on_free is not None:
            self._on_free(False, 1)

    def step(self) -> float | None:
        """One round (see the module docstring); returns the seconds until the next thing
        to do, or None when only a new run or a returning job can bring any."""
        self._write_outcomes()
        self._time_out()
        now = self._liveness.db_now()
        self._release(now)
        with self._lock:
            due = [] if self._closed else self._table.pop_due(now + LEAD)
        if due:
            self._start(due, now)
        self._hand_back(now)
        return self._next_delay(self._liveness.db_now())  # now: this round took time

    def _write_outcomes(self) -> None:
        with self._lock:
            outcomes, self._outcomes = self._outcomes, []
            active = [self._active.pop(run.id, None) for run, _, _ in outcomes]
        if not outcomes:
            return
        timed_out = {a.run.id for a in active if a is not None and a.timed_out}
        for run, _, seconds in outcomes:
            if run.id in timed_out:
                self.writer.say(
                    logging.WARNING,
                    run,
                    "returned %.1fs after it started, past its timeout: its outcome was fenced "
                    "(the run was failed at the timeout)",
                    seconds,
                )
        wins = [o for o in outcomes if o[1].ok and o[0].id not in timed_out]
        won = self.writer.succeed(wins) if wins else set()
        for run, outcome, seconds in wins:
            if won is not None and run.id not in won:
                self.writer.fenced(run)
            elif won is not None:
                self._event(EventKind.SUCCESS, run, outcome, seconds)
        written = len(won or ())
        for run, outcome, seconds in outcomes:
            if outcome.ok or run.id in timed_out:
                continue
            failed = self.writer.fail(
                run, outcome.error or "", traceback=outcome.traceback, exception=outcome.exception
            )
            written += bool(failed)
            if failed and run.attempt > run.retries:
                self._event(EventKind.FAILURE, run, outcome, seconds)
        for run, outcome, seconds in outcomes:
            ended = "failure" if not outcome.ok or run.id in timed_out else "success"
            self._metrics.run_finished(run.task_name, ended, seconds)
        with self._lock:
            self.completed += written
            for run, _, _ in outcomes:
                self._table.finished(run.id)
            self._poke()
        if self._on_free is not None and any(run.task_name in self._parents for run, _, _ in wins):
            self._on_free(True, 0)  # their children are written due now

    def _time_out(self) -> None:
        mono = self._clock.monotonic()
        with self._lock:
            expired = [
                a
                for a in self._active.values()
                if not a.timed_out and a.deadline is not None and a.deadline <= mono
            ]
        for active in expired:
            run = active.run
            seconds = (run.timeout_ms or 0) / 1000
            error = f"timed out after {seconds:g}s"
            written = self.writer.fail(run, error)
            active.timed_out = True
            active.cancel.set()
            if written and run.attempt > run.retries:
                self._event(EventKind.FAILURE, run, Outcome(error=error), seconds)
            with self._lock:
                self._table.timed_out(run.id)
                stuck = self._table.stuck
                self.completed += bool(written)
            if self.jobs.isolated(run):
                self.writer.say(logging.WARNING, run, "timed out after %gs; killed", seconds)
            else:
                self.writer.say(
                    logging.WARNING,
                    run,
                    "timed out after %gs; its thread keeps its worker until the function "
                    "returns (%d stuck on this node)",
                    seconds,
                    stuck,
                )

    def _release(self, now: datetime, *, all_: bool = False) -> None:
        """Hand to workers the runs written RUNNING (started ahead, or claimed and started
        by the loader) whose due time comes within HANDOFF (with *all_*, every one: the
        node is stopping and they are started); each is called at its due time."""
        while True:
            with self._lock:
                if not self._releasing or not (all_ or self._releasing[0][0] - HANDOFF <= now):
                    return
                _, _, run = heapq.heappop(self._releasing)
            self._run(run, now)

    def _start(self, due: list[Run], now: datetime) -> None:
        batch: list[Run] = []
        foreign: list[Run] = []
        missed: list[tuple[Run, str]] = []
        with self._lock:
            waited = self._table.held_back()
        for run in due:
            decision = admit(facts_of(run), now, declared_here=self.jobs.entry(run) is not None)
            if decision.verdict == Verdict.MISS:
                why = decision.reason or "missed"
                if run.id in waited:  # it waited for its task's limit: say so
                    why = held_reason(why, run.overlap, run.max_running)
                missed.append((run, why))
            elif decision.verdict == Verdict.ELSEWHERE:  # claimed by mistake
                foreign.append(run)
            else:
                batch.append(run)
        if foreign:
            self.writer.release(foreign, "its task is not registered here")
        self._close(missed, RunStatus.MISSED)
        for run in foreign:
            self._dropped(run)
        if not batch:
            return
        exclusive_ids = {r.id for r in batch if exclusive(r.overlap, r.max_running)}
        started = self.writer.start(batch, exclusive_ids)
        retry_at = now + self._retry
        skipped: list[tuple[Run, str]] = []
        missed_late: list[tuple[Run, str]] = []
        now = self._liveness.db_now()
        for run in batch:
            result = None if started is None else started.get(run.id)
            if isinstance(result, Run) and result.due_time > now:
                with self._lock:
                    heapq.heappush(self._releasing, (result.due_time, result.id, result))
            elif isinstance(result, Run):
                self._run(result, now)
            elif result is BLOCKED:  # its task is busy, or its start deadline came
                late = misfire(facts_of(run), now)
                if late is not None:
                    why = held_reason(late.reason or "missed", run.overlap, run.max_running)
                    missed_late.append((run, why))
                elif (busy := on_busy(run.overlap, run.max_running)).verdict == Verdict.SKIP:
                    skipped.append((run, busy.reason or "skipped"))
                else:
                    if run.id in exclusive_ids:
                        self._metrics.held_back(run.task_name)
                    with self._lock:
                        self._table.blocked(run, retry_at)
            else:
                if started is not None:
                    self.writer.say(logging.WARNING, run, "taken over before it started (fenced)")
                self._dropped(run)
        self._close(skipped, RunStatus.SKIPPED)
        self._close(missed_late, RunStatus.MISSED)

    def _close(self, runs: list[tuple[Run, str]], status: RunStatus) -> None:
        """Close claimed *runs* (each with its reason) as *status* in one write, and let
        them go; each MISSED one written is counted in ``easyjob_misfires`` and told in a
        ``missed`` event."""
        if not runs:
            return
        won = self.writer.close([r for r, _ in runs], status, {r.id: why for r, why in runs})
        for run, why in runs:
            if won is not None and run.id in won and status == RunStatus.MISSED:
                self._metrics.misfired(run.task_name, 1)
                self._event(EventKind.MISSED, run, Outcome(error=why), None)
            self._dropped(run)

    def _run(self, run: Run, now: datetime) -> None:
        """Hand *run* (RUNNING) to a worker, which calls its function at its due time
        (at once if that has come by database time *now*)."""
        wait = max(0.0, (run.due_time - now).total_seconds())
        self._metrics.run_started(run.task_name, max(0.0, (now - run.due_time).total_seconds()))
        if run.jitter_ms and run.triggered_by == Trigger.CRON and run.attempt == 1:
            self._metrics.run_jittered(
                run.task_name, (run.due_time - run.fire_time).total_seconds()
            )
        at = self._clock.monotonic() + wait
        timeout = run.timeout_ms / 1000 if run.timeout_ms else None
        deadline = None if timeout is None else at + timeout
        active = _Active(run, deadline)
        with self._lock:
            self._table.started(run, at)
            first = not self._active
            self._active[run.id] = active
        if first and self._on_busy is not None:
            self._on_busy()
        self.jobs.submit(run, active.cancel, at=at if wait else None)

    def _event(self, kind: EventKind, run: Run, outcome: Outcome, seconds: float | None) -> None:
        if not self.hooks.wants(run.task_name, kind):
            return
        self.hooks.emit(
            RunEvent(
                kind=kind,
                task_name=run.task_name,
                node_id=self._node_id,
                run_id=run.id,
                fire_time=run.fire_time,
                attempt=run.attempt,
                duration_s=seconds,
                result=outcome.result,
                error=outcome.error if outcome.error is not None else outcome.note,
                traceback=outcome.traceback,
                exception=outcome.exception,
            )
        )

    def _dropped(self, run: Run) -> None:
        with self._lock:
            self._table.dropped(run)

    def _hand_back(self, now: datetime) -> None:
        with self._lock:
            mono = self._clock.monotonic()
            late = [] if self._closed else self._table.overdue(now, self._grace, mono)
        if late:
            self.writer.release(late, f"no worker was free for {self._grace.total_seconds():g}s")

    def _next_delay(self, now: datetime) -> float | None:
        """Until the next run may start, the next hand-back check (while every worker is
        busy, a grace after the latest start) or the next timeout; a returning job or a
        new claim pokes the thread sooner."""
        delays: list[float] = []
        mono = self._clock.monotonic()
        with self._lock:
            if self._outcomes:
                return 0.0
            if self._releasing:
                delays.append((self._releasing[0][0] - HANDOFF - now).total_seconds())
            ready = self._table.next_ready()
            busy_since = self._table.busy_since()
            if busy_since is None and ready is not None:
                delays.append((ready - LEAD - now).total_seconds())
            elif busy_since is not None and ready is not None:
                check = busy_since + self._grace.total_seconds() - mono
                if check > 0:
                    delays.append(check)
            delays.extend(
                a.deadline - mono
                for a in self._active.values()
                if a.deadline is not None and not a.timed_out
            )
        return max(0.0, min(delays)) if delays else None

    # -- stopping -------------------------------------------------------------------------

    def close(self, grace: float) -> int:
        """Stop starting runs: hand back the waiting ones, let running ones finish for up
        to *grace* seconds (their cancellation flags are set after it) and write their
        outcomes. Returns how many were still running when the grace ran out."""
        with self._lock:
            self._closed = True
            self._poke()
        if self._thread.is_alive():
            self._thread.join()
        self._release(self._liveness.db_now(), all_=True)  # started in the database: they run
        with self._lock:
            waiting = self._table.drain()
        if waiting:
            self.writer.release(waiting, "the node is stopping")
        deadline = self._clock.monotonic() + grace
        while True:
            self._write_outcomes()
            with self._lock:
                left = [a for a in self._active.values() if not a.timed_out]
                if not left or self._clock.monotonic() >= deadline:
                    break
                if not self._outcomes:
                    self._lock.wait(min(0.05, max(0.0, deadline - self._clock.monotonic())))
        for active in left:
            active.cancel.set()
        self.jobs.shutdown()
        return len(left)
