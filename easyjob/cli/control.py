"""``easyjob trigger`` and ``easyjob schedule add|set|remove``: their options and commands
(and ``easyjob calendar``'s entry point, :mod:`easyjob.cli.calendar`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from easyjob.cli.output import dumps
from easyjob.core.inputs import parse_kwargs, parse_time
from easyjob.core.schedule import every_text

if TYPE_CHECKING:
    from easyjob.core.records import TaskRow

__all__ = [
    "COMMANDS",
    "add_cancel_parser",
    "add_schedule_parser",
    "add_trigger_parser",
    "cancel",
    "parse_kwargs",
    "parse_time",
    "schedule",
    "trigger",
]

EXIT_OK = 0
#: ``trigger``: the run was created, but no live node can run the task (see cli/__init__).
EXIT_NOT_RUNNABLE = 5


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def add_trigger_parser(sub: Any, command: Any, option: Any) -> None:
    """``trigger NAME [--at TIME] [--kwargs JSON] [--priority N]``."""
    parser = command(sub, "trigger", "run a task once, now or at a given time; prints the run id")
    parser.add_argument("name", metavar="NAME", help="task name")
    option(
        parser,
        "--at",
        env="TRIGGER_AT",
        kind=parse_time,
        metavar="TIME",
        help="when it may start, ISO 8601 (no zone: UTC); default now",
    )
    option(
        parser,
        "--kwargs",
        env="TRIGGER_KWARGS",
        kind=parse_kwargs,
        metavar="JSON",
        help="arguments for the function, a JSON object; only those the task accepts",
    )
    option(
        parser,
        "--priority",
        env="TRIGGER_PRIORITY",
        kind=_priority,
        metavar="N",
        help="the run's priority, -1000 to 1000 (default: its task's): a node with more runs "
        "due than it can start starts higher ones first",
    )


def _priority(text: str) -> int:
    """``--priority``: an integer in :data:`~easyjob.core.records.PRIORITY_RANGE`."""
    from easyjob.core.records import PRIORITY_RANGE

    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value not in PRIORITY_RANGE:
        raise ValueError(
            f"invalid priority {text!r}: an integer from {PRIORITY_RANGE.start} to "
            f"{PRIORITY_RANGE.stop - 1}"
        )
    return value


def add_cancel_parser(sub: Any, command: Any, positive_int: Any) -> None:
    """``cancel RUN_ID``."""
    parser = command(
        sub, "cancel", "cancel a run: a running one is stopped, a waiting one never starts"
    )

    def run_id(text: str) -> int:
        try:
            return int(positive_int(text))
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parser.add_argument("run_id", metavar="RUN_ID", type=run_id, help="the run's id")


def add_schedule_parser(sub: Any, command: Any, option: Any, positive_int: Any) -> None:
    """``schedule add|set|remove NAME ...``."""
    what = "add, change or remove a schedule while nodes run"
    parser = sub.add_parser("schedule", help=what, description=what)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = command(actions, "add", "add a task calling a @runnable function of the nodes' code")
    change = command(actions, "set", "give a task a new cron or interval from now on")
    remove = command(actions, "remove", "remove a task added at run time")
    for each in (add, change, remove):
        each.add_argument("name", metavar="NAME", help="task name")
    from easyjob.cli.options import _flag_default

    for each in (add, change):
        each.add_argument(
            "--force",
            action="store_true",
            default=_flag_default("EASYJOB_SCHEDULE_FORCE"),
            help="even if no live node can run the function (ahead of a deploy), instead of "
            "exit code 6 [env EASYJOB_SCHEDULE_FORCE=1]",
        )
    option(
        add,
        "--func",
        env="SCHEDULE_FUNC",
        required=True,
        metavar="MODULE:QUALNAME",
        help="the function, allowed by the nodes' code with @runnable",
    )
    for each in (add, change):
        option(each, "--cron", env="SCHEDULE_CRON", metavar="EXPR", help="a cron expression")
        option(
            each,
            "--every",
            env="SCHEDULE_EVERY",
            metavar="INTERVAL",
            help="an interval: 45s, 90m, 1h30m, 250ms",
        )
    option(add, "--tz", env="SCHEDULE_TZ", default="UTC", metavar="ZONE", help="IANA time zone")
    option(change, "--tz", env="SCHEDULE_TZ", metavar="ZONE", help="IANA zone; default: kept")
    option(
        add,
        "--start",
        env="SCHEDULE_START",
        kind=parse_time,
        metavar="TIME",
        help="no fire before (ISO 8601)",
    )
    option(
        add,
        "--end",
        env="SCHEDULE_END",
        kind=parse_time,
        metavar="TIME",
        help="no fire after (ISO 8601)",
    )
    option(
        add,
        "--max-runs",
        env="SCHEDULE_MAX_RUNS",
        kind=positive_int,
        metavar="N",
        help="FINISHED after this many fires",
    )
    option(
        add,
        "--accepts",
        env="SCHEDULE_ACCEPTS",
        kind=_names,
        metavar="NAMES",
        help="trigger arguments it accepts, comma-separated",
    )


def trigger(args: argparse.Namespace) -> int:
    from easyjob import control
    from easyjob.cli.stores import existing_store
    from easyjob.views import live_code

    with existing_store(args.db) as store:
        run_id = control.trigger(
            store, args.name, at=args.at, kwargs=args.kwargs, priority=args.priority
        )
        runnable = live_code(store).runs(store.tasks.get(args.name))
    document = {"task": args.name, "run_id": run_id, "runnable": runnable}
    sys.stdout.write(
        (dumps(document) if args.json else f"triggered {args.name}: run {run_id}") + "\n"
    )
    if runnable:
        return EXIT_OK
    sys.stderr.write(
        f"easyjob: warning: no live node can run task {args.name!r}: run {run_id} waits "
        "PENDING until a node whose code declares it (or allows its function with "
        "@runnable) starts (see `easyjob tasks`, in_code)\n"
    )
    return EXIT_NOT_RUNNABLE


def schedule(args: argparse.Namespace) -> int:
    from easyjob import control
    from easyjob.cli.stores import existing_store

    with existing_store(args.db) as store:
        if args.action == "add":
            row = control.add_schedule(
                store,
                args.name,
                args.func,
                cron=args.cron,
                every=args.every,
                tz=args.tz,
                start=args.start,
                end=args.end,
                max_runs=args.max_runs,
                accepts=args.accepts or (),
                force=args.force,
            )
        elif args.action == "set":
            row = control.set_schedule(
                store, args.name, cron=args.cron, every=args.every, tz=args.tz, force=args.force
            )
        else:
            row = control.remove_schedule(store, args.name)
    document = _described(row)
    sys.stdout.write((dumps(document) if args.json else _line(args.action, document)) + "\n")
    return EXIT_OK


def _described(row: TaskRow) -> dict[str, Any]:
    from easyjob.views import schedule_text

    every = None
    if row.every_ms is not None:
        every = every_text(timedelta(milliseconds=row.every_ms))
    return {
        "task": row.name,
        "func": row.func,
        "origin": row.origin,
        "cron_expr": row.cron_expr,
        "every": every,
        "tz": row.tz,
        "status": row.status.value,
        "schedule": schedule_text(row),
        "next_start_time": row.next_start_time,
    }


def _line(action: str, doc: dict[str, Any]) -> str:
    done = {"add": "added", "set": "changed", "remove": "removed"}[action]
    what = doc["schedule"]
    nxt = doc["next_start_time"]
    when = nxt.isoformat().replace("+00:00", "Z") if nxt is not None else "none"
    return f"{done} {doc['task']} ({doc['func']}): {what}, {doc['status']}, next fire {when}"


#: ``cancel``: the run had ended already; nothing was changed (see cli/__init__).
EXIT_ENDED = 7


def cancel(args: argparse.Namespace) -> int:
    from easyjob import control
    from easyjob.cli.stores import existing_store
    from easyjob.views import cancel_text

    with existing_store(args.db) as store:
        found = control.cancel(store, args.run_id)
    document = {
        "run_id": found.run_id,
        "was": found.was.value,
        "node_id": found.node_id,
        "cancelled": found.cancelled,
    }
    text = cancel_text(found)
    sys.stdout.write((dumps(document) if args.json else text) + "\n")
    return EXIT_OK if found.cancelled else EXIT_ENDED


def calendar(args: argparse.Namespace) -> int:
    from easyjob.cli.calendar import calendar as run

    return run(args)


#: The commands defined here, by name (see :data:`easyjob.cli.commands.COMMANDS`).
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "trigger": trigger,
    "cancel": cancel,
    "schedule": schedule,
    "calendar": calendar,
}
