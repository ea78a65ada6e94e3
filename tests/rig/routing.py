"""Per-node routes to the database: one :class:`~tests.rig.proxy.Proxy` per node process.

A node is partitioned alone by faulting its own proxy; the test's inspection store keeps
connecting to the server directly. SQLite is embedded (there is no network to cut), so
there every node gets the database URL itself and :meth:`NodeRoutes.proxy` refuses.

    with NodeRoutes(db_url) as routes:
        cluster.start("node-0", db_url=routes.url("node-0"))
        routes.proxy("node-0").blackhole()
"""

from __future__ import annotations

from sqlalchemy.engine import make_url

from tests.rig.proxy import Proxy

__all__ = ["NodeRoutes"]


class NodeRoutes:
    """Lazily one proxy per node id in front of the server *db_url* names."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.embedded = make_url(db_url).get_backend_name() == "sqlite"
        self._proxies: dict[str, Proxy] = {}

    def url(self, node_id: str) -> str:
        """The database URL node *node_id* must use: through its own proxy (server backends)."""
        if self.embedded:
            return self.db_url
        return self.proxy(node_id).url(self.db_url)

    def proxy(self, node_id: str) -> Proxy:
        """Node *node_id*'s proxy, started on first use."""
        if self.embedded:
            raise ValueError(f"SQLite is embedded: no network route to fault for {node_id!r}")
        if node_id not in self._proxies:
            self._proxies[node_id] = Proxy.for_url(self.db_url)
        return self._proxies[node_id]

    def heal_all(self) -> None:
        for proxy in self._proxies.values():
            proxy.heal()

    def close(self) -> None:
        for proxy in self._proxies.values():
            proxy.close()
        self._proxies.clear()

    def __enter__(self) -> NodeRoutes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
