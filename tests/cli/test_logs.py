"""Log lines carry the node, task and fire time; --log-format json writes one object a line."""

from __future__ import annotations

import json
import logging

import pytest

from easyjob import logs
from tests.cli.conftest import Cli

CONTEXT = {
    "node_id": "web-1",
    "task": "jobs.refresh",
    "fire_time": "2030-01-01T00:00:05+00:00",
    "run_id": 7,
    "attempt": 2,
}


def _record(**extra: object) -> logging.LogRecord:
    logger = logging.getLogger("easyjob.task")
    record = logger.makeRecord("easyjob.task", logging.INFO, __file__, 1, "done %s", ("ok",), None)
    record.created = 1893456005.25  # 2030-01-01T00:00:05.250Z
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_text_lines_carry_the_context_the_record_has() -> None:
    formatter = logs.TextFormatter()
    assert formatter.format(_record(**CONTEXT)) == (
        "2030-01-01T00:00:05.250Z INFO easyjob.task [node=web-1 task=jobs.refresh "
        "fire=2030-01-01T00:00:05+00:00 run=7 attempt=2] done ok"
    )
    assert formatter.format(_record(node_id="web-1")) == (
        "2030-01-01T00:00:05.250Z INFO easyjob.task [node=web-1] done ok"
    )
    assert formatter.format(_record()) == "2030-01-01T00:00:05.250Z INFO easyjob.task done ok"


def test_json_lines_are_objects_with_the_context_and_the_traceback() -> None:
    formatter = logs.JsonFormatter()
    assert json.loads(formatter.format(_record(**CONTEXT))) == {
        "time": "2030-01-01T00:00:05.250Z",
        "level": "INFO",
        "logger": "easyjob.task",
        "message": "done ok",
        **CONTEXT,
    }
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("x").makeRecord(
            "x", logging.ERROR, __file__, 1, "failed", (), exc_info=__import__("sys").exc_info()
        )
    doc = json.loads(formatter.format(record))
    assert set(doc) == {"time", "level", "logger", "message", "exc_info"}
    assert doc["exc_info"].startswith("Traceback (most recent call last)")
    assert doc["exc_info"].endswith("ValueError: boom")


def test_log_format_json_from_the_command_line(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("--log-format", "json", "--log-level", "debug", "sql").code == 0
    node_log = logging.LoggerAdapter(logging.getLogger("easyjob.node"), {"node_id": "n-1"})
    node_log.debug("claimed %d run(s)", 3)
    logging.getLogger("easyjob.store").info("plain")
    first, second = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert {k: first[k] for k in ("level", "logger", "message", "node_id")} == {
        "level": "DEBUG",
        "logger": "easyjob.node",
        "message": "claimed 3 run(s)",
        "node_id": "n-1",
    }
    assert "node_id" not in second and second["message"] == "plain"


def test_logging_options_after_the_command_and_from_the_environment(
    cli: Cli, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("sql", "--log-level", "WARNING").code == 0
    logging.getLogger("easyjob.node").info("hidden")
    logging.getLogger("easyjob.node").warning("shown", extra={"task": "t"})
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(" WARNING easyjob.node [task=t] shown")
    monkeypatch.setenv("EASYJOB_LOG_FORMAT", "json")
    assert cli("sql").code == 0
    logging.getLogger("easyjob").warning("again")
    assert json.loads(capsys.readouterr().err)["message"] == "again"
    root = logging.getLogger()
    assert sum(isinstance(h.formatter, logs.JsonFormatter) for h in root.handlers) == 1


def test_bad_logging_options_are_exit_2(cli: Cli) -> None:
    result = cli("--log-format", "xml", "sql")
    assert result.code == 2
    assert result.err.splitlines()[-1] == (
        "easyjob: error: argument --log-format: must be one of text, json, got 'xml'"
    )
    result = cli("sql", "--log-level", "loud")
    assert result.err.splitlines()[-1] == (
        "easyjob sql: error: argument --log-level: must be one of DEBUG, INFO, WARNING, "
        "ERROR, CRITICAL, got 'loud'"
    )
