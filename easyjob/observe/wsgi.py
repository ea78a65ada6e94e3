"""easyjob's HTTP applications as WSGI applications, so that they can be served alone (by
:class:`~easyjob.observe.http.HttpServer`) or mounted in a user's own Flask, Django or
(through a WSGI-to-ASGI adapter) FastAPI application (``docs/embedding.md``).

An application is a function of a :class:`Request` to a :class:`Response`; :func:`as_wsgi`
makes it a WSGI callable. ``HEAD`` is answered as ``GET`` without the body; a form body
larger than :data:`MAX_FORM_BYTES` is refused (413).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs

__all__ = ["MAX_FORM_BYTES", "App", "Request", "Response", "WSGIApp", "as_wsgi", "mount"]

log = logging.getLogger("easyjob.http")

#: The largest form body read (64 KiB): every form of the dashboard fits many times over.
MAX_FORM_BYTES = 64 * 1024

#: A WSGI application (PEP 3333).
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class Request:
    """What an application sees of a request: *path* is relative to where it is mounted
    (``PATH_INFO``); *root* is the mount point (``SCRIPT_NAME``), for links."""

    method: str
    path: str
    query: Mapping[str, list[str]] = field(default_factory=dict)
    form: Mapping[str, list[str]] = field(default_factory=dict)
    cookies: Mapping[str, str] = field(default_factory=dict)
    root: str = ""
    remote: str | None = None
    secure: bool = False


@dataclass(frozen=True)
class Response:
    """What an application answers."""

    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    cookies: tuple[str, ...] = ()


#: Maps a request to a response.
App = Callable[[Request], Response]


class _TooLarge(Exception):
    pass


def _form(environ: Mapping[str, Any]) -> dict[str, list[str]]:
    kind = str(environ.get("CONTENT_TYPE", "")).split(";")[0].strip().lower()
    if environ.get("REQUEST_METHOD") != "POST" or kind != "application/x-www-form-urlencoded":
        return {}
    try:
        size = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        size = 0
    if size > MAX_FORM_BYTES:
        raise _TooLarge
    body = environ["wsgi.input"].read(size) if size > 0 else b""
    return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)


def _cookies(header: str) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


def request_of(environ: Mapping[str, Any]) -> Request:
    """The :class:`Request` of a WSGI *environ* (the form read from its body)."""
    method = str(environ.get("REQUEST_METHOD", "GET")).upper()
    return Request(
        method="GET" if method == "HEAD" else method,
        path=str(environ.get("PATH_INFO") or "/"),
        query=parse_qs(str(environ.get("QUERY_STRING", "")), keep_blank_values=True),
        form=_form(environ),
        cookies=_cookies(str(environ.get("HTTP_COOKIE", ""))),
        root=str(environ.get("SCRIPT_NAME", "")).rstrip("/"),
        remote=environ.get("REMOTE_ADDR"),
        secure=environ.get("wsgi.url_scheme") == "https",
    )


def as_wsgi(app: App) -> WSGIApp:
    """*app* as a WSGI application: GET, HEAD (the GET answer without its body) and POST
    (form bodies); an exception in *app* is logged and answered 500."""

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        if method not in ("GET", "HEAD", "POST"):
            response = Response(405, b"method not allowed\n", headers={"Allow": "GET, HEAD, POST"})
        else:
            try:
                response = app(request_of(environ))
            except _TooLarge:
                response = Response(413, f"a form is at most {MAX_FORM_BYTES} bytes\n".encode())
            except Exception:
                log.exception("%s %s failed", method, environ.get("PATH_INFO"))
                response = Response(500, b"internal error; see the server's log\n")
        status = f"{response.status} {HTTPStatus(response.status).phrase}"
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            ("Cache-Control", "no-store"),
            *response.headers.items(),
            *(("Set-Cookie", cookie) for cookie in response.cookies),
        ]
        start_response(status, headers)
        return [] if method == "HEAD" else [response.body]

    return application


def mount(fallback: WSGIApp, apps: Mapping[str, WSGIApp]) -> WSGIApp:
    """A WSGI application that passes a request under a prefix of *apps* (``"/easyjob"``)
    to that application, with the prefix moved from ``PATH_INFO`` to ``SCRIPT_NAME`` as PEP
    3333 asks, and every other request to *fallback* (e.g. a Django project's application).
    For frameworks without a mount of their own; Flask has werkzeug's
    ``DispatcherMiddleware``, FastAPI ``app.mount``."""
    prefixes = sorted(((p.rstrip("/"), app) for p, app in apps.items()), reverse=True)
    for prefix, _ in prefixes:
        if not prefix.startswith("/"):
            raise ValueError(f"a mount point starts with '/', got {prefix!r}")

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO") or "/")
        for prefix, app in prefixes:
            if path == prefix or path.startswith(prefix + "/"):
                inner = dict(environ)
                inner["SCRIPT_NAME"] = str(environ.get("SCRIPT_NAME", "")) + prefix
                inner["PATH_INFO"] = path[len(prefix) :] or "/"
                return app(inner, start_response)
        return fallback(environ, start_response)

    return application
