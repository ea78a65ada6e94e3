"""What "a live node can run this task" means, decided once for every face."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from easyjob.core.records import NodeRow, TaskRow
from easyjob.core.states import NodeStatus
from easyjob.errors import NotRunnableError, shown
from easyjob.store.contract import Store

__all__ = ["GONE_AFTER_S", "LiveCode", "live_code", "require_runnable", "require_task_runnable"]

#: A RUNNING node whose heartbeat is older than this is not counted as live by the views
#: (they do not know the nodes' heartbeat settings; peers mark a crashed node DEAD sooner).
GONE_AFTER_S = 60.0


@dataclass(frozen=True)
class LiveCode:
    """The code of the live nodes: when the oldest of them started (*since*; None when no
    node is live) and the ``@runnable`` functions they published (*funcs*)."""

    since: datetime | None
    funcs: frozenset[str]

    def runs(self, task: TaskRow) -> bool:
        """Whether a live node can run *task*: a task of the code was registered by a live
        node (its ``seen_time`` is not older than the oldest live node's start); a task added
        at run time calls a function some live node allowed with ``@runnable``."""
        if self.since is None:
            return False
        if task.runtime:
            return task.func in self.funcs
        return task.seen_time >= self.since

    def allows(self, func: str) -> bool:
        """Whether a live node allowed *func* with ``@runnable``."""
        return func in self.funcs


def live(nodes: Iterable[NodeRow]) -> list[NodeRow]:
    """The live nodes of *nodes*: RUNNING, heartbeat younger than :data:`GONE_AFTER_S`."""
    return [n for n in nodes if n.status == NodeStatus.RUNNING and n.age_s <= GONE_AFTER_S]


def live_code(store: Store) -> LiveCode:
    """The live nodes' code, read from *store*."""
    _, nodes = store.nodes.all()
    alive = live(nodes)
    since = min((n.started_at for n in alive), default=None)
    return LiveCode(since, store.code.runnable([n.node_id for n in alive]))


def require_runnable(store: Store, func: str) -> None:
    """Raise :class:`NotRunnableError` naming *func* unless a live node allowed it with
    ``@runnable``."""
    code = live_code(store)
    if code.allows(func):
        return
    if code.since is None:
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
