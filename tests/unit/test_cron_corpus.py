"""Cases transcribed from other projects' cron test suites, run against easyjob's reading.

Each ``cron_corpus/*.json`` names its source repository, file and commit. A case is one of:

- ``after`` + ``next``: the fires that follow ``after``, in order (chained ``next_after``);
- ``at`` + ``fires``: whether the expression fires at that instant;
- ``never``: the expression never fires (easyjob refuses it when parsed);
- ``invalid``: the expression is refused.

Times without an offset are wall times in the case's ``tz``; with one, they are instants.
A case marked ``policy`` is a deliberate difference (listed in docs/cron.md) with its
``reason``: for a DST policy (``dst-*``) or a result the source itself calls wrong
(``source-limitation``) the test checks that the source's answer is not easyjob's and that
easyjob gives ``ours``; ``syntax-refused`` is an expression the source accepts and easyjob
refuses; ``syntax-accepted`` one the source refuses and easyjob reads as ``ours`` says.
"""

from __future__ import annotations

import json
import warnings
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from easyjob.core.cron import CronSchedule
from easyjob.errors import CronDialectWarning, CronError

CORPUS = Path(__file__).parent / "cron_corpus"
SOURCES = sorted(CORPUS.glob("*.json"))
POLICIES = ("dst-gap", "dst-repeat", "dst-day-removed", "source-limitation")


def load() -> list[Any]:
    params = []
    for path in SOURCES:
        data = json.loads(path.read_text())
        for case in data["cases"]:
            params.append(pytest.param(case, id=f"{path.stem}: {case['ref']}: {case['expr']}"))
    return params


def instant(text: str, zone: ZoneInfo) -> datetime:
    value = datetime.fromisoformat(text)
    return value if value.tzinfo is not None else value.replace(tzinfo=zone)


def shown(fire: datetime | None, like: str, zone: ZoneInfo) -> str | None:
    """*fire* written as the source wrote its expectation: wall time, or with its offset."""
    if fire is None:
        return None
    if datetime.fromisoformat(like).tzinfo is None:
        return fire.astimezone(zone).replace(tzinfo=None).isoformat()
    return fire.astimezone(datetime.fromisoformat(like).tzinfo).isoformat()


def schedule(case: dict[str, Any]) -> CronSchedule:
    with warnings.catch_warnings():
        # Sources that name no dialect are read as easyjob reads them; the warning is
        # tested in test_cron.py.
        warnings.simplefilter("ignore", CronDialectWarning)
        return CronSchedule.parse(case["expr"], case.get("tz", "UTC"), case.get("dialect"))


def walk(case: dict[str, Any], expected: list[str]) -> list[str | None]:
    zone = ZoneInfo(case.get("tz", "UTC"))
    s, cursor, got = schedule(case), instant(case["after"], zone), []
    for like in expected:
        fire = s.next_after(cursor)
        got.append(shown(fire, like, zone))
        if fire is None:
            break
        cursor = fire
    return got


@pytest.mark.parametrize("case", load())
def test_corpus_case(case: dict[str, Any]) -> None:
    if case.get("invalid") or case.get("never"):
        with pytest.raises(CronError, match="never fires" if case.get("never") else None):
            schedule(case)
        return
    if "at" in case:
        zone = ZoneInfo(case.get("tz", "UTC"))
        at = instant(case["at"], zone)
        fired = schedule(case).first_at_or_after(at) == at
        assert fired is case["fires"]
        return
    if case.get("policy") == "syntax-refused":
        assert case["reason"]
        with pytest.raises(CronError):
            schedule(case)
        return
    if case.get("policy") == "syntax-accepted":
        assert case["reason"]
        assert walk(case, case["ours"]) == case["ours"]
        return
    if "policy" in case:
        assert case["policy"] in POLICIES
        assert case["reason"]
        assert walk(case, case["next"]) != case["next"]
        assert walk(case, case["ours"]) == case["ours"]
        return
    assert walk(case, case["next"]) == case["next"]


def test_corpus_has_three_sources_naming_file_and_commit() -> None:
    assert len(SOURCES) >= 3
    for path in SOURCES:
        data = json.loads(path.read_text())
        assert data["repository"] and data["file"] and len(data["commit"]) == 40
        assert data["cases"]


def test_apia_removed_day_fires_a_daily_job_once_per_local_day() -> None:
    # Pacific/Apia went from 2011-12-29 23:59:59 (-10:00) to 2011-12-31 00:00 (+14:00).
    apia = ZoneInfo("Pacific/Apia")
    for expr in ("0 0 12 * * *", "0 30 23 * * *", "0 0 0 * * *", "0 0 * * *"):
        s = CronSchedule.parse(expr, "Pacific/Apia", "unix")
        start = datetime(2011, 12, 27, tzinfo=apia)
        fires = s.fires_between(start, start + timedelta(days=7, seconds=-1))
        days = [f.astimezone(apia).date() for f in fires]
        assert len(days) == len(set(days)), (expr, fires)
        assert datetime(2011, 12, 30).date() not in days
        assert len(days) == 6  # 27, 28, 29, 31 December and 1, 2 January


def test_gap_across_midnight_removes_no_date_and_fires_once_at_its_end() -> None:
    # America/Nuuk went from 2024-03-30 23:00 (-02:00) to 2024-03-31 00:00 (-01:00): the
    # 30th lost its last hour, not the whole day, so its 23:00 fires at the transition.
    s = CronSchedule.parse("0 23 * * *", "America/Nuuk", "unix")
    start = datetime.fromisoformat("2024-03-29T12:00:00+00:00")
    fires = s.fires_between(start, start + timedelta(days=3))
    assert [f.isoformat() for f in fires] == [
        "2024-03-30T01:00:00+00:00",  # 23:00 on the 29th (-02:00)
        "2024-03-31T01:00:00+00:00",  # the 30th's 23:00, at 00:00 on the 31st (-01:00)
        "2024-04-01T00:00:00+00:00",  # 23:00 on the 31st (-01:00)
    ]
