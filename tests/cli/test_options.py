"""Options: each has an EASYJOB_* variable named in --help; durations; output helpers."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta

import pytest

from easyjob.cli.options import build_parser, parse_duration
from easyjob.cli.output import Column, dumps, duration, table
from easyjob.views import seconds
from tests.cli.conftest import Cli


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_option_names_its_environment_variable() -> None:
    parser = build_parser("0")
    commands = _subparsers(parser)
    assert sorted(commands) == sorted(
        [
            "run",
            "init-db",
            "upgrade-db",
            "sql",
            "status",
            "tasks",
            "nodes",
            "history",
            "trigger",
            "cancel",
            "schedule",
            "pause",
            "resume",
            "prune",
            "bench",
            "dashboard",
            "calendar",
        ]
    )
    actions = _subparsers(commands["schedule"])
    assert sorted(actions) == ["add", "remove", "set"]
    nested = [(f"schedule {name}", sub) for name, sub in actions.items()]
    calendar = _subparsers(commands["calendar"])
    assert sorted(calendar) == ["add", "list", "remove"]
    nested += [(f"calendar {name}", sub) for name, sub in calendar.items()]
    for name, sub in [("easyjob", parser), *commands.items(), *nested]:
        for action in sub._actions:
            if not action.option_strings or action.dest in ("help", "version"):
                continue
            assert action.help is not None and "EASYJOB_" in action.help, (name, action.dest)


def test_options_read_the_environment(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EASYJOB_DIALECT", "postgresql")
    assert "TIMESTAMP WITHOUT TIME ZONE" in cli("sql").out
    assert "DATETIME" in cli("sql", "--dialect", "sqlite").out  # the command line wins
    parser = build_parser("0")
    monkeypatch.setenv("EASYJOB_HISTORY_LIMIT", "7")
    monkeypatch.setenv("EASYJOB_JSON", "yes")
    monkeypatch.setenv("EASYJOB_LOG_FORMAT", "json")
    args = build_parser("0").parse_args(["history"])
    assert (args.limit, args.json, args.log_format) == (7, True, "json")
    assert parser.parse_args(["history"]).limit == 100  # read when the parser is built


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        ("45s", timedelta(seconds=45)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("2w1d2h3m4s", timedelta(weeks=2, days=1, hours=2, minutes=3, seconds=4)),
        ("0s", timedelta(0)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


def test_duration_errors_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"^invalid duration '12': use a whole number"):
        parse_duration("12")


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.44, "0.4s"), (59.94, "59.9s"), (100, "1m40s"), (3720, "1h02m"), (183600, "2d03h")],
)
def test_ages_for_people(value: float, shown: str) -> None:
    assert seconds(value) == shown
    assert seconds(-value) == "-" + shown


def test_durations_are_shown_as_they_are_written() -> None:
    assert duration(timedelta(days=30)) == "30d"
    assert duration(timedelta(days=1, hours=12)) == "1d12h"
    assert duration(timedelta(minutes=90)) == "1h30m"
    assert duration(timedelta(0)) == "0s"


def test_tables_align_columns_and_json_keeps_precision() -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    rows = [
        {"name": "a", "n": 5, "at": when, "gone": None},
        {"name": "longer", "n": 12345, "at": None, "gone": None},
    ]
    columns = [Column("name"), Column("n", right=True), Column("at"), Column("gone")]
    assert table(rows, columns).splitlines() == [
        "name        n  at                        gone",
        "a           5  2030-01-02T03:04:05.123Z  -",
        "longer  12345  -                         -",
    ]
    assert table([], columns, empty="no rows") == "no rows"
    assert json.loads(dumps({"rows": rows}))["rows"][0] == {
        "name": "a",
        "n": 5,
        "at": "2030-01-02T03:04:05.123456Z",
        "gone": None,
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cancel", "99999999999999999999"], "RUN_ID: must be at most 9223372036854775807"),
        (["cancel", "0"], "RUN_ID: must be a positive integer, got '0'"),
        (["cancel", "one"], "RUN_ID: must be a positive integer, got 'one'"),
        (["history", "--limit", "1" + "0" * 19], "--limit: must be at most 9223372036854775807"),
    ],
)
def test_whole_numbers_past_a_64_bit_integer_are_refused_by_name(
    cli: Cli, argv: list[str], message: str, tmp_path: object
) -> None:
    result = cli(*argv, "--db", f"sqlite:///{tmp_path}/none.db")
    assert result.code == 2 and message in result.err, result.err
