"""Reading a cron expression: dialects, fields, validation with messages that state the rule.

Three dialects (see ``docs/cron.md`` for every difference):

- ``unix``: 5 fields, or 6 with seconds first; weekdays 0-7 (0 and 7 = Sunday); when both
  day fields are restricted a day matches if EITHER does (Vixie cron).
- ``spring``: 6 fields, seconds first; weekdays 0-7; a day matches only if BOTH day
  fields match.
- ``quartz``: 6 fields or 7 with a year; weekdays 1-7 (1 = Sunday); exactly one day field
  must be ``?``; steps larger than the field's range are refused.

Without a dialect the field count decides: 5 or 6 fields read as ``unix`` (easyjob's form
so far, kept for stored expressions), 7 fields as ``quartz``. A 6-field expression whose
meaning differs between the dialects (both day fields restricted; weekday numbers) is
still read as before, with a warning. A dialect can also be written in the expression as a
marker, ``quartz: 0 0 12 ? * 2-6``, which is how a stored row names its dialect.

croniter parses and validates the plain fields (numbers, names, ranges, steps, lists); the
day rules are :class:`~easyjob.core.cron_days.DaySpec`, the times of day plain sorted lists
that :mod:`easyjob.core.cron` walks by bisection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from croniter import CroniterError, croniter

from easyjob.core.cron_days import DaySpec
from easyjob.errors import CronError

__all__ = ["DIALECTS", "Parsed", "parse", "split_marker"]

DIALECTS = ("unix", "spring", "quartz")
_MARKER_RE = re.compile(r"([A-Za-z]+)\s*:\s*(.*)", re.DOTALL)
# croniter splits on ASCII whitespace only; splitting the same way keeps its view and ours equal.
_FIELDS_RE = re.compile(r"\S+", re.ASCII)
# croniter's H (needs a hash id) and R (random: every node would compute other fire times).
_HASHED_RE = re.compile(r"[hr](\(\d+-\d+\))?(/\d+)?", re.IGNORECASE)
_STEP_RE = re.compile(r"/(\d*)")
_NUMBER_RE = re.compile(r"(?<![/\d])\d+")
_DOM_LAST_RE = re.compile(r"L(?:-(\d+))?(W?)")
_DOM_NEAREST_RE = re.compile(r"(\d+)W")
_DOW_LAST_RE = re.compile(r"(\d+|[A-Z]{3})L")
_DOW_CRONITER_LAST_RE = re.compile(r"L(\d+|[A-Z]{3})")
_DOW_NTH_RE = re.compile(r"(\d+|[A-Z]{3})#(\d*)")
_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_YEARS = (1970, 2099)
_MAX_LAST_OFFSET = 30

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_COUNTS = {None: (5, 6, 7), "unix": (5, 6), "spring": (6,), "quartz": (6, 7)}
_FORMS = {
    None: "expected 5 fields (minute hour day month weekday), "
    "6 (second minute hour day month weekday) or 7 (Quartz: ... weekday year)",
    "unix": "the unix dialect takes 5 fields (minute hour day month weekday) "
    "or 6 (second minute hour day month weekday)",
    "spring": "the spring dialect takes 6 fields (second minute hour day month weekday)",
    "quartz": "the quartz dialect takes 6 fields (second minute hour day month weekday) "
    "or 7 (... weekday year)",
}


@dataclass(frozen=True)
class _Field:
    name: str
    bounds: str
    allowed: str
    step_limit: int
    slot: int  # position in croniter's expand() result


_SECOND = _Field("second", "0-59", "0-59", 59, 5)
_MINUTE = _Field("minute", "0-59", "0-59", 59, 0)
_HOUR = _Field("hour", "0-23", "0-23", 23, 1)
_DOM = _Field("day-of-month", "1-31", "1-31, 'L', 'L-n', 'nW', 'LW', '?'", 31, 2)
_MONTH = _Field("month", "1-12", "1-12, JAN-DEC", 12, 3)
_DOW = _Field("day-of-week", "0-7", "0-7, SUN-SAT, 'n#k', 'nL', '?'", 7, 4)
_QUARTZ_DOW = _Field("day-of-week", "1-7", "1-7 (1 = SUN), SUN-SAT, 'n#k', 'nL', 'L', '?'", 7, 4)
_YEAR = _Field("year", "1970-2099", "1970-2099", 10_000, -1)


@dataclass(frozen=True)
class Parsed:
    """A validated expression: its text, dialect and the pieces the walker needs."""

    body: str  # without the dialect marker
    dialect: str | None  # chosen explicitly (argument or marker); None: by field count
    reading: str  # the dialect it is read in
    seconds: tuple[int, ...]  # the time-of-day fields, each ascending
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: DaySpec
    warnings: tuple[str, ...]


def split_marker(text: str) -> tuple[str | None, str]:
    """``'quartz: 0 0 12 ? * 2-6'`` -> ``('quartz', '0 0 12 ? * 2-6')``; no marker -> None."""
    match = _MARKER_RE.fullmatch(text)
    if match is None:
        return None, text
    return match[1].lower(), match[2].strip()


def parse(expr: object, dialect: object = None) -> Parsed:
    """Validate *expr* in *dialect* (``None``, ``'unix'``, ``'spring'``, ``'quartz'``)."""
    if not isinstance(expr, str):
        raise CronError(
            f"invalid cron expression {expr!r}: expected a string, got {type(expr).__name__}"
        )
    text = expr.strip()
    if not text:
        raise CronError(f"invalid cron expression {expr!r}: it is empty")
    if dialect is not None and dialect not in DIALECTS:
        raise CronError(f"unknown cron dialect {dialect!r} (use 'unix', 'spring' or 'quartz')")
    chosen = dialect if isinstance(dialect, str) else None
    marker, body = split_marker(text)
    if marker is not None:
        if marker not in DIALECTS:
            raise CronError(
                f"invalid cron expression {text!r}: unknown dialect marker {marker!r} "
                "(use 'unix:', 'spring:' or 'quartz:')"
            )
        if chosen is not None and chosen != marker:
            raise CronError(
                f"invalid cron expression {text!r}: its marker says {marker!r} "
                f"but the dialect given is {chosen!r}"
            )
        chosen = marker
    if not body:
        raise CronError(f"invalid cron expression {text!r}: it is empty")
    return _Reader(text, body, chosen).read()


class _Reader:
    """One parse: the expression's text (for messages), its fields and its dialect."""

    def __init__(self, text: str, body: str, dialect: str | None) -> None:
        self.text, self.body, self.dialect = text, body, dialect
        self.warnings: list[str] = []

    def fail(self, reason: str) -> CronError:
        return CronError(f"invalid cron expression {self.text!r}: {reason}")

    def read(self) -> Parsed:
        source, dialect = self.body, self.dialect
        if source.startswith("@"):
            source = _MACROS.get(source.lower(), "")
            if not source:
                raise self.fail(f"unsupported macro (supported: {', '.join(_MACROS)})")
            if dialect == "quartz":
                raise self.fail("the quartz dialect has no macros")
            dialect = None
        fields = _FIELDS_RE.findall(source)
        if len(fields) not in _COUNTS[dialect]:
            raise self.fail(f"{_FORMS[dialect]}, got {len(fields)}")
        if len(fields) == 5:
            fields.insert(0, "0")
            seconds = False
        else:
            seconds = True
        reading = dialect or ("quartz" if len(fields) == 7 else "unix")
        self.reading, self.guessed = reading, dialect is None and seconds and reading == "unix"
        clock = [self.plain(fields, i, spec, seconds) for i, spec in enumerate(_CLOCK_FIELDS)]
        months = self.plain(fields, 4, _MONTH, seconds)
        days = self.days(fields, seconds, _all(months, 1, 12))
        return Parsed(
            body=self.body,
            dialect=self.dialect,
            reading=reading,
            seconds=_values(clock[0], 59),
            minutes=_values(clock[1], 59),
            hours=_values(clock[2], 23),
            days=days,
            warnings=tuple(self.warnings),
        )

    def prefix(self, spec: _Field, value: str) -> str:
        return f"{spec.name} field {value!r}"

    def plain(self, fields: list[str], index: int, spec: _Field, seconds: bool) -> list[Any]:
        """Validate a plain field (croniter syntax) and return croniter's expansion."""
        value = fields[index] if seconds or index else "0"
        where = self.prefix(spec, value)
        if _HASHED_RE.fullmatch(value):
            raise self.fail(f"{where} is not supported (hashed H and random R values)")
        self.check_steps(value, spec, where)
        probe = ["*"] * 6
        probe[index] = value
        try:
            expanded = croniter.expand(" ".join(probe), second_at_beginning=True)[0]
        except CroniterError as err:
            reason = str(err)
            if "out of range" in reason or "out of bands" in reason:
                raise self.fail(f"{where} is out of range ({spec.bounds})") from err
            if "?" in value and spec not in (_DOM, _DOW):
                raise self.fail(
                    f"{where} is not valid ('?' is only allowed in day-of-month and day-of-week)"
                ) from err
            if spec in (*_CLOCK_FIELDS, _MONTH) and re.search(r"[LW#]", value.upper()):
                raise self.fail(
                    f"{where} is not valid ('L', 'W' and '#' are only allowed in "
                    "day-of-month and day-of-week)"
                ) from err
            raise self.fail(
                f"{where} is not valid (use {spec.allowed}, '*', "
                "ranges 'a-b', steps 'a/n' or '*/n', lists 'a,b')"
            ) from err
        return list(expanded[spec.slot])

    def check_steps(self, value: str, spec: _Field, where: str) -> None:
        for raw in _STEP_RE.findall(value):
            if not raw:
                raise self.fail(f"{where} is not valid ('/' must be followed by a step)")
            step = int(raw)
            rule = f"steps must be 1-{spec.step_limit}"
            if step == 0:
                raise self.fail(f"{where} has a step of 0 ({rule})")
            if step > spec.step_limit:
                message = f"{where} has a step of {step}, larger than the field's range ({rule})"
                if self.reading == "quartz":
                    raise self.fail(message)
                self.warnings.append(
                    f"cron expression {self.text!r}: {message}; it fires only at the start value "
                    "(the quartz dialect refuses it)"
                )

    def days(self, fields: list[str], seconds: bool, months: frozenset[int]) -> DaySpec:
        dom_text, dow_text = fields[3].upper(), fields[5].upper()
        quartz = self.reading == "quartz"
        if quartz and (dom_text == "?") == (dow_text == "?"):
            raise self.fail(
                f"the quartz dialect needs '?' in exactly one of day-of-month ({fields[3]!r}) "
                f"and day-of-week ({fields[5]!r}); Quartz cannot combine them"
            )
        dom = self.dom(fields, seconds, dom_text)
        dow = self.dow(fields, seconds, dow_text)
        years = self.years(fields[6]) if len(fields) == 7 else None
        spec = DaySpec(
            months=months,
            years=years,
            either=self.reading == "unix",
            w_spring=self.reading == "spring",
            **dom,
            **dow,
        )
        if self.guessed and not spec.dom_all and not spec.dow_all:
            self.warnings.append(
                f"cron expression {self.text!r} restricts both day-of-month and day-of-week: "
                "easyjob (like Unix cron) fires when EITHER matches, Spring only when BOTH do, "
                "and Quartz refuses it; pass cron_dialect='unix' (or 'spring') to say which"
            )
        return spec

    def dom(self, fields: list[str], seconds: bool, value: str) -> dict[str, Any]:
        if value in ("*", "?"):
            return {}
        where = self.prefix(_DOM, fields[3])
        plain: list[str] = []
        last: set[int] = set()
        nearest: set[int] = set()
        last_nearest: set[int] = set()
        for item in value.split(","):
            if match := _DOM_LAST_RE.fullmatch(item):
                offset = int(match[1] or 0)
                if offset > _MAX_LAST_OFFSET:
                    raise self.fail(
                        f"{where}: 'L-n' counts back 0-{_MAX_LAST_OFFSET} days, got {offset}"
                    )
                (last_nearest if match[2] else last).add(offset)
            elif match := _DOM_NEAREST_RE.fullmatch(item):
                day = int(match[1])
                if not 1 <= day <= 31:
                    raise self.fail(f"{where}: 'nW' needs a day 1-31, got {day}")
                nearest.add(day)
            elif "W" in item:
                raise self.fail(f"{where}: 'W' follows a single day ('15W') or 'L' ('LW')")
            elif item.endswith("L") or "#" in item:
                raise self.fail(
                    f"{where}: {item!r} is a day-of-week form (the last or n-th weekday of the "
                    "month); in day-of-month use 'L', 'L-n', 'LW' or 'nW'"
                )
            else:
                plain.append(item)
        days: list[Any] = []
        if plain:
            probe = [*fields[:6]]
            probe[3] = ",".join(plain)
            days = self.plain(probe, 3, _DOM, True)
        # Only '*' and '?' restrict nothing: '1-31' is a restriction (croniter's reading).
        return {
            "dom_all": False,
            "dom": frozenset(range(1, 32)) if days == ["*"] else frozenset(days),
            "dom_last": frozenset(last),
            "dom_nearest": frozenset(nearest),
            "dom_last_nearest": frozenset(last_nearest),
        }

    def dow(self, fields: list[str], seconds: bool, value: str) -> dict[str, Any]:
        if value in ("*", "?"):
            return {}
        quartz = self.reading == "quartz"
        spec = _QUARTZ_DOW if quartz else _DOW
        where = self.prefix(spec, fields[5])
        plain: list[str] = []
        last: set[int] = set()
        nth: set[tuple[int, int]] = set()
        if quartz and "," in value and ("L" in value or value.count("#") > 1):
            raise self.fail(
                f"{where}: the quartz dialect takes 'L' or 'n#k' only alone in day-of-week "
                "(as Quartz does); the spring dialect accepts them in lists"
            )
        for item in value.split(","):
            if item == "L":
                if not quartz:
                    raise self.fail(
                        f"{where}: 'L' alone means Saturday only in the quartz dialect; "
                        "write 'SAT', or 'nL' (e.g. 'FRIL') for the last such weekday of the month"
                    )
                plain.append("7")
            elif match := _DOW_LAST_RE.fullmatch(item) or _DOW_CRONITER_LAST_RE.fullmatch(item):
                last.add(self.weekday(match[1], spec, where))
            elif match := _DOW_NTH_RE.fullmatch(item):
                weekday = self.weekday(match[1], spec, where)
                if not match[2] or not 1 <= int(match[2]) <= 5:
                    raise self.fail(
                        f"{where}: the occurrence after '#' must be 1-5 (the 1st to 5th such "
                        f"weekday of the month), got {match[2]!r}"
                    )
                nth.add((weekday, int(match[2])))
            elif "L" in item.replace("JUL", "") or "#" in item:
                raise self.fail(
                    f"{where}: {item!r} is not valid ('nL' is the last weekday n of the month, "
                    "'n#k' its k-th occurrence, k 1-5)"
                )
            else:
                plain.append(item)
        weekdays: list[Any] = []
        if plain:
            joined = ",".join(plain)
            if re.search(r"\d", _STEP_RE.sub("", joined)):
                self.numbered()
            if quartz:
                joined = _NUMBER_RE.sub(lambda m: self.quartz_number(m[0], where), joined)
            probe = [*fields[:6]]
            probe[5] = joined
            weekdays = self.plain(probe, 5, spec, True)
        return {
            "dow_all": False,
            "dow": frozenset(range(7)) if weekdays == ["*"] else frozenset(w % 7 for w in weekdays),
            "dow_nth": frozenset(nth),
            "dow_last": frozenset(last),
        }

    def weekday(self, token: str, spec: _Field, where: str) -> int:
        if token in _NAMES:
            return _NAMES.index(token)
        if not token.isdigit():
            raise self.fail(f"{where}: {token!r} is not a weekday ({spec.allowed})")
        self.numbered()
        number = int(token)
        if self.reading == "quartz":
            return int(self.quartz_number(token, where))
        if not 0 <= number <= 7:
            raise self.fail(f"{where}: weekday {number} is out of range (0-7, 0 and 7 = Sunday)")
        return number % 7

    def quartz_number(self, token: str, where: str) -> str:
        number = int(token)
        if not 1 <= number <= 7:
            raise self.fail(
                f"{where}: weekday {number} is out of range (1-7, 1 = Sunday in Quartz)"
            )
        return str(number - 1)

    def numbered(self) -> None:
        if self.guessed and not self.warnings_about_numbers:
            self.warnings_about_numbers = True
            self.warnings.append(
                f"cron expression {self.text!r} numbers weekdays: easyjob and Spring read 1 as "
                "Monday (0 and 7 as Sunday), Quartz reads 1 as Sunday; use names (MON-FRI) or "
                "pass cron_dialect='unix' (or 'quartz') to say which"
            )

    warnings_about_numbers = False

    def years(self, value: str) -> frozenset[int] | None:
        where = self.prefix(_YEAR, value)
        if value == "*":
            return None
        found: set[int] = set()
        for item in value.split(","):
            match = re.fullmatch(r"(\*|\d{4})(?:-(\d{4}))?(?:/(\d+))?", item)
            if match is None:
                raise self.fail(f"{where} is not valid (use 1970-2099, '*', ranges, steps, lists)")
            start = _YEARS[0] if match[1] == "*" else int(match[1])
            end = (
                int(match[2]) if match[2] else (_YEARS[1] if match[3] or match[1] == "*" else start)
            )
            step = int(match[3]) if match[3] else 1
            if step == 0:
                raise self.fail(f"{where} has a step of 0 (steps must be at least 1)")
            if not (_YEARS[0] <= start <= _YEARS[1] and _YEARS[0] <= end <= _YEARS[1]):
                raise self.fail(f"{where} is out of range (1970-2099)")
            if end < start:
                raise self.fail(f"{where}: a year range must go forward, got {item!r}")
            found.update(range(start, end + 1, step))
        return frozenset(found)


_CLOCK_FIELDS = (_SECOND, _MINUTE, _HOUR)


def _values(values: list[Any], high: int) -> tuple[int, ...]:
    return tuple(range(high + 1)) if values == ["*"] else tuple(sorted({int(v) for v in values}))


def _all(values: list[Any], low: int, high: int) -> frozenset[int]:
    return frozenset(range(low, high + 1)) if values == ["*"] else frozenset(values)
