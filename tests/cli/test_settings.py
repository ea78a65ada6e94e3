"""The node's settings are declared once, on NodeConfig: ``easyjob run`` offers every field as
an option and an EASYJOB_* variable, each one sets its field, and a bad value is named."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from easyjob.cli import main
from easyjob.cli.options import build_parser
from easyjob.core.config import NodeConfig
from easyjob.core.settings import configure, default_text, env_name, flag_name, settings

FIELDS = [field.name for field in dataclasses.fields(NodeConfig)]

# The names docs, deployments and tests use: a rename breaks them, so it fails here first.
VARIABLES = {
    "node_id": "EASYJOB_NODE_ID",
    "strategy": "EASYJOB_STRATEGY",
    "claim_mode": "EASYJOB_CLAIM_MODE",
    "weight": "EASYJOB_WEIGHT",
    "workers": "EASYJOB_WORKERS",
    "heartbeat": "EASYJOB_HEARTBEAT",
    "dead_after": "EASYJOB_DEAD_AFTER",
    "poll": "EASYJOB_POLL",
    "lookahead": "EASYJOB_LOOKAHEAD",
    "plan_ahead": "EASYJOB_PLAN_AHEAD",
    "plan_window": "EASYJOB_PLAN_WINDOW",
    "batch": "EASYJOB_BATCH",
    "max_held": "EASYJOB_MAX_HELD",
    "executor": "EASYJOB_EXECUTOR",
    "overdue_grace": "EASYJOB_OVERDUE_GRACE",
    "shutdown_grace": "EASYJOB_SHUTDOWN_GRACE",
    "max_recoveries": "EASYJOB_MAX_RECOVERIES",
    "retention": "EASYJOB_RETENTION",
}

# field: (text, the value it sets, a bad text); the value is never the field's default
SAMPLES: dict[str, tuple[str, Any, str]] = {
    "node_id": ("node-7", "node-7", "x" * 129),
    "strategy": ("least_count", "least_count", "fastest"),
    "claim_mode": ("skip_locked", "skip_locked", "pessimistic"),
    "weight": ("3", 3, "0"),
    "workers": ("5", 5, "many"),
    "heartbeat": ("0.5", 0.5, "-1"),
    "dead_after": ("4", 4, "1"),
    "poll": ("0.25", 0.25, "0"),
    "lookahead": ("3", 3.0, "soon"),
    "plan_ahead": ("30", 30, "1001"),
    "plan_window": ("1h", 3600.0, "10 minutes"),
    "batch": ("50", 50, "0"),
    "max_held": ("99", 99, "1.5"),
    "executor": ("process", "process", "fork"),
    "overdue_grace": ("2.5", 2.5, "-2"),
    "shutdown_grace": ("7", 7.0, "x"),
    "max_recoveries": ("0", 0, "-1"),
    "retention": ("1d12h", 129600.0, "7 days"),
}


def _config(*argv: str) -> NodeConfig:
    args = build_parser("0").parse_args(["run", "jobs.py", *argv])
    return configure(NodeConfig, vars(args))


def test_every_field_is_a_setting_under_its_known_names() -> None:
    assert sorted(FIELDS) == sorted(VARIABLES) == sorted(SAMPLES)
    assert [field.name for field, _ in settings(NodeConfig)] == FIELDS
    assert {name: env_name(name) for name in FIELDS} == VARIABLES
    assert flag_name("max_held") == "--max-held"


def test_run_help_lists_every_field_with_its_variable() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "easyjob", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    text = " ".join(done.stdout.split())  # argparse wraps lines at the terminal's width
    for field, found in settings(NodeConfig):
        flag, var = flag_name(field.name), env_name(field.name)
        entry = rf"{flag} {found.metavar} (?:(?!\[env ).)+ \[env {var}; default [^\]]+\]"
        assert re.search(entry, text), (field.name, text)
    assert "--workers N jobs running at once" in text
    assert "[env EASYJOB_WORKERS; default 64]" in text
    assert "[env EASYJOB_RETENTION; default 7d]" in text
    assert "[env EASYJOB_LOOKAHEAD; default 2 polls]" in text


def test_the_cli_reference_lists_every_setting_as_generated() -> None:
    reference = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
    rows = {}
    for line in reference.read_text().splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip("|").split("|")]
        if len(cells) >= 4 and cells[3].startswith("run"):
            rows[cells[0]] = (cells[1], cells[2])
    for field, found in settings(NodeConfig):
        row = rows.get(f"{flag_name(field.name)} {found.metavar}")
        assert row == (env_name(field.name), default_text(field, found)), (field.name, row)


def test_left_out_settings_keep_the_config_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in VARIABLES.values():
        monkeypatch.delenv(var, raising=False)
    config, default = _config(), NodeConfig()
    for name in FIELDS:
        if name != "node_id":  # host-pid-random: new for each config
            assert getattr(config, name) == getattr(default, name), name


@pytest.mark.parametrize("name", FIELDS)
def test_each_variable_and_option_sets_its_field(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in VARIABLES.values():
        monkeypatch.delenv(var, raising=False)
    text, value, _ = SAMPLES[name]
    assert getattr(NodeConfig(), name) != value
    monkeypatch.setenv(VARIABLES[name], text)
    config = _config()
    assert getattr(config, name) == value
    others = {field: getattr(config, field) for field in FIELDS if field not in (name, "node_id")}
    assert others == {
        field: getattr(NodeConfig(), field) for field in FIELDS if field not in (name, "node_id")
    }
    # the command line wins over the environment
    monkeypatch.setenv(VARIABLES[name], "unparsable here")
    assert getattr(_config(flag_name(name), text), name) == value


@pytest.mark.parametrize("name", FIELDS)
@pytest.mark.parametrize("origin", ["environment", "command line"])
def test_a_bad_value_names_the_option_the_variable_and_the_value(
    name: str, origin: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in VARIABLES.values():
        monkeypatch.delenv(var, raising=False)
    bad = SAMPLES[name][2]
    argv = ["run", "jobs_never_loaded.py", "--db", "sqlite:///never/made.db"]
    if origin == "environment":
        monkeypatch.setenv(VARIABLES[name], bad)
    else:
        argv += [f"{flag_name(name)}={bad}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"easyjob run: error: argument {flag_name(name)}: " in err, err
    assert bad in err, err
    assert (f"(from {VARIABLES[name]})" in err) == (origin == "environment"), err


@pytest.mark.parametrize(
    ("var", "text", "message"),
    [
        (
            "EASYJOB_WORKERS",
            "0",
            "argument --workers: workers must be a positive integer, got 0 (from EASYJOB_WORKERS)",
        ),
        (
            "EASYJOB_WORKERS",
            "x",
            "argument --workers: must be an integer, got 'x' (from EASYJOB_WORKERS)",
        ),
        (
            "EASYJOB_PLAN_AHEAD",
            "1001",
            "argument --plan-ahead: plan_ahead must be at most 1000 fires, got 1001 "
            "(from EASYJOB_PLAN_AHEAD)",
        ),
        (
            "EASYJOB_DEAD_AFTER",
            "1",
            "argument --dead-after: dead_after must be at least 2 heartbeats, got 1 "
            "(from EASYJOB_DEAD_AFTER)",
        ),
    ],
)
def test_the_check_is_the_configs_own(
    var: str,
    text: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(var, text)
    assert main(["run", "jobs_never_loaded.py"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"easyjob run: error: {message}"
    with pytest.raises(ValueError, match="workers must be a positive integer, got 0"):
        NodeConfig(workers=0)
