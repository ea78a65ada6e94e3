"""A small threaded HTTP server (the standard library's ``wsgiref``) that serves one WSGI
application: the node endpoint's or the dashboard's when they run on their own."""

from __future__ import annotations

import logging
import re
import socket
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

from easyjob.errors import ConfigError
from easyjob.observe.wsgi import App, Request, Response, WSGIApp
from easyjob.threads import NamedThread, name_this_thread

__all__ = ["App", "HttpServer", "Request", "Response", "parse_address"]

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


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    role = "http"

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        name_this_thread(self.role)  # a request's thread is the server's, named as its own
        super().process_request_thread(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


class HttpServer:
    """Binds at construction (so a bad or busy address fails before anything else starts),
    serves the WSGI application *app* on a daemon thread after :meth:`start`, stops with
    :meth:`close`."""

    def __init__(self, address: tuple[str, int], app: WSGIApp, *, name: str) -> None:
        host, port = address
        cls = _Server6 if ":" in host else _Server
        try:
            self._server = cls((host, port), _Handler)
        except OSError as err:
            raise ConfigError(f"cannot serve HTTP on {_show(host, port)}: {err}") from err
        self._server.set_app(app)
        self._server.role = name
        self._thread = NamedThread(name, self._server.serve_forever)

    @property
    def address(self) -> tuple[str, int]:
        """The host and port it is bound to (the port chosen, when asked for port 0)."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

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


class _Quiet(ServerHandler):
    server_software = "easyjob"

    def log_exception(self, exc_info: Any) -> None:
        log.error("serving a request failed", exc_info=exc_info)


class _Handler(WSGIRequestHandler):
    server_version = "easyjob"

    def handle(self) -> None:
        """As wsgiref's, with easyjob's logging instead of stderr."""
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.send_error(414)
            return
        if not self.parse_request():
            return
        stderr, environ = self.get_stderr(), self.get_environ()
        handler = _Quiet(self.rfile, self.wfile, stderr, environ)  # type: ignore[arg-type]
        handler.request_handler = self  # type: ignore[attr-defined]
        handler.run(self.server.get_app())  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)
