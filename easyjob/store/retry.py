"""Which database errors are transient, and the retry policy for them.

Transient: the operation may succeed if simply tried again a little later, e.g. a server
restart or failover, a lost connection, a deadlock (MySQL 1213) or lock wait timeout (1205), a
read-only server (MySQL 1290/1792, PostgreSQL 25006), SQLite "database is locked"/"busy" or a full
disk. Everything else (a bug, a constraint violation, a missing table) is raised at once. Each
dialect names its own transient driver errors (:meth:`Dialect.is_transient
<easyjob.store.dialects.base.Dialect.is_transient>`); a lost connection is transient everywhere.
"""

from __future__ import annotations

import logging

import tenacity
from sqlalchemy import exc as sa_exc

from easyjob.store.dialects import dialect_of_error

__all__ = ["RetryPolicy", "error_kind", "is_transient"]

log = logging.getLogger("easyjob.store")


def is_transient(err: BaseException) -> bool:
    """True when *err* is a database error worth retrying (see the module docstring)."""
    if isinstance(err, sa_exc.DBAPIError):
        if err.connection_invalidated:
            return True
        return _transient_driver_error(err.orig)
    return isinstance(err, (sa_exc.DisconnectionError, ConnectionError, TimeoutError))


def _transient_driver_error(orig: BaseException | None) -> bool:
    dialect = dialect_of_error(orig)
    return orig is not None and dialect is not None and dialect.is_transient(orig)


def error_kind(err: BaseException) -> str | None:
    """What kind of database error *err* is, for counting: ``connection``, ``deadlock``,
    ``lock`` (lock wait, SQLite busy), ``read_only``, ``resources`` (disk, memory) or
    ``other`` (not transient: a constraint, a bug); None when it is no database error."""
    if isinstance(err, sa_exc.DBAPIError):
        if err.connection_invalidated:
            return "connection"
        dialect = dialect_of_error(err.orig)
        kind = dialect.error_kind(err.orig) if dialect and err.orig is not None else None
        return kind or "other"
    if isinstance(err, (sa_exc.DisconnectionError, ConnectionError, TimeoutError)):
        return "connection"
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
