"""Logging setup for the ``easyjob`` process: plain text or one JSON object per line.

The library only logs through :mod:`logging` (loggers ``easyjob.*``; a task's own logger is
``easyjob.task``) and never configures it; the command line calls :func:`setup`. The node
attaches context to its records with ``extra`` or a :class:`logging.LoggerAdapter`, using the
keys of :data:`CONTEXT_KEYS`; both formats show those keys when a record carries them::

    2030-01-01T00:00:05.002Z INFO easyjob.task [node=web-1 task=jobs.refresh fire=...] done
    {"time": "2030-01-01T00:00:05.002Z", "level": "INFO", "logger": "easyjob.task",
     "message": "done", "node_id": "web-1", "task": "jobs.refresh", ...}
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

__all__ = [
    "CONTEXT_KEYS",
    "LEVELS",
    "LOG_FORMATS",
    "ContextLogger",
    "JsonFormatter",
    "TextFormatter",
    "context",
    "run_context",
    "setup",
]

#: Record attributes the node sets (``extra=``) and the formatters show, in this order.
CONTEXT_KEYS = ("node_id", "task", "fire_time", "run_id", "attempt")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")

_TEXT_LABELS = {"node_id": "node", "task": "task", "fire_time": "fire", "run_id": "run"}
_HANDLER_MARK = "_easyjob_handler"


class ContextLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger adapter whose fixed context (e.g. the node id) is merged with the ``extra=``
    of each call (the stdlib adapter would drop the call's)."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


def run_context(task: str, fire_time: datetime, run_id: int, attempt: int) -> dict[str, Any]:
    """The ``extra=`` that tags a record with the run it is about."""
    return {"task": task, "fire_time": fire_time, "run_id": run_id, "attempt": attempt}


def _iso(created: float) -> str:
    stamp = datetime.fromtimestamp(created, UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _value(value: object) -> object:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return value


def context(record: logging.LogRecord) -> dict[str, object]:
    """The :data:`CONTEXT_KEYS` that *record* carries (and that are not None)."""
    found = {}
    for key in CONTEXT_KEYS:
        value = getattr(record, key, None)
        if value is not None:
            found[key] = _value(value)
    return found


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER [node=.. task=.. fire=.. run=.. attempt=..] message``, UTC times;
    the bracket holds only the keys the record has, and is left out when it has none."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(
            f"{_TEXT_LABELS.get(key, key)}={value}" for key, value in context(record).items()
        )
        line = f"{_iso(record.created)} {record.levelname} {record.name} "
        line += f"[{fields}] " if fields else ""
        line += record.getMessage()
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time``, ``level``, ``logger``, ``message``, the context
    keys the record has, and ``exc_info`` (the formatted traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **context(record),
        }
        if record.exc_info:
            doc["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is at emit time (it may be replaced, e.g. by tests)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def setup(level: str = "INFO", fmt: str = "text") -> logging.Handler:
    """Send the records of every logger at *level* and above to stderr in *fmt* (``text`` or
    ``json``). Calling it again replaces the handler it installed before; handlers installed
    by others are left alone. Returns the handler."""
    if level.upper() not in LEVELS:
        raise ValueError(f"unknown log level {level!r}: choose one of {', '.join(LEVELS)}")
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}: choose one of {', '.join(LOG_FORMATS)}")
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
        old.close()
    handler = _StderrHandler()
    setattr(handler, _HANDLER_MARK, True)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Alembic narrates each step at INFO; easyjob.store.migrations logs what an operator needs
    logging.getLogger("alembic").setLevel(max(logging.WARNING, root.level))
    return handler
