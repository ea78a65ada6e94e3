"""How a call's end is written down: error text, traceback, result (pure)."""

from __future__ import annotations

import json

from easyjob.core.outcome import (
    ERROR_LIMIT,
    RESULT_LIMIT,
    encode_result,
    error_text,
    failed,
    succeeded,
)


class QuotaError(Exception):
    pass


def test_error_text_is_type_and_message_with_notes_and_capped() -> None:
    err = ValueError("bad input")
    assert error_text(err) == "ValueError: bad input"
    err.add_note("while reading row 7")
    assert error_text(err) == "ValueError: bad input\nwhile reading row 7"
    assert error_text(QuotaError()) == f"{__name__}.QuotaError"
    assert len(error_text(ValueError("x" * 10_000))) == ERROR_LIMIT


def test_the_traceback_holds_the_chained_cause() -> None:
    try:
        try:
            {}["key"]
        except KeyError as inner:
            raise RuntimeError("lookup failed") from inner
    except RuntimeError as err:
        outcome = failed(err)
    assert outcome.error == "RuntimeError: lookup failed" and not outcome.ok
    assert outcome.traceback is not None
    assert "KeyError: 'key'" in outcome.traceback
    assert "The above exception was the direct cause" in outcome.traceback
    assert outcome.traceback.endswith("RuntimeError: lookup failed")


def test_results_are_stored_as_json_reads_them_back_or_noted() -> None:
    assert encode_result({"a": (1, 2), 3: "x"}) == ({"a": [1, 2], "3": "x"}, None)
    assert encode_result(None) == (None, None)
    assert encode_result(False) == (False, None)
    value, note = encode_result(object())
    assert value is None and (note or "").startswith(
        "result not stored: a object is not JSON-serializable"
    )
    fits = "é" * (RESULT_LIMIT // 2 - 1)  # 2 bytes each, plus two quotes
    assert len(json.dumps(fits, ensure_ascii=False).encode()) == RESULT_LIMIT
    assert encode_result(fits) == (fits, None)
    assert encode_result(fits + "e") == (
        None,
        f"result not stored: {RESULT_LIMIT + 1} bytes of JSON, over the limit of "
        f"{RESULT_LIMIT} bytes",
    )
    assert succeeded([1]).ok and succeeded([1]).result == [1]
