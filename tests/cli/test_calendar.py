"""``easyjob calendar add|remove|list`` in-process, and the jitter in ``easyjob history``."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from easyjob.core.records import Advance, PlannedFire, TaskSpec
from easyjob.store import Store
from tests.cli.conftest import Cli


def test_add_list_and_remove(cli: Cli, store: Store, db_url: str) -> None:
    added = cli(
        "calendar", "add", "holidays", "2030-12-24..2030-12-26", "--note", "x", "--db", db_url
    )
    assert (added.code, added.out) == (0, "calendar holidays: excludes 2030-12-24..2030-12-26\n")
    assert cli("calendar", "add", "holidays", "2030-12-31", "--db", db_url).code == 0
    assert cli("calendar", "add", "ops", "2031-01-05", "--db", db_url).code == 0
    listed = cli("calendar", "list", "--db", db_url)
    lines = listed.out.splitlines()
    assert lines[0].split() == ["name", "first_day", "last_day", "days", "note", "create_time"]
    assert [line.split()[:5] for line in lines[1:]] == [
        ["holidays", "2030-12-24", "2030-12-26", "3", "x"],
        ["holidays", "2030-12-31", "2030-12-31", "1", "-"],
        ["ops", "2031-01-05", "2031-01-05", "1", "-"],
    ]
    removed = cli("calendar", "remove", "holidays", "2030-12-25", "--db", db_url)
    assert (removed.code, removed.out) == (0, "removed 1 day(s) from calendar holidays\n")
    doc = cli("calendar", "list", "holidays", "--json", "--db", db_url).json()
    assert [(r["first_day"], r["last_day"], r["note"]) for r in doc["calendars"]] == [
        ("2030-12-24", "2030-12-24", "x"),
        ("2030-12-26", "2030-12-26", "x"),
        ("2030-12-31", "2030-12-31", None),
    ]
    gone = cli("calendar", "remove", "holidays", "--json", "--db", db_url).json()
    assert gone == {"calendar": "holidays", "days_removed": 3}
    assert [r.name for r in store.calendars.list()] == ["ops"]


@pytest.mark.parametrize(
    ("argv", "code", "error"),
    [
        (["add", "h", "2030-13-01"], 2, "invalid day '2030-13-01' in '2030-13-01'"),
        (["add", "h", "24/12/2030"], 2, "invalid day '24/12/2030'"),
        (
            ["add", "h", "2030-12-26..2030-12-24"],
            2,
            "invalid day range '2030-12-26..2030-12-24': it ends (2030-12-24) before it "
            "starts (2030-12-26)",
        ),
        (["add", " h", "2030-12-24"], 2, "easyjob: invalid calendar name ' h'"),
        (["add", "h"], 2, "the following arguments are required: DAY[..DAY]"),
        (["remove", "nope"], 4, "easyjob: no calendar named 'nope'\n"),
        (
            ["remove", "h", "2031-01-01..2031-01-31"],
            4,
            "easyjob: calendar 'h' excludes none of the days 2031-01-01..2031-01-31\n",
        ),
        (["remove", "h", "2031-02-30"], 2, "invalid day '2031-02-30'"),
        (["list", "nope"], 4, "easyjob: no calendar named 'nope'\n"),
    ],
)
def test_bad_input_is_named_and_loses_nothing(
    cli: Cli, store: Store, db_url: str, argv: list[str], code: int, error: str
) -> None:
    store.calendars.add("h", date(2030, 12, 24), date(2030, 12, 24), "kept")
    result = cli("calendar", *argv, "--db", db_url)
    assert result.code == code and error in result.err, result.err
    assert [(r.name, r.first_day, r.note) for r in store.calendars.list()] == [
        ("h", date(2030, 12, 24), "kept")
    ]


def test_history_shows_the_jitter_apart_from_the_lateness(
    cli: Cli, store: Store, db_url: str
) -> None:
    spec = TaskSpec("j", "tests.jobs:noop", cron="* * * * * *", jitter=timedelta(seconds=9))
    (task,) = store.tasks.upsert([spec])
    assert task.next_start_time is not None
    fire = task.next_start_time
    planned = PlannedFire(fire, jitter=timedelta(milliseconds=4250))
    store.tasks.advance(
        "p", [Advance(task.id, task.version, fire + timedelta(seconds=1), (planned,))]
    )
    result = cli("history", "--task", "j", "--upcoming", "--db", db_url)
    header, row = result.out.splitlines()[:2]
    names = header.split()
    assert names.index("jitter_s") < names.index("late_s")
    assert row.split()[names.index("jitter_s")] == "4.2s"  # the cell: seconds, one decimal
    (doc,) = cli("history", "--task", "j", "--upcoming", "--json", "--db", db_url).json()["runs"]
    assert (doc["jitter_ms"], doc["jitter_s"], doc["late_s"]) == (4250, 4.25, None)
