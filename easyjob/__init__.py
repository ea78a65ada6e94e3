"""easyjob: scheduled jobs on a cluster of equal nodes sharing one SQL database."""

from __future__ import annotations

from easyjob.clock import Clock, FakeClock, SystemClock
from easyjob.context import TaskContext
from easyjob.control import (
    add_schedule,
    pause,
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

__all__ = [
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
    "add_schedule",
    "pause",
    "remove_schedule",
    "rerun",
    "resume",
    "runnable",
    "scheduled",
    "set_schedule",
    "trigger",
]
