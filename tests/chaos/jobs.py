"""Jobs for chaos scenarios, shaped by environment variables set by the runner.

Every call appends to the ledger (``EASYJOB_CHAOS_LEDGER``) outside the database, in the
format of :mod:`tests.chaos.ledger`.

- ``EASYJOB_CHAOS_TICKS``: how many every-second tasks ``tick-0`` ... (default 0).
- ``EASYJOB_CHAOS_TICK_CRON``: the ticks' cron text (default ``* * * * * *``); a rolling
  deploy changes it to another text of the same fires.
- ``EASYJOB_CHAOS_SLOW_SECONDS``: how long the manual-only ``slow`` task runs (default 2).
- ``EASYJOB_CHAOS_CHAIN_CRON``: schedule of ``chain_a`` (children ``chain_b`` -> ``chain_d``
  and ``chain_c``); by default it never fires by itself.
- ``EASYJOB_CHAOS_MISFIRE_GRACE``: when set, ``late-fire_once``, ``late-skip`` and
  ``late-catch_up``, every second, with that misfire grace (seconds) and that policy.
- ``EASYJOB_CHAOS_DST``: when set, tasks in Europe/Berlin around its DST transitions.
- ``oneoff``: manual only, instant; scenarios insert its runs with a due time.
- ``poison``: manual only, ``retries=0``; kills its process (``os._exit(1)``), as a segfault
  or an OOM kill would.
"""

from __future__ import annotations

import os
import time

from easyjob import TaskContext, scheduled
from tests.chaos.catalog import DST_TASKS, DST_ZONE, MISFIRE_POLICIES, TICK_CRON
from tests.chaos.ledger import append, format_line

NEVER = "0 0 1 1 *"  # fired by the scenarios with manual runs
LEDGER = os.environ.get("EASYJOB_CHAOS_LEDGER", "ledger.txt")


def record(ctx: TaskContext, event: str = "ran") -> None:
    line = format_line(ctx.task_name, ctx.fire_time, ctx.node_id, ctx.attempt, ctx.run_id, event)
    append(LEDGER, line)


def tick(ctx: TaskContext, n: int = 0) -> None:
    record(ctx)


def spend(ctx: TaskContext, seconds: float) -> None:
    record(ctx, "started")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.02)
    record(ctx, "finished")


_tick_cron = os.environ.get("EASYJOB_CHAOS_TICK_CRON", TICK_CRON)
for _i in range(int(os.environ.get("EASYJOB_CHAOS_TICKS", "0"))):
    scheduled(_tick_cron, name=f"tick-{_i}", kwargs={"n": _i})(tick)


@scheduled(NEVER, name="slow")
def slow(ctx: TaskContext) -> None:
    spend(ctx, float(os.environ.get("EASYJOB_CHAOS_SLOW_SECONDS", "2")))


@scheduled(NEVER, name="oneoff")
def oneoff(ctx: TaskContext) -> None:
    record(ctx)


@scheduled(NEVER, name="poison", retries=0)
def poison(ctx: TaskContext) -> None:
    record(ctx, "started")
    os._exit(1)


@scheduled(os.environ.get("EASYJOB_CHAOS_CHAIN_CRON", NEVER), name="chain_a")
def chain_a(ctx: TaskContext) -> None:
    record(ctx)


@scheduled(parent="chain_a", name="chain_b")
def chain_b(ctx: TaskContext) -> None:
    spend(ctx, float(os.environ.get("EASYJOB_CHAOS_CHAIN_B_SECONDS", "0")))


@scheduled(parent="chain_a", name="chain_c")
def chain_c(ctx: TaskContext) -> None:
    record(ctx)


@scheduled(parent="chain_b", name="chain_d")
def chain_d(ctx: TaskContext) -> None:
    record(ctx)


if _grace := os.environ.get("EASYJOB_CHAOS_MISFIRE_GRACE"):
    for _policy in MISFIRE_POLICIES:
        scheduled(TICK_CRON, name=f"late-{_policy}", misfire=_policy, misfire_grace=float(_grace))(
            tick
        )

if os.environ.get("EASYJOB_CHAOS_DST"):
    for _name, _cron in DST_TASKS.items():
        scheduled(_cron, name=_name, tz=DST_ZONE)(tick)
