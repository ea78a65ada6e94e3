"""A node's HTTP endpoint: ``GET /metrics``, ``/healthz`` and ``/readyz``.

- ``/metrics``: the node's :class:`~easyjob.observe.prometheus.NodeMetrics`, Prometheus text.
- ``/healthz``: 200 while the node's threads run and its heartbeat is fresh (the database
  accepted one within the dead threshold); else 503. While the node stops, its loader has
  ended on purpose and only the heartbeat counts. The body is JSON with the reason.
- ``/readyz``: as ``/healthz``, and 503 once the node is stopping, or while it makes no
  progress (:mod:`easyjob.node.health`: a loop failing on every step, or due runs held
  that it neither starts nor hands back); the reason names the cause.

:func:`endpoint_app` is the same as a WSGI application, to mount in a user's own web
application instead of (or beside) the node's own server (``docs/embedding.md``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from easyjob.observe.http import HttpServer
from easyjob.observe.prometheus import NodeMetrics
from easyjob.observe.wsgi import Request, Response, WSGIApp, as_wsgi

__all__ = ["NodeEndpoint", "Probe", "check", "endpoint_app"]


@dataclass(frozen=True)
class Probe:
    """How a node looks from outside: its threads (name to "is it running"), the age of
    its last accepted heartbeat (None before the first), the age at which peers judge it
    dead, whether it is stopping, and what keeps it from progress (empty: nothing)."""

    threads: Callable[[], Mapping[str, bool]]
    heartbeat_age_s: Callable[[], float | None]
    dead_after_s: float
    stopping: Callable[[], bool]
    problems: Callable[[], list[str]] = list


def check(probe: Probe, *, ready: bool = False) -> tuple[bool, dict[str, Any]]:
    """Whether the node is healthy (or, with *ready*, ready for work), and the JSON body."""
    age = probe.heartbeat_age_s()
    body: dict[str, Any] = {"heartbeat_age_s": None if age is None else round(age, 3)}
    stopping = probe.stopping()
    down = [] if stopping else sorted(name for name, up in probe.threads().items() if not up)
    if down:
        return False, {"status": "fail", "reason": f"thread(s) not running: {', '.join(down)}"}
    if age is None or age >= probe.dead_after_s:
        seen = "never" if age is None else f"{age:.1f} s ago"
        reason = (
            f"heartbeat is stale: last accepted {seen}, peers judge a node dead after "
            f"{probe.dead_after_s:g} s"
        )
        return False, {"status": "fail", "reason": reason, **body}
    if ready and stopping:
        return False, {"status": "fail", "reason": "node is stopping", **body}
    problems = [] if stopping or not ready else probe.problems()
    if problems:
        reason = f"no progress: {'; '.join(problems)}"
        return False, {"status": "fail", "reason": reason, **body}
    return True, {"status": "stopping" if stopping else "ok", **body}


def endpoint_app(metrics: NodeMetrics, probe: Probe) -> WSGIApp:
    """A WSGI application answering ``/metrics``, ``/healthz`` and ``/readyz`` (relative to
    where it is mounted) for the node of *metrics* and *probe*."""

    def route(request: Request) -> Response:
        if request.path == "/metrics":
            return Response(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
        if request.path in ("/healthz", "/readyz"):
            ok, body = check(probe, ready=request.path == "/readyz")
            text = json.dumps(body).encode() + b"\n"
            return Response(200 if ok else 503, text, "application/json")
        return Response(404, b"not found: try /metrics, /healthz or /readyz\n")

    return as_wsgi(route)


class NodeEndpoint:
    """Serves one node's metrics and health on *address* (bound at construction)."""

    def __init__(self, address: tuple[str, int], metrics: NodeMetrics, probe: Probe) -> None:
        self._server = HttpServer(address, endpoint_app(metrics, probe), name="http")
        self.url = self._server.url

    def start(self) -> None:
        self._server.start()

    def close(self) -> None:
        self._server.close()
