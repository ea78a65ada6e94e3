"""Scenario 11: every node is down for a while, then the cluster comes back; what happens to
the fires of the down time depends on each task's misfire policy (docs/policies.md).

Three every-second tasks, ``late-fire_once``, ``late-skip`` and ``late-catch_up``, with a
2 s misfire grace; both nodes are stopped for 6 s. With marks (database time) *stopping*,
*down* (every node exited), *starting* and *up* (live again), a fire *f* is:

- owed before *stopping* - 1 s and from *up* - grace on (on time for every policy);
- *surely late* in (*down*, *starting* - grace): its row can only be written after the
  restart, when it is older than the grace;
- uncertain in between (the edges of the stop and of the restart's first poll).

``catch_up`` owes every fire. ``skip`` must not run a surely-late fire. ``fire_once`` runs
at most the newest late fire and must not run the others. Every fire of the window has a row
(run or MISSED): none is dropped silently.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.chaos.catalog import MISFIRE_POLICIES, TICK_CRON
from tests.chaos.checker import Expectations
from tests.chaos.conftest import Chaos
from tests.chaos.expected import Window, cron_fires
from tests.chaos.runner import Play, Scenario, Step, start_nodes, stop_nodes

pytestmark = [pytest.mark.chaos, pytest.mark.cluster, pytest.mark.slow_chaos]
GRACE_S = 2.0
DOWN_S = 6.0
Key = tuple[str, datetime]


def by_policy(play: Play, window: Window) -> Expectations:
    marks = play.marks
    grace = timedelta(seconds=GRACE_S)
    must: set[Key] = set()
    may: set[Key] = set()
    never: set[Key] = set()
    for policy in MISFIRE_POLICIES:
        task = f"late-{policy}"
        fires = cron_fires(TICK_CRON, "UTC", window)
        late = [f for f in fires if marks["down"] < f < marks["starting"] - grace]
        assert len(late) >= 2, f"the scenario must leave several fires surely late: {late}"
        for fire in fires:
            key = (task, fire)
            on_time = (
                fire <= marks["stopping"] - timedelta(seconds=1) or fire >= marks["up"] - grace
            )
            if on_time or policy == "catch_up":
                must.add(key)
            elif fire in late and (policy == "skip" or fire != late[-1]):
                never.add(key)
            else:
                may.add(key)
    return Expectations(must=frozenset(must), may=frozenset(may), never=frozenset(never))


def test_catch_up_after_every_node_was_down(chaos: Chaos) -> None:
    report = chaos(
        Scenario(
            "all down 6 s, misfire policies",
            nodes=2,
            env={"EASYJOB_CHAOS_MISFIRE_GRACE": str(GRACE_S)},
            steps=(Step(3, stop_nodes()), Step(3 + DOWN_S, start_nodes(2))),
            duration_s=3 + DOWN_S + 3,
            settle_s=3,
            failover_bound=False,
            expect=by_policy,
        )
    )
    assert report.forbidden_runs == 0 and report.silently_dropped == 0
