"""The heartbeat thread: stamps this node's row in database time and keeps the membership."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence

from easyjob.clock import Clock
from easyjob.core.admission import Catalog
from easyjob.core.config import NodeConfig
from easyjob.errors import NodeIdInUseError
from easyjob.node.liveness import Liveness
from easyjob.node.loop import Loop
from easyjob.node.membership import Membership
from easyjob.store.contract import Store

__all__ = ["Heartbeater"]


class Heartbeater(Loop):
    """Every ``heartbeat`` seconds: stamp ``heartbeat_at`` (database time), then in one read
    measure the clock offset and refresh the membership (the live nodes, and the dead ones
    for the recovery). A heartbeat that fails or hangs simply leaves the node un-fresh (see
    :class:`Liveness`): it stops claiming until a heartbeat succeeds."""

    name = "heartbeat"

    def __init__(
        self,
        store: Store,
        config: NodeConfig,
        clock: Clock,
        liveness: Liveness,
        membership: Membership,
        counters: Callable[[], tuple[int, int, int]],
        log: logging.LoggerAdapter[logging.Logger],
        broadcast_tasks: Sequence[str] = (),
        catalog: Catalog | None = None,
        problems: Callable[[], list[str]] | None = None,
        on_stale: Callable[[], None] | None = None,
    ) -> None:
        self._on_stale = on_stale
        self._broadcast_tasks = list(broadcast_tasks)
        self._catalog = catalog
        self._problems = problems  # the node's health, written with each heartbeat
        super().__init__(config.heartbeat, log)
        self._store = store
        self._config = config
        self._clock = clock
        self._liveness = liveness
        self._membership = membership
        self._counters = counters

    def step(self) -> None:
        claimed, completed, stuck = self._counters()
        offset_ms = round(self._liveness.offset.total_seconds() * 1000)
        beat = self._store.nodes.heartbeat(
            self._config.node_id,
            clock_offset_ms=offset_ms,
            claimed=claimed,
            completed=completed,
            stuck=stuck,
            health=self._health(),
        )
        if not beat.accepted:
            self.log.error("node row is stopped or missing; registering this node again")
            self.register()
            return
        if beat.revived:
            self.log.warning("peers had declared this node dead; its runs were taken over")
        self._refresh_membership()

    def register(self) -> None:
        """Write this node's row. If a row with this id has a fresh heartbeat, wait up to a
        dead threshold: a crashed predecessor's heartbeat goes stale and the id is taken over;
        a live node's stays fresh, and NodeIdInUseError is raised."""
        config = self._config
        deadline = self._clock.monotonic() + config.dead_threshold.total_seconds() * 1.5
        while True:
            try:
                self._store.nodes.register(
                    config.node_id,
                    host=socket.gethostname(),
                    pid=os.getpid(),
                    weight=config.weight,
                    strategy=config.strategy,
                    workers=config.workers,
                    dead_after=config.dead_threshold,
                    broadcast_tasks=self._broadcast_tasks,
                    catalog=self._catalog,
                )
                break
            except NodeIdInUseError:
                if self._clock.monotonic() > deadline:
                    raise
                self.log.info(
                    "node id %s has a fresh heartbeat; waiting to see it go stale", config.node_id
                )
                self._stop.wait(config.heartbeat)
        self._refresh_membership()

    def _health(self) -> str | None:
        """Why this node is unhealthy now, for its row (None: healthy)."""
        problems = self._problems() if self._problems is not None else []
        return "; ".join(problems) or None

    def _refresh_membership(self) -> None:
        """Database time for :class:`Liveness`, the live nodes (and the bodies of their
        catalogs not known here yet) and the dead ones not marked yet, from one read after
        the heartbeat's write: its database time, not the write's, which was read before the
        UPDATE and commit and so trailed the server by their length (~3 ms on PostgreSQL and
        MariaDB), and so would every start. A dead node seen wakes the recovery
        (*on_stale*): it marks it DEAD without a read of its own."""
        sent = self._clock.now()
        members = self._store.nodes.members(self._config.dead_threshold)
        self._liveness.beat(members.db_time, sent, self._clock.now())
        unknown = self._membership.unknown(members.live)
        catalogs = self._store.nodes.catalogs(unknown) if unknown else None
        self._membership.set(members.live, catalogs, members.stale)
        if members.stale and self._on_stale is not None:
            self._on_stale()
