"""easyjob: scheduled jobs on a cluster of equal nodes sharing one SQL database."""

from __future__ import annotations

from easyjob.errors import (
    ConfigError,
    CronError,
    DatabaseError,
    DatabaseUnavailableError,
    DatabaseURLError,
    EasyJobError,
    SchemaMissingError,
    SchemaVersionError,
    TaskDefinitionError,
    TaskNotFoundError,
    UnknownStrategyError,
    UnknownTimeZoneError,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "CronError",
    "DatabaseError",
    "DatabaseURLError",
    "DatabaseUnavailableError",
    "EasyJobError",
    "SchemaMissingError",
    "SchemaVersionError",
    "TaskDefinitionError",
    "TaskNotFoundError",
    "UnknownStrategyError",
    "UnknownTimeZoneError",
    "__version__",
]
