"""What "a live node can run this task" means (easyjob.views.code.LiveCode): the nodes' own
rule over their catalogs, and, for a node of an earlier release with no catalog, the tasks
of the code it registered and never a task added at run time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from easyjob.core.admission import Catalog
from easyjob.core.records import ORIGIN_RUNTIME, TaskRow
from easyjob.core.states import Misfire, Overlap, TaskStatus
from easyjob.views import LiveCode, schedule_text

START = datetime(2030, 1, 1, tzinfo=UTC)


def task(
    name: str, func: str, *, runtime: bool = False, seen: datetime = START, **more: object
) -> TaskRow:
    values: dict[str, object] = dict(
        id=1, name=name, func=func, cron_expr=None, tz="UTC", pid=None,
        status=TaskStatus.ACTIVE, next_start_time=None, version=0, node_id=None,
        misfire=Misfire.FIRE_ONCE, misfire_grace_ms=60_000, overlap=Overlap.SERIAL, retries=0,
        retry_delay_ms=1000, timeout_ms=None, kwargs={}, pruned_success_count=0, fail_count=0,
        create_time=START, update_time=START, seen_time=seen,
    )  # fmt: skip
    if runtime:
        values["origin"] = ORIGIN_RUNTIME
    values.update(more)
    return TaskRow(**values)  # type: ignore[arg-type]


def test_catalogs_decide_as_the_nodes_do() -> None:
    code = LiveCode((Catalog({"a": "jobs:a"}, frozenset({"jobs:report"})),))
    assert code.runs(task("a", "jobs:a"))
    assert not code.runs(task("a", "jobs:other"))  # the name with another function
    assert not code.runs(task("b", "jobs:b"))  # no live node declares it
    assert code.runs(task("r", "jobs:report", runtime=True))
    assert not code.runs(task("r", "jobs:not_runnable", runtime=True))
    assert not code.runs(task("a", "jobs:report", runtime=True))  # the name is the code's
    assert code.allows("jobs:report") and not code.allows("jobs:a")


def test_a_node_of_an_earlier_release_counts_for_the_code_it_registered_only() -> None:
    code = LiveCode((), {"old-node": START})
    assert code.any_live
    assert code.runs(task("a", "jobs:a", seen=START + timedelta(seconds=1)))
    assert not code.runs(task("a", "jobs:a", seen=START - timedelta(seconds=1)))
    assert not code.runs(task("r", "jobs:report", runtime=True))
    assert not code.allows("jobs:report")


def test_no_live_node_runs_nothing() -> None:
    code = LiveCode()
    assert not code.any_live and not code.runs(task("a", "jobs:a"))


def test_schedules_are_written_as_what_they_are() -> None:
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert schedule_text(task("t", "f", every_ms=90_000)) == "every 1m30s"
    assert schedule_text(task("t", "f", every_ms=86_400_000, starts_at=at, max_runs=1)) == (
        "once at 2030-01-02 03:04:05Z"
    )
    assert schedule_text(task("t", "f", cron_expr="0 3 * * *", tz="Europe/Berlin")) == (
        "cron 0 3 * * * (Europe/Berlin)"
    )
    bounded = task("t", "f", cron_expr="@hourly", starts_at=at, ends_at=at, max_runs=3)
    assert schedule_text(bounded) == (
        "cron @hourly, from 2030-01-02 03:04:05Z, until 2030-01-02 03:04:05Z, at most 3 runs"
    )
    assert schedule_text(task("t", "f"), "parent") == "after parent"
    assert schedule_text(task("t", "f")) == "manual (trigger only)"
    spread = task("t", "f", cron_expr="0 9 * * *", jitter_ms=90_500, exclude_calendar="h")
    assert schedule_text(spread) == "cron 0 9 * * *, jitter 1m30s500ms, except calendar 'h'"
