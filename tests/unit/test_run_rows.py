"""The pending read and the run read build their records from a row by position (the
node's hottest path): each record field must take the value of the column of its name."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from easyjob.core.states import Misfire, Overlap, RunStatus, Trigger
from easyjob.store.runs import reads

#: A valid stored value for the columns read into an enumeration.
_ENUMS = {
    "status": str(RunStatus.RUNNING),
    "triggered_by": str(Trigger.MANUAL),
    "overlap": str(Overlap.ALLOW),
    "misfire": str(Misfire.SKIP),
}


@pytest.mark.parametrize(
    ("columns", "build"),
    [(reads._RUN_COLUMNS, reads._run), (reads._CANDIDATE_COLUMNS, reads._candidate)],
    ids=["run", "candidate"],
)
def test_each_field_gets_the_column_of_its_name(columns: Any, build: Any) -> None:
    names = [column.name for column in columns]
    assert len(set(names)) == len(names), names
    row = [_ENUMS.get(name, f"value-{i}") for i, name in enumerate(names)]
    record = build(row)
    got = {f.name: getattr(record, f.name) for f in fields(record)}
    assert set(names) <= set(got), set(names) - set(got)
    for name, value in zip(names, row, strict=True):
        assert str(got[name]) == value, name
