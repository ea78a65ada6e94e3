"""easyjob: scheduled jobs on a cluster of equal nodes sharing one SQL database."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from easyjob.clock import Clock, FakeClock, SystemClock
    from easyjob.context import TaskContext
    from easyjob.control import (
        add_calendar_days,
        add_schedule,
        list_calendars,
        pause,
        remove_calendar_days,
        remove_schedule,
        rerun,
        resume,
        set_schedule,
        trigger,
    )
    from easyjob.core.config import NodeConfig
    from easyjob.core.states import Misfire, Overlap
    from easyjob.decorator import runnable, scheduled
    from easyjob.errors import (
        CalendarNotFoundError,
        ConfigError,
        CronError,
        DatabaseError,
        DatabaseUnavailableError,
        DatabaseURLError,
        EasyJobError,
        NotRunnableError,
        SchemaMissingError,
        SchemaOutdatedError,
        SchemaTooNewError,
        SchemaVersionError,
        TaskDefinitionError,
        TaskNotFoundError,
        UnknownStrategyError,
        UnknownTimeZoneError,
    )
    from easyjob.events import EventKind, RunEvent
    from easyjob.node.node import Node
    from easyjob.registry import Registry
    from easyjob.store import Store

__version__ = "0.1.0"

#: Where each public name lives: imported on first use (PEP 562), so that ``easyjob
#: --version`` or ``from easyjob import scheduled`` does not import SQLAlchemy and the node.
_LAZY = {
    "CalendarNotFoundError": "easyjob.errors",
    "Clock": "easyjob.clock",
    "ConfigError": "easyjob.errors",
    "CronError": "easyjob.errors",
    "DatabaseError": "easyjob.errors",
    "DatabaseURLError": "easyjob.errors",
    "DatabaseUnavailableError": "easyjob.errors",
    "EasyJobError": "easyjob.errors",
    "EventKind": "easyjob.events",
    "FakeClock": "easyjob.clock",
    "Misfire": "easyjob.core.states",
    "Node": "easyjob.node.node",
    "NodeConfig": "easyjob.core.config",
    "NotRunnableError": "easyjob.errors",
    "Overlap": "easyjob.core.states",
    "Registry": "easyjob.registry",
    "RunEvent": "easyjob.events",
    "SchemaMissingError": "easyjob.errors",
    "SchemaOutdatedError": "easyjob.errors",
    "SchemaTooNewError": "easyjob.errors",
    "SchemaVersionError": "easyjob.errors",
    "Store": "easyjob.store",
    "SystemClock": "easyjob.clock",
    "TaskContext": "easyjob.context",
    "TaskDefinitionError": "easyjob.errors",
    "TaskNotFoundError": "easyjob.errors",
    "UnknownStrategyError": "easyjob.errors",
    "UnknownTimeZoneError": "easyjob.errors",
    "add_calendar_days": "easyjob.control",
    "add_schedule": "easyjob.control",
    "list_calendars": "easyjob.control",
    "pause": "easyjob.control",
    "remove_calendar_days": "easyjob.control",
    "remove_schedule": "easyjob.control",
    "rerun": "easyjob.control",
    "resume": "easyjob.control",
    "runnable": "easyjob.decorator",
    "scheduled": "easyjob.decorator",
    "set_schedule": "easyjob.control",
    "trigger": "easyjob.control",
}


__all__ = [
    "CalendarNotFoundError",
    "Clock",
    "ConfigError",
    "CronError",
    "DatabaseError",
    "DatabaseURLError",
    "DatabaseUnavailableError",
    "EasyJobError",
    "EventKind",
    "FakeClock",
    "Misfire",
    "Node",
    "NodeConfig",
    "NotRunnableError",
    "Overlap",
    "Registry",
    "RunEvent",
    "SchemaMissingError",
    "SchemaOutdatedError",
    "SchemaTooNewError",
    "SchemaVersionError",
    "Store",
    "SystemClock",
    "TaskContext",
    "TaskDefinitionError",
    "TaskNotFoundError",
    "UnknownStrategyError",
    "UnknownTimeZoneError",
    "__version__",
    "add_calendar_days",
    "add_schedule",
    "list_calendars",
    "pause",
    "remove_calendar_days",
    "remove_schedule",
    "rerun",
    "resume",
    "runnable",
    "scheduled",
    "set_schedule",
    "trigger",
]


def __getattr__(name: str) -> Any:
    """The public name *name*, imported from its module on first use and kept."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'easyjob' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
