"""Databases of earlier releases for the upgrade tests: each release's DDL (from git history,
``tests/store/old_schemas/vN_DIALECT.sql``: ``git show COMMIT:sql/DIALECT.sql``, the last
commit of that release) with rows in every table, and reads of every row and column to
compare before and after an upgrade."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from easyjob.store import render_upgrade
from easyjob.store.engine import create_engine

OLD_SCHEMAS = Path(__file__).parent / "old_schemas"
TABLES = ("easy_job_meta", "easy_job_node", "easy_job_task", "easy_job_task_detail")
_KEYS = {"easy_job_meta": "name", "easy_job_node": "node_id"}

T = "'2030-01-02 03:04:05.123456'"
T2 = "'2030-01-02 03:05:00.000000'"


def sql_dialect(engine: sa.Engine) -> str:
    """``sqlite``, ``postgresql`` or ``mysql`` (MariaDB too): the DDL file's suffix."""
    name = engine.dialect.name
    return "mysql" if name in ("mysql", "mariadb") else name


def create_old(engine: sa.Engine, version: int) -> None:
    """Run release *version*'s DDL, statement by statement, as a DBA would."""
    text = (OLD_SCHEMAS / f"v{version}_{sql_dialect(engine)}.sql").read_text(encoding="utf-8")
    statements = [s.strip() for s in text.split(";\n") if s.strip()]
    with engine.begin() as conn:
        for statement in statements:
            body = "\n".join(x for x in statement.splitlines() if not x.startswith("--"))
            if body.strip():
                conn.exec_driver_sql(body)


def _insert(conn: sa.Connection, table: str, row: dict[str, str]) -> None:
    columns = ", ".join(row)
    values = ", ".join(row.values())
    conn.exec_driver_sql(f"INSERT INTO {table} ({columns}) VALUES ({values})")


def _task_id(name: str) -> str:
    return f"(SELECT id FROM easy_job_task WHERE name = '{name}')"


def fill(engine: sa.Engine, version: int) -> None:
    """Rows in every table of a database of *version*, using every column it has, with
    values other than the defaults where a column has one."""
    v2, v3, v4, v6 = version >= 2, version >= 3, version >= 4, version >= 6
    with engine.begin() as conn:
        for node_id, status, stopped in (("n1", "RUNNING", "NULL"), ("n2", "STOPPED", T2)):
            row = {
                "node_id": f"'{node_id}'",
                "host": "'host-a'",
                "pid": "4242",
                "weight": "3",
                "strategy": "'id_hash'",
                "workers": "8",
                "status": f"'{status}'",
                "started_at": T,
                "heartbeat_at": T2,
                "stopped_at": stopped,
                "clock_offset_ms": "-250",
                "claimed_count": "17",
                "completed_count": "15",
                "version": "40",
            }
            if v3:
                row |= {"stuck_count": "1", "broadcast_tasks": "'[\"jobs.a\"]'"}
            _insert(conn, "easy_job_node", row)
        for name, status, cron, parent in (
            ("jobs.a", "ACTIVE", "'0/10 * * * * ?'", "NULL"),
            ("jobs.b", "ACTIVE", "NULL", _task_id("jobs.a")),
            ("jobs.c", "PAUSED", "'*/5 * * * *'", "NULL"),
        ):
            row = {
                "name": f"'{name}'",
                "func": f"'{name.replace('.', ':')}'",
                "cron_expr": cron,
                "tz": "'Europe/Berlin'",
                "pid": parent,
                "status": f"'{status}'",
                "next_start_time": T2,
                "version": "6",
                "node_id": "'n1'",
                "misfire": "'skip'",
                "misfire_grace_ms": "5000",
                "overlap": "'allow'",
                "retries": "2",
                "retry_delay_ms": "250",
                "timeout_ms": "30000",
                "kwargs": "'{\"x\": 1}'",
                # 7 successes in all: the SUCCESS rows below (3, 1, 1) and the pruned ones
                "success_count": "7",
                "fail_count": "2",
                "create_time": T,
                "update_time": T,
                "seen_time": T2,
            }
            if v4:
                pruned = {"jobs.a": "4"}.get(name, "6")
                row = {
                    ("pruned_success_count" if k == "success_count" else k): v
                    for k, v in row.items()
                }
                row["pruned_success_count"] = pruned
            if v3:
                row |= {
                    "every_ms": "NULL",
                    "anchor_time": T,
                    "starts_at": T,
                    "ends_at": "NULL",
                    "max_runs": "100",
                    "fire_count": "11",
                    "accepts": "'[\"user\"]'",
                    "origin": "'runtime'" if name == "jobs.c" else "'code'",
                    "declared": "'0/10 * * * * ?|Europe/Berlin|'",
                    "shards": "2",
                    "broadcast": "true" if name == "jobs.c" else "false",
                }
            if v6:
                row |= {
                    "jitter_ms": "1500",
                    "exclude_calendar": "'holidays'",
                    "max_running": "3",
                    "priority": "-2",
                }
            _insert(conn, "easy_job_task", row)
        for i, (task, status, trigger, attempt) in enumerate(
            (
                ("jobs.a", "SUCCESS", "cron", 1),
                ("jobs.a", "SUCCESS", "cron", 1),
                ("jobs.a", "FAILED", "cron", 1),
                ("jobs.a", "SUCCESS", "retry", 2),
                ("jobs.a", "MISSED", "cron", 1),
                ("jobs.a", "PENDING", "cron", 1),
                ("jobs.b", "SUCCESS", "parent", 1),
                ("jobs.c", "ABANDONED", "cron", 1),
                ("jobs.c", "SUCCESS", "recovery", 2),
            )
        ):
            fire = f"'2030-01-02 03:0{i}:00.000000'" if trigger == "cron" else T
            row = {
                "task_id": _task_id(task),
                "pid": "NULL",
                "fire_time": fire,
                "due_time": fire,
                "node_id": "'n1'" if status != "PENDING" else "NULL",
                "status": f"'{status}'",
                "triggered_by": f"'{trigger}'",
                "attempt": str(attempt),
                "claim_time": T,
                "start_time": T,
                "end_time": "NULL" if status == "PENDING" else T2,
                "error_msg": "'ValueError: boom'" if status == "FAILED" else "NULL",
                "version": str(3 + i),
                "create_time": T,
            }
            if v2:
                missed = status == "MISSED"
                row |= {
                    "recoveries": "1" if trigger == "recovery" else "0",
                    "missed_count": "4" if missed else "NULL",
                    "last_fire_time": T2 if missed else "NULL",
                }
            if v3:
                row |= {
                    "kwargs": "'{\"user\": 7}'",
                    "result": "'{\"ok\": true}'" if status == "SUCCESS" else "NULL",
                    "traceback": "'Traceback: ...'" if status == "FAILED" else "NULL",
                    "shard": "1" if status == "PENDING" else "0",
                    "shards": "2",
                    "target_node": "'n1'",
                }
            if v6:
                row |= {"jitter_ms": "250", "priority": "5"}
            _insert(conn, "easy_job_task_detail", row)
        # a pruned row: its id must never be handed out again
        _insert(conn, "easy_job_task_detail", {**row, "fire_time": T2, "due_time": T2})
        conn.exec_driver_sql(
            "DELETE FROM easy_job_task_detail WHERE id = (SELECT m FROM (SELECT MAX(id) AS m "
            "FROM easy_job_task_detail) AS x)"
        )


def columns(engine: sa.Engine) -> dict[str, list[str]]:
    """Each table's columns, in order."""
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        return {t: [c["name"] for c in inspector.get_columns(t)] for t in TABLES}


def read_all(
    engine: sa.Engine, shape: dict[str, list[str]], renamed: dict[str, str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table, with the columns of *shape*; *renamed* maps a column of
    *shape* to the SQL that gives its value now."""
    renamed = renamed or {}
    found: dict[str, list[dict[str, Any]]] = {}
    with engine.connect() as conn:
        for table, names in shape.items():
            select = ", ".join(f"{renamed.get(n, n)} AS {n}" for n in names)
            key = _KEYS.get(table, "id")
            rows = conn.exec_driver_sql(f"SELECT {select} FROM {table} ORDER BY {key}")
            found[table] = [dict(r._mapping) for r in rows]
    return found


#: Version 4 reads version 3's ``success_count`` as the pruned count plus the history's.
SUCCESS_COUNT = (
    "pruned_success_count + (SELECT COUNT(*) FROM easy_job_task_detail d "
    "WHERE d.task_id = easy_job_task.id AND d.status = 'SUCCESS')"
)


def structure(engine: sa.Engine) -> dict[str, Any]:
    """The easyjob tables as the database describes them: columns (type, nullability,
    default, generated expression) by name, primary key, unique keys and indexes. Columns
    are compared by name, not position: PostgreSQL adds a column last, so an upgraded
    ``easy_job_node`` has ``stuck_count`` (version 3) after ``version``."""
    shape: dict[str, Any] = {}
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        for table in TABLES:
            shape[table] = {
                "columns": sorted(
                    (
                        c["name"],
                        str(c["type"]),
                        c["nullable"],
                        c.get("default"),
                        (c.get("computed") or {}).get("sqltext"),
                    )
                    for c in inspector.get_columns(table)
                ),
                "pk": inspector.get_pk_constraint(table)["constrained_columns"],
                "unique": sorted(
                    (u["name"], tuple(u["column_names"]))
                    for u in inspector.get_unique_constraints(table)
                ),
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                    for i in inspector.get_indexes(table)
                    if not i.get("duplicates_constraint")
                ),
            }
    return shape


def run_printed(url: str, dialect: str, from_version: int) -> None:
    """Run what ``easyjob sql --dialect D --upgrade-from N`` prints as a DBA would: statement
    by statement, its own BEGIN and COMMIT (where it has them) included."""
    printed = render_upgrade(dialect, from_version)
    text = "\n".join(x for x in printed.splitlines() if not x.startswith("--"))
    statements = [s.strip() for s in text.split(";\n") if s.strip()]
    engine = create_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            if dialect == "sqlite":
                raw.isolation_level = None  # the script's own transactions, if any
            elif dialect == "mysql":
                raw.autocommit(True)  # PyMySQL: a method
            else:
                raw.autocommit = True
            cursor = raw.cursor()
            for statement in statements:
                cursor.execute(statement)
            cursor.close()
    finally:
        engine.dispose()
