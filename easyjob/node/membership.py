"""The membership: the live nodes in database time, and which tasks each one's code declares."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable, Mapping

from easyjob.core.admission import Catalog, declares
from easyjob.core.records import NodeRow

__all__ = ["Membership"]


class Membership:
    """The live nodes as of the last heartbeat (sorted by node id) and their catalogs (see
    :class:`~easyjob.core.admission.Catalog`): the view the strategies and the planner's
    split rank over; and the nodes that heartbeat's read found dead. Set by the heartbeat
    thread, read by the others."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: list[NodeRow] = []
        self._catalogs: dict[str, Catalog] = {}
        self._declaring: dict[tuple[str, str, str], list[str]] = {}
        self._stale: list[str] = []

    def set(
        self,
        nodes: Iterable[NodeRow],
        catalogs: Mapping[str, Catalog] | None = None,
        stale: Iterable[str] = (),
    ) -> None:
        """The live *nodes*; *catalogs* adds the bodies of catalogs not known yet (a catalog
        never changes under its digest, so each is read once); *stale*: the ids of the nodes
        that the same read found dead but not marked so yet."""
        with self._lock:
            self._nodes = sorted(nodes, key=lambda n: n.node_id)
            self._catalogs.update(catalogs or {})
            self._declaring = {}
            self._stale = sorted(stale)

    def stale(self) -> list[str]:
        """The nodes RUNNING or STOPPING whose heartbeat was older than the dead threshold
        at the last heartbeat's read (see :meth:`NodeStore.members
        <easyjob.store.contract.NodeStore.members>`): the recovery marks them DEAD."""
        with self._lock:
            return list(self._stale)

    def nodes(self) -> list[NodeRow]:
        with self._lock:
            return list(self._nodes)

    def unknown(self, nodes: Iterable[NodeRow]) -> builtins.set[str]:
        """Digests of the catalogs *nodes* name whose bodies are not known here yet."""
        with self._lock:
            return {n.catalog for n in nodes if n.catalog and n.catalog not in self._catalogs}

    def declaring(self, name: str, func: str, origin: str) -> list[str]:
        """The live nodes (by node id) whose code declares task *name* calling *func*. A node
        whose catalog is not known (an earlier release's, or not read yet) counts as one."""
        key = (name, func, origin)
        with self._lock:
            found = self._declaring.get(key)
            if found is None:
                found = [
                    n.node_id
                    for n in self._nodes
                    if declares(self._catalogs.get(n.catalog or ""), name, func, origin)
                ]
                self._declaring[key] = found
            return found

    def uniform(self) -> bool:
        """Whether every live node has the same catalog (or none is known): then every task
        is declared by all of them or by none."""
        with self._lock:
            return len({n.catalog for n in self._nodes}) <= 1
