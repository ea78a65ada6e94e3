"""Operator input read the same way by the CLI and the dashboard: times and trigger
arguments. Each raises ValueError naming the bad value."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from easyjob.errors import shown

__all__ = ["parse_kwargs", "parse_time"]


def parse_time(text: str) -> datetime:
    """An ISO 8601 time (``2030-01-01T09:00:00+01:00``, ``...Z``); without a zone, UTC."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"invalid time {shown(text)}: expected ISO 8601, e.g. 2030-01-01T09:00:00Z"
        ) from None
    return value.replace(tzinfo=UTC) if value.utcoffset() is None else value


def parse_kwargs(text: str, what: str = "--kwargs") -> dict[str, Any]:
    """A JSON object of trigger arguments; *what* names the input in messages."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ValueError(f"invalid {what} {shown(text)}: not JSON ({err})") from None
    except RecursionError:
        raise ValueError(
            f"invalid {what} {shown(text, 60)}: nested too deeply for JSON arguments"
        ) from None
    if not isinstance(value, dict):
        raise ValueError(f"invalid {what} {shown(text)}: must be a JSON object")
    return value
