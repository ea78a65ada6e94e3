"""Dealing work by ids handed out a step apart (a MariaDB Galera cluster hands them out its
size apart): every rule that splits work between nodes by an id deals its ordinal, so each
node gets its part whatever the step, and the rules agree (see easyjob.core.ids)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from easyjob.core.admission import planner_owner
from easyjob.core.ids import dealt, ordinal
from easyjob.core.records import Candidate
from easyjob.core.strategies import (
    ClusterView,
    DefaultStrategy,
    IdHashStrategy,
    Share,
    is_home,
    steal_turn,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)
NODES = ["a", "b", "c", "d", "e", "f"]


def runs(first: int, step: int, count: int) -> list[Candidate]:
    """*count* runs of one instant with ids *step* apart from *first*, each of its own task
    (task ids the same way)."""
    ids = [first + i * step for i in range(count)]
    return [Candidate(id=i, task_id=i, version=0, fire_time=T0, due_time=T0) for i in ids]


@pytest.mark.parametrize(
    ("db_id", "step", "expected"),
    [(0, 1, 0), (7, 1, 7), (271, 3, 90), (272, 3, 90), (274, 3, 91)],
)
def test_an_ordinal_is_the_id_divided_by_the_step(db_id: int, step: int, expected: int) -> None:
    assert ordinal(db_id, step) == expected


@pytest.mark.parametrize("step", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("nodes", [2, 3, 4, 5])
@pytest.mark.parametrize("first", [1, 271, 1_000_003])
def test_ids_a_step_apart_are_dealt_evenly_to_any_number_of_nodes(
    step: int, nodes: int, first: int
) -> None:
    """30 ids a step apart (one instant's fires written together, ids as a Galera member of
    a cluster of *step* hands them out): each node is dealt a part, give or take one. By the
    id itself, 3 apart over 3 nodes was 30/0/0."""
    ids = [first + i * step for i in range(30)]
    counts = Counter(dealt(i, nodes, step) for i in ids)
    parts = [counts[rank] for rank in range(nodes)]
    assert max(parts) - min(parts) <= 1, parts


def test_dealt_by_the_id_itself_ids_a_step_apart_fall_on_few_nodes() -> None:
    """Why the step is divided out (the measured Galera case)."""
    ids = [271 + 3 * i for i in range(30)]
    assert Counter(dealt(i, 3) for i in ids) == {271 % 3: 30}


@pytest.mark.parametrize("step", [1, 2, 3])
def test_every_rule_that_deals_by_id_deals_the_ordinal_and_they_agree(step: int) -> None:
    """``default``'s homes (its selection, ``is_home`` and the pending read's share),
    ``id_hash``'s tasks (by task id plus shard) and a task's planner: the same node for the
    same ordinal, each node a third of 30 ids *step* apart."""
    batch = runs(271, step, 30)
    live = NODES[:3]
    home: dict[int, str] = {}
    for me in live:
        view = ClusterView(me=me, live=live, now=T0, id_step=step)
        mine = DefaultStrategy().select(batch, view)
        share = DefaultStrategy().share(view)
        assert share == Share(3, live.index(me), False, step)
        assert [c for c in batch if share.holds(c)] == mine
        assert [c for c in batch if is_home(c, view)] == mine
        assert IdHashStrategy().select(batch, view) == mine  # task id = run id here
        assert [c for c in batch if planner_owner(c.task_id, live, step) == me] == mine
        home.update({c.id: me for c in mine})
    assert sorted(Counter(home.values()).values()) == [10, 10, 10]


def test_a_sharded_tasks_shards_follow_its_ordinal() -> None:
    """``id_hash``: a task's shards go to consecutive nodes from its ordinal's."""
    task = runs(271, 3, 1)[0]
    shards = [replace(task, shard=s) for s in range(3)]
    live = NODES[:3]
    for me in live:
        view = ClusterView(me=me, live=live, now=T0, id_step=3)
        shares = Share(3, live.index(me), True, 3)
        taken = IdHashStrategy().select(shards, view)
        assert [c for c in shards if shares.holds(c)] == taken
        assert [c.shard for c in taken] == [(live.index(me) - ordinal(271, 3)) % 3]


def test_a_stopped_nodes_runs_a_step_apart_have_every_other_node_as_first_thief_in_turn() -> None:
    """``default``'s steal turns deal the ordinal too: a stopped node's runs, ids 3 apart,
    spread evenly over the others' first turns."""
    batch = runs(271, 3, 120)
    stopped = [c for c in batch if steal_turn(ordinal(c.id, 3), 0, 4) == 0]
    assert len(stopped) == 30
    first = Counter(
        next(rank for rank in range(1, 4) if steal_turn(ordinal(c.id, 3), rank, 4) == 1)
        for c in stopped
    )
    assert sorted(first.values()) == [10, 10, 10]
