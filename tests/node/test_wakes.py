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


def test_runs_left_for_want_of_workers_wake_the_loader_once_enough_are_free(
    rig: Callable[..., Rig], registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs due with no worker free stay PENDING; the loader claims them once as many
    workers are free as there are such runs, or an eighth of its workers: in batches, not
    a pending read per run that ends."""
    for i in range(40):
        task(registry, f"t{i}", overlap="allow")
    node = rig(workers=16)  # 40 due each second: 16 start, 24 are left PENDING
    node.pool.finish = lambda keep=None: 0  # type: ignore[assignment,method-assign]
    node.tick(1.0)
    assert len(node.pool.queued) == 16
    wakes = _wakes(node, monkeypatch)
    loader = node.node.loader
    loader.freed()
    assert wakes == []  # one worker of 16 free: not yet
    loader.freed()
    assert wakes == [1]  # two (16 / 8): claim the next batch
    node.tick()  # the claim: 2 started, 22 left
    wakes.clear()
    loader.freed(workers=3)  # an outcome batch of three runs
    assert wakes == [1]
