"""A small threaded HTTP server (the standard library's) for the node endpoint and the
dashboard: GET only, one function maps a path and query to a response."""

from __future__ import annotations

import logging
import re
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from easyjob.errors import ConfigError

__all__ = ["App", "HttpServer", "Response", "parse_address"]

log = logging.getLogger("easyjob.http")

LOOPBACK = "127.0.0.1"
_ADDRESS = re.compile(r"(?:(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<host>[^:\[\]]*)):)?(?P<port>\d+)")


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPV6]:PORT``, ``:PORT`` or ``PORT`` as (host, port); the host is
    the loopback address unless given. Raises ValueError naming *text*."""
    match = _ADDRESS.fullmatch(text.strip())
    port = int(match["port"]) if match else -1
    if match is None or not 0 <= port <= 65535:
        raise ValueError(
            f"invalid address {text!r}: use HOST:PORT, [IPV6]:PORT or PORT "
            "(e.g. 127.0.0.1:9100, 0.0.0.0:9100, 9100), port 0 to 65535"
        )
    return match["v6"] or match["host"] or LOOPBACK, port


@dataclass(frozen=True)
class Response:
    """What a GET answers."""

    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


#: Maps a request's path and its query (each name to its values) to a response.
App = Callable[[str, dict[str, list[str]]], Response]


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class HttpServer:
    """Binds at construction (so a bad or busy address fails before anything else starts),
    serves *app* on a daemon thread after :meth:`start`, stops with :meth:`close`."""

    def __init__(self, address: tuple[str, int], app: App, *, name: str) -> None:
        host, port = address
        cls = _Server6 if ":" in host else _Server
        try:
            self._server = cls((host, port), _handler(app))
        except OSError as err:
            raise ConfigError(f"cannot serve HTTP on {_show(host, port)}: {err}") from err
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"easyjob-{name}", daemon=True
        )

    @property
    def url(self) -> str:
        """The address it listens on, e.g. ``http://127.0.0.1:9100``."""
        host, port = self._server.server_address[:2]
        return f"http://{_show(str(host), int(port))}"

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


def _show(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _handler(app: App) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "easyjob"
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            try:
                response = app(parts.path, parse_qs(parts.query))
            except Exception:
                log.exception("GET %s failed", self.path)
                response = Response(500, b"internal error; see the server's log\n")
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            self.send_header("Cache-Control", "no-store")
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(response.body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return Handler
