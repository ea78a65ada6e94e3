"""How a job's call ended, as the history stores it (pure; no database code).

A failure is stored twice: ``error_msg`` holds the exception's type and message
(``ValueError: bad input``), short enough for a table; ``traceback`` holds the whole
traceback, capped. A success may store the function's return value in ``result`` when it
is JSON and at most :data:`RESULT_LIMIT` bytes; any other value is not stored, and the
run's ``error_msg`` says why (the run is still a success).
"""

from __future__ import annotations

import json
import traceback as tb
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ERROR_LIMIT",
    "RESULT_LIMIT",
    "TRACEBACK_LIMIT",
    "Outcome",
    "encode_result",
    "error_text",
    "failed",
    "succeeded",
    "traceback_cut",
    "traceback_text",
]

#: Characters of ``error_msg`` kept (the column's documented size).
ERROR_LIMIT = 4000
#: Bytes of a result's JSON (UTF-8) that may be stored.
RESULT_LIMIT = 64 * 1024
#: Characters of a traceback kept: its head and its tail, the middle cut.
TRACEBACK_LIMIT = 64 * 1024
_HEAD = 4 * 1024


@dataclass(frozen=True)
class Outcome:
    """How one call of a job's function ended. ``error`` None is a success: ``result`` is
    the JSON value to store (None: nothing) and ``note`` why a value was not stored.
    ``exception`` is kept (briefly) for the failure's log record and the event hooks."""

    error: str | None = None
    traceback: str | None = None
    exception: BaseException | None = None
    result: Any = None
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def error_text(err: BaseException) -> str:
    """``Type: message`` of *err* (its notes too), capped at :data:`ERROR_LIMIT`."""
    text = "".join(tb.format_exception_only(err)).strip()
    return text[:ERROR_LIMIT]


def traceback_text(err: BaseException) -> str:
    """The full traceback of *err* (chained causes included), capped at
    :data:`TRACEBACK_LIMIT` characters by cutting the middle: the head says where the call
    began, the tail where it raised."""
    return traceback_cut("".join(tb.format_exception(err)).rstrip())


def traceback_cut(text: str) -> str:
    """*text* (a traceback) capped at :data:`TRACEBACK_LIMIT` characters by cutting the
    middle."""
    if len(text) <= TRACEBACK_LIMIT:
        return text
    cut = len(text) - TRACEBACK_LIMIT
    marker = f"\n... {cut} characters cut ...\n"
    tail = TRACEBACK_LIMIT - _HEAD - len(marker)
    return text[:_HEAD] + marker + text[-tail:]


def encode_result(value: Any) -> tuple[Any, str | None]:
    """``(value to store, note)``: a JSON value of at most :data:`RESULT_LIMIT` bytes is
    stored as JSON reads it back (tuples become lists); None stores nothing; anything else
    stores nothing, with a note naming why."""
    if value is None:
        return None, None
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as err:
        kind = type(value).__name__
        return None, f"result not stored: a {kind} is not JSON-serializable ({err})"
    size = len(text.encode())
    if size > RESULT_LIMIT:
        return None, (
            f"result not stored: {size} bytes of JSON, over the limit of {RESULT_LIMIT} bytes"
        )
    return json.loads(text), None


def succeeded(value: Any) -> Outcome:
    """The outcome of a call that returned *value*."""
    result, note = encode_result(value)
    return Outcome(result=result, note=note)


def failed(err: BaseException) -> Outcome:
    """The outcome of a call that raised *err*."""
    return Outcome(error=error_text(err), traceback=traceback_text(err), exception=err)
