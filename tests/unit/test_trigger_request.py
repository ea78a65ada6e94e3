"""What a manual trigger writes, decided without a database (easyjob/store/triggers.py):
the same rules for a trigger in its own transaction and in the caller's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from easyjob.errors import TaskDefinitionError, TaskNotFoundError
from easyjob.store.triggers import TriggerRequest, TriggerTarget

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
TASK = TriggerTarget(id=7, accepts=("n",), misfire_grace_ms=60_000, shards=1, broadcast=False)


@pytest.mark.parametrize(
    ("at", "due"),
    [
        (None, NOW),  # now, database time
        (NOW + timedelta(hours=1), NOW + timedelta(hours=1)),
        (NOW - timedelta(seconds=60), NOW - timedelta(seconds=60)),  # within the grace
    ],
)
def test_the_due_time(at: datetime | None, due: datetime) -> None:
    assert TriggerRequest.of("m", at, {"n": 1}).due(TASK, NOW) == due


def test_arguments_are_stored_as_json_and_none_when_empty() -> None:
    assert TriggerRequest.of("m", None, {"n": (1, "x")}).kwargs == {"n": [1, "x"]}
    assert TriggerRequest.of("m", None, {}).kwargs is None


@pytest.mark.parametrize(
    ("at", "kwargs", "message"),
    [
        (None, {"n": float("nan")}, "trigger of 'm': kwargs must be JSON"),
        (None, {1: 2}, "trigger of 'm': kwargs must be a JSON object, got {1: 2}"),
        (datetime(2026, 1, 1), None, "at must be an aware datetime, got datetime.datetime("),
    ],
)
def test_a_request_no_task_could_take_is_refused(
    at: datetime | None, kwargs: dict[object, object], message: str
) -> None:
    with pytest.raises(TaskDefinitionError) as info:
        TriggerRequest.of("m", at, kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("target", "at", "kwargs", "error", "message"),
    [
        (None, None, None, TaskNotFoundError, "no task named 'm'"),
        (
            TASK,
            None,
            {"n": 1, "evil": 2},
            TaskDefinitionError,
            "task 'm' does not accept trigger argument(s) 'evil' (it accepts: 'n')",
        ),
        (
            TriggerTarget(7, None, 60_000, 1, False),
            None,
            {"n": 1},
            TaskDefinitionError,
            "(it accepts: none)",
        ),
        (
            TASK,
            NOW - timedelta(seconds=61),
            None,
            TaskDefinitionError,
            "at 2026-11-26T11:58:59+00:00: in the past (database time 2026-11-26T12:00:00+00:00)",
        ),
    ],
)
def test_a_request_its_task_cannot_take_is_refused(
    target: TriggerTarget | None,
    at: datetime | None,
    kwargs: dict[str, object] | None,
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error) as info:
        TriggerRequest.of("m", at, kwargs).due(target, NOW)
    assert message in str(info.value)
