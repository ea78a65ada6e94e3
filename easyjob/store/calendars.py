"""Statements on ``easy_job_calendar``: calendars of excluded days (see
:mod:`easyjob.core.calendars`).

A calendar is the set of its rows; it exists while it has one. Planners read the days of
the calendars their due tasks name, and keep them until :meth:`CalendarStore.version`
changes: one small read per poll, not one per fire.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import date, datetime

import sqlalchemy as sa

from easyjob.core.calendars import CalendarDay, check_calendar_name, without
from easyjob.errors import CalendarNotFoundError, ConfigError
from easyjob.store.database import Database
from easyjob.store.engine import database_time
from easyjob.store.schema import calendar_table

__all__ = ["CalendarStore"]

c = calendar_table
_MAX_NOTE = 1000
Range = tuple[date, date]


class CalendarStore:
    """Calendars: add days, remove days or whole calendars, list them, and the planners'
    cached read of their days."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def add(self, name: str, first: date, last: date, note: str | None = None) -> CalendarDay:
        """Exclude the days *first* to *last* (inclusive) in calendar *name* (created by its
        first range); returns the row. ConfigError for a bad name, a range that ends before
        it starts, or a note longer than 1000 characters: nothing is written."""
        _check(name, (first, last))
        if note is not None and len(note) > _MAX_NOTE:
            raise ConfigError(f"calendar note too long: {len(note)} characters (at most 1000)")

        def write(conn: sa.Connection) -> int:
            now = database_time(conn)
            values = {"name": name, "first_day": first, "last_day": last, "note": note}
            result = conn.execute(c.insert().values(**values, create_time=now))
            return int(result.inserted_primary_key[0])  # type: ignore[index]

        row_id = self._db.write("add_calendar_days", write)
        return next(day for day in self.list(name) if day.id == row_id)

    def remove(self, name: str, days: Range | None = None) -> int:
        """Remove calendar *name* (every row), or only the days *days* from it (ranges that
        hold some of them are cut, keeping their note); returns how many days it excluded
        that it no longer does. CalendarNotFoundError when the calendar does not exist, or
        excludes none of *days*: nothing is changed."""
        check_calendar_name_or_fail(name)
        if days is not None:
            _check(name, days)

        def write(conn: sa.Connection) -> int:
            query = sa.select(c).where(c.c.name == name)
            if days is not None:
                query = query.where(c.c.first_day <= days[1], c.c.last_day >= days[0])
            rows = [_day(row) for row in conn.execute(query).mappings()]
            if not rows:
                raise CalendarNotFoundError(_missing(conn, name, days))
            removed = 0
            for row in rows:
                if conn.execute(c.delete().where(c.c.id == row.id)).rowcount != 1:
                    continue  # removed meanwhile by another writer: its pieces are its own
                kept = [] if days is None else without((row.first_day, row.last_day), days)
                removed += row.days - sum((b - a).days + 1 for a, b in kept)
                for first, last in kept:
                    conn.execute(
                        c.insert().values(
                            name=name,
                            first_day=first,
                            last_day=last,
                            note=row.note,
                            create_time=row.create_time,
                        )
                    )
            return removed

        return self._db.write("remove_calendar_days", write)

    def list(self, name: str | None = None) -> list[CalendarDay]:
        """The rows of calendar *name* (every calendar's when None), by name and first day.
        CalendarNotFoundError when *name* has none."""
        if name is not None:
            check_calendar_name_or_fail(name)

        def read(conn: sa.Connection) -> list[CalendarDay]:
            query = sa.select(c).order_by(c.c.name, c.c.first_day, c.c.id)
            if name is not None:
                query = query.where(c.c.name == name)
            return [_day(row) for row in conn.execute(query).mappings()]

        found = self._db.read("list_calendars", read)
        if name is not None and not found:
            raise CalendarNotFoundError(f"no calendar named {name!r}")
        return found

    def days(self, names: Collection[str]) -> dict[str, tuple[Range, ...]]:
        """The excluded ranges of each calendar of *names* that exists (absent: none)."""
        if not names:
            return {}

        def read(conn: sa.Connection) -> dict[str, tuple[Range, ...]]:
            query = sa.select(c.c.name, c.c.first_day, c.c.last_day).where(
                c.c.name.in_(sorted(names))
            )
            found: dict[str, list[Range]] = {}
            for row in conn.execute(query):
                found.setdefault(row.name, []).append((row.first_day, row.last_day))
            return {key: tuple(sorted(value)) for key, value in found.items()}

        return self._db.read("calendar_days", read)

    def version(self) -> tuple[int, int]:
        """``(rows, highest id)``: changes whenever a calendar does (an add takes a new,
        higher id; a removal lowers the count, and a cut range is re-added under new ids),
        read from the primary key alone."""

        def read(conn: sa.Connection) -> tuple[int, int]:
            row = conn.execute(sa.select(sa.func.count(), sa.func.max(c.c.id))).one()
            return int(row[0]), int(row[1] or 0)

        return self._db.read("calendar_version", read)


def check_calendar_name_or_fail(name: str) -> None:
    try:
        check_calendar_name(name)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _check(name: str, days: Range) -> None:
    check_calendar_name_or_fail(name)
    first, last = days
    if not all(isinstance(d, date) and not isinstance(d, datetime) for d in (first, last)):
        raise ConfigError(f"calendar {name!r}: days must be dates, got {first!r}..{last!r}")
    if last < first:
        raise ConfigError(
            f"calendar {name!r}: the range {first.isoformat()}..{last.isoformat()} ends "
            "before it starts"
        )


def _missing(conn: sa.Connection, name: str, days: Range | None) -> str:
    exists = conn.scalar(sa.select(sa.func.count()).where(c.c.name == name))
    if days is None or not exists:
        return f"no calendar named {name!r}"
    return (
        f"calendar {name!r} excludes none of the days {days[0].isoformat()}..{days[1].isoformat()}"
    )


def _day(row: sa.RowMapping) -> CalendarDay:
    return CalendarDay(
        id=int(row["id"]),
        name=row["name"],
        first_day=row["first_day"],
        last_day=row["last_day"],
        note=row["note"],
        create_time=row["create_time"],
    )
