"""How fast a node's planner writes fires while its cluster is behind (pure).

A cluster offered more fires than it can start misses the excess: a fire not started
before its successor is due is superseded (:mod:`easyjob.core.admission`). A fire written
ahead and then missed costs two row writes (its insert and its MISSED mark) for nothing,
at the moment the database is the cluster's limit: measured, 16 rows per run on 4 SQLite
nodes offered 3,000 fires a second (docs/performance.md, "Overload"). So a planner watches
the share of the runs its *cluster* dealt with in a poll (ran, or marked MISSED after their
fire was written) that were marked MISSED (the *loss*), read from the run table each poll
(:meth:`~easyjob.store.contract.RunStore.fates`: the runs every node ended in the round, by
``end_time``), and while the loss is high it is *behind*. The cluster's, not its own node's:
the node whose loader marks a fire MISSED is the run's home node (run id modulo the live
nodes, under ``default``), or a node that steals it, not the node whose planner wrote it,
and the misses fall unevenly on the nodes. Measured (2026-11-27, `tests/perf/pace_trace.py`,
4 SQLite nodes x 6,000 tasks, 40 s): the nodes marked 19,331, 5,599, 3,584 and 2,119 runs
MISSED; the planner of the node that marked 2,119 was not behind for its first 12 s and
wrote 22,965 fires while its node started 6,177 runs; one saturated bench wrote 8.1 rows
per run where another trial of it wrote 4.9. The misses it counts are those of runs due
since its node started: a node restarted after an outage marks the fires left from before
it MISSED, which say nothing of what the cluster runs now. While behind:

- it writes no fire ahead: each advance writes one fire, the one with a chance to start
  (see :func:`easyjob.core.planner.plan_behind`), and the fires passed over meanwhile are
  recorded on that fire's row (its gap: ``missed_from``, ``missed_count``), never a row each;
- it advances at most :attr:`Pace.rate` tasks per poll, the most overdue first, each step at
  least 1/:data:`ROUNDS` of it (a write's fixed cost is most of a saturated run's when it
  starts a handful: see :meth:`Pace.allowance`). The rate is at first half the batch, or
  what its node ran in either of its last two polls if more (the poll with the loss may be a
  stall; measured, see docs/performance.md). It halves after a poll whose misses passed
  :data:`LOSS` of the runs its cluster dealt with (and :data:`MIN_MISSES`), at most once per
  two polls (the fires written before a cut are missed in the poll after it) and never below
  the runs the node ran in the last poll (what it evidently can run: fires written ahead
  before it was behind are missed for up to ``plan_ahead`` polls, and would halve it
  further), and grows after a poll that did not: by a quarter when nothing was missed, by an
  eighth (at least one) when a little was, up to twice what the node ran in the last poll
  (plus :data:`MIN_MISSES`). So the fires written follow the runs the cluster starts, not
  the fires it is offered (as a TCP sender paces on loss).

A planner writes no fire ahead of the look-ahead (``plan_ahead``) before its first
:data:`QUIET` polls have passed without loss (:attr:`Pace.settled`): a node that has just
started does not know whether its cluster keeps up.

A planner stops being behind after :data:`QUIET` polls in a row without loss in which the
rate held no due task back. Misses below :data:`MIN_MISSES` a poll never count: a serial
task slower than its period misses a fire a period by itself, and that is not the
cluster's capacity.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

__all__ = ["LOSS", "MIN_MISSES", "QUIET", "Fates", "Pace"]

#: The share of the runs a cluster dealt with in a poll (ran or missed) that, missed, is loss.
LOSS = 0.1
#: Fewer misses than this in a poll are never loss.
MIN_MISSES = 10
#: Polls without loss, the rate holding nothing back, after which a planner is not behind.
QUIET = 3
#: The least rate (tasks per poll): a planner behind still plans its most overdue task.
MIN_RATE = 1.0
#: A behind planner's step advances at least 1/ROUNDS of its rate (the least round).
ROUNDS = 8


class Fates(NamedTuple):
    """What became of the runs a cluster ended in one round (see
    :meth:`~easyjob.store.contract.RunStore.fates`)."""

    ran: int  # ended SUCCESS or FAILED
    missed: int  # marked MISSED after their fire was written


class Pace:
    """One planner's pacing state; the planner tells it the time, the fates of the runs its
    cluster ended in each round (:meth:`round_start`), its node's running count of runs run,
    and what each step wrote. Not thread-safe (the planner's thread alone uses it)."""

    def __init__(self, poll: timedelta, batch: int) -> None:
        if poll <= timedelta(0) or batch < 1:
            raise ValueError(f"pacing needs a positive poll and batch, got {poll!r}, {batch!r}")
        self._poll = poll
        self._batch = batch
        self._behind = False
        self.rate = float(batch)  # tasks per poll, while behind
        self._tokens = 0.0
        self._round_at: datetime | None = None
        self._step_at: datetime | None = None
        self._ran_mark = 0
        #: what the node ran in the round before the last one closed (see _decide)
        self._ran_before = 0.0
        self._held_back = False  # whether the rate left due tasks unplanned this poll
        #: whether the planner advanced a task in this round, and in the one before
        self._wrote = self._wrote_before = False
        self._quiet = 0
        #: polls closed without loss since start (see settled), up to QUIET
        self._calm = 0
        self._since_cut = 0  # polls since the rate was last halved
        #: How many times this planner became behind (for tests and the log).
        self.episodes = 0

    @property
    def behind(self) -> bool:
        """Whether the planner is behind (paced, writing nothing ahead)."""
        return self._behind

    @property
    def settled(self) -> bool:
        """Whether the planner may write fires ahead of the lookahead (``plan_ahead``): its
        first :data:`QUIET` polls closed without loss. A node that has just started does
        not know yet whether its cluster keeps up; fires written ahead for a cluster that
        does not are each inserted and then marked MISSED (measured at the start of 4
        SQLite nodes offered 3,000 fires a second: 3.0 MISSED marks per run in the first
        20 s, the plan-ahead of every task written in the first poll)."""
        return not self._behind and self._calm >= QUIET

    def round_start(self, now: datetime) -> datetime | None:
        """When the round that closes at database time *now* began, if one does (a poll or
        more ago) and its fates tell this pace something (see :meth:`_needs_fates`): the
        planner then reads the fates of the runs its cluster ended since, for
        :meth:`allowance`. None: nothing to read now."""
        if self._round_at is None or now - self._round_at < self._poll:
            return None
        return self._round_at if self._needs_fates() else None

    def _needs_fates(self) -> bool:
        """Whether the round closing now needs its fates: the planner is behind (it leaves
        only after polls without loss), or it advanced tasks in this round or the one before
        (their fires' runs end in the round after). Else the round closes as one without
        loss (none of its fires could be lost): a planner with nothing due reads nothing
        (the read cost an idle SQLite node 1.3 ms of CPU a second, a quarter of its
        whole)."""
        return self._behind or self._wrote or self._wrote_before

    def allowance(
        self, now: datetime, fates: Fates | None = None, succeeded: int = 0
    ) -> int | None:
        """How many due tasks the planner may advance in this step at database time *now*,
        given the *fates* of the runs its cluster ended in the round that closes now (see
        :meth:`round_start`; None when none does), its node having run *succeeded* runs so
        far; None: any number (not behind).

        Behind, the allowance accrues with time, up to the rate, and is 0 until it is a
        round (1/:data:`ROUNDS` of the rate; :meth:`refill_s` says when): a saturated node
        wakes its planner at each eighth of its workers freed, and each step advanced
        the few tasks accrued since the last, about 8 a write on 4 SQLite nodes x 6,000
        tasks, whose fixed cost (the due read, the write's statements and commit) was most
        of a run's (docs/performance.md: 0.88 ms of CPU per run, 0.62 in rounds)."""
        self._close_round(now, fates, succeeded)
        if not self._behind:
            self._step_at = now
            return None
        elapsed = 0.0 if self._step_at is None else (now - self._step_at) / self._poll
        self._step_at = now
        self._tokens = min(self.rate, self._tokens + self.rate * max(0.0, elapsed))
        return int(self._tokens) if self._tokens >= self._least_round() else 0

    def _least_round(self) -> float:
        return max(MIN_RATE, self.rate / ROUNDS)

    def refill_s(self) -> float | None:
        """Seconds until a behind planner's allowance is a round again; None: not behind."""
        if not self._behind:
            return None
        missing = max(0.0, self._least_round() - self._tokens)
        return missing / self.rate * self._poll.total_seconds()

    def planned(self, tasks: int, *, held_back: bool) -> None:
        """A step advanced *tasks* tasks; *held_back*: the allowance left due tasks
        unplanned."""
        self._tokens = max(0.0, self._tokens - tasks)
        self._held_back = self._held_back or held_back
        self._wrote = self._wrote or tasks > 0

    def _close_round(self, now: datetime, fates: Fates | None, succeeded: int) -> None:
        if self._round_at is None:
            self._round_at, self._ran_mark = now, succeeded
            return
        if now - self._round_at < self._poll:
            return
        if fates is None:
            if self._needs_fates():
                return  # the planner reads them first (see round_start): the round stays open
            fates = Fates(ran=0, missed=0)  # nothing written lately: nothing of its lost
        misses = fates.missed
        loss = misses >= MIN_MISSES and misses > LOSS * (misses + fates.ran)
        ran = (succeeded - self._ran_mark) / ((now - self._round_at) / self._poll)
        self._decide(loss, misses == 0, ran)
        self._ran_before = ran
        self._round_at, self._ran_mark = now, succeeded
        self._held_back = False
        self._wrote_before, self._wrote = self._wrote, False

    def _decide(self, loss: bool, clean: bool, ran: float) -> None:
        self._since_cut += 1
        if not self._behind:
            self._calm = 0 if loss else min(QUIET, self._calm + 1)
            if loss:
                self._behind, self._quiet, self._since_cut = True, 0, 0
                # never below what the node ran in either of its last two polls: the
                # one that closes with the loss may be a stall (the misses of a pause
                # of the machine), and below what it ran every task held back loses
                # its fires while it could run them
                self.rate = max(self._batch / 2, ran, self._ran_before)
                self._tokens = self.rate
                self.episodes += 1
            return
        if loss:
            # what was written before a cut is missed during the poll after it: one cut
            # per two polls (a sender halves once per round trip)
            if self._since_cut >= 2:  # never below what the node ran in the last poll
                self.rate = max(MIN_RATE, self.rate / 2, min(self.rate, ran))
                self._since_cut = 0
            self._quiet = 0
            return
        grow = self.rate / 4 if clean else self.rate / 8  # quicker while nothing is missed
        # more than twice what the node runs would only be missed: a bound on the overshoot
        # while the misses of an overshoot are still to come
        self.rate = min(self.rate + max(1.0, grow), 2 * ran + MIN_MISSES, 100.0 * self._batch)
        self._quiet = 0 if self._held_back else self._quiet + 1
        if self._quiet >= QUIET:
            self._behind = False
            self._calm = QUIET  # as many quiet polls: settled again
