"""Scenario 6, integration part: a cluster whose clock crosses a Europe/Berlin DST
transition (the unit cases for Berlin, New York and Lord Howe are in tests/unit/test_cron.py).

The nodes run under libfaketime, their clocks moved to a few seconds before 01:00 UTC on a
transition day and running on from there. On SQLite the database clock is the nodes' clock
(SQLite reads the time in the node process), so this is a real run across the transition:
tasks are registered, advanced, claimed and run in faked time. On PostgreSQL and MariaDB the
database clock, which the contract makes the cluster's one clock, belongs to the server
process shared by every test; moving it is not honest to fake in the nodes alone, so those
runs are skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from tests.chaos.catalog import DST_TASKS, DST_ZONE
from tests.chaos.checker import Expectations
from tests.chaos.conftest import Chaos
from tests.chaos.expected import Window, cron_fires
from tests.chaos.runner import LIBFAKETIME, Play, Scenario, faketime_env

pytestmark = [pytest.mark.chaos, pytest.mark.cluster, pytest.mark.slow_chaos]


PROBE = """
import threading, time
started = time.monotonic()
threading.Event().wait(0.05)
assert time.monotonic() - started < 1, "Event.wait(0.05) overslept"
time.sleep(0.01)
"""


def faketime_breaks_python(offset_s: float) -> str | None:
    """Why a Python process under libfaketime with *offset_s* cannot run a node, or None.

    libfaketime 0.9.10 (Debian 12) moves the monotonic clock too, but not the deadlines of
    the kernel's timed waits: with a large offset ``Event.wait`` never returns (every node
    thread waits on one); with ``FAKETIME_DONT_FAKE_MONOTONIC=1`` ``time.sleep`` fails with
    EINVAL. A node in such a process would heartbeat once and freeze.
    """
    env = {**os.environ, **faketime_env(offset_s)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=5
        )
    except subprocess.TimeoutExpired:
        return "a timed wait (threading.Event.wait) does not return"
    if done.returncode != 0:
        return done.stderr.strip().splitlines()[-1]
    return None


def dst_fires(play: Play, window: Window) -> Expectations:
    owed = {
        (name, fire)
        for name, cron in DST_TASKS.items()
        for fire in cron_fires(cron, DST_ZONE, window)
    }
    return Expectations(must=frozenset(owed))


@pytest.mark.parametrize(
    ("transition", "gap_fires"),
    [
        (datetime(2027, 3, 28, 1, 0, 0, tzinfo=UTC), 2),  # dst-hour2 and dst-0200 at 01:00
        (datetime(2027, 10, 31, 1, 0, 0, tzinfo=UTC), 0),  # the repeated hour: no second pass
    ],
    ids=["spring", "autumn"],
)
def test_a_cluster_runs_across_a_dst_transition(
    chaos: Chaos, db_backend: str, transition: datetime, gap_fires: int
) -> None:
    if db_backend != "sqlite":
        pytest.skip("the database server's clock cannot be moved for this test alone")
    if not LIBFAKETIME:
        pytest.skip("libfaketime is not installed (make deps)")
    # Nodes start 12 s before it. Future transitions only: libfaketime moves the monotonic
    # clock by the same offset, and a negative one (weeks back) makes it negative, which
    # stops every timed wait in the node.
    offset = transition.timestamp() - 12 - time.time()
    if offset <= 0:
        pytest.skip(f"the {transition.date()} transition is in the past: pick the next one")
    broken = faketime_breaks_python(offset)
    if broken:
        pytest.skip(f"libfaketime cannot move a Python node by {offset:.0f}s here: {broken}")
    report = chaos(
        Scenario(
            f"DST {transition.date()} Europe/Berlin",
            nodes=2,
            env={"EASYJOB_CHAOS_DST": "1"},
            duration_s=16,
            settle_s=2,
            clock_offset_s=offset,
            failover_bound=False,
            expect=dst_fires,
        )
    )
    # The window really spans the transition, and the gap/repeat fires were owed and ran.
    assert report.expected >= 3
    assert report.run == report.expected
    assert gap_fires == 0 or report.expected >= gap_fires + 2
