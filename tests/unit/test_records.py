"""Records made without their dataclass ``__init__`` (easyjob.core.records.from_values) are
the records ``__init__`` makes: every field set, to the row's value, frozen."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from easyjob.core.records import Candidate, PlanningRow, Run, from_values
from easyjob.core.states import (
    Misfire,
    NodeStatus,
    Overlap,
    RunStatus,
    TaskStatus,
    Trigger,
    by_value,
)
from easyjob.store.runs import reads

T0 = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)

#: A valid stored value per column an enum is made from.
ENUMS: dict[str, tuple[str, Any]] = {
    "status": (str(RunStatus.RUNNING), RunStatus.RUNNING),
    "triggered_by": (str(Trigger.MANUAL), Trigger.MANUAL),
    "overlap": (str(Overlap.ALLOW), Overlap.ALLOW),
    "misfire": (str(Misfire.SKIP), Misfire.SKIP),
}


def _row(columns: tuple[Any, ...]) -> tuple[list[Any], dict[str, Any]]:
    """A row of *columns* with a value of its own in every place, and the field values it
    must give (by the column's name: the record's fields are named as the columns)."""
    row, expected = [], {}
    for i, column in enumerate(columns):
        stored, value = ENUMS.get(column.key, (f"value-{i}", f"value-{i}"))
        row.append(stored)
        expected[column.key] = value
    return row, expected


@pytest.mark.parametrize(
    ("make", "columns", "cls"),
    [
        (reads._run, reads._RUN_COLUMNS, Run),
        (reads._candidate, reads._CANDIDATE_COLUMNS, Candidate),
    ],
    ids=["run", "candidate"],
)
def test_a_read_row_sets_every_field_of_its_record_from_its_own_column(
    make: Any, columns: tuple[Any, ...], cls: type[Any]
) -> None:
    row, expected = _row(columns)
    record = make(row)
    names = {f.name for f in dataclasses.fields(cls)}
    assert set(vars(record)) == names == set(expected)
    assert {name: getattr(record, name) for name in names} == expected
    assert record == cls(**expected)  # as __init__ makes it


def _run(**changes: Any) -> Run:
    values: dict[str, Any] = {
        "id": 7,
        "version": 2,
        "status": RunStatus.CLAIMED,
        "node_id": "n1",
        "task_id": 3,
        "task_name": "t",
        "func": "m:f",
        "kwargs": {"a": 1},
        "fire_time": T0,
        "due_time": T0 + timedelta(seconds=1),
        "attempt": 1,
        "triggered_by": Trigger.CRON,
        "pid": None,
        "overlap": Overlap.SERIAL,
        "retries": 0,
        "retry_delay_ms": 1000,
        "timeout_ms": None,
        "misfire": Misfire.FIRE_ONCE,
        "misfire_grace_ms": 60_000,
    }
    return Run(**{**values, **changes})


def test_a_record_made_from_values_is_frozen_and_its_defaults_are_filled() -> None:
    made = _run()
    given = {k: v for k, v in vars(made).items() if k not in ("priority", "shards", "cron_expr")}
    fast = from_values(Run, given)
    assert fast == made
    assert (fast.priority, fast.shards, fast.cron_expr) == (0, 1, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.status = RunStatus.SUCCESS  # type: ignore[misc]


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"id": 1}, "version"),  # a field without a default left out
        ({**vars(_run()), "colour": "red"}, "colour"),  # no such field
    ],
    ids=["missing", "unknown"],
)
def test_a_record_with_a_field_missing_or_unknown_is_refused_naming_it(
    values: dict[str, Any], named: str
) -> None:
    with pytest.raises(TypeError, match=named):
        from_values(Run, dict(values))


def test_a_bumped_run_is_the_run_at_its_next_version_and_the_original_is_unchanged() -> None:
    run = _run()
    bumped = run.bumped(RunStatus.RUNNING)
    assert bumped == dataclasses.replace(run, status=RunStatus.RUNNING, version=3)
    assert (run.status, run.version) == (RunStatus.CLAIMED, 2)


def test_a_planning_row_from_a_row_is_the_one_init_makes() -> None:
    stored = {f.name: None for f in dataclasses.fields(PlanningRow)}
    stored.update(
        id=4,
        name="t",
        func="m:f",
        tz="UTC",
        status=str(TaskStatus.PAUSED),
        version=5,
        misfire=str(Misfire.SKIP),
        misfire_grace_ms=1000,
        overlap=str(Overlap.ALLOW),
        fire_count=3,
        origin="code",
        shards=2,
        broadcast=True,
        jitter_ms=5,
    )
    made = PlanningRow.from_row(stored)
    enums = {
        "status": TaskStatus.PAUSED,
        "misfire": Misfire.SKIP,
        "overlap": Overlap.ALLOW,
    }
    assert made == PlanningRow(**{**stored, **enums})
    assert made.status is TaskStatus.PAUSED


def test_a_stored_text_becomes_its_member_and_an_unknown_one_is_refused_by_its_enum() -> None:
    for enum in (RunStatus, TaskStatus, NodeStatus, Trigger, Misfire, Overlap):
        members = by_value(enum)
        assert members is by_value(enum)  # one table per enumeration
        assert all(members[str(member)] is member for member in enum)
    with pytest.raises(ValueError, match="'BOGUS' is not a valid RunStatus"):
        by_value(RunStatus)["BOGUS"]
