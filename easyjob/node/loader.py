"""The loader thread: turns due schedules into runs and claims this node's share of them."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from easyjob.core.config import NodeConfig
from easyjob.core.cron import CronSchedule
from easyjob.core.planner import plan_advance
from easyjob.core.records import Advance, Candidate
from easyjob.core.strategies import ClusterView, LeastCountStrategy, Strategy, overdue
from easyjob.errors import ConfigError
from easyjob.node.dispatcher import Dispatcher
from easyjob.node.heartbeat import Membership
from easyjob.node.liveness import Liveness
from easyjob.node.loop import Loop
from easyjob.observe.metrics import NO_METRICS, Metrics, count_misfires
from easyjob.store import Store

__all__ = ["Loader"]


class Loader(Loop):
    """Every poll, with database time *now* and horizon ``now + lookahead``:

    1. advance due task schedules, writing their fires up to the horizon as PENDING runs
       (misfire policy applied; see :mod:`easyjob.core.planner`): this node's share of the
       tasks (task id modulo the live nodes), and any task overdue past the grace;
    2. read PENDING runs due by the horizon (of tasks whose function this node's code has), let
       the strategy pick this node's share (plus any overdue past the grace), and claim at
       most as many as the dispatcher has free capacity for, in one batch. When the strategy
       offers more than that, each node starts at its own offset into the list, so that
       nodes racing for the same runs (``default``) mostly try different ones.

       In the ``skip_locked`` claim mode, step 2 is one locking claim of the next due runs
       (at most the free capacity and the batch), which skips rows other nodes are claiming:
       no pending read, no strategy, no lost races; a full batch claims again at once.

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
        funcs: frozenset[str],
        log: logging.LoggerAdapter[logging.Logger],
        metrics: Metrics = NO_METRICS,
    ) -> None:
        super().__init__(config.poll, log)
        self._metrics = metrics
        self._store = store
        self._config = config
        self._strategy = strategy
        self._liveness = liveness
        self._membership = membership
        self._dispatcher = dispatcher
        self._funcs = funcs
        self._schedules: dict[tuple[str, str], CronSchedule] = {}
        self.offered = 0  # runs this node tried to claim
        self.lost = 0  # of those, runs another node claimed first (lost races)
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
        now = self._liveness.db_now()
        horizon = now + timedelta(seconds=self._config.lookahead_s)
        backlog = self._advance(now, horizon)
        more = self._claim(now, horizon)
        return 0.0 if backlog or more else None

    def _advance(self, now: datetime, horizon: datetime) -> bool:
        live = [n.node_id for n in self._membership.nodes()]
        share = None
        if self._config.node_id in live:  # else (not yet in the membership): advance any
            share = (live.index(self._config.node_id), len(live))
        grace = timedelta(seconds=self._config.overdue_grace_s)
        due = self._store.tasks.due(
            horizon, self._config.batch, self._funcs, share=share, overdue_before=now - grace
        )
        advances: list[Advance] = []
        backlog = False
        for task in due:
            schedule = self._schedule(task.cron_expr, task.tz)
            if schedule is None:
                continue
            advance, more = plan_advance(task, schedule, now, horizon)
            advances.append(advance)
            backlog = backlog or more
        if advances:
            won = self._store.tasks.advance(self._config.node_id, advances)
            count_misfires(self._metrics, due, advances, won)
        return backlog or len(due) == self._config.batch

    def _schedule(self, expr: str | None, tz: str) -> CronSchedule | None:
        if expr is None:
            return None
        key = (expr, tz)
        if key not in self._schedules:
            try:
                self._schedules[key] = CronSchedule.parse(expr, tz)
            except ConfigError as err:
                self.log.error("cannot schedule %r in %s: %s", expr, tz, err)
                return None
        return self._schedules[key]

    def _claim(self, now: datetime, horizon: datetime) -> bool:
        """Claim this poll's runs; True when there may be more to claim at once."""
        free = self._dispatcher.free()
        if free <= 0:
            return False
        if self._config.claim_mode == "skip_locked":
            limit = min(free, self._config.batch)
            won = self._store.runs.claim_next(self._config.node_id, horizon, limit, self._funcs)
            self.offered += len(won)
            self._metrics.claims(len(won), 0)
            self._dispatcher.submit(won)
            return len(won) == limit
        held = self._dispatcher.held_ids()
        live = [n.node_id for n in self._membership.nodes()]
        # enough for every live node to take a slice of its own (see _spread)
        limit = max(self._config.batch, free * max(1, len(live)))
        pending = self._store.runs.pending(horizon, limit, self._funcs)
        mine = [c for c in pending if c.id not in held]
        if not mine:
            return False
        chosen = _spread(self._choose(mine, now), free, live, self._config.node_id)
        if chosen:
            won = self._store.runs.claim(self._config.node_id, chosen)
            self.offered += len(chosen)
            self.lost += len(chosen) - len(won)
            self._metrics.claims(len(won), len(chosen) - len(won))
            self._dispatcher.submit(won)
        return False

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
        picked = self._strategy.select(candidates, view)
        grace = timedelta(seconds=self._config.overdue_grace_s)
        late = overdue(candidates, now, grace)
        ids = {c.id for c in picked}
        return picked + [c for c in late if c.id not in ids]


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
