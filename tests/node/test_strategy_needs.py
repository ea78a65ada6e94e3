"""The loader reads what a strategy declares it needs (``needs``), and only that."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

import pytest

from easyjob.core.records import Candidate
from easyjob.core.states import RunStatus
from easyjob.core.strategies import ClusterView
from easyjob.registry import Registry
from tests.node.conftest import Rig, task


class Seeing:
    """Takes every run and keeps the ``held`` of each view it was given."""

    seen: ClassVar[list[Mapping[str, int]]] = []

    def select(self, candidates: Sequence[Candidate], view: ClusterView) -> list[Candidate]:
        Seeing.seen.append(dict(view.held))
        return list(candidates)


class SeeingHeld(Seeing):
    needs: ClassVar[frozenset[str]] = frozenset({"held"})


@pytest.mark.parametrize(
    ("strategy", "reads"), [("SeeingHeld", True), ("Seeing", False)], ids=["needs", "no needs"]
)
def test_held_counts_are_read_only_for_a_strategy_that_needs_them(
    rig: Callable[..., Rig], registry: Registry, strategy: str, reads: bool
) -> None:
    Seeing.seen = []
    task(registry, "slow")  # every second, serial: its running run stays held below
    node = rig(strategy=f"{__name__}:{strategy}", workers=1)
    node.keep = lambda name: True
    node.run_for(3)
    assert node.statuses("slow").get(RunStatus.RUNNING) == 1  # held by n1 all along
    assert Seeing.seen, "the strategy was asked"
    held = [view for view in Seeing.seen if view]
    if reads:
        assert held and all(set(view) == {"n1"} for view in held), Seeing.seen
        assert held[-1]["n1"] >= 1
    else:
        assert held == []
