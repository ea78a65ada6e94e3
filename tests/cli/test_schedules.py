"""``easyjob trigger --at/--kwargs`` and ``easyjob schedule add|set|remove`` in-process."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from easyjob.core.admission import Catalog
from easyjob.core.records import TaskSpec
from easyjob.core.states import RunStatus, TaskStatus
from easyjob.store import Store
from tests.cli.conftest import Cli, register


def test_trigger_at_a_time_with_accepted_arguments(cli: Cli, store: Store, db_url: str) -> None:
    register(store, "node-a")
    store.tasks.upsert([TaskSpec(name="greet", func="tests.jobs:noop", accepts=("user_id",))])
    at = (store.now() + timedelta(hours=2)).replace(microsecond=0)
    result = cli(
        "trigger", "greet", "--at", at.isoformat(), "--kwargs", '{"user_id": 7}', "--db", db_url
    )
    assert result.code == 0, result.err
    (run,) = store.history.runs(task="greet")
    assert result.out == f"triggered greet: run {run.id}\n"
    assert (run.fire_time, run.due_time, run.status) == (at, at, RunStatus.PENDING)
    naive = at.astimezone(UTC).replace(tzinfo=None).isoformat()  # no zone: UTC
    assert cli("trigger", "greet", "--at", naive, "--db", db_url).code == 0
    assert {r.fire_time for r in store.history.runs(task="greet")} == {at}


@pytest.mark.parametrize(
    ("argv", "code", "error"),
    [
        (
            ["--kwargs", '{"admin": true}'],
            2,
            "easyjob: task 'greet' does not accept trigger argument(s) 'admin' "
            "(it accepts: 'user_id')\n",
        ),
        (["--kwargs", "[1]"], 2, "invalid --kwargs '[1]': must be a JSON object"),
        (["--kwargs", "{nope"], 2, "invalid --kwargs '{nope': not JSON"),
        (["--at", "tomorrow"], 2, "invalid time 'tomorrow': expected ISO 8601"),
        (["--at", "2020-01-01T00:00:00Z"], 2, "in the past (database time"),
    ],
)
def test_bad_triggers_are_refused_and_write_nothing(
    cli: Cli, store: Store, db_url: str, argv: list[str], code: int, error: str
) -> None:
    store.tasks.upsert([TaskSpec(name="greet", func="tests.jobs:noop", accepts=("user_id",))])
    result = cli("trigger", "greet", *argv, "--db", db_url)
    assert result.code == code and error in result.err, result.err
    assert store.history.runs(task="greet") == []


def live_node_allowing(store: Store, *funcs: str, node_id: str = "node-a") -> None:
    """A live node whose code declares task ``code`` and allows *funcs* with ``@runnable``
    (its catalog)."""
    catalog = Catalog(tasks={"code": "tests.jobs:noop"}, runnable=frozenset(funcs))
    register(store, node_id, catalog=catalog)


def test_schedule_add_set_remove(cli: Cli, store: Store, db_url: str) -> None:
    live_node_allowing(store, "jobs:report")
    add = cli(
        "schedule", "add", "r", "--func", "jobs:report", "--every", "90m", "--json", "--db", db_url
    )
    assert add.code == 0, add.err
    doc = add.json()
    assert (doc["origin"], doc["every"], doc["cron_expr"], doc["status"]) == (
        "runtime",
        "1h30m",
        None,
        "ACTIVE",
    )
    row = store.tasks.get("r")
    assert row.next_start_time == row.anchor_time + timedelta(minutes=90)  # type: ignore[operator]
    changed = cli("schedule", "set", "r", "--cron", "0 3 * * *", "--db", db_url)
    assert changed.code == 0
    assert changed.out.startswith("changed r (jobs:report): cron 0 3 * * *, ACTIVE, next fire ")
    assert changed.out.endswith("T03:00:00Z\n")
    removed = cli("schedule", "remove", "r", "--db", db_url)
    assert removed.out == "removed r (jobs:report): cron 0 3 * * *, FINISHED, next fire none\n"
    assert store.tasks.get("r").status == TaskStatus.FINISHED
    start, end = datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 1, 2, tzinfo=UTC)
    bounded = cli(
        "schedule", "add", "b", "--func", "jobs:report", "--cron", "0 * * * *",
        "--start", start.isoformat(), "--end", end.isoformat(), "--max-runs", "3",
        "--accepts", "n, day", "--db", db_url,
    )  # fmt: skip
    assert bounded.code == 0, bounded.err
    row = store.tasks.get("b")
    assert (row.starts_at, row.ends_at, row.max_runs, row.accepts) == (start, end, 3, ["day", "n"])
    assert row.next_start_time == start


@pytest.mark.parametrize(
    ("argv", "code", "error"),
    [
        (["add", "x", "--func", "jobs:report", "--every", "45x"], 2, "invalid interval '45x'"),
        (["add", "code", "--func", "jobs:report", "--every", "1m"], 2, "exists already"),
        (
            ["add", "x", "--func", "jobs:report", "--every", "1m", "--cron", "@hourly"],
            2,
            "not both",
        ),
        (["set", "code"], 2, "give a new cron or a new interval"),
        (["set", "nope", "--every", "1m"], 4, "no task named 'nope'"),
        (["remove", "code"], 2, "is declared by code: pause it"),
        (["remove", "nope"], 4, "no task named 'nope'"),
    ],
)
def test_bad_schedule_changes_are_refused(
    cli: Cli, store: Store, db_url: str, argv: list[str], code: int, error: str
) -> None:
    live_node_allowing(store, "jobs:report")
    store.tasks.upsert([TaskSpec(name="code", func="tests.jobs:noop", cron="@hourly")])
    result = cli("schedule", *argv, "--db", db_url)
    assert result.code == code and error in result.err, result.err
    assert [t.name for t in store.tasks.all()] == ["code"]
    assert store.tasks.get("code").cron_expr == "@hourly"


@pytest.mark.parametrize(
    ("func", "why"),
    [
        (
            "jobs:not_marked",
            "no live node's code allows it with @runnable (it is not marked, or not there)",
        ),
        (
            "jobs:missing",
            "no live node's code allows it with @runnable (it is not marked, or not there)",
        ),
    ],
)
def test_schedule_add_of_a_function_no_live_node_can_run_exits_6(
    cli: Cli, store: Store, db_url: str, func: str, why: str
) -> None:
    live_node_allowing(store, "jobs:report")
    refused = cli("schedule", "add", "x", "--func", func, "--every", "1m", "--db", db_url)
    assert refused.code == 6
    assert refused.err == (
        f"easyjob: function {func!r} cannot run: {why}; deploy it first, or force it "
        "(--force) to add the schedule ahead of a deploy\n"
    )
    assert [t.name for t in store.tasks.all()] == []
    forced = cli("schedule", "add", "x", "--func", func, "--every", "1m", "--force", "--db", db_url)
    assert forced.code == 0, forced.err
    assert store.tasks.get("x").func == func


def test_schedule_add_with_no_live_node_exits_6(cli: Cli, store: Store, db_url: str) -> None:
    refused = cli("schedule", "add", "x", "--func", "jobs:report", "--every", "1m", "--db", db_url)
    assert (refused.code, "no node is live" in refused.err) == (6, True)


def test_schedule_set_of_a_task_no_live_node_can_run_exits_6(
    cli: Cli, store: Store, db_url: str
) -> None:
    live_node_allowing(store, "jobs:report")
    assert cli("schedule", "add", "r", "--func", "jobs:gone", "--every", "1m", "--force",
               "--db", db_url).code == 0  # fmt: skip
    refused = cli("schedule", "set", "r", "--every", "2m", "--db", db_url)
    assert refused.code == 6 and "function 'jobs:gone' cannot run" in refused.err
    assert store.tasks.get("r").every_ms == 60_000
    forced = cli("schedule", "set", "r", "--every", "2m", "--force", "--db", db_url)
    assert forced.code == 0 and store.tasks.get("r").every_ms == 120_000


def test_trigger_of_a_runtime_task_no_live_node_can_run_exits_5(
    cli: Cli, store: Store, db_url: str
) -> None:
    live_node_allowing(store, "jobs:report")
    store.schedules.add("later", "jobs:not_runnable")  # added ahead of a deploy
    result = cli("trigger", "later", "--json", "--db", db_url)
    assert result.code == 5
    assert result.json()["runnable"] is False
    store.schedules.add("now", "jobs:report")
    assert cli("trigger", "now", "--db", db_url).code == 0


def test_kwargs_nested_5000_deep_exits_2_with_a_clear_message(
    cli: Cli, store: Store, db_url: str
) -> None:
    store.tasks.upsert([TaskSpec(name="greet", func="tests.jobs:noop", accepts=("user_id",))])
    deep = '{"user_id": ' + "[" * 5000 + "]" * 5000 + "}"
    result = cli("trigger", "greet", "--kwargs", deep, "--db", db_url)
    assert result.code == 2
    assert "nested too deeply for JSON arguments" in result.err
    assert "Traceback (most recent call last)" not in result.err and len(result.err) < 600
