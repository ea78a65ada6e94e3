"""Settings declared once: a config field carries its help, how its text is parsed, and its
check; the command line option ``--field-name`` and the variable ``EASYJOB_FIELD_NAME`` are
generated from it (pure).

The text parsers here serve every option of the command line; each raises ValueError with
the offending text in the message.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any, TypeVar

__all__ = [
    "Setting",
    "configure",
    "default_text",
    "env_name",
    "flag_name",
    "format_duration",
    "integer",
    "non_negative_int",
    "number",
    "one_of",
    "parse_duration",
    "positive_int",
    "seconds",
    "setting",
    "settings",
]

_KEY = "easyjob.setting"
_DURATION = re.compile(r"(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_UNITS = ("weeks", "days", "hours", "minutes", "seconds")

T = TypeVar("T")


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or a combination, largest unit first
    (``1d12h``). Raises ValueError naming *text*."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None:
        raise ValueError(
            f"invalid duration {text!r}: use a whole number with a unit w, d, h, m or s, "
            "largest first, e.g. 30d, 12h, 90m, 45s or 1d12h"
        )
    return timedelta(**{unit: int(n) for unit, n in zip(_UNITS, match.groups(), strict=True) if n})


def seconds(text: str) -> float:
    """A :func:`parse_duration` text as a number of seconds."""
    return parse_duration(text).total_seconds()


def format_duration(value: float) -> str:
    """Whole *value* seconds the way :func:`parse_duration` reads them: ``604800`` is ``7d``."""
    left, parts = int(value), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


#: The largest whole number a setting or an id may be: a signed 64-bit BIGINT, what every
#: database stores ids and counts in.
MAX_INT = 2**63 - 1


def positive_int(text: str) -> int:
    if not re.fullmatch(r"\s*\+?\d+\s*", text) or int(text) < 1:
        raise ValueError(f"must be a positive integer, got {text!r}")
    return _bounded(int(text), text)


def non_negative_int(text: str) -> int:
    if not re.fullmatch(r"\s*\+?\d+\s*", text):
        raise ValueError(f"must be a whole number (0 or more), got {text!r}")
    return _bounded(int(text), text)


def _bounded(value: int, text: str) -> int:
    if value > MAX_INT:
        raise ValueError(f"must be at most {MAX_INT} (a 64-bit integer), got {text.strip()!r}")
    return value


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"must be an integer, got {text!r}") from None


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"must be a number, got {text!r}") from None


def one_of(choices: tuple[str, ...], *, upper: bool = False) -> Callable[[str], str]:
    """A parser accepting *choices* in any case."""

    def check(text: str) -> str:
        value = text.upper() if upper else text.lower()
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {text!r}")
        return value

    return check


def _text(value: object) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _unchecked(name: str, value: object) -> None:
    pass


@dataclasses.dataclass(frozen=True)
class Setting:
    """What a config field tells the command line and the environment about itself.

    *parse* turns the text of the option or variable into the field's value (ValueError on
    bad text); *check* validates a value of the field (ConfigError naming the field and the
    value) and is what the config's ``__post_init__`` runs, so text and code meet one rule.
    *shown* words a computed default for ``--help``; *show* formats a plain one.
    """

    help: str
    metavar: str
    parse: Callable[[str], Any] = str
    check: Callable[[str, Any], None] = _unchecked
    shown: str | None = None
    show: Callable[[Any], str] = _text


def setting(
    default: Any = dataclasses.MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    help: str,
    metavar: str,
    parse: Callable[[str], Any] = str,
    check: Callable[[str, Any], None] = _unchecked,
    shown: str | None = None,
    show: Callable[[Any], str] = _text,
) -> Any:
    """A dataclass field with *default* (or *factory*) that is also a :class:`Setting`."""
    meta = {_KEY: Setting(help, metavar, parse, check, shown, show)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def flag_name(name: str) -> str:
    """The command line option of field *name*: ``max_held`` is ``--max-held``."""
    return "--" + name.replace("_", "-")


def env_name(name: str) -> str:
    """The environment variable of field *name*: ``max_held`` is ``EASYJOB_MAX_HELD``."""
    return "EASYJOB_" + name.upper()


def settings(cls: type) -> Iterator[tuple[dataclasses.Field[Any], Setting]]:
    """Every field of dataclass *cls* with its :class:`Setting`, in declaration order.
    Raises TypeError for a field that declares none (each one must be reachable)."""
    for field in dataclasses.fields(cls):
        found = field.metadata.get(_KEY)
        if not isinstance(found, Setting):
            raise TypeError(f"{cls.__name__}.{field.name} declares no setting")
        yield field, found


def default_text(field: dataclasses.Field[Any], found: Setting) -> str | None:
    """The default of *field* as ``--help`` shows it, or None when it has no words for it."""
    if found.shown is not None:
        return found.shown
    if field.default is dataclasses.MISSING or field.default is None:
        return None
    return found.show(field.default)


def configure(cls: type[T], values: Mapping[str, Any]) -> T:
    """``cls(**values)`` with only the settings *values* gives (not None): the rest keep the
    defaults the dataclass declares."""
    names = [field.name for field, _ in settings(cls)]
    return cls(**{name: values[name] for name in names if values.get(name) is not None})
