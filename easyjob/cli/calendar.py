"""``easyjob calendar add|remove|list``: calendars of excluded days (docs/cli.md).

Days are ``YYYY-MM-DD`` or ``YYYY-MM-DD..YYYY-MM-DD`` (inclusive), read as dates of the
time zone of each task that excludes the calendar. A bad day or a reversed range is a usage
error (exit 2) and writes nothing; an unknown calendar on ``remove`` or ``list NAME`` exits
4 (see :mod:`easyjob.cli`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from easyjob.cli.output import Column, dumps, table

__all__ = ["CALENDAR_COLUMNS", "add_calendar_parser", "calendar"]

EXIT_OK = 0

CALENDAR_COLUMNS = (
    Column("name"),
    Column("first_day"),
    Column("last_day"),
    Column("days", right=True),
    Column("note"),
    Column("create_time"),
)


def _days(text: str) -> Any:
    from easyjob.core.calendars import parse_days

    try:
        return parse_days(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_calendar_parser(sub: Any, command: Any, option: Any) -> None:
    """``calendar add NAME DAY[..DAY] [--note TEXT]``, ``calendar remove NAME [DAY[..DAY]]``,
    ``calendar list [NAME]``."""
    what = "calendars of excluded days: tasks declared with exclude=NAME skip fires on them"
    parser = sub.add_parser("calendar", help=what, description=what)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = command(actions, "add", "exclude a day or a range of days in a calendar")
    remove = command(actions, "remove", "remove a calendar, or some of its days")
    listed = command(actions, "list", "the days each calendar excludes")
    for each in (add, remove):
        each.add_argument("name", metavar="NAME", help="calendar name")
    add.add_argument("days", metavar="DAY[..DAY]", type=_days, help="e.g. 2030-12-24..2030-12-26")
    remove.add_argument(
        "days",
        metavar="DAY[..DAY]",
        type=_days,
        nargs="?",
        help="only these days (default: the whole calendar)",
    )
    option(add, "--note", env="CALENDAR_NOTE", metavar="TEXT", help="why these days")
    listed.add_argument("name", metavar="NAME", nargs="?", help="only this calendar")


def calendar(args: argparse.Namespace) -> int:
    """Run ``calendar add|remove|list``."""
    from easyjob import control
    from easyjob.cli.stores import existing_store

    with existing_store(args.db) as store:
        if args.action == "add":
            first, last = args.days
            row = control.add_calendar_days(store, args.name, first, last, note=args.note)
            document: dict[str, Any] = {"calendar": _row(row)}
            text = f"calendar {row.name}: excludes {_span(row.first_day, row.last_day)}"
        elif args.action == "remove":
            removed = control.remove_calendar_days(store, args.name, args.days)
            document = {"calendar": args.name, "days_removed": removed}
            what = "removed" if args.days is None else f"removed {removed} day(s) from"
            text = f"{what} calendar {args.name}"
        else:
            rows = [_row(day) for day in control.list_calendars(store, args.name)]
            document = {"calendars": rows}
            text = table(rows, CALENDAR_COLUMNS, empty="no calendars")
    sys.stdout.write((dumps(document) if args.json else text) + "\n")
    return EXIT_OK


def _row(day: Any) -> dict[str, Any]:
    return {
        "name": day.name,
        "first_day": day.first_day.isoformat(),
        "last_day": day.last_day.isoformat(),
        "days": day.days,
        "note": day.note,
        "create_time": day.create_time,
    }


def _span(first: Any, last: Any) -> str:
    return first.isoformat() if first == last else f"{first.isoformat()}..{last.isoformat()}"
