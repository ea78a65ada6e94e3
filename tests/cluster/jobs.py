"""Jobs for cluster tests, shaped by environment variables set by the harness.

Each run appends one line to the ledger file (see tests/cluster/recording.py).

- ``EASYJOB_TEST_LEDGER``: the ledger file.
- ``EASYJOB_TEST_TICKS``: how many every-second tasks ``tick-0`` ... to declare (default 0).
- ``EASYJOB_TEST_SLOW_SECONDS``: how long the manual-only ``slow`` task runs (default 2).
"""

from __future__ import annotations

import asyncio
import os
import time

from easyjob import TaskContext, runnable, scheduled
from tests.cluster.recording import record


def tick(ctx: TaskContext, n: int) -> None:
    record(ctx)


# EASYJOB_TEST_TICK_CRON: the ticks' schedule (a rolling deploy changes it);
# EASYJOB_TEST_TICK_GRACE: their misfire grace in seconds (default 60)
for _i in range(int(os.environ.get("EASYJOB_TEST_TICKS", "0"))):
    cron = os.environ.get("EASYJOB_TEST_TICK_CRON", "* * * * * *")
    grace = float(os.environ.get("EASYJOB_TEST_TICK_GRACE", "60"))
    scheduled(cron, name=f"tick-{_i}", kwargs={"n": _i}, misfire_grace=grace)(tick)


if os.environ.get("EASYJOB_TEST_SLOW_TICK"):  # every second, takes 2.5 s (overlap serial)

    @scheduled("* * * * * *", name="slow_tick")
    def slow_tick(ctx: TaskContext) -> None:
        record(ctx, "started")
        time.sleep(2.5)


@scheduled("0 0 1 1 *", name="slow")  # in practice fired by the tests with a manual trigger
def slow(ctx: TaskContext) -> None:
    record(ctx, "started")
    deadline = time.monotonic() + float(os.environ.get("EASYJOB_TEST_SLOW_SECONDS", "2"))
    while time.monotonic() < deadline:
        time.sleep(0.02)
    record(ctx, "finished")


# A two-level chain with fan-out: chain_a -> chain_b -> chain_d, and chain_a -> chain_c.
@scheduled(os.environ.get("EASYJOB_TEST_CHAIN_CRON", "0 0 1 1 *"), name="chain_a")
def chain_a(ctx: TaskContext) -> None:
    record(ctx)


@scheduled(parent="chain_a", name="chain_b")
def chain_b(ctx: TaskContext) -> None:
    record(ctx, "started")
    time.sleep(float(os.environ.get("EASYJOB_TEST_CHAIN_B_SECONDS", "0")))
    record(ctx, "finished")


@scheduled(parent="chain_a", name="chain_c")
def chain_c(ctx: TaskContext) -> None:
    record(ctx)


@scheduled(parent="chain_b", name="chain_d")
def chain_d(ctx: TaskContext) -> None:
    record(ctx)


# Policies, on a single node: each job appends start and end lines, so overlaps are visible.
@scheduled(
    os.environ.get("EASYJOB_TEST_FLAKY_CRON", "0 0 1 1 *"), name="flaky", retries=2, retry_delay=0.2
)
def flaky(ctx: TaskContext) -> None:
    record(ctx)
    if ctx.attempt < 3:
        raise RuntimeError(f"attempt {ctx.attempt} fails on purpose")


@scheduled("0 0 1 1 *", name="overrun", timeout=0.5)
def overrun(ctx: TaskContext) -> None:
    record(ctx, "started")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if ctx.is_cancelled():
            record(ctx, "cancelled")
            return
        time.sleep(0.01)
    record(ctx, "finished")


@scheduled("0 0 1 1 *", name="poison")
def poison(ctx: TaskContext) -> None:
    """Kills its process, as a segfault or an OOM kill would."""
    record(ctx, "started")
    os._exit(1)


def _long(ctx: TaskContext) -> None:
    record(ctx, "started")
    time.sleep(1.5)
    record(ctx, "finished")


if os.environ.get("EASYJOB_TEST_OVERLAP"):
    scheduled("* * * * * *", name="long", overlap=os.environ["EASYJOB_TEST_OVERLAP"])(_long)


# The dashboard's tests (tests/web): a task whose name is markup, and one that always fails.
if os.environ.get("EASYJOB_TEST_WEB"):

    @scheduled("* * * * * *", name='<script>alert("easyjob")</script>')
    def hostile(ctx: TaskContext) -> None:
        record(ctx)

    @scheduled("* * * * * *", name="always_fails")
    def always_fails(ctx: TaskContext) -> None:
        raise ValueError("no luck <img src=x onerror=alert(1)>")

    # the dashboard's actions (tests/web/test_browser_actions.py)
    @scheduled("0 0 1 1 *", name="greet", accepts=("who",))
    def greet(ctx: TaskContext, who: str = "nobody") -> None:
        record(ctx, who)

    @runnable
    def web_report(ctx: TaskContext) -> None:
        record(ctx)


@scheduled("0 0 1 1 *", name="hang", timeout=1)
def hang(ctx: TaskContext) -> None:
    """Never returns by itself (it ignores its cancellation flag)."""
    record(ctx, "started")
    while True:
        time.sleep(0.05)


# Async jobs (tests/cluster/test_async.py): one returns a result, one outlives its timeout.
if os.environ.get("EASYJOB_TEST_ASYNC"):

    @scheduled("0 0 1 1 *", name="async_answer")
    async def async_answer(ctx: TaskContext) -> dict[str, int]:
        await asyncio.sleep(0.05)
        record(ctx)
        return {"answer": 42}

    @scheduled("0 0 1 1 *", name="async_overrun", timeout=0.5)
    async def async_overrun(ctx: TaskContext) -> None:
        record(ctx, "started")
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            record(ctx, "cancelled")
            raise
        record(ctx, "finished")


# Sharding and broadcast (tests/cluster/test_split.py): the event names the shard.
if os.environ.get("EASYJOB_TEST_SPLIT"):

    @scheduled("* * * * * *", name="split", shards=3)
    def split(ctx: TaskContext) -> None:
        record(ctx, f"shard-{ctx.shard}-of-{ctx.shards}")

    @scheduled(parent="split", name="split_after")
    def split_after(ctx: TaskContext) -> None:
        record(ctx)

    @scheduled("* * * * * *", name="everywhere", broadcast=True)
    def everywhere(ctx: TaskContext) -> None:
        record(ctx, f"shard-{ctx.shard}-of-{ctx.shards}")


# The executor matrix (tests/cluster/test_executors.py): the same jobs under each executor.
if os.environ.get("EASYJOB_TEST_MATRIX"):

    @scheduled("0 0 1 1 *", name="m_sync")
    def m_sync(ctx: TaskContext) -> None:
        record(ctx)

    @scheduled("0 0 1 1 *", name="m_async")
    async def m_async(ctx: TaskContext) -> dict[str, object]:
        await asyncio.sleep(0.01)
        record(ctx)
        return {"awaited": True, "attempt": ctx.attempt}

    @scheduled("0 0 1 1 *", name="m_value", kwargs={"n": 7})
    def m_value(ctx: TaskContext, n: int) -> dict[str, object]:
        record(ctx)
        return {"n": n, "fire": ctx.fire_time.isoformat(), "task": ctx.task_name}

    @scheduled("0 0 1 1 *", name="m_raises")
    def m_raises(ctx: TaskContext) -> None:
        record(ctx)
        raise ValueError(f"matrix failure of {ctx.task_name}")

    @scheduled("0 0 1 1 *", name="m_sharded", shards=3)
    def m_sharded(ctx: TaskContext) -> dict[str, int]:
        record(ctx, f"shard-{ctx.shard}-of-{ctx.shards}")
        return {"shard": ctx.shard, "shards": ctx.shards}

    @scheduled("0 0 1 1 *", name="m_timeout", timeout=0.5)
    def m_timeout(ctx: TaskContext) -> None:
        record(ctx, "started")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not ctx.is_cancelled():
            time.sleep(0.01)
        record(ctx, "returned")

    @scheduled("0 0 1 1 *", name="m_kills", executor="process")
    def m_kills(ctx: TaskContext) -> None:
        """Kills its process, as a segfault or an OOM kill would: declared to run in a
        child process whatever the node's executor, so it takes no node down."""
        record(ctx, "started")
        os._exit(3)


# Cancel (tests/cluster/test_cancel.py): a cooperative job on a thread, a sleeping one in a
# child process (its started line names its pid).
if os.environ.get("EASYJOB_TEST_CANCEL"):

    @scheduled("0 0 1 1 *", name="c_coop")
    def c_coop(ctx: TaskContext) -> None:
        record(ctx, "started")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if ctx.is_cancelled():
                record(ctx, "cancelled")
                return
            time.sleep(0.01)
        record(ctx, "finished")

    @scheduled("0 0 1 1 *", name="c_sleep", executor="process")
    def c_sleep(ctx: TaskContext) -> None:
        record(ctx, f"pid-{os.getpid()}")
        time.sleep(60)
        record(ctx, "finished")


if os.environ.get("EASYJOB_TEST_JOIN"):  # a child of two parents on one schedule
    # join_a and join_b take the same time, so of one fire they end within moments of each
    # other, on two nodes; join_b fails (no retry) on fires whose second is a multiple of 3
    join_cron = os.environ["EASYJOB_TEST_JOIN"]

    @scheduled(join_cron, name="join_a")
    def join_a(ctx: TaskContext) -> None:
        time.sleep(0.3)
        record(ctx)

    @scheduled(join_cron, name="join_b")
    def join_b(ctx: TaskContext) -> None:
        time.sleep(0.3)
        record(ctx)
        if ctx.fire_time.second % 3 == 0:
            raise RuntimeError("join_b fails on purpose")

    @scheduled(parent=["join_a", "join_b"], name="join_c")
    def join_c(ctx: TaskContext) -> None:
        record(ctx)
