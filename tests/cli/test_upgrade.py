"""``easyjob upgrade-db`` and ``easyjob sql --upgrade-from``, and every command's refusal of an
older schema with a message that names ``easyjob upgrade-db`` (exit code 3)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from easyjob.store.engine import create_engine
from easyjob.store.schema import SCHEMA_VERSION
from tests.cli.conftest import Cli
from tests.cluster.harness import JOBS
from tests.store.upgrade_rows import create_old, fill

UPGRADE_HINT = "run `easyjob upgrade-db` to upgrade them in place"


@pytest.fixture
def old_db(db_url: str) -> Iterator[str]:
    """A database made by release 3's DDL, with rows."""
    engine = create_engine(db_url)
    try:
        create_old(engine, 3)
        fill(engine, 3)
    finally:
        engine.dispose()
    yield db_url


def test_commands_refuse_an_older_schema_naming_upgrade_db(cli: Cli, old_db: str) -> None:
    for command in ("init-db", "status", "tasks", "history"):
        result = cli(command, "--db", old_db)
        assert result.code == 3, command
        assert f"are schema version '3', this easyjob needs version {SCHEMA_VERSION}: " in (
            result.err
        )
        assert UPGRADE_HINT in result.err, command


@pytest.mark.parametrize(
    "argv",
    [
        ["run", JOBS],
        ["run", JOBS, "--http", "127.0.0.1:0", "--schema-wait", "0s"],
        ["dashboard", "--http", "127.0.0.1:0", "--schema-wait", "0s"],
    ],
    ids=["run", "run-http", "dashboard"],
)
def test_run_and_dashboard_refuse_an_older_schema(old_db: str, argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "easyjob", *argv, "--db", old_db],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert UPGRADE_HINT in done.stderr.splitlines()[-1]


def test_upgrade_db_upgrades_in_place_once(cli: Cli, old_db: str) -> None:
    result = cli("upgrade-db", "--db", old_db)
    assert (result.code, result.out) == (
        0,
        f"easyjob tables upgraded from schema version 3 to {SCHEMA_VERSION}\n",
    )
    again = cli("upgrade-db", "--db", old_db)
    assert again.out == (
        f"easyjob tables are schema version {SCHEMA_VERSION} already: nothing to upgrade\n"
    )
    tasks = cli("tasks", "--db", old_db, "--json").json()["tasks"]
    assert {t["name"]: t["success_count"] for t in tasks} == {"jobs.a": 7, "jobs.b": 7, "jobs.c": 7}


def test_upgrade_db_of_no_tables_names_init_db(cli: Cli, db_url: str) -> None:
    result = cli("upgrade-db", "--db", db_url)
    assert result.code == 3
    assert "the easyjob tables are missing in " in result.err
    assert "run `easyjob init-db`" in result.err


def test_sql_prints_the_upgrade_for_each_dialect(cli: Cli) -> None:
    renames = {
        "postgresql": "ALTER TABLE easy_job_task RENAME success_count TO pruned_success_count;",
        "sqlite": "ALTER TABLE easy_job_task RENAME COLUMN success_count TO pruned_success_count;",
        "mysql": "ALTER TABLE easy_job_task CHANGE success_count pruned_success_count BIGINT",
    }
    for dialect, rename in renames.items():
        result = cli("sql", "--dialect", dialect, "--upgrade-from", "1")
        assert result.code == 0, result.err
        assert result.out.startswith(
            f"-- easyjob: upgrade schema version 1 to {SCHEMA_VERSION} on {dialect}."
        )
        assert "INSERT INTO easy_job_alembic_version (version_num) VALUES ('schema_1');" in (
            result.out
        )
        assert rename in result.out
        assert result.out.count("UPDATE easy_job_meta SET value = ") == SCHEMA_VERSION - 1


def test_sql_upgrade_from_a_version_it_cannot_upgrade_is_a_usage_error(cli: Cli) -> None:
    result = cli("sql", "--upgrade-from", str(SCHEMA_VERSION))
    older = ", ".join(str(v) for v in range(1, SCHEMA_VERSION))
    assert (result.code, result.err) == (
        2,
        f"easyjob: cannot upgrade from schema version {SCHEMA_VERSION}: this easyjob is version "
        f"{SCHEMA_VERSION} and upgrades from {older}\n",
    )
    assert cli("sql", "--upgrade-from", "0").code == 2
