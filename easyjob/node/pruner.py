"""The pruner thread: retention by default, one node at a time, in small batches."""

from __future__ import annotations

import logging
from datetime import timedelta

from easyjob.core.config import NodeConfig
from easyjob.node.loop import Loop
from easyjob.node.membership import Membership
from easyjob.store.contract import Store

__all__ = ["PRUNE_BATCH", "PRUNE_EVERY_HEARTBEATS", "Pruner"]

#: Finished runs deleted per transaction: a short hold of any lock, whatever the backlog.
PRUNE_BATCH = 500
#: Batches per round at most; a round that had more to do runs again after one heartbeat.
_BATCHES_PER_ROUND = 10
#: A round every this many heartbeats (60 s with the default heartbeat of 2 s).
PRUNE_EVERY_HEARTBEATS = 30


class Pruner(Loop):
    """Every :data:`PRUNE_EVERY_HEARTBEATS` heartbeats, if this node is the first of the live
    nodes (by node id; the membership the loader ranks by), delete finished runs that ended
    more than ``config.retention`` seconds ago (database time), :data:`PRUNE_BATCH` per
    transaction, and the rows of nodes stopped or dead for as long. Two nodes that both
    think they are first for a moment only delete the same old rows twice over."""

    name = "pruner"

    def __init__(
        self,
        store: Store,
        config: NodeConfig,
        membership: Membership,
        log: logging.LoggerAdapter[logging.Logger],
    ) -> None:
        super().__init__(config.heartbeat * PRUNE_EVERY_HEARTBEATS, log)
        self._store = store
        self._config = config
        self._membership = membership
        self.pruned = 0

    def step(self) -> float | None:
        if self._config.retention <= 0:
            return None
        live = [n.node_id for n in self._membership.nodes()]
        if not live or live[0] != self._config.node_id:
            return None
        older = timedelta(seconds=self._config.retention)
        deleted = 0
        for _ in range(_BATCHES_PER_ROUND):
            batch = self._store.history.prune_batch(older, PRUNE_BATCH)
            deleted += batch
            if batch < PRUNE_BATCH:
                break
        nodes = self._store.nodes.prune(older)
        self.pruned += deleted
        if deleted or nodes:
            self.log.info(
                "pruned %d finished run(s) and %d node row(s) older than the retention of %s",
                deleted,
                nodes,
                older,
            )
        return self._config.heartbeat if deleted == PRUNE_BATCH * _BATCHES_PER_ROUND else None
