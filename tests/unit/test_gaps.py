"""Which fires a run row records, and how many MISSED (pure): a fire's own row, a MISSED
or SKIPPED summary row's span, and the gap a fire's row carries (schema version 7)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from easyjob.core.records import HistoryRow, PlannedFire
from easyjob.core.states import RunStatus, Trigger

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _s(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _row(
    status: RunStatus,
    fire: int,
    *,
    count: int | None = None,
    last: int | None = None,
    since: int | None = None,
) -> HistoryRow:
    return HistoryRow(
        id=1,
        task_id=1,
        task_name="t",
        pid=None,
        fire_time=_s(fire),
        due_time=_s(fire),
        node_id=None,
        status=status,
        triggered_by=Trigger.CRON,
        attempt=1,
        claim_time=None,
        start_time=None,
        end_time=None,
        error_msg=None,
        version=0,
        create_time=T0,
        missed_count=count,
        last_fire_time=None if last is None else _s(last),
        missed_from=None if since is None else _s(since),
    )


M, P, S, K = RunStatus.MISSED, RunStatus.PENDING, RunStatus.SUCCESS, RunStatus.SKIPPED

# (row, fires it records, of them MISSED, missed_fires)
CASES = [
    (_row(S, 5), [5], [], 0),
    (_row(M, 5), [5], [5], 1),  # one fire MISSED where it waited
    (_row(M, 2, count=4, last=5), [2, 3, 4, 5], [2, 3, 4, 5], 4),  # a summary row
    (_row(K, 2, count=4, last=5), [2, 3, 4, 5], [], 0),  # a calendar's excluded stretch
    (_row(S, 5, count=3, since=2), [2, 3, 4, 5], [2, 3, 4], 3),  # ran after its gap
    (_row(P, 5, count=3, since=2), [2, 3, 4, 5], [2, 3, 4], 3),
    (_row(M, 5, count=3, since=2), [2, 3, 4, 5], [2, 3, 4, 5], 4),  # missed itself too
    (_row(S, 9, count=None, since=2), list(range(2, 10)), list(range(2, 9)), 1),  # uncounted
]


@pytest.mark.parametrize(("row", "records", "missed", "count"), CASES)
def test_a_row_records_its_fire_its_span_and_its_gap(
    row: HistoryRow, records: list[int], missed: list[int], count: int
) -> None:
    window = range(0, 12)
    assert [f for f in window if row.records(_s(f))] == records
    assert [f for f in window if row.missed(_s(f))] == missed
    assert row.missed_fires == count


@pytest.mark.parametrize(
    ("fire", "gap"),
    [
        (PlannedFire(_s(5)), None),
        (PlannedFire(_s(5), M), (_s(5), 1)),
        (PlannedFire(_s(2), M, "why", 4, _s(5)), (_s(2), 4)),
        (PlannedFire(_s(5), missed_count=3, missed_from=_s(2)), (_s(2), 3)),
        (PlannedFire(_s(9), missed_from=_s(2)), (_s(2), 1)),  # too many to count
        (PlannedFire(_s(2), K, "holiday", 4, _s(5)), None),
    ],
)
def test_a_planned_fire_tells_the_gap_it_records(
    fire: PlannedFire, gap: tuple[datetime, int] | None
) -> None:
    assert fire.gap == gap
