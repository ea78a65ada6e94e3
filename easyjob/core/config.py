"""Node configuration: one frozen record, validated at construction."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from easyjob.core.settings import (
    format_duration,
    integer,
    non_negative_int,
    number,
    seconds,
    setting,
    settings,
)
from easyjob.errors import ConfigError

__all__ = ["CLAIM_MODES", "EXECUTORS", "NodeConfig", "generate_node_id"]

#: How a node claims runs: ``optimistic`` (read due runs, let the strategy choose, claim
#: them with one version-checked UPDATE; every database) or ``skip_locked`` (one locking
#: claim of the next due runs, first come first served; PostgreSQL only).
CLAIM_MODES = ("optimistic", "skip_locked")

#: Where a node calls its jobs: ``thread`` (its worker threads; a hung job keeps its thread)
#: or ``process`` (a child process per run: a timeout kills it, a crash fails only that run).
EXECUTORS = ("thread", "process")


def _positive_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def _whole(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{name} must be a whole number (0 or more), got {value!r}")


def _dead_after(name: str, value: object) -> None:
    _positive_int(name, value)
    if isinstance(value, int) and value < 2:
        raise ConfigError(f"{name} must be at least 2 heartbeats, got {value!r}")


def _positive_seconds(name: str, value: object) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")


def _optional_positive_seconds(name: str, value: object) -> None:
    if value is not None:
        _positive_seconds(name, value)


def _retention(name: str, value: object) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{name} must be a number of seconds (0 keeps everything), got {value!r}")


#: The most fires one advance may write ahead: far more gains nothing (one task-row write
#: per this many fires is already a small part of a run's writes) and makes forgetting
#: them on a schedule change a big delete.
MAX_PLAN_AHEAD = 1000


def _plan_ahead(name: str, value: object) -> None:
    _positive_int(name, value)
    if isinstance(value, int) and value > MAX_PLAN_AHEAD:
        raise ConfigError(f"{name} must be at most {MAX_PLAN_AHEAD} fires, got {value!r}")


def _non_negative_seconds(name: str, value: object) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{name} must be a number of seconds (0 or more), got {value!r}")


def _node_id(name: str, value: object) -> None:
    if not isinstance(value, str) or not value or len(value) > 128:
        raise ConfigError(f"node id must be 1-128 characters, got {value!r}")


def _strategy(name: str, value: object) -> None:
    from easyjob.core.strategies import load_strategy

    load_strategy(str(value))  # an unknown strategy fails here, before any database work


def _one_of(choices: tuple[str, ...]) -> Callable[[str, object], None]:
    def check(name: str, value: object) -> None:
        if value not in choices:
            label = name.replace("_", " ")
            raise ConfigError(f"{label} must be one of {', '.join(choices)}, got {value!r}")

    return check


def generate_node_id() -> str:
    """``host-pid-random``: unique per process incarnation, readable in the node table."""
    return f"{socket.gethostname()[:80]}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class NodeConfig:
    """How one node behaves. Times are seconds (floats, so tests can run fast).

    Each field is a setting (:mod:`easyjob.core.settings`): ``easyjob run`` offers it as
    ``--field-name`` and reads ``EASYJOB_FIELD_NAME``, with the help and the check below.

    The dead threshold is ``dead_after`` heartbeats: a node whose last heartbeat is older
    than ``dead_after * heartbeat`` seconds of database time is dead, and its runs are
    taken back. A crashed node's run starts again within about
    ``(dead_after + 1) * heartbeat + 2 * poll`` seconds (see :attr:`failover_bound`).
    """

    node_id: str = setting(
        factory=generate_node_id,
        help="node id, unique among live nodes",
        metavar="ID",
        check=_node_id,
        shown="host-pid-random",
    )
    strategy: str = setting(
        "default",
        help="how a node picks its share of due runs: default, id_hash, least_count, weight "
        "or pkg.module:Class",
        metavar="NAME",
        check=_strategy,
    )
    claim_mode: str = setting(
        "optimistic",
        help="optimistic (any database) or skip_locked (PostgreSQL, strategy default only)",
        metavar="MODE",
        check=_one_of(CLAIM_MODES),
    )
    weight: int = setting(
        1, help="share for the weight strategy", metavar="N", parse=integer, check=_positive_int
    )
    workers: int = setting(
        64,  # see docs/performance.md
        help="jobs running at once (claimed runs wait without a worker)",
        metavar="N",
        parse=integer,
        check=_positive_int,
    )
    heartbeat: float = setting(
        2.0,
        help="seconds between heartbeats",
        metavar="SECONDS",
        parse=number,
        check=_positive_seconds,
    )
    dead_after: int = setting(
        3,
        help="heartbeats missed before a node is dead (2 or more)",
        metavar="N",
        parse=integer,
        check=_dead_after,
    )
    poll: float = setting(
        1.0,
        help="seconds between polls for due work",
        metavar="SECONDS",
        parse=number,
        check=_positive_seconds,
    )
    lookahead: float | None = setting(
        None,
        help="how far ahead of their fire time runs are claimed, seconds",
        metavar="SECONDS",
        parse=number,
        check=_optional_positive_seconds,
        shown="2 polls",
    )
    plan_ahead: int = setting(
        10,  # see docs/concepts.md, "Planning ahead"
        help="fires one advance of a schedule writes at most (1: only those in the lookahead; "
        "every fire in the lookahead is always written)",
        metavar="N",
        parse=integer,
        check=_plan_ahead,
    )
    plan_window: float = setting(
        600.0,  # see docs/concepts.md, "Planning ahead"
        help="how far ahead of now an advance writes fires beyond the lookahead (0s: only the "
        "lookahead)",
        metavar="DURATION",
        parse=seconds,
        check=_non_negative_seconds,
        show=format_duration,
    )
    batch: int = setting(
        200,
        help="runs or tasks per claim or advance statement",
        metavar="N",
        parse=integer,
        check=_positive_int,
    )
    max_held: int = setting(
        5000,
        help="most runs a node holds (waiting or running); see docs/concepts.md",
        metavar="N",
        parse=integer,
        check=_positive_int,
    )
    executor: str = setting(
        "thread",
        help="thread (jobs on worker threads) or process (each run in a warm child process: a "
        "timeout kills it, a crash fails only that run); a task's executor= overrides it",
        metavar="KIND",
        check=_one_of(EXECUTORS),
    )
    overdue_grace: float | None = setting(
        None,
        help="after this many seconds, any node may take an overdue task or run, and a node "
        "hands back runs no worker could start",
        metavar="SECONDS",
        parse=number,
        check=_optional_positive_seconds,
        shown="one poll, at least 1",
    )
    shutdown_grace: float = setting(
        30.0,
        help="seconds running jobs get to finish at shutdown",
        metavar="SECONDS",
        parse=number,
        check=_positive_seconds,
    )
    max_recoveries: int = setting(
        1,
        # a re-run is called in a child process: a job that kills its process takes down
        # only the node that first ran it; this bounds re-runs of a run whose node died
        help="times a run whose node died while running it is run again before it ends FAILED",
        metavar="N",
        parse=non_negative_int,
        check=_whole,
    )
    retention: float = setting(
        7 * 86400.0,
        help="finished runs, and rows of nodes stopped or dead, that ended longer ago than "
        "this are pruned (one node at a time, in small batches); 0s keeps everything",
        metavar="DURATION",
        parse=seconds,
        check=_retention,
        show=format_duration,
    )

    def __post_init__(self) -> None:
        for field, found in settings(type(self)):
            found.check(field.name, getattr(self, field.name))
        if self.claim_mode == "skip_locked" and self.strategy != "default":
            raise ConfigError(
                f"claim mode skip_locked hands runs out first come, first served and cannot "
                f"follow strategy {self.strategy!r}: use strategy 'default' or claim mode "
                "'optimistic'"
            )

    @property
    def dead_threshold(self) -> timedelta:
        return timedelta(seconds=self.dead_after * self.heartbeat)

    @property
    def lookahead_s(self) -> float:
        return self.lookahead if self.lookahead is not None else 2 * self.poll

    @property
    def plan_until(self) -> timedelta:
        """How far ahead of now an advance may write fires: the lookahead at least."""
        return timedelta(seconds=max(self.plan_window, self.lookahead_s))

    @property
    def overdue_grace_s(self) -> float:
        return self.overdue_grace if self.overdue_grace is not None else max(1.0, self.poll)

    @property
    def failover_bound(self) -> timedelta:
        """How long after a crash its runs start again elsewhere, at most (documented)."""
        return timedelta(seconds=(self.dead_after + 1) * self.heartbeat + 2 * self.poll)
