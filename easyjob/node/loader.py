"""The loader thread: claims this node's share of the due runs (the planner writes them)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import NamedTuple

from easyjob.core.admission import (
    Catalog,
    Verdict,
    declares,
    exclusive,
    facts_of,
    misfire,
    on_busy,
    outranked,
    overtakes,
    priority_tiers,
    run_limit,
    start_order,
)
from easyjob.core.config import NodeConfig
from easyjob.core.records import Candidate, Run
from easyjob.core.strategies import (
    ClusterView,
    ReadScope,
    Strategy,
    has_room_to_spare,
    is_home,
    needs,
    overdue,
    read_scope,
    steal_delay,
    steals,
)
from easyjob.node.dispatcher import Dispatcher
from easyjob.node.freed import LeftForWorkers
from easyjob.node.liveness import Liveness
from easyjob.node.loop import Loop
from easyjob.node.membership import Membership
from easyjob.observe.metrics import NO_METRICS, Metrics
from easyjob.store.contract import Store

__all__ = ["Loader"]

#: How far ahead of its due time the loader claims and starts a run in one write (see
#: ``Loader._claim_chosen``). The whole round, its read of the pending runs and the claim,
#: must be done by the due time: a few ms on an idle server, but at 20 ms (the dispatcher's
#: start LEAD) a MariaDB claim came after the fire at p95. The run is RUNNING from then, its
#: ``start_time`` its due time, and its worker calls it at that time.
CLAIM_LEAD = timedelta(milliseconds=50)

#: How many times its usual read a loader reads at most while every run it reads is missed
#: (see ``Loader._sweep``).
_MAX_SWEEP = 16

#: Polls after which the loader forgets which tasks are not its code's, and reads again.
_FORGET_POLLS = 60

#: How often, at most, the loader tells the log that it marks runs MISSED.
_TELL_EVERY = timedelta(seconds=60)


class _Read(NamedTuple):
    """A pending read as the loader sifted it (see ``Loader._sift``)."""

    full: bool  # it returned as many rows as it asked for: more are due behind them
    ours: list[Candidate]  # of this node's code, not held here
    mine: list[Candidate]  # of those, the ones to claim (or miss)
    new_foreign: bool  # rows of tasks not this node's code were found: read again


class Loader(Loop):
    """Every poll (and at once when the planner wrote fires or a worker came free), with
    database time *now* and horizon ``now + lookahead``: read PENDING runs due by the
    horizon, keep those of tasks this node's code declared (name and function), mark MISSED
    those the admission rule misses (:func:`easyjob.core.admission.misfire`: superseded by a
    later fire due by the schedule, or past the grace under ``skip``), let the strategy pick
    this node's share among the nodes that declare each task (plus any overdue past the
    grace), and claim as many as the dispatcher has room for (see
    :meth:`Timetable.room`), at most ``batch`` per statement. With ``default`` the read
    itself is of this node's share (:func:`~easyjob.core.strategies.read_scope`): its home
    runs, and other nodes' runs late by the steal delay when its last read left room to
    spare (:func:`~easyjob.core.strategies.has_room_to_spare`), or overdue. When the
    strategy offers more than the room, home runs come first, then the others from an
    offset of this node's own, so that nodes stealing the same runs mostly try different
    ones. A node holds at most one waiting run per exclusive (``serial``/``skip``) task:
    later fires stay PENDING for now. While a read finds nothing but runs to miss (a
    backlog), the loader reads more at a time; when they were due before the node started
    (the fires an outage left), it claims the present's runs first, newest first (each
    task's latest due fire: see :func:`easyjob.core.admission.overtakes`).

    In the ``skip_locked`` claim mode this is one locking claim of the next due runs (at most
    the room and the batch), which skips rows other nodes are claiming: no pending read, no
    strategy, no lost races; a full batch claims again at once.

    A node claims only the runs of tasks its code declares (name and function, see
    :func:`easyjob.core.admission.declares`), whether it registered their rows yet or not
    (a node registers in the background: :mod:`easyjob.node.registrar`). Tasks whose runs it
    cannot run are remembered (a short list of ids, forgotten every ``_FORGET_POLLS`` polls)
    and left out of the pending read, so polling costs the same whatever the number of
    tasks or functions.

    A node that is not fresh (its heartbeat may look dead to peers) claims nothing.
    """

    name = "loader"

    def __init__(
        self,
        store: Store,
        config: NodeConfig,
        strategy: Strategy,
        liveness: Liveness,
        membership: Membership,
        dispatcher: Dispatcher,
        catalog: Catalog,
        log: logging.LoggerAdapter[logging.Logger],
        metrics: Metrics = NO_METRICS,
        on_missed: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config.poll, log)
        self._on_missed = on_missed  # the planner plans a task again once its backlog is gone
        self._metrics = metrics
        self._store = store
        self._config = config
        self._strategy = strategy
        self._liveness = liveness
        self._membership = membership
        self._dispatcher = dispatcher
        self._writer = dispatcher.writer
        self._catalog = catalog
        self._foreign: set[int] = set()
        self._polls = 0
        self.offered = 0  # runs this node tried to claim
        self.lost = 0  # of those, runs another node claimed first (lost races)
        self.missed = 0  # PENDING runs it marked MISSED (misfire policy)
        self._was_fresh = True
        self._behind = 0  # runs marked MISSED since the last report in the log
        self._direct_at: datetime | None = None  # when to claim next (see _wake_at)
        self._behind_told: datetime | None = None
        #: priorities differed among the runs due here lately: read past the window
        self._ranked = False
        #: the last claim was cut short by the room or by the workers free (see freed)
        self._wants_room = True
        #: the last read's home runs left room and none was late (see has_room_to_spare):
        #: the next read takes other nodes' late runs too
        self._spare = steals(strategy)
        #: runs due left PENDING at the last claim for want of a free worker (see freed)
        self._left = LeftForWorkers(config.workers)
        #: How many times its usual read the next pending read takes: doubled after each
        #: full read whose runs were all missed (a restart after an outage finds the fires
        #: written ahead before it, due in due order before the current ones: read 2 x room
        #: at a time, 60,000 of them took hundreds of round trips), back to 1 after any other.
        self._sweep = 1
        #: more runs were due at the last claim than the workers free could start (a
        #: burst): the next read asks only for what the workers free then can start
        self._beyond_workers = False
        #: the last read was all runs to miss, due before the node started: an outage's
        #: backlog, whose present fires are claimed first (see _claim_present); a saturated
        #: cluster's misses are not (claiming its newest first cost 12 % more CPU per run at
        #: 4 SQLite nodes x 3,000 every-second tasks)
        self._outage = False

    def freed(self, children: bool = False, workers: int = 1) -> None:
        """*workers* came free (jobs returned): claim again at once if the last claim was cut
        short by the room the dispatcher had or left runs due PENDING for want of a free
        worker, or if a run whose task has children succeeded (*children*): its children
        are written due now, and this node's home children are its own to start (see
        :class:`~easyjob.core.strategies.DefaultStrategy`). Jobs return many times a
        second on a busy node, and each needless claim is a pending read. While runs due
        were left PENDING for want of a free worker, it waits for as many workers as there
        are such runs, or an eighth of its workers, whichever is fewer: a saturated node
        then claims and starts them in batches, not one pending read and claim per job
        returned."""
        enough = self._left.enough_freed(workers)  # counted even while nothing waits
        if children or (self._wants_room and enough):
            self.wake()

    def step(self) -> float | None:
        if not self._liveness.fresh():
            if self._was_fresh:
                self.log.warning("heartbeat is not fresh: claiming nothing until it is")
            self._was_fresh = False
            return None
        if not self._was_fresh:
            self.log.info("heartbeat is fresh again: claiming resumes")
            self._was_fresh = True
        self._polls += 1
        if self._polls % _FORGET_POLLS == 0:
            self._foreign.clear()  # a task's row may have been changed to this node's code
            self._ranked = False  # seen again if priorities still differ
        now = self._liveness.db_now()
        horizon = now + timedelta(seconds=self._config.lookahead_s)
        self._direct_at = None
        if self._claim(now, horizon):
            return 0.0
        if self._direct_at is None:
            return None
        # wake to claim and start the runs left for their time (at most a poll from now)
        wait = (self._direct_at - self._liveness.db_now()).total_seconds()
        return max(0.0, min(self._config.poll, wait))

    def _mine(self, task_id: int, name: str, func: str, origin: str) -> bool:
        """Whether this node's code declares task row *task_id* (see
        :func:`easyjob.core.admission.declares`); if not, its runs are left out of the next
        reads."""
        if declares(self._catalog, name, func, origin):
            return True
        self._foreign.add(task_id)
        return False

    def _claim(self, now: datetime, horizon: datetime) -> bool:
        """Claim this poll's runs; True when there may be more to claim at once."""
        room = min(self._dispatcher.room(), self._config.batch)
        self._wants_room = room <= 0
        if room <= 0:  # nothing to claim; the runs due here must still be missed in time
            view = self._view(now, spare=False, counts=False)  # for the read's scope only
            limit = self._config.batch * self._sweep
            due = self._store.runs.pending(
                now,
                limit,
                self._foreign,
                node_id=self._config.node_id,
                scope=read_scope(self._strategy, view, self._grace),
            )
            mine = [c for c in due if self._mine(c.task_id, c.task_name, c.func, c.origin)]
            missed = self._miss(mine, now)
            self._outrank(mine, now)
            return self._swept(due, len(due) == limit and len(missed) == len(due))
        if self._config.claim_mode == "skip_locked":
            won = self._writer.claim_next(horizon, room, self._foreign)
            self.offered += len(won)
            self._metrics.claims(len(won), 0)
            for run in won:
                self._mine(run.task_id, run.task_name, run.func, run.origin)  # released if not
            self._dispatcher.submit(won)
            return len(won) == room
        view = self._view(now, spare=self._spare)
        scope = read_scope(self._strategy, view, self._grace)
        # enough for every live node to take a slice of its own (see _spread), or, reading
        # its own share, for a room of its own and as much stolen; while priorities differ
        # here, a batch at least, to see high runs behind a backlog. While more runs are due
        # than workers free (a burst), only the workers free now can take any: a read for
        # the whole room read the same waiting runs again each round (a minute burst of
        # 20,000 tasks on 3 nodes: 12 rows read per run); not while sweeping a backlog of
        # runs to miss (see below), which no worker starts
        wanted = room
        if self._beyond_workers and self._sweep == 1:
            wanted = min(room, max(1, self._dispatcher.startable(now + CLAIM_LEAD)))
        limit = 2 * wanted if scope.share is not None else wanted * max(1, len(view.live))
        if self._ranked:
            limit = max(limit, self._config.batch)
        if self._outage and self._claim_present(now, view, scope, room, wanted, limit):
            return True  # an outage's backlog is being swept: the present first
        pending = self._store.runs.pending(
            horizon, limit * self._sweep, self._foreign, node_id=self._config.node_id, scope=scope
        )
        read = self._sift(pending, limit * self._sweep)
        missed = self._miss(read.mine, now)
        if self._swept(pending, read.full and len(missed) == len(pending)):
            if self._outage:  # an outage's backlog of runs to miss: its present first
                self._claim_present(now, view, scope, room, wanted, limit)
            return True
        if missed:
            return True  # read again: the backlog shrank
        return self._take(read, view, room, wanted, now)

    def _swept(self, read: list[Candidate], full: bool) -> bool:
        """After a *read* whose runs were all missed (*full*: as many as it asked for), the
        next read takes twice as many (up to :data:`_MAX_SWEEP` times the usual): a backlog
        of runs to miss. It is an outage's (the fires written ahead before it, due before
        the present ones) when the runs read were due before the node started. Back to the
        usual after any other read. Returns *full*."""
        self._sweep = min(_MAX_SWEEP, 2 * self._sweep) if full else 1
        started = self._liveness.started_at
        self._outage = full and bool(read) and started is not None and read[-1].due_time < started
        return full

    def _claim_present(
        self, now: datetime, view: ClusterView, scope: ReadScope, room: int, wanted: int, limit: int
    ) -> bool:
        """While a backlog of runs to miss is swept, claim the runs due by *now* that may
        start ahead of it (see :func:`easyjob.core.admission.overtakes`; each task's latest
        fire, read newest first); whether any was claimed. Sweeping 15,000 fires an outage
        left before claiming took one SQLite node 1.75 s before its first run, and then the
        present fires of the tasks it had not claimed yet were superseded."""
        present = self._store.runs.pending(
            now, limit, self._foreign, node_id=self._config.node_id, scope=scope, newest=True
        )
        read = self._sift(present, limit, lambda c: overtakes(facts_of(c), now))
        gone = self._miss(read.mine, now)
        mine = [c for c in read.mine if c.id not in gone]
        if not mine:
            return False
        offered = self.offered
        self._take(read._replace(mine=mine), view, room, wanted, now)
        return self.offered > offered

    def _sift(
        self,
        pending: list[Candidate],
        limit: int,
        admitted: Callable[[Candidate], bool] = lambda c: True,
    ) -> _Read:
        """The runs of *pending* (read with *limit*) this node may claim: ``ours`` (its
        code's, not held here) and of those ``mine`` (not of an exclusive task with a run
        waiting here, and *admitted*)."""
        foreign = len(self._foreign)
        held = self._dispatcher.held_ids()
        exclusive = self._dispatcher.exclusive_waiting()
        ours = [
            c
            for c in pending
            if self._mine(c.task_id, c.task_name, c.func, c.origin) and c.id not in held
        ]
        mine = [c for c in ours if c.task_id not in exclusive and admitted(c)]
        return _Read(len(pending) == limit, ours, mine, len(self._foreign) > foreign)

    def _take(self, read: _Read, view: ClusterView, room: int, wanted: int, now: datetime) -> bool:
        """Claim what the strategy picks of *read*'s runs for this node (at most *room*);
        True when there may be more to claim at once."""
        mine = _first_per_exclusive_task(read.mine)
        chosen = self._choose(mine, view)
        self._wants_room = len(chosen) > room
        if steals(self._strategy):
            home = [c for c in mine if c.target_node is None and is_home(c, view)]
            self._spare = has_room_to_spare(home, room, now, self._config.poll)
        if len(chosen) > room and len({c.priority for c in chosen}) > 1:
            self._ranked = True
        chosen = _spread_by_priority(chosen, room, list(view.live), self._config.node_id, now)
        if not chosen:
            self._direct_at = _wake_at(read.ours, [], now)
            return read.new_foreign  # read again without those tasks
        won, tried = self._claim_chosen(chosen, mine, now)
        # runs were left for want of a worker, or the read cut short by the workers found
        # as many as it asked for: more are due behind them
        self._beyond_workers = bool(self._left.left) or (wanted < room and read.full)
        self._direct_at = _wake_at(read.ours, won, now)
        self.offered += tried
        self.lost += tried - len(won)
        self._metrics.claims(len(won), tried - len(won))
        mark = self._left.mark()
        if self._beyond_workers and not self._dispatcher.startable(now + CLAIM_LEAD):
            # every worker is taken and more runs are due: read again once workers come
            # free (see freed), not at once for runs no worker can start (a minute burst
            # of 20,000 tasks on 3 nodes: every other read claimed a handful)
            self._wants_room = True
            if not self._left.left:  # the read stopped at the workers free: more are due
                self._left.leave(self._config.workers, mark)
            return self._left.enough()  # jobs returned since the check: claim at once
        # more at once: a full batch won, or some won from a full read (a backlog: the runs
        # lost to other nodes are theirs, the next read finds others)
        return len(won) == room or (bool(won) and read.full)

    def _outrank(self, due: list[Candidate], now: datetime) -> None:
        """A node that can claim no more hands back waiting runs for due PENDING runs of
        higher priority (see :func:`easyjob.core.admission.outranked`) and claims those."""
        top = max((c.priority for c in due), default=None)
        if top is not None and top > min(c.priority for c in due):
            self._ranked = True
        waiting = self._dispatcher.waiting_runs()
        if top is None or all(r.priority >= top for r in waiting):
            return  # nothing due outranks what waits here (always so without priorities)
        held = self._dispatcher.held_ids()
        pending = self._choose([c for c in due if c.id not in held], self._view(now, spare=False))
        pairs = outranked(waiting, pending, now)
        if not pairs:
            return
        given = self._dispatcher.give_back(
            [r.id for r, _ in pairs], "a run of higher priority is due"
        )
        won = self._writer.claim([c for _, c in pairs][: len(given)]) if given else []
        self.offered += len(given)
        self.lost += len(given) - len(won)
        self._dispatcher.submit(won)

    def _claim_chosen(
        self, chosen: list[Candidate], mine: list[Candidate], now: datetime
    ) -> tuple[list[Run], int]:
        """Claim *chosen* and hand the runs won to the dispatcher; returns them and how many
        were tried.

        A run that can start as soon as it is due (see :func:`_direct`) is claimed and
        started in one write (:meth:`RunStore.claim_started`) within :data:`CLAIM_LEAD` of its
        due time, when a worker here is free for it: the dispatcher calls it at that time.
        One due later is left PENDING, and the loader wakes for it then; so is one due now
        with no worker free for it: claimed to wait, it would cost a claim and a start (two
        writes) and hold a run another node may have a worker for; the loader claims it
        and starts it in one write when a worker here comes free (see :meth:`freed`), or
        the misfire rule misses it. Every other run (a ``serial`` one due while its task
        has a run here, which waits its turn; a ``skip`` one; one of several fires of its
        task due at once) is claimed to wait in the timetable and be started at its time
        (two writes)."""
        soon = now + CLAIM_LEAD
        held = self._dispatcher.tasks_held()
        direct = _direct(chosen, mine, soon)
        # a serial task's run here has most likely ended by its next fire's time: that
        # fire is left PENDING too (claimed ahead now, it would cost a write more)
        due = [
            c
            for c in direct
            if c.due_time <= soon
            and (not exclusive(c.overlap, c.max_running) or c.task_id not in held)
        ]
        # the workers to start them on, kept from a behind planner's fires written started
        mark = self._left.mark()
        startable = self._dispatcher.reserve(len(due), soon)
        self._left.leave(0)
        if len(due) > startable:  # more due than workers free: the admission rule's order
            due = start_order(due, now)
            self._wants_room = True  # claim the rest when workers come free
            self._left.leave(len(due) - startable, mark)
            if self._left.enough():  # jobs returned since the workers were counted
                self.wake()
        at_once = due[:startable]
        later = [c for c in direct if c.due_time > soon]  # the loader wakes for them
        won: list[Run] = []
        try:
            if at_once:
                serial = [c.id for c in at_once if exclusive(c.overlap, c.max_running)]
                won = self._writer.claim_started(at_once, exclusive=serial)
            ids = {c.id for c in due} | {c.id for c in later}
            rest = [c for c in chosen if c.id not in ids]
            if rest:
                won += self._writer.claim(rest)
        finally:  # the runs won take the workers reserved; the rest are free again
            self._dispatcher.submit(won, reserved=startable)
        return won, len(at_once) + len(rest)

    def _miss(self, candidates: list[Candidate], now: datetime) -> set[int]:
        """Mark MISSED the *candidates* the admission rule misses (see
        :func:`easyjob.core.admission.misfire`), each with its reason; returns their ids
        (marked here, or moved on meanwhile: none is to be claimed)."""
        # a run whose fire time is still to come can be neither superseded nor late
        decided = {c: misfire(facts_of(c), now) for c in candidates if c.fire_time < now}
        missed = {c: d.reason or "missed" for c, d in decided.items() if d is not None}
        if not missed:
            return set()
        won = self._writer.miss_pending({c.id: (c.version, why) for c, why in missed.items()})
        by_task: dict[str, list[Candidate]] = {}
        for c in missed:
            if c.id in won:
                by_task.setdefault(c.task_name, []).append(c)
        for name, runs in by_task.items():
            self._metrics.misfired(name, len(runs))
            first = min(runs, key=lambda c: c.fire_time)
            self._dispatcher.hooks.missed(
                name, self._config.node_id, first.fire_time, missed[first], len(runs)
            )
        self.missed += len(won)
        self._behind += len(won)
        if won and self._on_missed is not None:
            self._on_missed()
        if won and (self._behind_told is None or now - self._behind_told >= _TELL_EVERY):
            self.log.warning(
                "marked %d run(s) MISSED since the last report (%d task(s) just now): a later "
                "fire of each was due before they could start, or they were past their grace",
                self._behind,
                len(by_task),
            )
            self._behind, self._behind_told = 0, now
        return {c.id for c in missed}

    @property
    def _grace(self) -> timedelta:
        return timedelta(seconds=self._config.overdue_grace_s)

    def _view(self, now: datetime, *, spare: bool, counts: bool = True) -> ClusterView:
        """What the strategy looks at this poll; with *spare* (the last claim left room),
        other nodes' runs late by the steal delay are this node's to take too. Without
        *counts*, the runs each node holds are left unread (a view for the pending read's
        scope alone: a strategy that needs them reads them once it chooses)."""
        nodes = self._membership.nodes()
        held = {}
        if counts and "held" in needs(self._strategy):
            held = self._store.runs.held_counts()
        return ClusterView(
            me=self._config.node_id,
            live=[n.node_id for n in nodes],
            weights={n.node_id: n.weight for n in nodes},
            held=held,
            now=now,
            soon=now + timedelta(seconds=self._config.poll / 2),
            declaring=lambda c: self._membership.declaring(c.task_name, c.func, c.origin),
            steal_by=now - steal_delay(self._config.poll) if spare else None,
            uniform=self._membership.uniform(),
            id_step=self._store.id_step,
        )

    def _choose(self, candidates: list[Candidate], view: ClusterView) -> list[Candidate]:
        """The strategy's pick of *candidates* for *view*, plus this node's broadcast runs
        and the overdue ones (anyone's)."""
        # a broadcast run is this node's own: no strategy hands it to another
        targeted = [c for c in candidates if c.target_node == self._config.node_id]
        shared = [c for c in candidates if c.target_node is None]
        picked = targeted + self._strategy.select(shared, view)
        assert view.now is not None  # the loader's views always carry the time
        late = overdue(shared, view.now, self._grace)
        ids = {c.id for c in picked}
        return picked + [c for c in late if c.id not in ids]


def _wake_at(ours: list[Candidate], won: list[Run], now: datetime) -> datetime | None:
    """When the loader claims next, unless a poll or a wake comes first: :data:`CLAIM_LEAD`
    before the first of *ours* (the PENDING runs read for this node: its code's, not held
    here) due after the lead that this poll did not claim (*won*), so that it is claimed
    and started at its time; None if there is none. Every such run counts: one left for
    its time (see :meth:`Loader._claim_chosen`), and one of a limited task whose run is out
    here or ahead of it in this read (a ``serial`` task's, the default), and one another
    node may take (a read at its time costs little). Counting only the runs left for their
    time, a node of serial tasks read each fire a poll after its last read, later every
    second by the time a poll took (p95 55 ms late on an idle node)."""
    soon = now + CLAIM_LEAD
    claimed = {run.id for run in won}
    later = [c.due_time for c in ours if c.due_time > soon and c.id not in claimed]
    return min(later) - CLAIM_LEAD if later else None


def _direct(chosen: list[Candidate], mine: list[Candidate], soon: datetime) -> list[Candidate]:
    """Of *chosen*, the runs to claim and start in one write at their time: overlap
    ``allow`` or ``serial`` (a ``skip`` run that finds its task busy must be recorded
    SKIPPED: it takes the two-write way), and not one of several fires of its task due by
    *soon* (a backlog: the dispatcher decides between them, superseded or gated)."""
    due = Counter(c.task_id for c in mine if c.due_time <= soon)
    return [c for c in chosen if not _skipped_if_busy(c) and due[c.task_id] <= 1]


def _skipped_if_busy(candidate: Candidate) -> bool:
    return on_busy(candidate.overlap).verdict == Verdict.SKIP


def _first_per_exclusive_task(candidates: list[Candidate]) -> list[Candidate]:
    """*candidates* (in due order) less every limited task's runs after its first ones, as
    many as its limit (one for ``serial``; see :func:`easyjob.core.admission.run_limit`)."""
    seen: Counter[int] = Counter()
    out = []
    for c in candidates:
        limit = run_limit(c.overlap, c.max_running)
        if limit is not None:
            if seen[c.task_id] >= limit:
                continue
            seen[c.task_id] += 1
        out.append(c)
    return out


def _spread_by_priority(
    chosen: list[Candidate], free: int, live: list[str], me: str, now: datetime
) -> list[Candidate]:
    """:func:`_spread` of *chosen*, when more are offered than *free* and their priorities
    differ, tier by tier of the admission rule's effective priority (highest first, see
    :func:`easyjob.core.admission.priority_tiers`): lower tiers only get the room the
    higher leave; nodes spread over the runs within a tier."""
    if len(chosen) <= free or len({c.priority for c in chosen}) == 1:
        return _spread(chosen, free, live, me)  # equal priorities: aging keeps due order
    out: list[Candidate] = []
    for tier in priority_tiers(chosen, now):
        out += _spread(tier, free - len(out), live, me)
        if len(out) >= free:
            break
    return out


def _spread(chosen: list[Candidate], free: int, live: list[str], me: str) -> list[Candidate]:
    """At most *free* of *chosen*: all of them when they fit. Else this node's "home" runs
    first (``run id mod live nodes`` = its rank among the *live* node ids), then the others
    from an offset of its own: nodes offered the same runs then claim mostly different ones
    instead of all losing to the first, even when they read the runs at different moments."""
    if len(chosen) <= free:
        return chosen
    if me not in live:
        return chosen[:free]
    rank, size = live.index(me), len(live)
    home = [c for c in chosen if c.id % size == rank]
    rest = [c for c in chosen if c.id % size != rank]
    start = len(rest) * rank // size
    return (home + rest[start:] + rest[:start])[:free]
