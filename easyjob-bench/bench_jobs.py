"""No-op tasks written by `easyjob bench`: each notes when it was called."""
import atexit
import json
import os
import time

from easyjob import scheduled

_calls = []  # (fire time, call time), epoch seconds


def noop(ctx) -> None:
    _calls.append((ctx.fire_time.timestamp(), time.time()))


@atexit.register
def _save() -> None:
    with open(os.environ["EASYJOB_BENCH_CALLS"], "w", encoding="utf-8") as out:
        json.dump(_calls, out)


for _i in range(int(os.environ["EASYJOB_BENCH_TASKS"])):
    scheduled(os.environ["EASYJOB_BENCH_CRON"], name=f"bench-{_i}", overlap="allow")(noop)
