"""Every error path: one line on stderr naming the bad thing, and its documented exit code."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from easyjob.cli import commands
from easyjob.errors import SchemaMissingError
from easyjob.store import Store
from easyjob.store.engine import normalize_url, safe_url
from easyjob.store.schema import SCHEMA_VERSION, meta_table
from tests.cli.conftest import Cli, Result, yearly

DB_COMMANDS = [
    ["status"],
    ["tasks"],
    ["nodes"],
    ["history"],
    ["trigger", "x"],
    ["pause", "x"],
    ["resume", "x"],
    ["prune", "--older-than", "1d"],
]


def _usage_error(err: str) -> str:
    """The last line argparse printed (the first lines are the usage)."""
    return err.splitlines()[-1]


def test_missing_schema_is_exit_3_and_nothing_is_created(cli: Cli, db_url: str) -> None:
    shown = safe_url(normalize_url(db_url))
    for argv in DB_COMMANDS:
        result = cli(*argv, "--db", db_url)
        assert (result.code, result.out, result.err) == (
            3,
            "",
            f"easyjob: the easyjob tables are missing in {shown!r}: run `easyjob init-db`\n",
        ), argv
    if db_url.startswith("sqlite"):
        assert not Path(db_url.removeprefix("sqlite:///")).exists()
    else:
        with pytest.raises(SchemaMissingError):
            Store.open(db_url)


def test_schema_of_a_newer_incompatible_version_is_exit_3(
    cli: Cli, store: Store, db_url: str
) -> None:
    for name in ("schema_version", "compatible_from"):
        stmt = meta_table.update().where(meta_table.c.name == name).values(value="999")
        store.db.write("bump", lambda conn, stmt=stmt: conn.execute(stmt))
    result = cli("tasks", "--db", db_url)
    assert (result.code, result.err) == (
        3,
        f"easyjob: the easyjob tables in {store.db.url!r} are schema version '999', "
        f"this easyjob needs version {SCHEMA_VERSION}, and version 999 runs only code of "
        "version 999 or later (its compatible_from): upgrade easyjob on this host\n",
    )


def test_init_db_creates_the_schema_that_status_needs(cli: Cli, db_url: str) -> None:
    created = cli("init-db", "--db", db_url)
    assert created.code == 0
    assert created.out == f"easyjob tables ready in {safe_url(normalize_url(db_url))}\n"
    assert "***" in created.out or db_url.startswith("sqlite")  # never the password
    assert cli("init-db", "--db", db_url).code == 0  # idempotent
    assert cli("status", "--db", db_url).code == 0


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "not a url",
            "invalid database URL 'not a url': "
            "Could not parse SQLAlchemy URL from given URL string",
        ),
        (
            "foo://x",
            "unsupported database URL 'foo://x': use sqlite:///FILE, "
            "postgresql://USER:PASSWORD@HOST/DB or mysql://USER:PASSWORD@HOST/DB",
        ),
        (
            "sqlite://",
            "unsupported database URL 'sqlite://': an in-memory SQLite database cannot be "
            "shared by nodes; give a file, e.g. sqlite:///easyjob.db",
        ),
    ],
)
def test_bad_database_url_is_exit_2(cli: Cli, url: str, message: str) -> None:
    result = cli("status", "--db", url)
    assert (result.code, result.out, result.err) == (2, "", f"easyjob: {message}\n")


@pytest.mark.parametrize(
    ("url", "module", "hint"),
    [
        (
            "postgresql://easyjob:secret@127.0.0.1/app",
            "psycopg",
            "the PostgreSQL driver psycopg is not installed: pip install 'easyjob[postgres]'",
        ),
        (
            "mysql://easyjob:secret@127.0.0.1/app",
            "pymysql",
            "the MySQL/MariaDB driver PyMySQL is not installed: pip install 'easyjob[mysql]'",
        ),
    ],
)
def test_missing_driver_names_what_to_install(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, url: str, module: str, hint: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # its import fails as if not installed
    result = cli("status", "--db", url)
    shown = url.replace(":secret@", ":***@").replace("://", f"+{module}://", 1)
    assert (result.code, result.out, result.err) == (
        2,
        "",
        f"easyjob: cannot use database URL {shown!r}: {hint}\n",
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again: connections are refused


@pytest.mark.parametrize("scheme", ["postgresql", "mysql"])
def test_unreachable_database_is_exit_3(cli: Cli, scheme: str) -> None:
    url = f"{scheme}://easyjob:secret@127.0.0.1:{_closed_port()}/app"
    result = cli("status", "--db", url)
    assert result.code == 3
    masked = url.replace(":secret@", ":***@")
    assert result.err.startswith(f"easyjob: cannot reach database {masked!r}: ")
    assert "secret" not in result.err and len(result.err.splitlines()) == 1


def test_unknown_task_is_exit_4(cli: Cli, store: Store, db_url: str) -> None:
    store.tasks.upsert(yearly("known"))
    for argv in (["trigger", "nope"], ["pause", "nope"], ["resume", "nope"]):
        result = cli(*argv, "--db", db_url)
        assert (result.code, result.out, result.err) == (
            4,
            "",
            "easyjob: no task named 'nope'\n",
        ), argv
    history = cli("history", "--task", "nope", "--db", db_url)
    assert (history.code, history.err) == (4, "easyjob: no task named 'nope'\n")
    assert store.history.runs() == []


@pytest.mark.parametrize("value", ["3x", "30", "1h1d", "1.5h", "-5m", "d", " "])
def test_bad_duration_is_exit_2(cli: Cli, value: str) -> None:
    result = cli("prune", f"--older-than={value}", "--db", "sqlite:///never-opened.db")
    assert result.code == 2
    assert _usage_error(result.err) == (
        f"easyjob prune: error: argument --older-than: invalid duration {value!r}: use a "
        "whole number with a unit w, d, h, m or s, largest first, e.g. 30d, 12h, 90m, 45s "
        "or 1d12h"
    )
    assert not Path("never-opened.db").exists()


def test_prune_needs_an_age(cli: Cli) -> None:
    result = cli("prune")
    assert result.code == 2
    assert _usage_error(result.err) == (
        "easyjob prune: error: the following arguments are required: --older-than"
    )


@pytest.mark.parametrize("value", ["0", "-1", "ten", "2.5"])
def test_bad_limit_is_exit_2(cli: Cli, value: str) -> None:
    result = cli("history", f"--limit={value}")
    assert result.code == 2
    assert _usage_error(result.err) == (
        f"easyjob history: error: argument --limit: must be a positive integer, got {value!r}"
    )


def test_bad_status_is_exit_2(cli: Cli) -> None:
    result = cli("history", "--status", "done")
    assert result.code == 2
    assert _usage_error(result.err) == (
        "easyjob history: error: argument --status: must be one of PENDING, CLAIMED, "
        "RUNNING, SUCCESS, FAILED, MISSED, SKIPPED, ABANDONED, CANCELLED, got 'done'"
    )


def test_a_bad_environment_variable_is_named(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EASYJOB_HISTORY_LIMIT", "lots")
    result = cli("history")
    assert result.code == 2
    assert _usage_error(result.err) == (
        "easyjob history: error: argument --limit: must be a positive integer, "
        "got 'lots' (from EASYJOB_HISTORY_LIMIT)"
    )
    assert cli("sql").code == 0  # another command's variable does not get in the way
    monkeypatch.setenv("EASYJOB_JSON", "maybe")
    result = cli("sql")
    assert (result.code, result.err) == (
        2,
        "easyjob: invalid EASYJOB_JSON='maybe': use 1, true, yes, on or 0, false, no, off\n",
    )


def test_unknown_command_and_help(cli: Cli) -> None:
    assert cli("frobnicate").code == 2
    helped = cli("--help")
    assert helped.code == 0 and "Exit codes: 0 ok" in helped.out


def test_an_unexpected_error_is_exit_1_with_its_traceback_logged(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(args: object) -> int:
        raise RuntimeError("kaboom\nmore")

    monkeypatch.setitem(commands.COMMANDS, "sql", broken)
    result = cli("sql")
    assert result.code == 1
    assert result.err.endswith("easyjob: unexpected error: RuntimeError: kaboom\n")
    assert "Traceback (most recent call last)" in result.err
    assert " ERROR easyjob.cli unexpected error\n" in result.err


def test_a_database_error_past_the_retries_is_exit_3(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    def lost(args: object) -> int:
        raise sa.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection"))

    monkeypatch.setitem(commands.COMMANDS, "sql", lost)
    result = cli("sql")
    assert (result.code, result.err) == (
        3,
        "easyjob: database error: (builtins.Exception) server closed the connection\n",
    )


def test_ctrl_c_is_exit_130(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setitem(commands.COMMANDS, "sql", interrupted)
    assert cli("sql") == Result(130, "", "easyjob: interrupted\n")
