"""The recovery thread: takes back the runs of nodes judged dead in database time, and this
node's own runs that it no longer knows of."""

from __future__ import annotations

import logging
from collections.abc import Callable

from easyjob.core.config import NodeConfig
from easyjob.core.records import HeldRun
from easyjob.events import EventKind, RunEvent
from easyjob.node.hooks import Hooks
from easyjob.node.liveness import Liveness
from easyjob.node.loop import Loop
from easyjob.node.membership import Membership
from easyjob.node.writer import RunWriter
from easyjob.observe.metrics import NO_METRICS, Metrics
from easyjob.store.contract import Store

__all__ = ["Recoverer"]


class Recoverer(Loop):
    """Steps every heartbeat: if this node is *stable* (see :class:`Liveness`), find runs
    held by nodes whose heartbeat is older than the dead threshold, in bounded batches, and
    make each claimable again as its next attempt (version-checked, so two recoverers never
    both win). The nodes that the last heartbeat's read found dead (:meth:`Membership.stale`) are
    marked DEAD first; the heartbeat wakes this thread when it finds one.

    The runs of dead nodes are read when that read found a dead node (a crashed node's row
    is RUNNING or STOPPING until someone marks it: the failover bound is kept), until a
    takeover is done (a full batch read, or a step that failed), and once per dead
    threshold whatever it found: the runs of a node marked DEAD by a peer that died before
    taking them, of a node STOPPED with runs left past its shutdown grace, or of a node
    whose row is gone, are found within a dead threshold more.

    Once per dead threshold it also sweeps for *orphans*: runs the database says this node
    holds but the node does not know of (*known* gives the ids it holds in memory). A claim
    or start whose COMMIT was applied while every retry of it failed leaves one; so does a
    release that could not be written. A run found so twice in a row at the same version is
    taken back like a dead node's: its function never ran here, because a run whose function
    ran stays known until its outcome is written.
    """

    name = "recovery"

    def __init__(
        self,
        store: Store,
        config: NodeConfig,
        liveness: Liveness,
        membership: Membership,
        log: logging.LoggerAdapter[logging.Logger],
        known: Callable[[], set[int]],
        writer: RunWriter,
        metrics: Metrics = NO_METRICS,
        hooks: Hooks | None = None,
    ) -> None:
        super().__init__(config.heartbeat, log)
        self._membership = membership
        self._hooks = hooks if hooks is not None else Hooks({})
        self._metrics = metrics
        self._store = store
        self._config = config
        self._liveness = liveness
        self._known = known
        self._writer = writer
        self._steps = 0
        self._unfinished = False  # a takeover begun and not done (a full batch, an error)
        self._suspects: dict[int, int] = {}

    def step(self) -> float | None:
        self._steps += 1
        sweep = self._steps % self._config.dead_after == 0
        if sweep:
            self.sweep_orphans()
        if not self._liveness.stable():
            return None
        now = self._liveness.db_now()
        threshold = self._config.dead_threshold
        stale = self._membership.stale()  # seen by the heartbeat's read: no probe of our own
        marked = self._store.nodes.mark_dead(threshold, now=now) if stale else 0
        if marked:
            self.log.warning("marked %d node(s) DEAD: no heartbeat for %s", marked, threshold)
        if not (stale or sweep or self._unfinished):
            return None  # nobody died: nobody's runs to take back (see the class docstring)
        self._unfinished = True  # until a read finds less than a batch, and all is written
        held = self._store.runs.held_by_dead(threshold, self._config.batch, now=now)
        held = [h for h in held if h.node_id != self._config.node_id]
        if not held:
            self._unfinished = False
            return None
        gave_up: list[int] = []
        recovered: list[tuple[HeldRun, int]] = []
        created = self._writer.recover(
            held,
            max_recoveries=self._config.max_recoveries,
            gave_up=gave_up,
            recovered=recovered,
        )
        report(self._hooks, self._config.node_id, held, recovered, gave_up)
        self._metrics.recovered(len(created))
        dead = sorted({h.node_id for h in held})
        self.log.warning(
            "recovered %d run(s) of dead node(s) %s as new attempts", len(created), ", ".join(dead)
        )
        if gave_up:
            self.log.error(
                "run(s) %s FAILED, not run again: their nodes died while running them more "
                "than max_recoveries (%d) times",
                ", ".join(map(str, gave_up)),
                self._config.max_recoveries,
            )
        full = len(held) == self._config.batch
        self._unfinished = full
        return 0.0 if full else None

    def sweep_orphans(self) -> int:
        """Take back this node's orphans seen in the previous sweep too; returns how many."""
        me = self._config.node_id
        # it holds at most `workers` runs it knows of; the rest of the read is for orphans
        held = self._store.runs.held_by(me, self._config.workers + self._config.batch)
        known = self._known()  # after the read: a run claimed since is not in it anyway
        unknown = {h.id: h for h in held if h.id not in known}
        orphans = [h for h in unknown.values() if self._suspects.get(h.id) == h.version]
        self._suspects = {h.id: h.version for h in unknown.values()}
        if not orphans:
            return 0
        reason = f"node {me} lost track of it (a write's reply was lost); taken back by {me}"
        recovered: list[tuple[HeldRun, int]] = []
        created = self._writer.recover(orphans, reason=reason, recovered=recovered)
        report(self._hooks, me, orphans, recovered, [])
        self._metrics.recovered(len(created))
        self.log.warning("took back %d run(s) this node had lost track of", len(created))
        return len(created)


def report(
    hooks: Hooks,
    node_id: str,
    held: list[HeldRun],
    recovered: list[tuple[HeldRun, int]],
    gave_up: list[int],
) -> None:
    """Emit a ``recovered`` event per run taken back, a ``failure`` per run given up."""
    for run, new_id in recovered:
        if hooks.wants(run.task_name, EventKind.RECOVERED):
            hooks.emit(
                RunEvent(
                    kind=EventKind.RECOVERED,
                    task_name=run.task_name,
                    node_id=node_id,
                    run_id=run.id,
                    fire_time=run.fire_time,
                    attempt=run.attempt,
                    new_run_id=new_id,
                    error=f"held by {run.node_id} ({run.status})",
                )
            )
    ended = set(gave_up)
    for run in held:
        if run.id in ended and hooks.wants(run.task_name, EventKind.FAILURE):
            hooks.emit(
                RunEvent(
                    kind=EventKind.FAILURE,
                    task_name=run.task_name,
                    node_id=node_id,
                    run_id=run.id,
                    fire_time=run.fire_time,
                    attempt=run.attempt,
                    error=f"its node died while running it (last: {run.node_id}); not run again",
                )
            )
