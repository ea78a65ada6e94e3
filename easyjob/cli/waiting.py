"""Waiting for the database at start: ``easyjob dashboard`` and ``easyjob run --http``.

In a first deploy (compose, Kubernetes) processes start in any order: the dashboard may come
up before the database accepts connections or before any node created the tables, and nodes
of a new release before ``easyjob upgrade-db`` ran. Instead of exiting (and being restarted
in a loop), these commands wait up to ``--schema-wait``, log one line each time the reason
changes, and meanwhile answer ``/healthz`` (200: the process is alive) and ``/readyz``
(503, with the reason). A schema too new for this code is not waited for: it will not change
by itself.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from easyjob.clock import Clock, SystemClock
from easyjob.errors import DatabaseUnavailableError, SchemaMissingError, SchemaOutdatedError
from easyjob.observe.wsgi import Request, Response, WSGIApp, as_wsgi

__all__ = ["WAITED_FOR", "Switch", "wait_for_schema", "waiting_app"]

T = TypeVar("T")
log = logging.getLogger("easyjob.cli")

#: What may pass by itself: the database starting, a node creating the tables, an upgrade.
WAITED_FOR = (DatabaseUnavailableError, SchemaMissingError, SchemaOutdatedError)
#: How often the database is tried again while waiting.
RETRY_S = 1.0


def wait_for_schema(
    open_: Callable[[], T],
    wait_s: float,
    *,
    on_wait: Callable[[str], None] = lambda reason: None,
    clock: Clock | None = None,
    stop: threading.Event | None = None,
) -> T:
    """``open_()`` once it succeeds; while it raises one of :data:`WAITED_FOR`, try again
    every :data:`RETRY_S` until *wait_s* seconds have passed (then the last error is
    raised) or *stop* is set (the same). Each new reason is logged and given to *on_wait*."""
    clock = clock or SystemClock()
    stop = stop or threading.Event()
    deadline = clock.monotonic() + wait_s
    last = None
    while True:
        try:
            return open_()
        except WAITED_FOR as err:
            left = deadline - clock.monotonic()
            if left <= 0 or stop.is_set():
                raise
            reason = str(err)
            if reason != last:
                log.warning("waiting for the database (up to %.0f s more): %s", left, reason)
                on_wait(reason)
                last = reason
            stop.wait(min(RETRY_S, left))


def waiting_app(reason: Callable[[], str]) -> WSGIApp:
    """What a process serves while it waits: ``/healthz`` 200, anything else 503."""

    def route(request: Request) -> Response:
        body = {"status": "waiting", "reason": reason()}
        text = json.dumps(body).encode() + b"\n"
        return Response(200 if request.path == "/healthz" else 503, text, "application/json")

    return as_wsgi(route)


class Switch:
    """A WSGI application that passes each request to the application set last
    (thread-safe): the server binds once and serves the waiting answers, then the real
    ones."""

    def __init__(self, app: WSGIApp) -> None:
        self._app = app
        self._lock = threading.Lock()

    def set(self, app: WSGIApp) -> None:
        with self._lock:
            self._app = app

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        with self._lock:
            app = self._app
        return app(environ, start_response)
