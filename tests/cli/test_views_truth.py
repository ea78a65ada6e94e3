"""What ``easyjob tasks`` and ``history`` show is what is true (issue 26): schedules as they
are, a task runnable only when a live node's code can run it, an ABANDONED run naming the
node that lost it and the one that took it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from easyjob.core.admission import Catalog
from easyjob.core.records import TaskSpec
from easyjob.core.states import NodeStatus
from easyjob.store import Store
from tests.cli.conftest import Cli, register, start_manual_run, yearly


def _tasks(cli: Cli, db_url: str) -> dict[str, dict[str, object]]:
    result = cli("tasks", "--json", "--db", db_url)
    assert result.code == 0, result.err
    return {row["name"]: row for row in result.json()["tasks"]}


def test_interval_and_one_off_schedules_are_shown_as_what_they_are(
    cli: Cli, store: Store, db_url: str
) -> None:
    register(store, "node-a", catalog=Catalog(runnable=frozenset({"jobs:report"})))
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    store.tasks.upsert(
        [
            TaskSpec(name="interval", func="tests.jobs:noop", every="90s"),
            TaskSpec(name="berlin", func="tests.jobs:noop", cron="0 3 * * *", tz="Europe/Berlin"),
            TaskSpec(name="manual", func="tests.jobs:noop"),
            TaskSpec(name="child", func="tests.jobs:noop", parent="manual"),
        ]
    )
    store.schedules.add("once", "jobs:report", every="1d", start=at, max_runs=1)
    rows = _tasks(cli, db_url)
    assert {name: row["schedule"] for name, row in rows.items()} == {
        "interval": "every 1m30s",
        "berlin": "cron 0 3 * * * (Europe/Berlin)",
        "manual": "manual (trigger only)",
        "child": "after manual",
        "once": "once at 2030-01-02 03:04:05Z",
    }
    table = cli("tasks", "--db", db_url).out
    assert "every 1m30s" in table and "once at 2030-01-02 03:04:05Z" in table


def test_a_runtime_task_is_in_code_only_if_a_live_node_allows_its_function(
    cli: Cli, store: Store, db_url: str
) -> None:
    register(store, "node-a", catalog=Catalog(runnable=frozenset({"jobs:report"})))
    store.schedules.add("ok", "jobs:report", every="1h")
    store.schedules.add("unmarked", "jobs:not_runnable", every="1h")
    rows = _tasks(cli, db_url)
    assert (rows["ok"]["in_code"], rows["unmarked"]["in_code"]) == (True, False)
    store.nodes.set_status("node-a", NodeStatus.STOPPED)
    assert _tasks(cli, db_url)["ok"]["in_code"] is False  # no live node at all


def test_an_abandoned_run_names_the_node_that_lost_it_and_the_one_that_took_it(
    cli: Cli, store: Store, db_url: str
) -> None:
    store.tasks.upsert(yearly("a"))
    lost = start_manual_run(store, "a", "node-lost")
    held = store.runs.held_by("node-lost", 10)
    (new_id,) = store.runs.recover(held, "node-recoverer")
    horizon = store.now() + timedelta(days=1)
    candidates = [c for c in store.runs.pending(horizon, 1000) if c.id == new_id]
    assert store.runs.claim("node-taker", candidates)

    runs = cli("history", "--json", "--status", "ABANDONED", "--db", db_url).json()["runs"]
    (abandoned,) = runs
    assert abandoned["id"] == lost.id and abandoned["taken_by"] == "node-taker"
    assert abandoned["error_msg"] == (
        "lost by node node-lost: node node-lost declared dead; taken over by node-recoverer; "
        f"run {new_id} (attempt 2) taken by node node-taker"
    )


def test_history_shows_what_happened_and_upcoming_shows_what_is_planned(
    cli: Cli, store: Store, db_url: str
) -> None:
    store.tasks.upsert(yearly("a"))
    done = start_manual_run(store, "a")
    assert store.runs.finish(done)
    ahead = [store.tasks.trigger("a", at=store.now() + timedelta(hours=h)) for h in (1, 2, 3)]
    past = cli("history", "--limit", "5", "--json", "--db", db_url).json()["runs"]
    assert [row["id"] for row in past] == [done.id]
    planned = cli("history", "--upcoming", "--json", "--db", db_url).json()["runs"]
    assert [row["id"] for row in planned] == ahead  # soonest first
