"""When a freed worker wakes the loader (see ``Loader.freed``): only when the dispatcher's
room cut the loader's last claim short; otherwise a pending read per outcome batch would
find nothing new to claim."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from easyjob.registry import Registry
from tests.node.conftest import Rig, task


def _wakes(node: Rig, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(node.node.loader, "wake", lambda: calls.append(1))
    return calls


def test_a_freed_worker_does_not_wake_a_loader_that_claimed_all_it_could(
    rig: Callable[..., Rig], registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(4):
        task(registry, f"t{i}", overlap="allow")
    node = rig()
    node.tick(1.0)
    wakes = _wakes(node, monkeypatch)
    node.tick(1.0)  # four runs claimed, run and ended: workers came free
    assert node.statuses("t0")
    assert wakes == []


def test_a_freed_worker_wakes_a_loader_whose_claim_room_cut_short(
    rig: Callable[..., Rig], registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(4):
        task(registry, f"t{i}", overlap="allow")
    node = rig(max_held=2)  # room for two of the four runs due each second
    node.tick(1.0)
    wakes = _wakes(node, monkeypatch)
    node.tick(1.0)
    assert wakes
