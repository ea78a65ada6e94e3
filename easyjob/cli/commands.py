"""The commands behind ``easyjob COMMAND``: each takes the parsed options, returns an exit code.

Only ``run`` and ``init-db`` create the tables; every other command opens an existing
schema and stops with SchemaMissingError (exit code 3) when there is none.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from easyjob.cli import control, views
from easyjob.cli.output import Column, dumps, duration, iso, table
from easyjob.cli.stores import existing_store
from easyjob.cli.waiting import WAITED_FOR, Switch, wait_for_schema, waiting_app
from easyjob.core.states import NodeStatus, RunStatus, TaskStatus
from easyjob.errors import ConfigError
from easyjob.store import HELD_DUE_AFTER, Store, render_ddl, render_upgrade, upgrade_schema
from easyjob.store.contract import is_pattern
from easyjob.views import read

__all__ = ["COMMANDS"]

EXIT_OK = 0


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _show(args: argparse.Namespace, document: dict[str, Any], human: Callable[[], str]) -> int:
    _out(dumps(document) if args.json else human())
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    from easyjob.core.config import NodeConfig
    from easyjob.core.settings import configure
    from easyjob.loading import load_jobs
    from easyjob.node.node import Node
    from easyjob.registry import default_registry

    config = configure(NodeConfig, vars(args))
    load_jobs(args.jobs)
    if not len(default_registry):
        raise ConfigError(f"no @scheduled tasks found in {' '.join(args.jobs)}")
    default_registry.resolved()

    def open_store() -> Store:
        return Store.open(
            args.db,
            create=True,
            pool_size=config.workers + 4,
            # a transaction paused longer than this loses its session and so its row locks
            # before peers would judge the node dead and try to take its runs
            stuck_transaction_s=max(1.0, config.dead_threshold.total_seconds() / 2),
        )

    store, http = _open_waiting(open_store, args) if args.http else (open_store(), None)
    try:
        node = Node(store, config, http=http)
        node.run()
        if args.stats_file:
            Path(args.stats_file).write_text(json.dumps(node.stats()), encoding="utf-8")
    finally:
        store.close()
    return EXIT_OK


def _open_waiting(
    open_store: Callable[[], Store], args: argparse.Namespace
) -> tuple[Store, tuple[str, int]]:
    """``run --http``: the store once the database and its tables are there (see
    :mod:`easyjob.cli.waiting`), answering /healthz and /readyz on the node's address
    meanwhile, and that address as bound: the node binds it again once the store is open,
    the same port when port 0 asked for any (a scraper that found the port keeps it)."""
    from easyjob.observe.http import HttpServer

    reason = ["starting"]
    server = HttpServer(args.http, waiting_app(lambda: reason[0]), name="waiting")
    server.start()
    try:
        store = wait_for_schema(
            open_store, args.schema_wait.total_seconds(), on_wait=lambda r: reason.__setitem__(0, r)
        )
        return store, server.address
    finally:
        server.close()


def init_db(args: argparse.Namespace) -> int:
    store = Store.open(args.db, create=True)
    try:
        _out(f"easyjob tables ready in {store.url}")
    finally:
        store.close()
    return EXIT_OK


def upgrade_db(args: argparse.Namespace) -> int:
    before, after = upgrade_schema(args.db)
    if before == after:
        _out(f"easyjob tables are schema version {after} already: nothing to upgrade")
    else:
        _out(f"easyjob tables upgraded from schema version {before} to {after}")
    return EXIT_OK


def sql(args: argparse.Namespace) -> int:
    if args.upgrade_from is not None:
        sys.stdout.write(render_upgrade(args.dialect, args.upgrade_from))
    else:
        sys.stdout.write(render_ddl(args.dialect))
    return EXIT_OK


#: ``status`` counts a task as late once its oldest unstarted fire is this much overdue.
LATE_AFTER = timedelta(seconds=2)


def status(args: argparse.Namespace) -> int:
    with existing_store(args.db) as store:
        summary = store.summary.summary(window=args.window, late_after=LATE_AFTER, top=args.top)
        _, nodes = store.nodes.all()
        failures = read.failures(store, limit=args.failures)
        held_due = store.progress.held_due()
    # ages in the summary's database time, so that they agree with its db_time and lags
    shown = [
        replace(node, age=summary.db_time - node.heartbeat_at)
        for node in nodes
        if node.status != NodeStatus.STOPPED
    ]
    held = {
        node: sum(by.get(str(s), 0) for s in (RunStatus.CLAIMED, RunStatus.RUNNING))
        for node, by in summary.by_node.items()
    }
    node_rows = views.node_rows(shown, held)
    for row in node_rows:
        ended = summary.by_node.get(row["node_id"], {})
        row["succeeded"] = ended.get(str(RunStatus.SUCCESS), 0)
        row["failed"] = ended.get(str(RunStatus.FAILED), 0)
        row["held_due"] = held_due.get(row["node_id"], 0)
    late, failing = views.records(summary.late), views.records(summary.failing)
    counts = {
        "tasks": summary.tasks,
        "runs": summary.runs,
        "ended": summary.ended,
        "nodes": summary.nodes,
    }
    document = {
        "db_time": summary.db_time,
        "window_s": args.window.total_seconds(),
        "counts": counts,
        "nodes": node_rows,
        "late": {"total": summary.late_total, "tasks": late},
        "failing": failing,
        "failures": failures,
    }

    def human() -> str:
        window = duration(args.window)
        stopped = summary.nodes.get(str(NodeStatus.STOPPED), 0)
        hidden = f" ({stopped} STOPPED not shown: easyjob nodes)" if stopped else ""
        tasks = sum(summary.tasks.values())
        runs = dict(summary.runs)
        if "PENDING" in runs:
            runs["PENDING due"] = runs.pop("PENDING")
        if "PENDING_LATER" in runs:
            runs["PENDING later"] = runs.pop("PENDING_LATER")
        order = ("PENDING due", "PENDING later", "CLAIMED", "RUNNING")
        unhealthy = "".join(_unhealthy(row) for row in node_rows)
        sections = [
            f"database time {iso(summary.db_time, ms=True)}{unhealthy}",
            _section(
                f"nodes: {views.counted(summary.nodes, tuple(NodeStatus))}{hidden}",
                node_rows,
                views.STATUS_NODE_COLUMNS,
            ),
            f"tasks: {tasks} ({views.counted(summary.tasks, tuple(TaskStatus))}), "
            f"{summary.late_total} late\n"
            f"runs: {views.counted(runs, order)}; ended in the last {window}: "
            f"{views.counted(summary.ended, tuple(RunStatus))}",
            _section(
                f"late tasks: {len(late)} of {summary.late_total}, most late first",
                late,
                views.LATE_COLUMNS,
            ),
            _section(
                f"failing tasks: most FAILED or ABANDONED runs in the last {window} first",
                failing,
                views.FAILING_COLUMNS,
            ),
            _section("recent failures", failures, views.FAILURE_COLUMNS),
        ]
        return "\n\n".join(sections)

    return _show(args, document, human)


def _section(title: str, rows: list[views.Row], columns: tuple[Column, ...]) -> str:
    return f"{title}\n{table(rows, columns)}"


def tasks(args: argparse.Namespace) -> int:
    with existing_store(args.db) as store:
        total, found = store.views.find_tasks(task=args.task, status=args.status, limit=args.limit)
        if args.task is not None and not is_pattern(args.task) and not total:
            store.tasks.get(args.task)  # an unknown name is an error, not an empty list
        db_now, rows = read.tasks(store, found)
    document = {"db_time": db_now, "total": total, "tasks": rows}
    if len(rows) < total:
        sys.stderr.write(
            f"easyjob: showing {len(rows)} of {total} tasks (the first by name): narrow with "
            "--task or --status, or raise --limit\n"
        )
    return _show(args, document, lambda: table(rows, views.TASK_COLUMNS, empty="no tasks"))


def nodes(args: argparse.Namespace) -> int:
    with existing_store(args.db) as store:
        db_now, rows = read.nodes(store)
    document = {"db_time": db_now, "nodes": rows}
    return _show(args, document, lambda: table(rows, views.NODE_COLUMNS, empty="no nodes"))


def history(args: argparse.Namespace) -> int:
    status = RunStatus(args.status) if args.status else None
    with existing_store(args.db) as store:
        if args.task is not None and not is_pattern(args.task):
            store.tasks.get(args.task)  # an unknown name is an error, not an empty history
        since = args.since
        if isinstance(since, timedelta):
            since = store.now() - since
        rows = read.runs(
            store,
            task=args.task,
            status=status,
            node=args.node,
            since=since,
            limit=args.limit,
            upcoming=args.upcoming,
        )
    document = {"runs": rows}
    return _show(args, document, lambda: table(rows, views.RUN_COLUMNS, empty="no runs"))


def _set_status(status: TaskStatus) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        with existing_store(args.db) as store:
            task = store.tasks.set_status(args.name, status)
        document = {"task": task.name, "status": task.status.value}
        return _show(args, document, lambda: f"{task.name} is {task.status.value}")

    return command


def prune(args: argparse.Namespace) -> int:
    shown: list[int] = [0]

    def progress(total: int) -> None:
        if total != shown[0]:
            shown[0] = total
            sys.stderr.write(f"pruned {_runs(total)}...\n")
            sys.stderr.flush()

    with existing_store(args.db) as store:
        deleted = store.history.prune(args.older_than, batch=args.batch, progress=progress)
    document = {"deleted": deleted, "older_than_s": args.older_than.total_seconds()}
    ago = duration(args.older_than)
    return _show(args, document, lambda: f"pruned {_runs(deleted)} that ended more than {ago} ago")


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


def bench(args: argparse.Namespace) -> int:
    """Trials of real nodes against ``--db``; with ``--find-max``, tasks double per trial
    until lateness p99 passes the bound or a fire is missed or doubled."""
    from easyjob.bench.probe import probe_claim_rate
    from easyjob.bench.report import probe_share, render
    from easyjob.bench.trial import TrialConfig, run_trial
    from easyjob.core.config import NodeConfig

    def progress(text: str) -> None:
        sys.stderr.write(f"bench: {text}\n")

    NodeConfig(strategy=args.strategy, claim_mode=args.claim_mode)  # bad input fails here

    workdir = Path(args.workdir)
    config = TrialConfig(
        db=args.db,
        nodes=args.nodes,
        tasks=args.tasks,
        duration=args.duration,
        cron=args.cron,
        workers=args.workers,
        poll=args.poll,
        heartbeat=args.heartbeat,
        strategy=args.strategy,
        claim_mode=args.claim_mode,
        overlap=args.overlap,
        idle_tasks=args.idle_tasks,
        http=args.http,
        db_pid=args.db_pid,
    )
    trials = []
    while True:
        figures = None
        # default settings first, then the tuned ones, if any flag changes a default
        for trial in [config.defaults()] + ([config] if config.settings == "tuned" else []):
            progress(
                f"trial: {trial.nodes} nodes, {trial.tasks} tasks on {trial.cron!r}, "
                f"{trial.settings} settings"
            )
            figures = run_trial(trial, workdir, progress)
            trials.append(figures)
        assert figures is not None
        saturated = (
            figures.lateness_ms["p99"] > args.lateness_bound_ms
            or figures.missed > 0
            or figures.duplicates > 0
        )
        if not args.find_max or saturated or config.tasks >= args.max_tasks:
            break
        config = replace(config, tasks=config.tasks * 2)
    probe = None
    if args.probe:
        progress(f"probing the database's claim-pattern rate with {args.nodes} processes")
        probe = probe_claim_rate(args.db, processes=args.nodes, seconds=min(10.0, args.duration))
    backend = _server(args.db)
    document = {
        "backend": backend,
        "trials": [f.as_dict() for f in trials],
        "claim_pattern_rows_per_s": probe,
        "claim_pattern_share": probe_share(trials, probe),
    }
    if args.find_max:
        good = [
            f.tasks
            for f in trials
            if f.missed == 0
            and f.duplicates == 0
            and f.lateness_ms["p99"] <= args.lateness_bound_ms
        ]
        document["saturation_tasks"] = max(good, default=None)
    return _show(args, document, lambda: render(trials, probe, backend))


def dashboard(args: argparse.Namespace) -> int:
    """Serve the dashboard until SIGTERM or SIGINT; the database is opened read-only unless
    a token or users file turns the actions on."""
    import signal
    import threading

    from easyjob.observe.http import HttpServer
    from easyjob.web.app import Dashboard
    from easyjob.web.auth import Access

    access = Access.from_files(
        token_file=args.token_file,
        users_file=args.users_file,
        session_s=args.session,
        secret=args.secret,
    )
    stop = threading.Event()
    reason = ["starting"]
    app = Switch(waiting_app(lambda: reason[0]))
    server = HttpServer(args.http, app, name="dashboard")
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server.start()
    try:
        try:
            store = wait_for_schema(
                lambda: Store.open(args.db, read_only=access is None),
                args.schema_wait.total_seconds(),
                on_wait=lambda r: reason.__setitem__(0, r),
                stop=stop,
            )
        except WAITED_FOR:
            if stop.is_set():  # stopped while waiting: nothing to hand back
                return EXIT_OK
            raise
        try:
            app.set(Dashboard(store, refresh_s=args.refresh, access=access).wsgi())
            mode = "actions on" if access else "read-only"
            sys.stderr.write(f"easyjob dashboard of {store.url} on {server.url} ({mode})\n")
            sys.stderr.flush()
            stop.wait()
        finally:
            store.close()
    finally:
        server.close()
    return EXIT_OK


def _unhealthy(row: dict[str, Any]) -> str:
    """The lines of ``easyjob status`` that say why a node is unhealthy: what it wrote at
    its last heartbeat (a loop failing on every step, due work held), and the runs the
    database says it holds CLAIMED well past due (true even of a node too stuck to say)."""
    lines = []
    if row.get("health"):
        lines.append(f"\nnode {row['node_id']} is unhealthy: {row['health']}")
    if row["held_due"] and "due_work_held" not in (row.get("health") or ""):
        lines.append(
            f"\nnode {row['node_id']} is unhealthy: it holds {row['held_due']} run(s) CLAIMED "
            f"more than {HELD_DUE_AFTER.total_seconds():g}s past due, neither started nor "
            "handed back"
        )
    return "".join(lines)


def _server(url: str) -> str:
    """The database product and version behind *url* (``mariadb 10.11.6``), for reports."""
    store = Store.open(url)
    try:
        return store.server
    finally:
        store.close()


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run,
    "init-db": init_db,
    "upgrade-db": upgrade_db,
    "sql": sql,
    "status": status,
    "tasks": tasks,
    "nodes": nodes,
    "history": history,
    **control.COMMANDS,
    "pause": _set_status(TaskStatus.PAUSED),
    "resume": _set_status(TaskStatus.ACTIVE),
    "prune": prune,
    "bench": bench,
    "dashboard": dashboard,
}
