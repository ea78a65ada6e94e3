"""A node's view of its own heartbeat, on a fake clock: freshness, stability, offset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from easyjob import FakeClock, NodeConfig
from easyjob.errors import ConfigError
from easyjob.node.liveness import Liveness

DB = datetime(2030, 1, 1, tzinfo=UTC)


def beat(clock: FakeClock, live: Liveness, skew_s: float = 0.0) -> None:
    """A heartbeat answered instantly by a database whose clock is *skew_s* behind ours."""
    now = clock.now()
    live.beat(now - timedelta(seconds=skew_s), now, now)


def test_fresh_until_a_dead_threshold_passes_without_a_heartbeat() -> None:
    clock = FakeClock(DB)
    live = Liveness(clock, heartbeat_s=1.0, dead_threshold=timedelta(seconds=3))
    assert not live.fresh()
    beat(clock, live)
    clock.advance(2.9)
    assert live.fresh()
    clock.advance(0.2)
    assert not live.fresh()


def test_stable_only_after_a_whole_threshold_of_unbroken_heartbeats() -> None:
    clock = FakeClock(DB)
    live = Liveness(clock, heartbeat_s=1.0, dead_threshold=timedelta(seconds=3))
    for _ in range(3):
        beat(clock, live)
        assert not live.stable()
        clock.advance(1.0)
    beat(clock, live)
    assert live.stable()
    clock.advance(2.0)  # a missed heartbeat (a stall): stability starts over
    beat(clock, live)
    assert live.fresh() and not live.stable()
    for _ in range(3):
        clock.advance(1.0)
        beat(clock, live)
    assert live.stable()


def test_database_time_is_our_clock_minus_the_measured_offset() -> None:
    clock = FakeClock(DB)
    live = Liveness(clock, heartbeat_s=1.0, dead_threshold=timedelta(seconds=3))
    beat(clock, live, skew_s=30)
    assert live.offset == timedelta(seconds=30)
    assert live.db_now() == DB - timedelta(seconds=30)
    sent = clock.now()
    clock.advance(0.2)
    live.beat(DB, sent, clock.now())  # the round trip's midpoint is taken
    assert live.offset == timedelta(seconds=0.1)


def test_node_config_validates_and_states_its_failover_bound() -> None:
    config = NodeConfig(heartbeat=2.0, dead_after=3, poll=1.0)
    assert config.dead_threshold == timedelta(seconds=6)
    assert config.failover_bound == timedelta(seconds=10)
    with pytest.raises(ConfigError, match="workers must be a positive integer, got 0"):
        NodeConfig(workers=0)
    with pytest.raises(ConfigError, match="heartbeat must be a positive number of seconds"):
        NodeConfig(heartbeat=-1)
    with pytest.raises(ConfigError, match="dead_after must be at least 2 heartbeats, got 1"):
        NodeConfig(dead_after=1)
    assert NodeConfig().node_id.count("-") >= 2


def test_database_time_bound_follows_the_quickest_recent_reply_and_never_leads() -> None:
    """Replies taking 0 to 4 ms: the bound lags the database by the quickest recent reply,
    not by the slowest, and the jitter does not read as a slow database clock."""
    clock = FakeClock(DB)  # the database's clock is this one: no skew
    live = Liveness(clock, heartbeat_s=1.0, dead_threshold=timedelta(seconds=3))
    worst = timedelta(0)
    for i in range(40):
        sent = read = clock.now()
        clock.advance(0.004 if i % 3 else 0.0)  # the reply's way back
        live.beat(read, sent, clock.now())
        for _ in range(10):
            clock.advance(0.0996 if i % 3 else 0.1)
            lag = clock.now() - live.db_now()
            assert lag >= timedelta(0), "database time must never be overestimated"
            worst = max(worst, lag) if i >= 10 else worst
    assert worst < timedelta(milliseconds=1.5), worst  # the slow replies took 4 ms


def test_where_database_time_is_the_nodes_own_clock_it_is_read_directly() -> None:
    clock = FakeClock(DB)
    live = Liveness(clock, heartbeat_s=1.0, dead_threshold=timedelta(seconds=3), local=True)
    clock.advance(5.0)
    assert live.db_now() == clock.now()


def test_the_node_started_at_its_first_heartbeat_in_database_time_and_stays() -> None:
    """The one start the planner's pace and the loader's outage backlog both go by: kept
    through a stall that makes the node measure database time afresh."""
    clock = FakeClock(DB)
    live = Liveness(clock, heartbeat_s=1.0, dead_threshold=timedelta(seconds=3))
    assert live.started_at is None
    beat(clock, live, skew_s=30)
    assert live.started_at == DB - timedelta(seconds=30)
    clock.advance(10.0)  # a stall: no heartbeat for three thresholds
    beat(clock, live, skew_s=5)
    assert live.started_at == DB - timedelta(seconds=30)
