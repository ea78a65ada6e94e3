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

**Home runs and stealing** (``default``): each run has one home node among those that may
run it, and only that node reads and claims it while it is on time; another node takes it
only when it has room left over and the run is late by the steal delay
(:func:`steal_delay`), the other nodes taking turns (:func:`steal_turn`), or when it is
overdue past the grace. So nodes do not race for the
runs a healthy cluster starts on time, and a node's pending read costs its share of the
cluster's rate, not the whole of it: the strategy's :meth:`DefaultStrategy.share` is a
filter the pending read applies in SQL (:func:`read_scope`).
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import ClassVar, Protocol, runtime_checkable

from easyjob.core.ids import dealt, ordinal
from easyjob.core.records import Candidate
from easyjob.errors import UnknownStrategyError

__all__ = [
    "NEEDS",
    "STEAL_DELAY_MAX",
    "STEAL_DELAY_MIN",
    "ClusterView",
    "DefaultStrategy",
    "IdHashStrategy",
    "LeastCountStrategy",
    "ReadScope",
    "Share",
    "Strategy",
    "WeightStrategy",
    "first_come",
    "has_room_to_spare",
    "is_home",
    "late_for_turn",
    "load_strategy",
    "needs",
    "read_scope",
    "steal_delay",
    "steal_turn",
    "steals",
]

#: The parts of a :class:`ClusterView` that are read only for a strategy that needs them:
#: ``held``, the runs each live node holds (one count per poll).
NEEDS = frozenset({"held"})

#: Bounds of the steal delay (see :func:`steal_delay`), seconds.
STEAL_DELAY_MIN = 0.25
STEAL_DELAY_MAX = 2.0


def steal_delay(poll: float) -> timedelta:
    """How late another node's run must be before a node with room to spare takes it: half
    a poll, within [:data:`STEAL_DELAY_MIN`, :data:`STEAL_DELAY_MAX`] seconds.

    A healthy home node claims its run ahead and starts it at its due time; it is late only
    by its own lag (a loop turn, a wait for the write lock: p99 0.15-0.35 s on four busy
    SQLite nodes at half load). A delay below that lag would make nodes race for runs their
    home node is about to start; one above it delays the runs of a stopped or saturated node
    by that much (plus up to a poll, until the stealer's next read). Half a poll is what the
    home node had to itself before (see :class:`DefaultStrategy`); the floor keeps a very
    short poll from racing on the database's lag, the ceiling keeps a long poll from leaving
    a stopped node's runs for many seconds (the overdue grace, a poll at least, still takes
    them after that)."""
    return timedelta(seconds=min(STEAL_DELAY_MAX, max(STEAL_DELAY_MIN, poll / 2)))


@dataclass(frozen=True)
class Share:
    """A node's home runs among *nodes* ranked nodes: those dealt to its *rank* (see
    :func:`easyjob.core.ids.dealt`, ids *step* apart) by the run id (``default``), or with
    *by_task* by the task id plus the run's shard (``id_hash``). The pending read applies
    it in SQL (see :func:`read_scope`)."""

    nodes: int
    rank: int
    by_task: bool = False
    step: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.nodes:
            raise ValueError(f"rank must be in [0, {self.nodes}), got {self.rank!r}")

    def holds(self, candidate: Candidate) -> bool:
        """Whether *candidate* is a home run of this share."""
        if self.by_task:
            return dealt(candidate.task_id, self.nodes, self.step, candidate.shard) == self.rank
        return dealt(candidate.id, self.nodes, self.step) == self.rank


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
    #: another node's run due by then may be taken (late by the steal delay: see
    #: :func:`steal_delay`); None: this node has no room to spare, it takes its own only
    steal_by: datetime | None = None
    #: whether every live node declares the same tasks (see ``Membership.uniform``): then
    #: :meth:`nodes_for` is every live node, for any task this node declares
    uniform: bool = True
    #: how far apart the database hands out ids (``Store.id_step``; see easyjob.core.ids)
    id_step: int = 1

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
    """Each run has a home node: ``run id mod n`` = rank among the n live nodes that declare
    its task (the id's ordinal, with ids a step apart: :mod:`easyjob.core.ids`). Only the
    home node takes a run while it is on time; a run late by the steal
    delay (``view.steal_by``, set by a loader with room to spare) goes to the other such
    nodes in turn (:func:`steal_turn`, :func:`late_for_turn`), and the version-checked
    claim settles any overlap. So the runs of a stopped or saturated node
    start anyway (after the steal delay, or the overdue grace: see :func:`overdue`), while
    healthy nodes never race for a run: each claims its own, ahead of its due time.

    A child run (written due at once when its parent succeeded) is its home node's like any
    other, so the children of one run spread over the nodes. With a uniform catalog the
    home filter is applied by the pending read itself (:meth:`share`): a node does not even
    read the other nodes' runs while they are on time.
    """

    #: it takes other nodes' late runs (when the loader has room to spare: ``steal_by``)
    steals: ClassVar[bool] = True
    #: first come: a run is its home node's only while that node may take it, so a behind
    #: planner may write its fires started on its own node when a worker there is free
    #: (see :func:`easyjob.core.admission.starts_when_written`)
    first_come: ClassVar[bool] = True

    def select(self, candidates: Sequence[Candidate], view: ClusterView) -> list[Candidate]:
        if view.now is None:  # a view without a clock: any node may take any run
            return list(candidates)
        chosen = []
        for c in candidates:
            nodes = view.nodes_for(c)
            if view.me not in nodes:
                continue
            turn = steal_turn(ordinal(c.id, view.id_step), nodes.index(view.me), len(nodes))
            if turn == 0 or (
                view.steal_by is not None
                and c.due_time
                <= view.now - late_for_turn(turn, len(nodes), view.now - view.steal_by)
            ):
                chosen.append(c)
        return chosen

    def share(self, view: ClusterView) -> Share | None:
        """This node's home runs as a filter the pending read may apply, or None to read
        every run: when the nodes' catalogs differ, a run's home is ranked among the nodes
        declaring its task, which the filter cannot express (it would hide home runs)."""
        return _share(view, by_task=False)


def _share(view: ClusterView, *, by_task: bool) -> Share | None:
    """This node's rank among the live nodes as a :class:`Share`, where such a filter is
    exact: every live node declares the same tasks, and this node is one of two or more."""
    if not view.uniform or view.me not in view.live or len(view.live) < 2:
        return None
    return Share(len(view.live), view.live.index(view.me), by_task, view.id_step)


def is_home(candidate: Candidate, view: ClusterView) -> bool:
    """Whether *candidate* is a home run of this node (``default``): ``run id mod n`` (its
    ordinal: :mod:`easyjob.core.ids`) is its rank among the n live nodes that declare the
    run's task."""
    nodes = view.nodes_for(candidate)
    run = ordinal(candidate.id, view.id_step)
    return view.me in nodes and steal_turn(run, nodes.index(view.me), len(nodes)) == 0


def steal_turn(run_id: int, rank: int, nodes: int) -> int:
    """The turn of the node ranked *rank* among *nodes* to take run *run_id* (``default``;
    the id's ordinal, where ids are handed out a step apart: :mod:`easyjob.core.ids`): 0
    for its home node (``run id mod nodes``); for each other node, its place (1 to
    ``nodes - 1``) in the order in which they may steal it (how late the run must be for
    each: :func:`late_for_turn`). So the nodes with room to spare do not all try a late run
    at once, each run has one first thief, and the first thief rotates with ``run id div
    nodes`` over the other nodes: a stopped node's runs spread evenly over the rest."""
    home = run_id % nodes
    if rank == home:
        return 0
    first = (run_id // nodes) % (nodes - 1)  # the first thief's distance from home, less one
    return ((rank - home) % nodes - 1 - first) % (nodes - 1) + 1


def late_for_turn(turn: int, nodes: int, delay: timedelta) -> timedelta:
    """How late a run must be for the thief of *turn* (see :func:`steal_turn`) among *nodes*
    to take it: the first at the steal *delay*, the others in turn over the next delay, each
    ``delay / (nodes - 1)`` after the one before. So every thief has had its turn before the
    run is late by two steal delays (one poll: the overdue grace, at the default), and two
    thieves that read at about the same time try different runs."""
    return delay + delay * (turn - 1) / (nodes - 1)


def has_room_to_spare(home: Sequence[Candidate], room: int, now: datetime, poll: float) -> bool:
    """Whether a node whose pending read found *home* (its home runs, due by the horizon)
    and that may claim *room* more runs has room left over to steal at its next read: its
    home runs leave room, and none is late by the steal delay. A node behind on its own runs
    has none to spare whatever its free workers: at saturation the database or the CPU is
    the limit, and every node has home runs of its own to take first."""
    late = now - steal_delay(poll)
    return len(home) < room and all(c.due_time > late for c in home)


def _stable_hash(*parts: object) -> int:
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class IdHashStrategy:
    """Each task belongs to one node: ``task id mod nodes`` (with a sharded task's shard
    number added, so its shards spread too), ranked among the live nodes that declare it. A
    task's runs stay on one node while membership is stable, and tasks spread evenly: task
    ids are consecutive, so any n tasks registered together split n/k per node (a hash of
    the id split 6 tasks over 3 nodes 2/3/1). With ids a step apart (a Galera cluster's),
    the task id's ordinal is dealt (:mod:`easyjob.core.ids`)."""

    def select(self, candidates: Sequence[Candidate], view: ClusterView) -> list[Candidate]:
        chosen = []
        for c in candidates:
            nodes = view.nodes_for(c)
            if view.me not in nodes:
                continue
            if nodes[dealt(c.task_id, len(nodes), view.id_step, c.shard)] == view.me:
                chosen.append(c)
        return chosen

    def share(self, view: ClusterView) -> Share | None:
        """This node's tasks as a filter the pending read may apply (``(task id + shard)
        mod nodes``), or None to read every run (see :meth:`DefaultStrategy.share`). It
        steals nothing: another node's runs are read once overdue only."""
        return _share(view, by_task=True)


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


@dataclass(frozen=True)
class ReadScope:
    """What of the due PENDING runs a node's pending read returns: all of them (*share*
    None), or its home runs (*share*) plus every run due by *others_by* (another node's
    run it may take: late by the steal delay, or overdue)."""

    share: Share | None
    others_by: datetime | None


def read_scope(strategy: Strategy, view: ClusterView, grace: timedelta) -> ReadScope:
    """The rows *strategy* can choose from for *view* (see :class:`ReadScope`): a strategy
    with a ``share(view)`` method (``default``) reads its home runs, the runs it may steal
    (due by ``view.steal_by``) and the overdue ones (due longer ago than *grace*: anyone's,
    see :func:`overdue`); every other strategy reads every due run."""
    share_of = getattr(strategy, "share", None)
    share: Share | None = share_of(view) if callable(share_of) and view.now is not None else None
    if share is None or view.now is None:
        return ReadScope(None, None)
    overdue_by = view.now - grace
    if view.steal_by is None or not steals(strategy):
        return ReadScope(share, overdue_by)
    return ReadScope(share, max(overdue_by, view.steal_by))


def first_come(strategy: Strategy) -> bool:
    """Whether *strategy* lets the first node with a free worker take a run (its class
    attribute ``first_come``; ``default`` does): only then may a behind planner write a
    fire started on its own node. ``id_hash``, ``weight`` and ``least_count`` choose the
    node of each run themselves."""
    return bool(getattr(strategy, "first_come", False))


def steals(strategy: Strategy) -> bool:
    """Whether *strategy* takes other nodes' late runs when given a ``steal_by`` (its
    class attribute ``steals``; ``default`` does): only then does the loader judge whether
    it has room to spare, and the pending read return what it may steal."""
    return bool(getattr(strategy, "steals", False))
