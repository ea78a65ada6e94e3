"""A no-op task for ``tests/perf/executor_cost.py`` (every second when
``EASYJOB_NOOP_EVERY`` is set, as a node's job module)."""

from __future__ import annotations

import os

from easyjob import scheduled
from easyjob.registry import Registry


def noop() -> None:
    """Does nothing: what is measured is the executor."""


def declare(registry: Registry | None = None) -> None:
    scheduled("* * * * * *", name="noop", registry=registry)(noop)


if os.environ.get("EASYJOB_NOOP_EVERY"):
    declare()
