"""The planner thread: turns due schedules into runs (the fires a loader then claims).

Every poll, with database time *now* and horizon ``now + lookahead``, it advances due task
schedules, writing their fires up to the horizon as PENDING runs, and those of a task on
time further ahead (up to ``plan_ahead`` fires within ``plan_window``: one write of the task
row then covers many fires), misfire policy applied (see :mod:`easyjob.core.planner`): the
tasks this node owns (:func:`easyjob.core.admission.planner_owner`: task id modulo the live
nodes that declare the task; in the SQL when every live node has the same code), and any
task overdue past the grace. It plans only the task rows whose name and function its code
declared (or a schedule added at run time for a function its code allowed with
``@runnable``). A row it cannot plan (another node's code, a bad cron or zone edited into
the row, a write the database refuses) is set aside, reported once per change of the row and
looked at again every 10 s (:mod:`easyjob.node.unplannable`): one task's problem never
stops the others' planning. The days of the calendars that due tasks exclude come from
:mod:`easyjob.node.calendars` (read again only when a calendar changed).

While the share of the fires written that its cluster marks MISSED is high (read once a
poll: :meth:`~easyjob.store.contract.RunStore.fates`), the planner is *behind*
(:mod:`easyjob.core.pacing`): it advances at most its paced number of due tasks per poll,
the most overdue first, each by one fire (:func:`easyjob.core.planner.plan_behind`: no fire
written ahead, the fires passed over recorded on that fire's row), so the fires written
follow the runs the cluster starts instead of being inserted and then marked MISSED. The
fires it has free workers for (reserved from its dispatcher, so that its loader does not
count them too) it writes already started by its own node, when the admission rule lets it
(:func:`easyjob.core.admission.starts_when_written`: the ``default`` strategy, one fire to
run, due within the loader's claim lead, its task not limited with a run here): one row
written per run (the insert) where an insert, then the loader's claim and start, make two.
Such a task is planned without the margin (its latest due fire runs now, not its
successor). A task it could write so but has no worker free for is left due, not inserted
PENDING: its fires due meanwhile are the gap its next fire carries; once no worker is left
to reserve, such tasks (:func:`easyjob.core.admission.waits_for_a_worker`) are left due
without being planned at all.

Planning runs on its own thread beside the loader's claims: each is a round trip to the
database at a time, so a node that did both in turn could do neither at the pace of a
busy cluster (measured: one thread 96 % busy, half of it each). A node that is not fresh
plans nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from easyjob.core.admission import (
    Catalog,
    declares,
    planner_owner,
    run_limit,
    starts_when_written,
    waits_for_a_worker,
)
from easyjob.core.config import NodeConfig
from easyjob.core.pacing import Pace
from easyjob.core.planner import plan_advance, plan_behind
from easyjob.core.records import Advance, PlanningRow, Run
from easyjob.core.schedule import Schedule
from easyjob.core.states import RunStatus
from easyjob.core.strategies import Strategy, first_come
from easyjob.node.calendars import Calendars
from easyjob.node.dispatcher import Dispatcher
from easyjob.node.freed import LeftForWorkers
from easyjob.node.hooks import Hooks
from easyjob.node.liveness import Liveness
from easyjob.node.loader import CLAIM_LEAD
from easyjob.node.loop import Loop
from easyjob.node.membership import Membership
from easyjob.node.unplannable import Unplannable
from easyjob.observe.metrics import NO_METRICS, Metrics
from easyjob.store.contract import Store

__all__ = ["Planner"]


class Planner(Loop):
    """See the module docstring."""

    name = "planner"

    def __init__(
        self,
        store: Store,
        config: NodeConfig,
        liveness: Liveness,
        membership: Membership,
        catalog: Catalog,
        log: logging.LoggerAdapter[logging.Logger],
        hooks: Hooks,
        *,
        metrics: Metrics = NO_METRICS,
        on_planned: Callable[[], None] | None = None,
        succeeded: Callable[[], int] = lambda: 0,
        dispatcher: Dispatcher | None = None,
        strategy: Strategy | None = None,
    ) -> None:
        super().__init__(config.poll, log)
        self._store = store
        self._config = config
        self._liveness = liveness
        self._membership = membership
        self._catalog = catalog
        self._hooks = hooks
        self._metrics = metrics
        self._on_planned = on_planned
        self._unplannable = Unplannable(log)
        self._calendars = Calendars(store, log)
        self._wrote = False
        #: fires to run (PENDING rows) this planner wrote, for ``easyjob_fires_written``
        self.fires_written = 0
        self._schedules: dict[tuple[object, ...], Schedule | None] = {}
        self._succeeded = succeeded  # how many runs the node has run so far
        #: where a behind planner's fires written started go (see _started): the node's
        #: dispatcher, when its strategy lets the first node with a free worker take a run
        self._dispatcher = dispatcher if strategy is not None and first_come(strategy) else None
        #: runs this planner wrote started on its node (see _started)
        self.started = 0
        #: Whether its last read left room under its limit (and it had workers free for
        #: what it read: see _started). A behind planner reads the other nodes' overdue
        #: tasks only then: while every planner is behind, every task is overdue, and all
        #: of them read the same most overdue tasks and raced for them (measured: 4 SQLite
        #: nodes x 6,000 tasks lost 61 % of their advances). A node that stopped planning
        #: has its tasks taken once a planner has room, or re-split once it is declared
        #: dead.
        self._spare = True
        #: due tasks the last poll left for want of a free worker (see _started, freed)
        self._short = LeftForWorkers(config.workers)
        self.pace = Pace(timedelta(seconds=config.poll), config.batch)
        #: What a fire written while behind may wait before its successor is due (see
        #: easyjob.core.planner.plan_behind): half a poll.
        self._margin = timedelta(seconds=config.poll / 2)

    def step(self) -> float | None:
        if not self._liveness.fresh():
            return None  # the loader says so in the log
        now = self._liveness.db_now()
        was_behind = self.pace.behind
        since = self.pace.round_start(now)
        fates = (
            None if since is None else self._store.runs.fates(since, now, self._liveness.started_at)
        )
        allowance = self.pace.allowance(now, fates, self._succeeded())
        if self.pace.behind != was_behind:
            self._tell(was_behind)
        if allowance is None:
            horizon = now + timedelta(seconds=self._config.lookahead_s)
            limit = self._config.batch
        elif allowance <= 0:
            return self.pace.refill_s()  # paced: nothing more until the next round
        else:
            horizon, limit = now + self._margin, min(allowance, self._config.batch)
        self._wrote = False
        backlog = self._advance(now, horizon, limit, paced=allowance is not None)
        if self._wrote and self._on_planned is not None:
            self._on_planned()  # the loader claims what was written without waiting a poll
        return 0.0 if backlog else None

    def freed(self, workers: int) -> None:
        """*workers* of the node came free (jobs returned): plan again at once if the last
        poll left due tasks for want of a free worker (see :meth:`_started`), once as many
        workers as it left tasks, or an eighth of the node's workers, have come free."""
        if self._short.enough_freed(workers) and self._short.left:  # counted always
            self._short.leave(0)
            self.wake()

    def _tell(self, was_behind: bool) -> None:
        if was_behind:
            self.log.info("planner: caught up, writing fires ahead again")
        else:
            self.log.warning(
                "planner: the cluster misses many of the fires written (it is offered more than "
                "it starts): writing each task's next fire only, paced, the rest summarised "
                "as MISSED"
            )

    def _advance(self, now: datetime, horizon: datetime, limit: int, *, paced: bool) -> bool:
        due = self._due(now, horizon, limit, paced=paced)
        self._calendars.refresh(due)
        # fires this node writes started (see _started), on workers kept free for them
        mark = self._short.mark()
        seats = self._reserve(len(due), now) if paced else 0
        won: list[int] = []
        started: list[Run] = []
        try:
            plan = self._plan_due(due, now, horizon, paced=paced, seats=seats)
            if plan.advances:
                self._wrote = True
                done = self._store.tasks.advance_and_start(
                    self._config.node_id,
                    plan.advances,
                    plan.start,
                    on_error=self._unplannable.failed_write,
                )
                won, started = done.won, done.started
                self._report_planned_misses(due, plan.advances, won)
        finally:  # the runs started take the workers reserved; the rest are free again
            if seats:
                assert self._dispatcher is not None
                self._dispatcher.submit(started, reserved=seats)
        if started:
            self.started += len(started)
            self._metrics.claims(len(started), 0)
        full = len(due) == limit
        self.fires_written += _pending_fires(plan.advances, won)
        self.pace.planned(len(won), held_back=paced and (full or plan.short > 0))
        self._short.leave(plan.short, mark)
        self._spare = self._spare and not plan.short  # no worker free: no room for others
        # with tasks left for want of workers, the next poll comes when some are free (at
        # once if enough came free during the write)
        return ((plan.backlog or full) and not plan.short) or self._short.enough()

    def _due(
        self, now: datetime, horizon: datetime, limit: int, *, paced: bool
    ) -> list[PlanningRow]:
        """The due tasks this node plans in this poll: its share (see :meth:`_owns`) and,
        unless it is behind with no room (see ``_spare``), any task overdue past the grace;
        at most *limit*, the most overdue first."""
        me = self._config.node_id
        live = [n.node_id for n in self._membership.nodes()]
        uniform = self._membership.uniform()
        share = None
        if me in live and uniform:  # planner_owner over all live nodes, in the SQL
            share = (live.index(me), len(live))
        overdue_before = None
        if not paced or self._spare:  # see _spare
            overdue_before = now - timedelta(seconds=self._config.overdue_grace_s)
        due = self._store.tasks.due(
            horizon,
            limit,
            self._unplannable.ids(now),
            share=share,
            overdue_before=overdue_before,
            behind_before=now - timedelta(seconds=self._config.poll),
            behind_since=self._liveness.started_at,
        )
        if me in live and not uniform:  # nodes declare different tasks: ask per task
            due = [t for t in due if self._owns(t) or _before(t.next_start_time, overdue_before)]
        self._spare = len(due) < limit
        return due

    def _plan_due(
        self, due: list[PlanningRow], now: datetime, horizon: datetime, *, paced: bool, seats: int
    ) -> _Plan:
        """The advances of the *due* tasks, those whose fire is written started on one of
        the *seats* (workers reserved: see :meth:`_started`), and the tasks left due for
        want of a seat."""
        plan = _Plan()
        held = self._dispatcher.tasks_held() if paced and self._dispatcher else set()
        by = now + CLAIM_LEAD
        for task in due:
            if (
                paced
                and self._dispatcher
                and len(plan.start) == seats
                and waits_for_a_worker(task, by, first_come=True, held_here=task.id in held)
            ):
                plan.short += 1  # no worker left for it: left due, not planned (see _started)
                continue
            advance = self._started(task, now, held) if paced and self._dispatcher else None
            if advance is not None and len(plan.start) == seats:
                plan.short += 1  # no worker free for it: left due (see _started)
                continue
            if advance is not None:
                plan.start[task.id] = run_limit(task.overlap, task.max_running)
            else:
                advance, more = self._plan(task, now, horizon, paced=paced)
                plan.backlog = plan.backlog or more
            if advance is not None:
                plan.advances.append(advance)
        return plan

    def _reserve(self, due: int, now: datetime) -> int:
        """Reserve up to *due* free workers of this node for fires written started (see
        :meth:`_started`); returns how many (none without a first-come strategy)."""
        if self._dispatcher is None:
            return 0
        return self._dispatcher.reserve(due, now + CLAIM_LEAD)

    def _started(self, task: PlanningRow, now: datetime, held: set[int]) -> Advance | None:
        """The advance of due *task* whose fire this node writes started, on a worker
        reserved for it, when the admission rule lets it
        (:func:`~easyjob.core.admission.starts_when_written`; *held*: the tasks with a run
        on this node); else None. It is due within the loader's :data:`CLAIM_LEAD`, as a
        run the loader claims and starts in one write: a worker holds only a running job,
        or one about to run. Such a task is planned without the behind planner's margin:
        its latest due fire starts now, rather than its successor (the margin is for a
        fire that would wait behind the cluster's backlog).

        Such a task for which no worker is free is not advanced at all: it stays due, the
        most overdue, for the next poll, and its fires due meanwhile are the gap its next
        fire's row carries. Inserted PENDING instead, its fire was claimed and started by
        another write or missed (measured on 4 SQLite nodes x 6,000 tasks: 4.3-4.5 rows
        per run and 900-950 runs/s, against 3.0-3.3 and 1,800-1,980 so). The pace stays
        behind while it leaves tasks so (``held_back``)."""
        if task.next_start_time is None or task.next_start_time > now + CLAIM_LEAD:
            return None
        by = now + CLAIM_LEAD
        advance, _ = self._plan(task, now, by, paced=True, margin=CLAIM_LEAD)
        if advance is None or not starts_when_written(
            advance, task, by, first_come=True, held_here=task.id in held
        ):
            return None
        return advance

    def _owns(self, task: PlanningRow) -> bool:
        """Whether this node plans *task*: :func:`~easyjob.core.admission.planner_owner` over
        the live nodes that declare it."""
        declaring = self._membership.declaring(task.name, task.func, task.origin)
        return planner_owner(task.id, declaring, self._store.id_step) == self._config.node_id

    def _plan(
        self,
        task: PlanningRow,
        now: datetime,
        horizon: datetime,
        *,
        paced: bool = False,
        margin: timedelta | None = None,
    ) -> tuple[Advance | None, bool]:
        """The advance of one due task, or None when it cannot be planned (its row names a
        task this node's code does not declare, or holds a bad cron or zone): the task is
        then set aside, reported once per change of its row, and the others go on."""
        if not declares(self._catalog, task.name, task.func, task.origin):
            self._unplannable.add(task, now, self._not_declared(task), logging.INFO)
            return None, False
        try:
            schedule = self._schedule(task)
            if schedule is None:
                self._unplannable.add(
                    task, now, "it has a next_start_time but no cron or interval", logging.INFO
                )
                return None, False
            if paced:
                margin = self._margin if margin is None else margin
                return plan_behind(task, schedule, now, margin, excluded=self._calendars.days(task))
            until = now + self._config.plan_until
            return plan_advance(
                task,
                schedule,
                now,
                horizon,
                # nothing ahead until the pace knows the cluster keeps up (see settled)
                ahead=self._config.plan_ahead if self.pace.settled else 1,
                until=until,
                excluded=self._calendars.days(task),
            )
        except Exception as err:  # one task's bad row must not stop the others' planning
            self._unplannable.add(task, now, f"{type(err).__name__}: {err}", logging.ERROR)
            return None, False

    def _not_declared(self, task: PlanningRow) -> str:
        """Why this node's code does not declare *task*, for the log."""
        if task.runtime:
            return f"it was added at run time and its function {task.func} is not @runnable here"
        if task.name not in self._catalog.tasks:
            return "no task of that name is declared by this node's code"
        return f"its function {task.func} is not what this node's code declares for it"

    def _schedule(self, task: PlanningRow) -> Schedule | None:
        key: tuple[object, ...] = (task.cron_expr, task.tz, task.every_ms, task.anchor_time)
        key += (task.starts_at, task.ends_at)
        if key not in self._schedules:
            if len(self._schedules) > 10_000:  # schedules changed at run time: stay bounded
                self._schedules.clear()
            self._schedules[key] = task.schedule
        return self._schedules[key]

    def _report_planned_misses(
        self, tasks: list[PlanningRow], advances: list[Advance], won: Iterable[int]
    ) -> None:
        """Each gap the planner wrote, a MISSED row or the gap a fire carries (either may
        stand for ``missed_count`` fires): counted in ``easyjob_misfires`` and told by a
        ``missed`` event."""
        names = {task.id: task.name for task in tasks}
        written = set(won)
        for advance in advances:
            if advance.task_id not in written:
                continue
            for fire in advance.fires:
                if (gap := fire.gap) is not None:
                    first, count = gap
                    name = names[advance.task_id]
                    self._metrics.misfired(name, count)
                    self._hooks.missed(name, self._config.node_id, first, fire.error_msg, count)


@dataclass
class _Plan:
    """What one poll of the planner writes (see :meth:`Planner._plan_due`)."""

    advances: list[Advance] = field(default_factory=list)
    #: the tasks whose fire is written started -> their run limit
    start: dict[int, int | None] = field(default_factory=dict)
    short: int = 0  # due tasks left for want of a free worker
    backlog: bool = False  # fires beyond an advance's cap remain: plan again at once


def _pending_fires(advances: list[Advance], won: Iterable[int]) -> int:
    """The PENDING fires (fires to run) of the *advances* written."""
    written = set(won)
    return sum(
        1
        for advance in advances
        if advance.task_id in written
        for fire in advance.fires
        if fire.status == RunStatus.PENDING
    )


def _before(when: datetime | None, cutoff: datetime | None) -> bool:
    return when is not None and cutoff is not None and when < cutoff
