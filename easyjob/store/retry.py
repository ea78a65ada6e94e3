"""Which database errors are transient, and the retry policy for them.

Transient: the operation may succeed if simply tried again a little later, e.g. a server
restart or failover, a lost connection, a deadlock (MySQL 1213) or lock wait timeout (1205), a
read-only server (MySQL 1290/1792, PostgreSQL 25006), SQLite "database is locked"/"busy" or a full
disk. Everything else (a bug, a constraint violation, a missing table) is raised at once.
"""

from __future__ import annotations

import logging

import tenacity
from sqlalchemy import exc as sa_exc

__all__ = ["RetryPolicy", "error_kind", "is_transient"]

log = logging.getLogger("easyjob.store")

_MYSQL_TRANSIENT = {
    1040,  # too many connections
    1053,  # server shutdown in progress
    1205,  # lock wait timeout
    1213,  # deadlock
    1290,  # running with --read-only
    1792,  # read-only transaction
    1836,  # read-only mode
    1927,  # connection was killed
    2002,  # can't connect (socket)
    2003,  # can't connect (TCP)
    2006,  # server has gone away
    2013,  # lost connection during query
    2055,  # lost connection (system error)
    4031,  # disconnected by the server because of inactivity
}
_PG_TRANSIENT_CLASSES = ("08", "53", "57P")  # connection, resources, operator intervention
_PG_TRANSIENT = {"40001", "40P01", "25006", "55P03"}  # serialization, deadlock, read-only, lock
_SQLITE_TRANSIENT = ("database is locked", "database is busy", "disk is full", "disk i/o error")


def is_transient(err: BaseException) -> bool:
    """True when *err* is a database error worth retrying (see the module docstring)."""
    if isinstance(err, sa_exc.DBAPIError):
        if err.connection_invalidated:
            return True
        return _transient_driver_error(err.orig)
    return isinstance(err, (sa_exc.DisconnectionError, ConnectionError, TimeoutError))


def _transient_driver_error(orig: BaseException | None) -> bool:
    if orig is None:
        return False
    module = type(orig).__module__
    if module.startswith("pymysql"):
        code = orig.args[0] if orig.args and isinstance(orig.args[0], int) else None
        return code in _MYSQL_TRANSIENT
    if module.startswith("psycopg"):
        state: str = getattr(orig, "sqlstate", None) or ""
        if not state:  # no server reply at all: the connection broke
            return type(orig).__name__ in ("OperationalError", "InterfaceError")
        return state in _PG_TRANSIENT or state.startswith(_PG_TRANSIENT_CLASSES)
    if module.startswith("sqlite3"):
        text = str(orig).lower()
        return any(marker in text for marker in _SQLITE_TRANSIENT)
    return False


_MYSQL_KINDS = {
    **{code: "connection" for code in (1040, 1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031)},
    1205: "lock",
    1213: "deadlock",
    **{code: "read_only" for code in (1290, 1792, 1836)},
}
_PG_KINDS = {"40001": "deadlock", "40P01": "deadlock", "55P03": "lock", "25006": "read_only"}
_PG_CLASS_KINDS = {"08": "connection", "57": "connection", "53": "resources"}
_SQLITE_KINDS = {
    "database is locked": "lock",
    "database is busy": "lock",
    "disk is full": "resources",
    "disk i/o error": "resources",
}


def error_kind(err: BaseException) -> str | None:
    """What kind of database error *err* is, for counting: ``connection``, ``deadlock``,
    ``lock`` (lock wait, SQLite busy), ``read_only``, ``resources`` (disk, memory) or
    ``other`` (not transient: a constraint, a bug); None when it is no database error."""
    if isinstance(err, sa_exc.DBAPIError):
        if err.connection_invalidated:
            return "connection"
        return _driver_kind(err.orig) or "other"
    if isinstance(err, (sa_exc.DisconnectionError, ConnectionError, TimeoutError)):
        return "connection"
    return None


def _driver_kind(orig: BaseException | None) -> str | None:
    module = type(orig).__module__ if orig is not None else ""
    if module.startswith("pymysql") and orig is not None and orig.args:
        return _MYSQL_KINDS.get(orig.args[0]) if isinstance(orig.args[0], int) else None
    if module.startswith("psycopg"):
        state: str = getattr(orig, "sqlstate", None) or ""
        if not state:
            return "connection" if _transient_driver_error(orig) else None
        return _PG_KINDS.get(state) or _PG_CLASS_KINDS.get(state[:2])
    if module.startswith("sqlite3"):
        text = str(orig).lower()
        return next((kind for marker, kind in _SQLITE_KINDS.items() if marker in text), None)
    return None


class RetryPolicy:
    """Retry transient errors with jittered exponential backoff, up to a total deadline.

    Each retry is logged with the error; a non-transient error is raised at once, and the
    last transient one is raised once the deadline has passed.
    """

    def __init__(
        self, *, deadline_s: float = 30.0, initial_s: float = 0.05, max_wait_s: float = 2.0
    ) -> None:
        self.deadline_s = deadline_s
        self.initial_s = initial_s
        self.max_wait_s = max_wait_s

    def retrying(self, what: str) -> tenacity.Retrying:
        def before_sleep(state: tenacity.RetryCallState) -> None:
            err = state.outcome.exception() if state.outcome else None
            log.warning(
                "transient database error in %s (attempt %d), retrying in %.2fs: %s",
                what,
                state.attempt_number,
                state.upcoming_sleep,
                first_line(err),
            )

        return tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_transient),
            wait=tenacity.wait_exponential_jitter(
                multiplier=self.initial_s, max=self.max_wait_s, jitter=self.initial_s
            ),
            stop=tenacity.stop_after_delay(self.deadline_s),
            before_sleep=before_sleep,
            reraise=True,
        )


def first_line(err: BaseException | None) -> str:
    """The first line of *err*'s message (its type name when it has none), for messages."""
    text = str(err).strip() if err is not None else ""
    return text.splitlines()[0] if text else type(err).__name__
