"""When an idle loader wakes: in time for the next run it may claim, not a poll later (see
``loader._wake_at``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from easyjob.node.dispatcher import Dispatcher
from easyjob.node.loop import Loop
from easyjob.registry import Registry
from tests.node.conftest import Rig, task


def _run_loops(node: Rig, seconds: float, cost: float) -> None:
    """The node's loops as their threads run them, on the rig's clock: each steps when the
    delay its last step asked for has passed (a loop's interval when it named none; the
    dispatcher then waits to be poked) or when something woke it, and no other time; a
    step takes *cost* seconds (one at a time), and jobs return as soon as they are called."""
    loops: list[Loop] = [node.node.heartbeat, node.node.planner, node.node.loader]
    dispatcher = node.node.dispatcher
    parts: list[Loop | Dispatcher] = [*loops, dispatcher]
    at: dict[Loop | Dispatcher, float] = dict.fromkeys(parts, 0.0)  # next step, from start
    now = 0.0
    while now < seconds:
        part = min(parts, key=lambda each: at[each])
        if at[part] > now:  # else it is late: it waited for the steps before it
            node.clock.advance(at[part] - now)
            now = at[part]
        if isinstance(part, Loop):  # its thread's wake event, set again by a wake meanwhile
            part._wake.clear()
        else:
            part._poked = False
        delay = part.step()
        node.pool.finish()
        node.clock.advance(cost)
        now += cost
        if delay is None:
            delay = part.interval if isinstance(part, Loop) else math.inf
        at[part] = now + delay
        for loop in loops:
            if loop._wake.is_set():
                at[loop] = now
        if dispatcher._poked:
            at[dispatcher] = now


@pytest.mark.parametrize("overlap", ["serial", "allow", "skip"])
def test_an_idle_node_starts_every_fire_on_time(
    rig: Callable[..., Rig], registry: Registry, overlap: str
) -> None:
    """Each task's next fires are written ahead. A serial task's (the default) after its
    first were left out of the loader's next wake, so it read them at its next poll, a poll
    after its last read: later every second by the time a step took (here 40 ms after 12
    s; on an idle node of 10 serial tasks, 20 to 64 ms for a few seconds in ten, p95 55
    ms)."""
    for i in range(3):
        task(registry, f"t{i}", overlap=overlap)
    node = rig()
    node.tick(1.0)  # planned, and the first fires run (half a second late: see START)
    _run_loops(node, 12.0, cost=0.01)
    late = [ms for i in range(3) for ms in node.lateness_ms(f"t{i}")[1:]]
    assert len(late) >= 3 * 11 and max(late) <= 20  # at most a step or two
