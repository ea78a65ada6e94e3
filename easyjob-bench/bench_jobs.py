"""No-op tasks written by `easyjob bench`."""
import os

from easyjob import scheduled


def noop() -> None:
    pass


for _i in range(int(os.environ["EASYJOB_BENCH_TASKS"])):
    scheduled(os.environ["EASYJOB_BENCH_CRON"], name=f"bench-{_i}", overlap="allow")(noop)
