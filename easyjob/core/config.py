"""Node configuration: one frozen record, validated at construction."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field
from datetime import timedelta

from easyjob.errors import ConfigError

__all__ = ["CLAIM_MODES", "EXECUTORS", "NodeConfig", "generate_node_id"]

#: How a node claims runs: ``optimistic`` (read due runs, let the strategy choose, claim
#: them with one version-checked UPDATE; every database) or ``skip_locked`` (one locking
#: claim of the next due runs, first come first served; PostgreSQL only).
CLAIM_MODES = ("optimistic", "skip_locked")

#: Where a node calls its jobs: ``thread`` (its worker threads; a hung job keeps its thread)
#: or ``process`` (a child process per run: a timeout kills it, a crash fails only that run).
EXECUTORS = ("thread", "process")


def generate_node_id() -> str:
    """``host-pid-random``: unique per process incarnation, readable in the node table."""
    return f"{socket.gethostname()[:80]}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class NodeConfig:
    """How one node behaves. Times are seconds (floats, so tests can run fast).

    The dead threshold is ``dead_after`` heartbeats: a node whose last heartbeat is older
    than ``dead_after * heartbeat`` seconds of database time is dead, and its runs are
    taken back. A crashed node's run starts again within about
    ``(dead_after + 1) * heartbeat + 2 * poll`` seconds (see :attr:`failover_bound`).
    """

    node_id: str = field(default_factory=generate_node_id)
    strategy: str = "default"
    claim_mode: str = "optimistic"
    weight: int = 1
    #: jobs running at once; waiting runs take no worker (64: see docs/performance.md)
    workers: int = 64
    heartbeat: float = 2.0
    dead_after: int = 3
    poll: float = 1.0
    lookahead: float | None = None  # default: 2 polls
    batch: int = 200
    max_held: int = 5000
    executor: str = "thread"
    overdue_grace: float | None = None  # default: one poll, at least 1 s
    shutdown_grace: float = 30.0
    #: A run whose node died while running it is run again at most this many times, then
    #: ends FAILED (a job that kills its process takes at most this + 1 nodes down).
    max_recoveries: int = 1
    #: Finished runs that ended longer ago than this many seconds are pruned, and so are
    #: rows of nodes stopped or dead for as long; 0 keeps everything.
    retention: float = 7 * 86400.0

    def __post_init__(self) -> None:
        if not self.node_id or len(self.node_id) > 128:
            raise ConfigError(f"node id must be 1-128 characters, got {self.node_id!r}")
        _positive_int("workers", self.workers)
        _positive_int("weight", self.weight)
        _positive_int("dead_after", self.dead_after)
        _positive_int("batch", self.batch)
        _positive_int("max_held", self.max_held)
        for name in ("max_recoveries",):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name} must be a whole number (0 or more), got {value!r}")
        if not isinstance(self.retention, (int, float)) or self.retention < 0:
            raise ConfigError(
                f"retention must be a number of seconds (0 keeps everything), "
                f"got {self.retention!r}"
            )
        for name in ("heartbeat", "poll", "shutdown_grace"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        for name in ("lookahead", "overdue_grace"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or value <= 0):
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        if self.dead_after < 2:
            raise ConfigError(f"dead_after must be at least 2 heartbeats, got {self.dead_after!r}")
        if self.executor not in EXECUTORS:
            raise ConfigError(
                f"executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}"
            )
        if self.claim_mode not in CLAIM_MODES:
            raise ConfigError(
                f"claim mode must be one of {', '.join(CLAIM_MODES)}, got {self.claim_mode!r}"
            )
        if self.claim_mode == "skip_locked" and self.strategy != "default":
            raise ConfigError(
                f"claim mode skip_locked hands runs out first come, first served and cannot "
                f"follow strategy {self.strategy!r}: use strategy 'default' or claim mode "
                "'optimistic'"
            )
        from easyjob.core.strategies import load_strategy

        load_strategy(self.strategy)  # an unknown strategy fails here, before any database work

    @property
    def dead_threshold(self) -> timedelta:
        return timedelta(seconds=self.dead_after * self.heartbeat)

    @property
    def lookahead_s(self) -> float:
        return self.lookahead if self.lookahead is not None else 2 * self.poll

    @property
    def overdue_grace_s(self) -> float:
        return self.overdue_grace if self.overdue_grace is not None else max(1.0, self.poll)

    @property
    def failover_bound(self) -> timedelta:
        """How long after a crash its runs start again elsewhere, at most (documented)."""
        return timedelta(seconds=(self.dead_after + 1) * self.heartbeat + 2 * self.poll)


def _positive_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
