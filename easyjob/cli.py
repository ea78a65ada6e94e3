"""The ``easyjob`` command line.

Exit codes: 0 success; 1 an unexpected error; 2 bad usage or input (options, cron, job
modules); 3 the database cannot be used (unreachable, schema missing or of another
version); 130 stopped by a second signal. Every option also reads an ``EASYJOB_*``
environment variable, named in ``--help``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from easyjob.errors import ConfigError, DatabaseError

__all__ = ["main"]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_DATABASE = 0, 1, 2, 3
DEFAULT_DB = "sqlite:///easyjob.db"

log = logging.getLogger("easyjob.cli")


def _env(name: str, default: Any = None, kind: Callable[[str], Any] = str) -> Any:
    raw = os.environ.get(f"EASYJOB_{name}")
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise SystemExit(f"easyjob: invalid EASYJOB_{name}={raw!r}") from None


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", default=_env("DB", DEFAULT_DB),
        help=f"database URL [env EASYJOB_DB; default {DEFAULT_DB}]",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="easyjob", description="Cluster job scheduler.")
    parser.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"),
                        help="DEBUG, INFO, WARNING or ERROR [env EASYJOB_LOG_LEVEL]")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a node with the tasks of the given job modules")
    run.add_argument("jobs", nargs="+", metavar="MODULE_OR_FILE")
    _add_db(run)
    run.add_argument("--node-id", default=_env("NODE_ID"),
                     help="node id [env EASYJOB_NODE_ID; default host-pid-random]")
    run.add_argument("--strategy", default=_env("STRATEGY", "default"),
                     help="default, id_hash, least_count, weight or pkg.module:Class "
                          "[env EASYJOB_STRATEGY]")
    run.add_argument("--weight", type=int, default=_env("WEIGHT", 1, int),
                     help="share for the weight strategy [env EASYJOB_WEIGHT; default 1]")
    run.add_argument("--workers", type=int, default=_env("WORKERS", 8, int),
                     help="worker threads [env EASYJOB_WORKERS; default 8]")
    run.add_argument("--heartbeat", type=float, default=_env("HEARTBEAT", 2.0, float),
                     help="seconds between heartbeats [env EASYJOB_HEARTBEAT; default 2]")
    run.add_argument("--dead-after", type=int, default=_env("DEAD_AFTER", 3, int),
                     help="heartbeats missed before a node is dead [env EASYJOB_DEAD_AFTER; "
                          "default 3]")
    run.add_argument("--poll", type=float, default=_env("POLL", 1.0, float),
                     help="seconds between polls for due work [env EASYJOB_POLL; default 1]")
    run.add_argument("--shutdown-grace", type=float, default=_env("SHUTDOWN_GRACE", 30.0, float),
                     help="seconds running jobs get at shutdown [env EASYJOB_SHUTDOWN_GRACE]")

    init = sub.add_parser("init-db", help="create the easyjob tables (idempotent)")
    _add_db(init)

    sql = sub.add_parser("sql", help="print the DDL of the easyjob tables")
    sql.add_argument("--dialect", default=_env("DIALECT", "sqlite"),
                     help="sqlite, postgresql or mysql [env EASYJOB_DIALECT]")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with *argv* (default ``sys.argv[1:]``); returns the exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return EXIT_USAGE if exit_.code not in (0, None) else EXIT_OK
    _setup_logging(args.log_level)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "run": _run, "init-db": _init_db, "sql": _sql,
    }
    try:
        return commands[args.command](args)
    except ConfigError as err:
        print(f"easyjob: {err}", file=sys.stderr)
        return EXIT_USAGE
    except DatabaseError as err:
        print(f"easyjob: {err}", file=sys.stderr)
        return EXIT_DATABASE


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, str(level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


def _run(args: argparse.Namespace) -> int:
    from easyjob.core.config import NodeConfig, generate_node_id
    from easyjob.loading import load_jobs
    from easyjob.node.node import Node
    from easyjob.registry import default_registry
    from easyjob.store import Store

    config = NodeConfig(
        node_id=args.node_id or generate_node_id(), strategy=args.strategy, weight=args.weight,
        workers=args.workers, heartbeat=args.heartbeat, dead_after=args.dead_after,
        poll=args.poll, shutdown_grace=args.shutdown_grace,
    )
    load_jobs(args.jobs)
    if not len(default_registry):
        raise ConfigError(f"no @scheduled tasks found in {' '.join(args.jobs)}")
    default_registry.resolved()
    store = Store.open(args.db, create=True, pool_size=config.workers + 4)
    try:
        Node(store, config).run()
    finally:
        store.close()
    return EXIT_OK


def _init_db(args: argparse.Namespace) -> int:
    from easyjob.store import Store

    Store.open(args.db, create=True).close()
    print(f"easyjob tables ready in {args.db}")
    return EXIT_OK


def _sql(args: argparse.Namespace) -> int:
    from easyjob.store.ddl import render

    sys.stdout.write(render(args.dialect))
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
