"""The command line's options. Each one also reads an ``EASYJOB_*`` environment variable,
named in ``--help``; a value given on the command line wins over the environment.

A bad value names the option, the value and, when it came from the environment, the
variable: ``argument --limit: must be a positive integer, got '0' (from EASYJOB_HISTORY_LIMIT)``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from easyjob.cli.calendar import add_calendar_parser
from easyjob.cli.control import add_cancel_parser, add_schedule_parser, add_trigger_parser
from easyjob.core.config import NodeConfig
from easyjob.core.settings import (
    default_text,
    env_name,
    flag_name,
    non_negative_int,
    number,
    one_of,
    parse_duration,
    positive_int,
    settings,
)
from easyjob.core.states import Overlap, RunStatus, TaskStatus
from easyjob.errors import ConfigError
from easyjob.logs import LEVELS, LOG_FORMATS


def parse_address(text: str) -> tuple[str, int]:
    """:func:`easyjob.observe.http.parse_address`, imported when an address is given (the
    HTTP server's modules are not imported for every command)."""
    from easyjob.observe.http import parse_address as parse

    return parse(text)


__all__ = ["DEFAULT_DB", "build_parser", "parse_duration", "parse_since"]

DEFAULT_DB = "sqlite:///easyjob.db"

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def parse_since(text: str) -> timedelta | datetime:
    """``--since``: a duration back from database time (``1h``, ``30m``, ``1d12h``) or an
    ISO 8601 time (``2030-01-02T03:00:00Z``; without a zone, UTC)."""
    try:
        return parse_duration(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"invalid time {text!r}: give a duration back from now (30m, 12h, 1d12h) or an "
            "ISO 8601 time (2030-01-02T03:00:00Z)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _flag_default(env: str) -> bool:
    raw = os.environ.get(env, "")
    if raw.strip().lower() in ("", *_FALSE):
        return False
    if raw.strip().lower() in _TRUE:
        return True
    raise ConfigError(f"invalid {env}={raw!r}: use 1, true, yes, on or 0, false, no, off")


def option(
    parser: argparse._ActionsContainer,
    *flags: str,
    env: str,
    help: str,
    default: str | None = None,
    kind: Callable[[str], Any] | None = None,
    required: bool = False,
    metavar: str | None = None,
    inherited: bool = False,
    shown: str | None = None,
) -> None:
    """Add an option whose default is ``$EASYJOB_<env>``, else *default*. Values from either
    place go through *kind* (a ValueError becomes a usage error naming the variable).
    An *inherited* option only overrides, when given, the same option of the parent parser.
    *shown* words, in ``--help``, a default that is not given here (None leaves it out)."""
    var = f"EASYJOB_{env}"
    raw = None if inherited else os.environ.get(var) or None
    value = raw if raw is not None else default

    def convert(text: str) -> Any:
        try:
            return kind(text) if kind is not None else text
        except ValueError as err:
            origin = f" (from {var})" if text is raw else ""
            raise argparse.ArgumentTypeError(f"{err}{origin}") from None

    words = default if default is not None else shown
    label = f"env {var}" + (f"; default {words}" if words is not None else "")
    parser.add_argument(
        *flags,
        default=argparse.SUPPRESS if inherited else value,
        type=convert,
        required=required and value is None,
        metavar=metavar,
        help=f"{help} [{label}]",
    )


def _logging(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # Accepted before and after the command name; the top-level option holds the default.
    group = parser if top else parser.add_argument_group("logging (also before the command)")
    option(
        group,
        "--log-level",
        env="LOG_LEVEL",
        default="INFO",
        kind=one_of(LEVELS, upper=True),
        metavar="LEVEL",
        help="DEBUG, INFO, WARNING or ERROR",
        inherited=not top,
    )
    option(
        group,
        "--log-format",
        env="LOG_FORMAT",
        default="text",
        kind=one_of(LOG_FORMATS),
        metavar="FORMAT",
        help="text or json (one JSON object per line)",
        inherited=not top,
    )


def _db(parser: argparse.ArgumentParser, *, json: bool = True) -> None:
    option(parser, "--db", env="DB", default=DEFAULT_DB, metavar="URL", help="database URL")
    if json:
        parser.add_argument(
            "--json",
            action="store_true",
            default=_flag_default("EASYJOB_JSON"),
            help="print one JSON document instead of tables [env EASYJOB_JSON=1]",
        )


def _command(
    sub: Any, name: str, help: str, *, db: bool = True, json: bool = True
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
    if db:
        _db(parser, json=json)
    _logging(parser, top=False)
    return parser


def _task_filter(parser: argparse.ArgumentParser, env: str, what: str) -> None:
    option(
        parser,
        "--task",
        env=f"{env}_TASK",
        metavar="NAME",
        help=f"only {what} NAME, or whose name matches NAME as a pattern (* any text, ? one "
        "character)",
    )


def _bench_options(bench: argparse.ArgumentParser) -> None:
    for flag, env, default, kind, help in (
        ("--nodes", "BENCH_NODES", "4", positive_int, "node processes"),
        ("--tasks", "BENCH_TASKS", "100", positive_int, "no-op tasks (the first trial's)"),
        ("--duration", "BENCH_DURATION", "30", number, "seconds of fires measured per trial"),
        ("--cron", "BENCH_CRON", "* * * * * *", None, "every task's schedule"),
        (
            "--workers",
            "BENCH_WORKERS",
            None,
            positive_int,
            "tuned rows: worker threads per node (any tuning flag adds tuned rows beside the "
            "default-settings rows)",
        ),
        ("--poll", "BENCH_POLL", None, number, "tuned rows: nodes' poll interval, seconds"),
        (
            "--heartbeat",
            "BENCH_HEARTBEAT",
            None,
            number,
            "tuned rows: nodes' heartbeat interval, seconds",
        ),
        (
            "--lateness-bound-ms",
            "BENCH_LATENESS_BOUND_MS",
            "1000",
            number,
            "--find-max stops once lateness p99 passes this",
        ),
        ("--max-tasks", "BENCH_MAX_TASKS", "1000000", positive_int, "--find-max stops here"),
        ("--workdir", "BENCH_WORKDIR", "easyjob-bench", None, "node logs and counters go here"),
        ("--strategy", "BENCH_STRATEGY", "default", None, "the nodes' claim strategy"),
        (
            "--claim-mode",
            "BENCH_CLAIM_MODE",
            "optimistic",
            None,
            "the nodes' claim mode: optimistic or skip_locked",
        ),
        (
            "--overlap",
            "BENCH_OVERLAP",
            "serial",
            one_of(tuple(Overlap)),
            "every task's overlap policy: serial (the scheduler's default), skip or allow",
        ),
        (
            "--idle-tasks",
            "BENCH_IDLE_TASKS",
            "0",
            non_negative_int,
            "tasks registered besides, that never fire in the trial (polling cost)",
        ),
        (
            "--db-pid",
            "BENCH_DB_PID",
            None,
            positive_int,
            "the database server's process, whose CPU (with its children's) is read from /proc "
            "over each window; default: the process listening on the URL's loopback port",
        ),
    ):
        option(bench, flag, env=env, default=default, kind=kind, help=help, metavar="X")
    bench.add_argument(
        "--find-max",
        action="store_true",
        default=_flag_default("EASYJOB_BENCH_FIND_MAX"),
        help="double the tasks per trial until saturation [env EASYJOB_BENCH_FIND_MAX=1]",
    )
    bench.add_argument(
        "--http",
        action="store_true",
        default=_flag_default("EASYJOB_BENCH_HTTP"),
        help="nodes serve metrics (run --http) and are scraped every second "
        "[env EASYJOB_BENCH_HTTP=1]",
    )
    bench.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        default=not _flag_default("EASYJOB_BENCH_NO_PROBE"),
        help="skip the database's own claim-pattern rate [env EASYJOB_BENCH_NO_PROBE=1]",
    )


def _checked(
    name: str, parse: Callable[[str], Any], check: Callable[[str, Any], None]
) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        value = parse(text)
        check(name, value)  # a ConfigError is a ValueError: a usage error naming the option
        return value

    return convert


def _run_options(run: argparse.ArgumentParser) -> None:
    """The node's settings are generated from :class:`NodeConfig`; an option left out (on
    the command line and in the environment) is None, and the config's default holds."""
    run.add_argument(
        "jobs",
        nargs="+",
        metavar="MODULE_OR_FILE",
        help="job modules (dotted names) or .py files to load",
    )
    for field, found in settings(NodeConfig):
        option(
            run,
            flag_name(field.name),
            env=env_name(field.name).removeprefix("EASYJOB_"),
            kind=_checked(field.name, found.parse, found.check),
            metavar=found.metavar,
            help=found.help,
            shown=default_text(field, found),
        )
    option(
        run,
        "--stats-file",
        metavar="PATH",
        env="STATS_FILE",
        help="at shutdown, write this node's counters (runs, claims, statements, CPU) as JSON",
    )
    option(
        run,
        "--http",
        metavar="HOST:PORT",
        env="HTTP",
        kind=parse_address,
        help="serve /metrics, /healthz and /readyz here (a bare PORT binds 127.0.0.1); "
        "off by default",
    )
    _schema_wait(run, "with --http: ")


def _schema_wait(parser: argparse.ArgumentParser, when: str) -> None:
    option(
        parser,
        "--schema-wait",
        env="SCHEMA_WAIT",
        default="5m",
        kind=parse_duration,
        metavar="DURATION",
        help=f"{when}at start, wait this long for the database, its easyjob tables and an "
        "`easyjob upgrade-db` (answering /healthz 200, /readyz 503), then exit 3; 0s: do not "
        "wait",
    )


def build_parser(version: str) -> argparse.ArgumentParser:
    """The whole ``easyjob`` parser. Raises ConfigError for a bad ``EASYJOB_JSON``."""
    parser = argparse.ArgumentParser(
        prog="easyjob",
        description="Scheduled jobs on a cluster of equal nodes sharing one SQL database.",
        epilog="Exit codes: 0 ok, 1 unexpected error, 2 bad usage or input, 3 database "
        "unusable, 4 no such task, 5 triggered but no live node registered the task, "
        "130 interrupted. See docs/cli.md.",
    )
    parser.add_argument("--version", action="version", version=f"easyjob {version}")
    _logging(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _run_options(
        _command(sub, "run", "run a node with the tasks of the given job modules", json=False)
    )
    _command(sub, "init-db", "create the easyjob tables (idempotent)", json=False)
    _command(
        sub,
        "upgrade-db",
        "upgrade the easyjob tables in place to this release's schema, keeping every row",
        json=False,
    )
    sql = _command(sub, "sql", "print the DDL of the easyjob tables", db=False)
    option(sql, "--dialect", env="DIALECT", default="sqlite", help="sqlite, postgresql or mysql")
    option(
        sql,
        "--upgrade-from",
        env="SQL_UPGRADE_FROM",
        kind=positive_int,
        metavar="VERSION",
        help="print instead the SQL that upgrades tables of this schema version (the "
        "schema_version row of easy_job_meta) to this release's, for a DBA",
    )

    status = _command(sub, "status", "a summary: counts, live nodes, late and failing tasks")
    option(
        status,
        "--failures",
        env="STATUS_FAILURES",
        default="10",
        kind=positive_int,
        metavar="N",
        help="how many recent failed, missed or abandoned runs to show",
    )
    option(
        status,
        "--top",
        env="STATUS_TOP",
        default="10",
        kind=positive_int,
        metavar="N",
        help="how many of the most late and of the most failing tasks to show",
    )
    option(
        status,
        "--window",
        env="STATUS_WINDOW",
        default="1h",
        kind=parse_duration,
        metavar="DURATION",
        help="runs ended this long ago or less are counted as recent (ended, failing)",
    )
    tasks = _command(sub, "tasks", "tasks with their schedule, next fire and lag, by name")
    _task_filter(tasks, "TASKS", "the task named")
    option(
        tasks,
        "--status",
        env="TASKS_STATUS",
        metavar="STATUS",
        kind=one_of(tuple(TaskStatus), upper=True),
        help=f"only tasks in this status: {', '.join(TaskStatus)}",
    )
    option(
        tasks,
        "--limit",
        env="TASKS_LIMIT",
        default="1000",
        kind=positive_int,
        metavar="N",
        help="at most N tasks (the first by name); the JSON document's total counts them all",
    )
    _command(sub, "nodes", "every node with its heartbeat age in database time")

    history = _command(
        sub, "history", "runs that started or ended, newest fire first (--upcoming: planned)"
    )
    history.add_argument(
        "--upcoming",
        action="store_true",
        default=_flag_default("EASYJOB_HISTORY_UPCOMING"),
        help="the planned runs instead (not started: written ahead, due or held), soonest "
        "first [env EASYJOB_HISTORY_UPCOMING=1]",
    )
    _task_filter(history, "HISTORY", "runs of the task named")
    option(
        history,
        "--status",
        env="HISTORY_STATUS",
        metavar="STATUS",
        kind=one_of(tuple(RunStatus), upper=True),
        help=f"only runs in this status: {', '.join(RunStatus)}",
    )
    option(
        history,
        "--since",
        env="HISTORY_SINCE",
        kind=parse_since,
        metavar="WHEN",
        help="only runs fired at or after WHEN: a duration back from database time (1h, 30m) "
        "or an ISO 8601 time",
    )
    option(
        history,
        "--node",
        env="HISTORY_NODE",
        metavar="NODE_ID",
        help="only runs this node holds or ran",
    )
    option(
        history,
        "--limit",
        env="HISTORY_LIMIT",
        default="100",
        kind=positive_int,
        metavar="N",
        help="at most N runs",
    )

    add_trigger_parser(sub, _command, option)
    add_cancel_parser(sub, _command, positive_int)
    add_schedule_parser(sub, _command, option, positive_int)
    add_calendar_parser(sub, _command, option)
    for name, what in (
        ("pause", "stop making and starting fires of a task"),
        ("resume", "make fires of a paused task again"),
    ):
        _command(sub, name, what).add_argument("name", metavar="NAME", help="task name")

    prune = _command(sub, "prune", "delete finished runs that ended long enough ago")
    option(
        prune,
        "--older-than",
        env="PRUNE_OLDER_THAN",
        kind=parse_duration,
        required=True,
        metavar="DURATION",
        help="age of the runs to delete, e.g. 30d, 12h, 90m, 1d12h",
    )
    option(
        prune,
        "--batch",
        env="PRUNE_BATCH",
        default="1000",
        kind=positive_int,
        metavar="N",
        help="runs deleted per transaction",
    )
    _bench_options(_command(sub, "bench", "measure throughput and lateness with real nodes"))
    dashboard = _command(
        sub,
        "dashboard",
        "serve a web dashboard of the cluster: read-only, or with actions behind a login",
        json=False,
    )
    option(
        dashboard,
        "--http",
        env="DASHBOARD_HTTP",
        default="127.0.0.1:8080",
        kind=parse_address,
        metavar="HOST:PORT",
        help="where to serve it (a bare PORT binds 127.0.0.1)",
    )
    option(
        dashboard,
        "--refresh",
        env="DASHBOARD_REFRESH",
        default="10",
        kind=non_negative_int,
        metavar="SECONDS",
        help="pages reload themselves this often; 0: never",
    )
    option(
        dashboard,
        "--token-file",
        env="DASHBOARD_TOKEN_FILE",
        metavar="FILE",
        help="turn the actions on: a file holding the login token (16 characters or more)",
    )
    option(
        dashboard,
        "--users-file",
        env="DASHBOARD_USERS_FILE",
        metavar="FILE",
        help="turn the actions on: lines NAME:HASH (python -m easyjob.web.auth makes a HASH)",
    )
    option(
        dashboard,
        "--session",
        env="DASHBOARD_SESSION",
        default="1800",
        kind=positive_int,
        metavar="SECONDS",
        help="a login lasts this long (at least 60)",
    )
    option(
        dashboard,
        "--secret",
        env="DASHBOARD_SECRET",
        metavar="TEXT",
        help="signs the session cookies; default random per process (give every dashboard "
        "process behind one address the same)",
    )
    _schema_wait(dashboard, "")
    return parser
