"""The node's timetable: runs it claimed, until they end (pure: no threads, clock or database).

A run here is *waiting* (claimed, not started: its fire time has not come, no worker is
free, or runs of the same limited task are ahead of it), *running* (started, its
function holds a worker) or *ending* (its function returned, its outcome not written
yet). Only running runs take worker slots: waiting costs nothing but a row in memory, so
one slow task never blocks the others; an ending run's worker is free for the next run
while its outcome is written (the node's start rate does not wait on the database's
commit), but the run is still held here, and keeps its place among its limited task's
runs, until the outcome is written.

Runs of a limited task (overlap ``serial`` or ``skip``, or a ``max_running``: see
:func:`~easyjob.core.admission.run_limit`) leave the timetable at most its limit at a time
(one for ``serial``) and in order: the next waits until one before it has ended here. When
more runs are due than workers are free, they leave in the admission rule's
:func:`~easyjob.core.admission.start_order` (highest effective priority first). The caller
(the dispatcher) owns the clock and the database: it asks :meth:`Timetable.pop_due` what
may start now, writes the starts, and reports each run's fate back.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from easyjob.core.admission import run_limit, start_order
from easyjob.core.records import Run

__all__ = ["Room", "Timetable"]

#: Weight of the newest run time in the running mean (see :attr:`Timetable.mean_run_s`).
_EWMA = 0.1


@dataclass(frozen=True)
class Room:
    """How much a node claims ahead (see :meth:`Timetable.room`)."""

    lookahead_s: float  # the window the node claims runs for
    max_held: int  # the hard cap on runs held (waiting or running)


class Timetable:
    """Claimed runs by state; see the module docstring. Not thread-safe: one lock around it."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._waiting: dict[int, Run] = {}
        self._of_task: dict[int, set[int]] = {}  # task -> its waiting runs
        self._heap: list[tuple[datetime, int, int]] = []  # (ready at, seq, run id), lazy
        self._ready: dict[int, datetime] = {}
        self._added: dict[int, datetime] = {}  # waiting run -> when it was claimed
        self._seq = itertools.count()
        self._out: dict[int, set[int]] = {}  # limited task -> its runs out (or next)
        self._gated: dict[int, list[Run]] = {}  # limited task -> runs behind those
        self._held_back: set[int] = set()  # runs that waited for their task's limit
        self._priorities: Counter[int] = Counter()  # waiting runs by priority
        self._running: dict[int, Run] = {}
        self._ending: dict[int, Run] = {}  # returned, outcome not written: no worker
        self._since: dict[int, float] = {}  # running run -> when it started (monotonic)
        self._stuck: set[int] = set()
        self.mean_run_s = 0.0
        #: workers kept free for runs a thread is about to write started (see
        #: Dispatcher.reserve): not free for anything else meanwhile
        self.reserved = 0

    # -- what is held -------------------------------------------------------------------

    def held_ids(self) -> set[int]:
        return set(self._waiting) | set(self._running) | set(self._ending)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def ending(self) -> int:
        """Runs whose function returned and whose outcome is not written yet."""
        return len(self._ending)

    @property
    def stuck(self) -> int:
        """Runs whose time ran out while their function still holds a worker."""
        return len(self._stuck)

    def free_workers(self) -> int:
        return max(0, self.workers - len(self._running) - self.reserved)

    def busy_since(self) -> float | None:
        """While no worker is free: since when every worker has been busy (the latest
        start, monotonic); None while a worker is free."""
        if self.free_workers() > 0 or not self._since:
            return None
        return max(self._since.values())

    def tasks_held(self) -> set[int]:
        """Tasks with a run here (waiting, running or ending)."""
        held = (self._waiting, self._running, self._ending)
        return {r.task_id for runs in held for r in runs.values()}

    def startable(self, now: datetime) -> int:
        """Workers free at database time *now* once the waiting runs already due have
        taken theirs: how many runs due now could start here at once."""
        due = sum(1 for at in self._ready.values() if at <= now)
        return max(0, self.free_workers() - due)

    def exclusive_tasks_waiting(self) -> set[int]:
        """Limited tasks with as many runs waiting here as their limit: the node claims no
        more of them (it holds at most its limit of waiting runs per limited task, one for
        ``serial``; later fires stay PENDING)."""
        count: dict[int, int] = {}
        full: set[int] = set()
        for r in self._waiting.values():
            limit = run_limit(r.overlap, r.max_running)
            if limit is not None:
                count[r.task_id] = count.get(r.task_id, 0) + 1
                if count[r.task_id] >= limit:
                    full.add(r.task_id)
        return full

    def room(self, room: Room, now: float, behind_before: datetime | None = None) -> int:
        """How many more runs to claim at monotonic time *now*: what the workers can start
        within the look-ahead window, capped by ``max_held``, less the runs already
        waiting. The window holds ``workers * lookahead / expected run time`` starts after
        the free workers': the expected time is the mean run time seen so far, or, while
        every worker is busy, the mean age of the running jobs when that is longer (a
        node whose workers all hang claims next to nothing). Nothing known yet: the cap.

        None at all while a run here was ready to start before *behind_before* (database
        time) and has not: the node starts runs slower than it claims them (its database
        writes, not its workers, are the limit), and what it does not hold stays PENDING,
        for other nodes and for the misfire policy, instead of ageing in its timetable."""
        ready = self.next_ready()
        if behind_before is not None and ready is not None and ready < behind_before:
            return 0
        expected = self.mean_run_s
        if self.free_workers() == 0 and self._since:
            ages = [now - at for at in self._since.values()]
            expected = max(expected, sum(ages) / len(ages))
        if expected > 0:
            can_start = self.free_workers() + self.workers * room.lookahead_s / expected
        else:
            can_start = float(room.max_held)
        limit = min(float(room.max_held - len(self._running) - len(self._ending)), can_start)
        return max(0, int(limit) - len(self._waiting))

    # -- runs coming and going ----------------------------------------------------------

    def add(self, runs: Iterable[Run], now: datetime) -> None:
        """Hold *runs* (claimed at database time *now*) until their due time."""
        for run in runs:
            self._wait(run)
            self._added[run.id] = now
            self._schedule(run, run.due_time)

    def _wait(self, run: Run) -> None:
        self._waiting[run.id] = run
        self._priorities[run.priority] += 1
        self._of_task.setdefault(run.task_id, set()).add(run.id)

    def _unwait(self, run_id: int) -> Run:
        run = self._waiting.pop(run_id)
        self._priorities[run.priority] -= 1
        if not self._priorities[run.priority]:
            del self._priorities[run.priority]
        same = self._of_task[run.task_id]
        same.discard(run_id)
        if not same:
            del self._of_task[run.task_id]
        return run

    def _schedule(self, run: Run, at: datetime) -> None:
        self._ready[run.id] = at
        heapq.heappush(self._heap, (at, next(self._seq), run.id))

    def next_ready(self) -> datetime | None:
        """When the earliest waiting run may start (None: nothing waits for a time)."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def _drop_stale(self) -> None:
        while self._heap:
            at, _, run_id = self._heap[0]
            if self._ready.get(run_id) == at and run_id in self._waiting:
                return
            heapq.heappop(self._heap)

    def pop_due(self, now: datetime) -> list[Run]:
        """The waiting runs that may start at database time *now*: due, a worker free for
        each, and at most its limit of runs out per limited task. In fire order while they
        all fit; when more are due than workers are free, in
        :func:`~easyjob.core.admission.start_order` when their priorities differ (runs of
        equal priority keep the fire order). Each takes a worker slot until it is reported
        back with :meth:`started` then :meth:`finished`, or with :meth:`blocked` or
        :meth:`dropped`."""
        out: list[Run] = []
        while (free := self.free_workers()) > 0:
            ready = self._ready_by(now, free + 1)
            if not ready:
                break
            if len(ready) > free and len(self._priorities) > 1:
                ready = self._ranked(ready, now)  # (equal priorities: the heap's order)
            for run in ready[:free]:
                self._take(run, out)
            for run in ready[free:]:
                self._schedule(run, self._ready.pop(run.id))
        return out

    def _ready_by(self, now: datetime, most: int) -> list[Run]:
        """Up to *most* waiting runs ready by *now*, off the heap, earliest first."""
        ready: list[Run] = []
        while len(ready) < most and (at := self.next_ready()) is not None and at <= now:
            _, _, run_id = heapq.heappop(self._heap)
            ready.append(self._waiting[run_id])
        return ready

    def _ranked(self, ready: list[Run], now: datetime) -> list[Run]:
        """More runs are ready than workers free: every run ready by *now*, in start order."""
        ready += self._ready_by(now, len(self._heap))
        return start_order(ready, now)

    def _take(self, run: Run, out: list[Run]) -> None:
        """*run* (ready, off the heap) goes out, or waits behind its limited task's runs."""
        del self._ready[run.id]
        limit = run_limit(run.overlap, run.max_running)
        if limit is not None:
            taken = self._out.setdefault(run.task_id, set())
            if run.id not in taken and len(taken) >= limit:
                self._gated.setdefault(run.task_id, []).append(run)
                self._held_back.add(run.id)
                return
            taken.add(run.id)
        self._unwait(run.id)
        del self._added[run.id]
        self._running[run.id] = run
        out.append(run)

    def overdue(self, now: datetime, grace: timedelta, mono: float) -> list[Run]:
        """Waiting runs that no worker was free for within *grace* of their due time (or
        of their claim, for runs claimed late) at database time *now* (monotonic *mono*):
        the node cannot start them on time, so it hands them back to the cluster. They
        leave. Only while every worker has been busy with one job for the whole grace: a
        node merely behind on short jobs keeps its runs (another would be behind too)."""
        out: list[Run] = []
        kept: list[tuple[datetime, int, int]] = []
        before = now - grace
        since = self.busy_since()
        if since is None or mono - since < grace.total_seconds():
            return out
        while self.free_workers() == 0 and (at := self.next_ready()) is not None:
            if at >= before:
                break
            entry = heapq.heappop(self._heap)
            run_id = entry[2]
            if self._added[run_id] >= before:
                kept.append(entry)
                continue
            run = self._unwait(run_id)
            del self._ready[run_id]
            del self._added[run_id]
            self._held_back.discard(run_id)
            self._end_out(run)
            out.append(run)
        for entry in kept:
            heapq.heappush(self._heap, entry)
        return out

    def begin(self, run: Run) -> None:
        """*run* was claimed and started in one write: it takes a worker slot (and a place
        of its limited task) at once, until :meth:`started` then :meth:`finished`."""
        self._running[run.id] = run
        if run_limit(run.overlap, run.max_running) is not None:
            self._out.setdefault(run.task_id, set()).add(run.id)

    def started(self, run: Run, at: float) -> None:
        """*run* (popped) is RUNNING since monotonic time *at*, with the version the start
        wrote."""
        self._running[run.id] = run
        self._since[run.id] = at

    def blocked(self, run: Run, retry_at: datetime) -> None:
        """*run* (popped) could not start: a run of its task runs on another node. It
        waits again, without a worker and still ahead of its task's later runs, until
        *retry_at*. It keeps its place among its limited task's runs out."""
        self._running.pop(run.id, None)
        self._held_back.add(run.id)
        self._wait(run)
        self._added[run.id] = retry_at
        self._schedule(run, retry_at)

    def held_back(self) -> set[int]:
        """The runs here that have waited for their task's limit (see :meth:`blocked`)."""
        return set(self._held_back)

    def dropped(self, run: Run) -> None:
        """*run* (popped) is no longer this node's: closed, released or fenced."""
        self._held_back.discard(run.id)
        self._running.pop(run.id, None)
        self._since.pop(run.id, None)
        self._end_out(run)

    def timed_out(self, run_id: int) -> None:
        """*run_id*'s outcome was written as a timeout while its function goes on."""
        if run_id in self._running:
            self._stuck.add(run_id)

    def returned(self, run_id: int, seconds: float) -> None:
        """*run_id*'s function returned after *seconds*: its worker is free again; the run
        is held, and keeps its limited task's place, until :meth:`finished`."""
        run = self._running.pop(run_id, None)
        if run is None:
            return
        self._ending[run_id] = run
        self._since.pop(run_id, None)
        self._stuck.discard(run_id)
        weight = 1.0 if self.mean_run_s == 0 else _EWMA
        self.mean_run_s += weight * (seconds - self.mean_run_s)

    def finished(self, run_id: int) -> None:
        """*run_id*'s outcome is written (or was, at its timeout): it leaves, and the runs
        of its limited task behind it may go."""
        run = self._ending.pop(run_id, None)
        self._held_back.discard(run_id)
        if run is not None:
            self._end_out(run)

    def _end_out(self, run: Run) -> None:
        """*run* no longer holds a place of its limited task: the runs behind may go."""
        taken = self._out.get(run.task_id)
        if taken is None or run.id not in taken:
            return
        taken.discard(run.id)
        if not taken:
            del self._out[run.task_id]
        for behind in self._gated.pop(run.task_id, []):
            self._schedule(behind, behind.due_time)

    def waiting_runs(self) -> list[Run]:
        """The runs waiting here (claimed, not started)."""
        return list(self._waiting.values())

    def take_back(self, run_ids: Iterable[int]) -> list[Run]:
        """Remove the runs of *run_ids* still waiting here (to be handed back); a run that
        went out meanwhile stays."""
        out: list[Run] = []
        for run_id in run_ids:
            if run_id not in self._waiting or run_id in self._running:
                continue
            run = self._unwait(run_id)
            self._held_back.discard(run_id)
            self._ready.pop(run_id, None)  # its heap entry goes stale
            self._added.pop(run_id, None)
            gated = self._gated.get(run.task_id)
            if gated is not None and run in gated:
                gated.remove(run)
            self._end_out(run)
            out.append(run)
        return out

    def drain(self) -> list[Run]:
        """Every waiting run, removed (the node is stopping: they are handed back)."""
        runs = list(self._waiting.values())
        self._waiting.clear()
        self._priorities.clear()
        self._of_task.clear()
        self._ready.clear()
        self._added.clear()
        self._heap.clear()
        self._gated.clear()
        self._held_back.clear()
        out = set(self._running) | set(self._ending)
        self._out = {t: kept for t, runs in self._out.items() if (kept := runs & out)}
        return runs
