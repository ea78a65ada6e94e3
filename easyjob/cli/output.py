"""Rendering rows for people (aligned tables) and for scripts (JSON documents).

A row is a mapping of column name to value. Tables show a chosen subset of a row's columns
under their names; JSON documents carry whole rows, so every table column is also a JSON key.
Times are ISO 8601 UTC: to the millisecond in tables, to the microsecond in JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

__all__ = [
    "Column",
    "dumps",
    "duration",
    "first_line",
    "iso",
    "offset_ms",
    "plain",
    "table",
]


Row = Mapping[str, Any]


def iso(value: datetime, *, ms: bool = False) -> str:
    """*value* as ISO 8601 UTC with a ``Z``: ``2030-01-02T03:04:05.123Z`` with *ms*, else
    to the microsecond."""
    spec = "milliseconds" if ms else "microseconds"
    return value.astimezone(UTC).isoformat(timespec=spec).replace("+00:00", "Z")


def plain(value: Any) -> str:
    """A table cell: ``-`` for None, times to the millisecond, anything else as ``str``."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return iso(value, ms=True)
    return str(value)


def duration(value: timedelta) -> str:
    """*value* in the units ``--older-than`` takes: ``30d``, ``1d12h``, ``90m`` is ``1h30m``."""
    left = int(value.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def offset_ms(value: int | None) -> str:
    """A clock offset with its sign: ``+120ms`` (the node's clock is ahead), ``-3ms``."""
    return "-" if value is None else f"{value:+d}ms"


def first_line(width: int) -> Callable[[Any], str]:
    """A cell showing the first line of a text, cut to *width* characters."""

    def show(value: Any) -> str:
        if value is None:
            return "-"
        lines = str(value).strip().splitlines()
        line = lines[0] if lines else ""
        return line if len(line) <= width else line[: width - 3] + "..."

    return show


def compact_json(width: int) -> Callable[[Any], str]:
    """A cell showing a JSON value on one line, cut to *width* characters."""

    def show(value: Any) -> str:
        if value is None:
            return "-"
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        return text if len(text) <= width else text[: width - 3] + "..."

    return show


@dataclass(frozen=True)
class Column:
    """A table column: the row key it shows (also its header) and how to show a value."""

    key: str
    show: Callable[[Any], str] = plain
    right: bool = False


def table(rows: Sequence[Row], columns: Sequence[Column], *, empty: str = "(none)") -> str:
    """*rows* as aligned text under a header of column names; *empty* when there are none."""
    if not rows:
        return empty
    cells = [[c.key for c in columns]] + [[c.show(row[c.key]) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = []
    for line in cells:
        parts = [
            cell.rjust(width) if column.right else cell.ljust(width)
            for cell, width, column in zip(line, widths, columns, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"cannot write {type(value).__name__} as JSON: {value!r}")


def dumps(document: Mapping[str, Any]) -> str:
    """*document* as indented JSON; times become ISO 8601 UTC strings."""
    return json.dumps(document, default=_json_value, indent=2, ensure_ascii=False)
