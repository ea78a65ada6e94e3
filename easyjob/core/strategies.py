"""Claim strategies: which of the due runs should this node claim? (pure)

Every node runs the same strategy over the same inputs (the live nodes in database time
that declare the run's task, ranked by node id: :meth:`ClusterView.nodes_for`) and so
agrees, without talking, on who takes what. A node that lacks a task's code is never dealt
its runs: nodes may carry different code (pools, a rolling deploy, a web process that embeds
a few jobs), and a run dealt to a node that cannot run it would wait out the grace.

Where nodes disagree for a moment (a node joined or died between two polls), a run may be
wanted by two nodes, which the version-checked claim settles, or by none: then, once a run
is overdue by more than the grace, every live node that declares its task may take it, so
nothing starves.

A user strategy is any class with a ``select`` method of the :class:`Strategy` shape, named
as ``package.module:Class``; it is built with no arguments.

Some of the :class:`ClusterView` costs a read per poll: a strategy names what it looks at in
a class attribute ``needs`` (a subset of :data:`NEEDS`; none if absent), and only that is
read for it.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import ClassVar, Protocol, runtime_checkable

from easyjob.core.records import Candidate
from easyjob.core.states import Trigger
from easyjob.errors import UnknownStrategyError

__all__ = [
    "NEEDS",
    "ClusterView",
    "DefaultStrategy",
    "IdHashStrategy",
    "LeastCountStrategy",
    "Strategy",
    "WeightStrategy",
    "load_strategy",
    "needs",
]

#: The parts of a :class:`ClusterView` that are read only for a strategy that needs them:
#: ``held``, the runs each live node holds (one count per poll).
NEEDS = frozenset({"held"})


@dataclass(frozen=True)
class ClusterView:
    """What a strategy may look at; all times are database time."""

    me: str
    live: Sequence[str]  # live node ids, sorted: the ranking
    weights: Mapping[str, int] = field(default_factory=dict)
    held: Mapping[str, int] = field(default_factory=dict)  # runs each node holds now
    now: datetime | None = None
    soon: datetime | None = None  # runs due by then are about to start
    #: the live nodes (sorted) whose code declares a candidate's task; None: all of them
    declaring: Callable[[Candidate], Sequence[str]] | None = None

    def nodes_for(self, candidate: Candidate) -> Sequence[str]:
        """The live nodes that may run *candidate* (those that declare its task), sorted:
        the ranking every built-in strategy deals the run over."""
        if self.declaring is None:
            return self.live
        return self.declaring(candidate)

    def rank(self, candidate: Candidate | None = None) -> int | None:
        """This node's rank among the nodes for *candidate* (or all live nodes); None when
        it is not one of them."""
        nodes = self.live if candidate is None else self.nodes_for(candidate)
        return nodes.index(self.me) if self.me in nodes else None


@runtime_checkable
class Strategy(Protocol):
    """Chooses, among *candidates*, the runs this node should try to claim.

    A strategy may also declare ``needs: frozenset[str]``, the parts of :data:`NEEDS` its
    view must hold; the rest of those are left empty. It is optional, so not a member here.
    """

    def select(self, candidates: Sequence[Candidate], view: ClusterView) -> list[Candidate]:
        """Return the subset of *candidates* (order kept) this node should claim."""
        ...


class DefaultStrategy:
    """First come, first served: any node may take any run; the claim decides.

    So that nodes do not all race for every run as soon as it is written (all but one lose,
    and every lost claim is a wasted write), a run is first offered only to its "home" node
    (``run id mod live nodes`` = rank); once it is due by ``view.soon`` (the loader gives half
    a poll from now) and still unclaimed, every node tries it. Fires are written two polls
    ahead, so a run's home node has over a poll to itself, and the run still starts on time
    when that node is busy or gone. A child run (written due at once, when its parent
    succeeded) is its home node's for half a poll after it was written, so the node that
    wrote it does not take every one: the children of one run spread over the nodes. Home
    and rank are among the nodes that declare the run's task.
    """

    def select(self, candidates: Sequence[Candidate], view: ClusterView) -> list[Candidate]:
        if view.soon is None:
            return list(candidates)
        # a child written moments ago (due when written) is its home node's for as long as
        # a run written ahead is before its due time: the children of one run spread out
        fresh = None if view.now is None else view.now - (view.soon - view.now)
        chosen = []
        for c in candidates:
            nodes = view.nodes_for(c)
            if view.me not in nodes:
                continue
            home = c.id % len(nodes) == nodes.index(view.me)
            fresh_child = (
                fresh is not None and c.triggered_by == Trigger.PARENT and c.due_time > fresh
            )
            opened = c.due_time <= view.soon and not fresh_child
            if home or opened:
                chosen.append(c)
        return chosen


def _stable_hash(*parts: object) -> int:
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class IdHashStrategy:
    """Each task belongs to one node: ``task id mod nodes`` (with a sharded task's shard
    number added, so its shards spread too), ranked among the live nodes that declare it. A
    task's runs stay on one node while membership is stable, and tasks spread evenly: task
    ids are consecutive, so any n tasks registered together split n/k per node (a hash of
    the id split 6 tasks over 3 nodes 2/3/1)."""

    def select(self, candidates: Sequence[Candidate], view: ClusterView) -> list[Candidate]:
        chosen = []
        for c in candidates:
            nodes = view.nodes_for(c)
            if view.me in nodes and nodes[(c.task_id + c.shard) % len(nodes)] == view.me:
                chosen.append(c)
        return chosen


class WeightStrategy:
    """Each fire goes to a live node with probability proportional to its weight, by hashing
    (task id, fire time) over the weighted ranks: the share of runs follows the weights."""

    def select(self, candidates: Sequence[Candidate], view: ClusterView) -> list[Candidate]:
        chosen = []
        for c in candidates:
            nodes = view.nodes_for(c)
            if view.me not in nodes:
                continue
            bounds: list[tuple[int, str]] = []
            total = 0
            for node in nodes:
                total += max(1, view.weights.get(node, 1))
                bounds.append((total, node))
            point = _stable_hash(c.task_id, c.fire_time.isoformat(), c.id) % total
            if next(node for bound, node in bounds if point < bound) == view.me:
                chosen.append(c)
        return chosen


class LeastCountStrategy:
    """Runs go to the nodes holding the fewest: the batch is dealt one run at a time to the
    least-loaded node (ties by rank), counting what has been dealt so far, so one poll never
    hands a whole batch to one node."""

    needs: ClassVar[frozenset[str]] = frozenset({"held"})

    def select(self, candidates: Sequence[Candidate], view: ClusterView) -> list[Candidate]:
        load = {node: view.held.get(node, 0) for node in view.live}
        chosen = []
        for c in candidates:
            nodes = view.nodes_for(c)
            if view.me not in nodes:
                continue
            _, owner = min(enumerate(nodes), key=lambda ranked: (load.get(ranked[1], 0), ranked[0]))
            load[owner] = load.get(owner, 0) + 1
            if owner == view.me:
                chosen.append(c)
        return chosen


BUILTIN: dict[str, type[Strategy]] = {
    "default": DefaultStrategy,
    "id_hash": IdHashStrategy,
    "least_count": LeastCountStrategy,
    "weight": WeightStrategy,
}


def load_strategy(name: str) -> Strategy:
    """A built-in strategy by name, or a user one given as ``package.module:Class``."""
    if name in BUILTIN:
        return BUILTIN[name]()
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise UnknownStrategyError(
            f"unknown strategy {name!r}: use one of {', '.join(map(repr, BUILTIN))} "
            "or 'package.module:Class'"
        )
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise UnknownStrategyError(f"unknown strategy {name!r}: {err}") from err
    strategy = cls()
    if not isinstance(strategy, Strategy):
        raise UnknownStrategyError(f"strategy {name!r} has no select(candidates, view) method")
    try:
        needs(strategy)
    except TypeError as err:
        raise UnknownStrategyError(f"strategy {name!r}: {err}") from err
    return strategy


def needs(strategy: Strategy) -> frozenset[str]:
    """What of :data:`NEEDS` *strategy* declares it looks at (its ``needs``; none if absent).
    Raises TypeError for a declaration that is not a set of :data:`NEEDS` names."""
    declared: object = getattr(strategy, "needs", frozenset())
    known = ", ".join(map(repr, sorted(NEEDS)))
    if not isinstance(declared, (set, frozenset)):
        raise TypeError(f"needs must be a set of {known}, got {declared!r}")
    unknown = sorted(map(repr, declared - NEEDS))
    if unknown:
        raise TypeError(f"unknown need {', '.join(unknown)} in needs: a strategy may need {known}")
    return frozenset(declared)


def overdue(candidates: Sequence[Candidate], now: datetime, grace: timedelta) -> list[Candidate]:
    """Runs due longer ago than *grace*: any live node may take these, whatever the strategy."""
    return [c for c in candidates if c.due_time < now - grace]
