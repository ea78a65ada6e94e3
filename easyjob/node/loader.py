"""The loader thread: turns due schedules into runs and claims this node's share of them."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from easyjob.core.config import NodeConfig
from easyjob.core.planner import plan_advance
from easyjob.core.records import ORIGIN_RUNTIME, Advance, Candidate, TaskRow
from easyjob.core.schedule import Schedule
from easyjob.core.states import Misfire, Overlap, RunStatus
from easyjob.core.strategies import ClusterView, LeastCountStrategy, Strategy, overdue
from easyjob.events import EventKind, RunEvent
from easyjob.node.dispatcher import Dispatcher
from easyjob.node.heartbeat import Membership
from easyjob.node.liveness import Liveness
from easyjob.node.loop import Loop
from easyjob.node.unplannable import Unplannable
from easyjob.observe.metrics import NO_METRICS, Metrics, count_misfires
from easyjob.registry import Registered
from easyjob.store import Store

__all__ = ["Loader"]

#: Polls after which the loader forgets which tasks are not its code's, and reads again.
_FORGET_POLLS = 60


class Loader(Loop):
    """Every poll, with database time *now* and horizon ``now + lookahead``:

    1. advance due task schedules, writing their fires up to the horizon as PENDING runs
       (misfire policy applied; see :mod:`easyjob.core.planner`): this node's share of the
       tasks (task id modulo the live nodes), and any task overdue past the grace;
    2. read PENDING runs due by the horizon, keep those of tasks this node's code declared
       (name and function), apply the misfire policy to the ones already later than their
       task's grace (see :meth:`RunStore.miss_late`), let the strategy pick this node's
       share (plus any overdue past the grace), and claim as many as the dispatcher has
       room for (see :meth:`Timetable.room`), at most ``batch`` per statement. When the
       strategy offers more than that, each node starts at its own offset into the list,
       so that nodes racing for the same runs (``default``) mostly try different ones. A
       node holds at most one waiting run per exclusive (``serial``/``skip``) task: later
       fires stay PENDING for now.

       In the ``skip_locked`` claim mode, step 2 is one locking claim of the next due runs
       (at most the room and the batch), which skips rows other nodes are claiming: no
       pending read, no strategy, no lost races; a full batch claims again at once.

    A node plans and claims only the tasks its code declared: the task rows it registered
    at start (:meth:`declare`), still naming the function its code has for that name. A
    task row it cannot plan (another node's code, a bad cron or zone edited into the row, a
    write the database refuses) is set aside, reported once per change of the row and
    looked at again every 10 s (:mod:`easyjob.node.unplannable`): one task's problem never
    stops the others' planning. Tasks whose runs it cannot run are remembered (a short list
    of ids, forgotten every ``_FORGET_POLLS`` polls) and left out of the pending read, so
    polling costs the same whatever the number of tasks or functions.

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
        tasks: Mapping[str, Registered],
        log: logging.LoggerAdapter[logging.Logger],
        metrics: Metrics = NO_METRICS,
        runnable: Iterable[str] = (),
    ) -> None:
        super().__init__(config.poll, log)
        self._metrics = metrics
        self._store = store
        self._config = config
        self._strategy = strategy
        self._liveness = liveness
        self._membership = membership
        self._dispatcher = dispatcher
        self._code = {name: entry.spec.func for name, entry in tasks.items()}
        self._runnable = frozenset(runnable)
        self._task_ids: frozenset[int] | None = None
        self._foreign: set[int] = set()
        self._unplannable = Unplannable(log)
        self._polls = 0
        self._schedules: dict[tuple[object, ...], Schedule | None] = {}
        self.offered = 0  # runs this node tried to claim
        self.lost = 0  # of those, runs another node claimed first (lost races)
        self.missed = 0  # PENDING runs it marked MISSED (misfire policy)
        self._was_fresh = True

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
        now = self._liveness.db_now()
        horizon = now + timedelta(seconds=self._config.lookahead_s)
        backlog = self._advance(now, horizon)
        more = self._claim(now, horizon)
        return 0.0 if backlog or more else None

    def declare(self, task_ids: Iterable[int]) -> None:
        """The ids of the task rows this node registered: it claims only their runs."""
        self._task_ids = frozenset(task_ids)

    def _mine(self, task_id: int, name: str, func: str, origin: str) -> bool:
        """Whether task row *task_id* is one this node registered, still naming the function
        its code declared for *name*, or a task added at run time whose function its code
        allowed (``@runnable``); if not, its runs are left out of the next reads."""
        if self._runnable_here(name, func, origin):
            return True
        if (self._task_ids is None or task_id in self._task_ids) and self._code.get(name) == func:
            return origin != ORIGIN_RUNTIME
        self._foreign.add(task_id)
        return False

    def _advance(self, now: datetime, horizon: datetime) -> bool:
        live = [n.node_id for n in self._membership.nodes()]
        share = None
        if self._config.node_id in live:  # else (not yet in the membership): advance any
            share = (live.index(self._config.node_id), len(live))
        grace = timedelta(seconds=self._config.overdue_grace_s)
        due = self._store.tasks.due(
            horizon,
            self._config.batch,
            self._unplannable.ids(now),
            share=share,
            overdue_before=now - grace,
        )
        advances: list[Advance] = []
        backlog = False
        for task in due:
            advance, more = self._plan(task, now, horizon)
            if advance is not None:
                advances.append(advance)
                backlog = backlog or more
        if advances:
            won = self._store.tasks.advance(
                self._config.node_id, advances, on_error=self._unplannable.failed_write
            )
            count_misfires(self._metrics, due, advances, won)
            self._report_planned_misses(due, advances, won)
        return backlog or len(due) == self._config.batch

    def _plan(self, task: TaskRow, now: datetime, horizon: datetime) -> tuple[Advance | None, bool]:
        """The advance of one due task, or None when it cannot be planned (its row names a
        task this node's code does not declare, or holds a bad cron or zone): the task is
        then set aside, reported once per change of its row, and the others go on."""
        func = self._code.get(task.name)
        if self._runnable_here(task.name, task.func, task.origin):
            pass
        elif task.runtime:
            why = f"it was added at run time and its function {task.func} is not @runnable here"
            self._unplannable.add(task, now, why, logging.INFO)
            return None, False
        elif func != task.func:
            why = f"its function {task.func} is not what this node's code declares for it"
            if func is None:
                why = "no task of that name is declared by this node's code"
            self._unplannable.add(task, now, why, logging.INFO)
            return None, False
        try:
            schedule = self._schedule(task)
            if schedule is None:
                self._unplannable.add(
                    task, now, "it has a next_start_time but no cron or interval", logging.INFO
                )
                return None, False
            return plan_advance(task, schedule, now, horizon)
        except Exception as err:  # one task's bad row must not stop the others' planning
            self._unplannable.add(task, now, f"{type(err).__name__}: {err}", logging.ERROR)
            return None, False

    def _runnable_here(self, name: str, func: str, origin: str) -> bool:
        """A task added at run time, under a name this node's code does not declare, calling
        a function its code allowed with ``@runnable``."""
        return origin == ORIGIN_RUNTIME and name not in self._code and func in self._runnable

    def _schedule(self, task: TaskRow) -> Schedule | None:
        key: tuple[object, ...] = (task.cron_expr, task.tz, task.every_ms, task.anchor_time)
        key += (task.starts_at, task.ends_at)
        if key not in self._schedules:
            if len(self._schedules) > 10_000:  # schedules changed at run time: stay bounded
                self._schedules.clear()
            self._schedules[key] = task.schedule
        return self._schedules[key]

    def _claim(self, now: datetime, horizon: datetime) -> bool:
        """Claim this poll's runs; True when there may be more to claim at once."""
        room = min(self._dispatcher.room(), self._config.batch)
        if room <= 0:
            return False
        if self._config.claim_mode == "skip_locked":
            won = self._store.runs.claim_next(self._config.node_id, horizon, room, self._foreign)
            self.offered += len(won)
            self._metrics.claims(len(won), 0)
            for run in won:
                self._mine(run.task_id, run.task_name, run.func, run.origin)  # released if not
            self._dispatcher.submit(won)
            return len(won) == room
        live = [n.node_id for n in self._membership.nodes()]
        # enough for every live node to take a slice of its own (see _spread)
        limit = room * max(1, len(live))
        pending = self._store.runs.pending(
            horizon, limit, self._foreign, node_id=self._config.node_id
        )
        known_foreign = len(self._foreign)
        held = self._dispatcher.held_ids()
        exclusive = self._dispatcher.exclusive_waiting()
        mine = [
            c
            for c in pending
            if self._mine(c.task_id, c.task_name, c.func, c.origin)
            and c.id not in held
            and c.task_id not in exclusive
        ]
        if self._miss_late(mine, now):
            return True  # read again: the backlog shrank
        mine = _first_per_exclusive_task(mine)
        chosen = _spread(self._choose(mine, now), room, live, self._config.node_id)
        if not chosen:
            return len(self._foreign) > known_foreign  # read again without those tasks
        won = self._store.runs.claim(self._config.node_id, chosen)
        self.offered += len(chosen)
        self.lost += len(chosen) - len(won)
        self._metrics.claims(len(won), len(chosen) - len(won))
        self._dispatcher.submit(won)
        # more at once: a full batch won, or some won from a full read (a backlog: the runs
        # lost to other nodes are theirs, the next read finds others)
        return len(won) == room or (bool(won) and len(pending) == limit)

    def _miss_late(self, candidates: list[Candidate], now: datetime) -> bool:
        """Apply the misfire policy to candidates later than their task's grace; True
        when any run was marked MISSED."""
        late = {
            c.task_id: (c.misfire, now - c.grace)
            for c in candidates
            if c.misfire != Misfire.CATCH_UP and c.due_time < now - c.grace
        }
        if not late:
            return False
        marked = self._store.runs.miss_late(late)
        if marked:
            self.missed += marked
            # one count per statement: by task when one task was late, else under "other"
            names = {c.task_name for c in candidates if c.task_id in late}
            self._metrics.misfired(next(iter(names)) if len(names) == 1 else "other", marked)
            self._report_marked(candidates, late, marked, now)
            self.log.warning(
                "marked %d run(s) of %d task(s) MISSED: later than their misfire grace",
                marked,
                len(late),
            )
        return marked > 0

    def _report_planned_misses(
        self, tasks: list[TaskRow], advances: list[Advance], won: Iterable[int]
    ) -> None:
        """A ``missed`` event per MISSED row the planner wrote (one row may stand for
        ``missed_count`` fires)."""
        hooks = self._dispatcher.hooks
        names = {task.id: task.name for task in tasks}
        written = set(won)
        for advance in advances:
            name = names[advance.task_id]
            if advance.task_id not in written or not hooks.wants(name, EventKind.MISSED):
                continue
            for fire in advance.fires:
                if fire.status == RunStatus.MISSED:
                    hooks.emit(
                        RunEvent(
                            kind=EventKind.MISSED,
                            task_name=name,
                            node_id=self._config.node_id,
                            fire_time=fire.fire_time,
                            error=fire.error_msg,
                            count=fire.missed_count or 1,
                        )
                    )

    def _report_marked(
        self, candidates: list[Candidate], late: Mapping[int, object], marked: int, now: datetime
    ) -> None:
        """A ``missed`` event per task whose PENDING runs were marked MISSED in bulk: with
        the exact count when one task was, else with the count of its runs read here."""
        hooks = self._dispatcher.hooks
        read: dict[int, list[Candidate]] = {}
        for c in candidates:
            if c.task_id in late and c.due_time < now - c.grace:
                read.setdefault(c.task_id, []).append(c)
        for runs in read.values():
            name = runs[0].task_name
            if not hooks.wants(name, EventKind.MISSED):
                continue
            hooks.emit(
                RunEvent(
                    kind=EventKind.MISSED,
                    task_name=name,
                    node_id=self._config.node_id,
                    fire_time=runs[0].fire_time,
                    error=f"missed: not started within its misfire grace "
                    f"(policy {runs[0].misfire.value})",
                    count=marked if len(read) == 1 else len(runs),
                )
            )

    def _choose(self, candidates: list[Candidate], now: datetime) -> list[Candidate]:
        nodes = self._membership.nodes()
        held = {}
        if isinstance(self._strategy, LeastCountStrategy):
            held = self._store.runs.held_counts()
        view = ClusterView(
            me=self._config.node_id,
            live=[n.node_id for n in nodes],
            weights={n.node_id: n.weight for n in nodes},
            held=held,
            now=now,
            soon=now + timedelta(seconds=self._config.poll / 2),
        )
        # a broadcast run is this node's own: no strategy hands it to another
        targeted = [c for c in candidates if c.target_node == self._config.node_id]
        shared = [c for c in candidates if c.target_node is None]
        picked = targeted + self._strategy.select(shared, view)
        grace = timedelta(seconds=self._config.overdue_grace_s)
        late = overdue(shared, now, grace)
        ids = {c.id for c in picked}
        return picked + [c for c in late if c.id not in ids]


def _first_per_exclusive_task(candidates: list[Candidate]) -> list[Candidate]:
    """*candidates* (in due order) less every exclusive task's runs after its first."""
    seen: set[int] = set()
    out = []
    for c in candidates:
        if c.overlap != Overlap.ALLOW:
            if c.task_id in seen:
                continue
            seen.add(c.task_id)
        out.append(c)
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
