"""What an ``async def`` job's event loop costs per call, three ways, on a worker thread.

- ``asyncio.Runner`` per call (what easyjob does: a loop of its own for each call, with
  asyncio's full cleanup of async generators and the default executor);
- a bare new loop per call (``new_event_loop`` / ``run_until_complete`` / ``close``);
- one shared loop thread, the coroutine handed over with ``run_coroutine_threadsafe``.

Each is ROUNDS rounds of CALLS calls of a coroutine that awaits ``asyncio.sleep(0)``, run on
a thread that is not the main one (as jobs run); the median microseconds per call of the
rounds is printed. Not a test.

Run: .venv/bin/python tests/perf/async_cost.py
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable

CALLS = 5000
ROUNDS = 5


async def job() -> None:
    await asyncio.sleep(0)


def runner_per_call() -> float:
    began = time.perf_counter()
    for _ in range(CALLS):
        with asyncio.Runner() as runner:
            runner.run(job())
    return (time.perf_counter() - began) / CALLS * 1e6


def loop_per_call() -> float:
    began = time.perf_counter()
    for _ in range(CALLS):
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(job())
        finally:
            loop.close()
    return (time.perf_counter() - began) / CALLS * 1e6


def shared_loop(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    def measure() -> float:
        began = time.perf_counter()
        for _ in range(CALLS):
            asyncio.run_coroutine_threadsafe(job(), loop).result()
        return (time.perf_counter() - began) / CALLS * 1e6

    return measure


def on_a_worker(measure: Callable[[], float]) -> float:
    rounds: list[float] = []
    worker = threading.Thread(target=lambda: rounds.extend(measure() for _ in range(ROUNDS)))
    worker.start()
    worker.join()
    return statistics.median(rounds)


def main() -> None:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    for name, measure in (
        ("asyncio.Runner per call", runner_per_call),
        ("new loop per call", loop_per_call),
        ("one shared loop thread", shared_loop(loop)),
    ):
        print(f"{name:<26} {on_a_worker(measure):6.0f} us per call (median of {ROUNDS} x {CALLS})")
    loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    main()
