"""The rule a node applies to the tables' schema version (easyjob.store.compat), as a table."""

from __future__ import annotations

import pytest

from easyjob.errors import SchemaOutdatedError, SchemaTooNewError, SchemaVersionError
from easyjob.store.compat import judge

URL = "sqlite:///x.db"


@pytest.mark.parametrize(
    ("found", "compatible_from", "code", "runs"),
    [
        ("4", "4", 4, True),  # its own version
        ("4", None, 4, True),  # release 4 wrote no compatible_from
        ("5", "4", 4, False),  # newer, additive: runs (and says so)
        ("7", "3", 4, False),
    ],
)
def test_versions_a_node_runs_on(
    found: str, compatible_from: str | None, code: int, runs: bool
) -> None:
    assert judge(URL, found, compatible_from, code) is runs


@pytest.mark.parametrize(
    ("found", "compatible_from", "error", "message"),
    [
        ("3", "3", SchemaOutdatedError, "needs version 4: run `easyjob upgrade-db`"),
        ("1", None, SchemaOutdatedError, "schema version '1', this easyjob needs version 4"),
        ("5", "5", SchemaTooNewError, "runs only code of version 5 or later"),
        ("5", None, SchemaTooNewError, "upgrade easyjob on this host"),
        ("5", "x", SchemaTooNewError, "runs only code of version 5 or later"),
        ("x", "4", SchemaVersionError, "schema version 'x', this easyjob needs version 4: not a"),
        (None, None, SchemaVersionError, "schema version None"),
    ],
)
def test_versions_a_node_refuses(
    found: str | None, compatible_from: str | None, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        judge(URL, found, compatible_from, 4)
    assert URL in str(caught.value)
