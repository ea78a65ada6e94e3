"""The recovery thread: takes back the runs of nodes judged dead in database time."""

from __future__ import annotations

import logging

from easyjob.core.config import NodeConfig
from easyjob.node.liveness import Liveness
from easyjob.node.loop import Loop
from easyjob.store import Store

__all__ = ["Recoverer"]


class Recoverer(Loop):
    """Every heartbeat: if this node is *stable* (see :class:`Liveness`), find runs held by
    nodes whose heartbeat is older than the dead threshold, in bounded batches, and make each
    claimable again as its next attempt (version-checked, so two recoverers never both win).
    """

    name = "recovery"

    def __init__(
        self,
        store: Store,
        config: NodeConfig,
        liveness: Liveness,
        log: logging.LoggerAdapter[logging.Logger],
    ) -> None:
        super().__init__(config.heartbeat, log)
        self._store = store
        self._config = config
        self._liveness = liveness

    def step(self) -> float | None:
        if not self._liveness.stable():
            return None
        now = self._liveness.db_now()
        threshold = self._config.dead_threshold
        if marked := self._store.nodes.mark_dead(threshold, now=now):
            self.log.warning("marked %d node(s) DEAD: no heartbeat for %s", marked, threshold)
        held = self._store.runs.held_by_dead(threshold, self._config.batch, now=now)
        held = [h for h in held if h.node_id != self._config.node_id]
        if not held:
            return None
        created = self._store.runs.recover(held, self._config.node_id)
        dead = sorted({h.node_id for h in held})
        self.log.warning(
            "recovered %d run(s) of dead node(s) %s as new attempts", len(created), ", ".join(dead)
        )
        return 0.0 if len(held) == self._config.batch else None
