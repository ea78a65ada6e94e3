"""What "a live node can run this task" means, decided once for every face, by the rule the
nodes themselves follow (:func:`easyjob.core.admission.declares` over each live node's
catalog: the tasks its code declares and the functions it allows with ``@runnable``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from easyjob.core.admission import Catalog, declares
from easyjob.core.records import NodeRow, TaskRow
from easyjob.core.states import NodeStatus
from easyjob.errors import NotRunnableError, shown

if TYPE_CHECKING:  # the store (SQLAlchemy) is not imported for --version
    from easyjob.store.contract import Store

__all__ = ["GONE_AFTER_S", "LiveCode", "live_code", "require_runnable", "require_task_runnable"]

#: A RUNNING node whose heartbeat is older than this is not counted as live by the views
#: (they do not know the nodes' heartbeat settings; peers mark a crashed node DEAD sooner).
GONE_AFTER_S = 60.0


@dataclass(frozen=True)
class LiveCode:
    """The code of the live nodes: the catalog of each that published one (*catalogs*), and
    the start of each live node of an earlier release that published none (*uncatalogued*,
    by node id)."""

    catalogs: tuple[Catalog, ...] = ()
    uncatalogued: Mapping[str, datetime] = field(default_factory=dict)

    @property
    def any_live(self) -> bool:
        """Whether any node is live."""
        return bool(self.catalogs or self.uncatalogued)

    def runs(self, task: TaskRow) -> bool:
        """Whether a live node can run *task*: a live node's catalog declares it (its name
        with its function, or, for a task added at run time, its function as ``@runnable``);
        a node of an earlier release, which published no catalog, counts for a task of the
        code it registered (``seen_time`` not older than its start), never for a task added
        at run time (what it allows is not known)."""
        if any(declares(c, task.name, task.func, task.origin) for c in self.catalogs):
            return True
        if task.runtime:
            return False
        return any(task.seen_time >= start for start in self.uncatalogued.values())

    def allows(self, func: str) -> bool:
        """Whether a live node's catalog allows *func* with ``@runnable``."""
        return any(func in c.runnable for c in self.catalogs)


def live(nodes: Iterable[NodeRow]) -> list[NodeRow]:
    """The live nodes of *nodes*: RUNNING, heartbeat younger than :data:`GONE_AFTER_S`."""
    return [n for n in nodes if n.status == NodeStatus.RUNNING and n.age_s <= GONE_AFTER_S]


def live_code(store: Store) -> LiveCode:
    """The live nodes' code, read from *store*."""
    _, nodes = store.nodes.all()
    alive = live(nodes)
    found = store.nodes.catalogs({n.catalog for n in alive if n.catalog})
    catalogs = tuple(found[n.catalog] for n in alive if n.catalog in found)
    old = {n.node_id: n.started_at for n in alive if not n.catalog}
    return LiveCode(catalogs, old)


def require_runnable(store: Store, func: str) -> None:
    """Raise :class:`NotRunnableError` naming *func* unless a live node allowed it with
    ``@runnable``."""
    code = live_code(store)
    if code.allows(func):
        return
    if not code.any_live:
        why = "no node is live"
    else:
        why = "no live node's code allows it with @runnable (it is not marked, or not there)"
    raise NotRunnableError(
        f"function {shown(func)} cannot run: {why}; deploy it first, or force it "
        "(--force) to add the schedule ahead of a deploy"
    )


def require_task_runnable(store: Store, name: str) -> None:
    """Raise :class:`NotRunnableError` unless a live node can run task *name*
    (:meth:`LiveCode.runs`); TaskNotFoundError when there is no such task."""
    task = store.tasks.get(name)
    if task.runtime:
        require_runnable(store, task.func)
    elif not live_code(store).runs(task):
        raise NotRunnableError(
            f"task {shown(name)} cannot run: no live node's code declares it; deploy it "
            "first, or force it (--force)"
        )
