"""The one exception tree of easyjob.

::

    EasyJobError
    ├── ConfigError (ValueError)                 a bad value given by a user
    │   ├── CronError                            invalid cron expression
    │   ├── UnknownTimeZoneError (LookupError)   not an IANA time zone
    │   ├── UnknownStrategyError (LookupError)   no such claim strategy
    │   ├── TaskDefinitionError                  bad @scheduled arguments, parents, names
    │   ├── NodeIdInUseError                     --node-id of a node that is alive
    │   └── DatabaseURLError                     a URL SQLAlchemy cannot use
    ├── DatabaseError                            the database cannot be used
    │   ├── DatabaseUnavailableError (ConnectionError)
    │   ├── SchemaMissingError (LookupError)     tables absent: run `easyjob init-db`
    │   └── SchemaVersionError                   tables of another easyjob version
    │       ├── SchemaOutdatedError              older: run `easyjob upgrade-db`
    │       └── SchemaTooNewError                newer, not compatible: upgrade easyjob
    ├── TaskNotFoundError (LookupError)          no task of that name
    ├── RunNotFoundError (LookupError)           no run of that id
    ├── CalendarNotFoundError (LookupError)      no calendar of that name
    └── NotRunnableError (LookupError)           no live node's code can run that function

Every error names the offending value with ``!r`` and chains its cause.

Warnings: :class:`CronDialectWarning` (a ``UserWarning``) for a cron expression that other
dialects read differently.
"""

from __future__ import annotations

__all__ = [
    "CalendarNotFoundError",
    "ConfigError",
    "CronDialectWarning",
    "CronError",
    "DatabaseError",
    "DatabaseURLError",
    "DatabaseUnavailableError",
    "EasyJobError",
    "NodeIdInUseError",
    "NotRunnableError",
    "RunNotFoundError",
    "SchemaMissingError",
    "SchemaOutdatedError",
    "SchemaTooNewError",
    "SchemaVersionError",
    "TaskDefinitionError",
    "TaskNotFoundError",
    "UnknownStrategyError",
    "UnknownTimeZoneError",
    "shown",
]


class EasyJobError(Exception):
    """Root of every error easyjob raises on purpose."""


class ConfigError(EasyJobError, ValueError):
    """A value given by the user (option, decorator argument, expression) is invalid."""


class CronError(ConfigError):
    """A cron expression is malformed or never fires."""


class CronDialectWarning(UserWarning):
    """A cron expression without a dialect means something else in Spring or Quartz."""


class UnknownTimeZoneError(ConfigError, LookupError):
    """A time zone name is not a known IANA zone."""


class UnknownStrategyError(ConfigError, LookupError):
    """A claim strategy name does not resolve to a strategy."""


class TaskDefinitionError(ConfigError):
    """A task definition is inconsistent: duplicate name, unknown or cyclic parent, bad policy."""


class NodeIdInUseError(ConfigError):
    """A node id given in the configuration belongs to a node that is alive."""


class DatabaseURLError(ConfigError):
    """A database URL cannot be parsed or names an unsupported backend."""


class DatabaseError(EasyJobError):
    """The database cannot be used as easyjob needs it."""


class DatabaseUnavailableError(DatabaseError, ConnectionError):
    """The database server cannot be reached."""


class SchemaMissingError(DatabaseError, LookupError):
    """The easyjob tables do not exist in the database."""


class SchemaVersionError(DatabaseError):
    """The easyjob tables were created by another schema version."""


class SchemaOutdatedError(SchemaVersionError):
    """The easyjob tables are of an older schema version: ``easyjob upgrade-db`` upgrades them."""


class SchemaTooNewError(SchemaVersionError):
    """The easyjob tables are of a newer schema version that this code cannot run on."""


class TaskNotFoundError(EasyJobError, LookupError):
    """No task with the given name is registered in the database."""


class RunNotFoundError(EasyJobError, LookupError):
    """No run with the given id is in the database."""


class CalendarNotFoundError(EasyJobError, LookupError):
    """No calendar of that name (it has no day stored), or not the days asked for."""


class NotRunnableError(EasyJobError, LookupError):
    """No live node's code can run the function a schedule names: it is not ``@runnable``
    in any live node's code, or does not exist there (``--force`` adds it anyway, ahead of
    a deploy)."""


def shown(value: object, limit: int = 200) -> str:
    """``repr(value)`` for a message, cut to about *limit* characters: a name pasted by
    mistake (or on purpose) with 100,000 characters must not become a 100,000-character
    error line."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return f"{text[:limit]}...{size}"
