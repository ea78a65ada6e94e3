"""The dashboard: pages rendered on the server from the view model (:mod:`easyjob.views`),
and, when credentials are configured, the operators' actions.

Templates are Jinja2 with autoescape on for every template, so every value from the
database (a task named ``<script>``, an error message) is shown as text. The pages use no
script and nothing from outside the package (the stylesheet is served from it); they
reload themselves every ``refresh_s`` seconds.

Without an :class:`~easyjob.web.auth.Access` the dashboard is read-only: no form that acts
is shown and every ``POST`` is refused (403). With one, an operator logs in, and each
action (``POST /act/NAME``, :data:`~easyjob.web.actions.ACTIONS`) needs the session and
its CSRF token; each is recorded in ``easy_job_audit``, shown on ``/audit``.

A :class:`Dashboard` is a WSGI application (:meth:`Dashboard.wsgi`): served alone by
``easyjob dashboard``, or mounted in an application's own web server
(``docs/embedding.md``).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from easyjob.clock import Clock, SystemClock
from easyjob.core.states import CANCELLABLE, NodeStatus, RunStatus, TaskStatus
from easyjob.errors import EasyJobError, TaskNotFoundError
from easyjob.observe.wsgi import Request, Response, WSGIApp, as_wsgi
from easyjob.store.contract import Store
from easyjob.views import read, seconds
from easyjob.web.actions import ACTIONS
from easyjob.web.auth import COOKIE, Access, Session
from easyjob.web.chart import chart

__all__ = ["Dashboard", "dashboard_app"]

HTML = "text/html; charset=utf-8"
#: Chart windows offered, by query value.
WINDOWS = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
}
RUN_LIMITS = (50, 200, 1000)
#: Runs offered a cancel button (not started yet, or running).
CANCELLABLE_SHOWN = frozenset(s.value for s in CANCELLABLE)
#: Runs offered a re-run button: those that ended without succeeding, and were not skipped.
RERUNNABLE_SHOWN = frozenset(
    s.value for s in (RunStatus.FAILED, RunStatus.ABANDONED, RunStatus.MISSED, RunStatus.CANCELLED)
)
#: Planned runs shown apart on the Runs page, soonest first.
UPCOMING = 20
#: Longest form value kept in an audit entry's detail.
_DETAIL_CHARS = 1000

Page = Callable[[Request], dict[str, Any]]


def _when(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _lateness(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else seconds(value)


def _first_line(value: str | None) -> str:
    if not value:
        return ""
    lines = [line for line in value.strip().splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


class Dashboard:
    """Maps requests to pages. Read-only without *access* (open *store* with
    ``read_only=True`` then); with *access*, the actions are on and *store* must be
    writable. *clock* judges session expiry."""

    def __init__(
        self,
        store: Store,
        *,
        refresh_s: int = 10,
        access: Access | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self._access = access
        self._clock = clock or SystemClock()
        self._env = Environment(
            loader=PackageLoader("easyjob.web", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            undefined=StrictUndefined,
        )
        self._env.filters.update(
            when=_when, secs=seconds, late=_lateness, first_line=_first_line, json=_json
        )
        self._env.globals.update(cancellable=CANCELLABLE_SHOWN, rerunnable=RERUNNABLE_SHOWN)
        self._css = (files("easyjob.web") / "static" / "style.css").read_bytes()
        self._pages: dict[str, Page] = {
            "/": self._overview,
            "/tasks": self._tasks,
            "/task": self._task,
            "/runs": self._runs,
            "/run": self._run,
            "/failures": self._failures,
            "/audit": self._audit,
            "/login": self._login_page,
        }

    def wsgi(self) -> WSGIApp:
        """This dashboard as a WSGI application (links follow where it is mounted)."""
        return as_wsgi(self)

    def __call__(self, request: Request) -> Response:
        if request.path in ("/healthz", "/readyz"):  # serving, with the tables found at start
            return Response(200, b'{"status": "ok"}\n', "application/json")
        if request.path == "/static/style.css":
            return Response(200, self._css, "text/css; charset=utf-8")
        if request.method == "POST":
            return self._post(request)
        page = self._pages.get(request.path)
        if page is None:
            return self._page(request, "missing.html", {"path": request.path}, 404)
        name = request.path.strip("/") or "overview"
        return self._page(request, f"{name}.html", page(request))

    # -- rendering ---------------------------------------------------------------------------

    def _session(self, request: Request) -> Session | None:
        if self._access is None:
            return None
        return self._access.session(request.cookies.get(COOKIE), self._clock)

    def _page(
        self,
        request: Request,
        template: str,
        context: dict[str, Any],
        status: int = 200,
        cookies: tuple[str, ...] = (),
        session: Session | bool | None = True,
    ) -> Response:
        """*session*: the operator's (True: the request's, as its cookie says)."""
        if session is True:
            session = self._session(request)
        assert session is None or isinstance(session, Session)
        if "db_now" not in context:
            context["db_now"] = self._store.now()
        body = self._env.get_template(template).render(
            refresh_s=self._refresh_s if template not in _STILL else 0,
            root=request.root,
            actions=self._access is not None,
            user=session.actor if session else None,
            csrf=session.csrf if session else "",
            page=context.pop("page", template.removesuffix(".html")),
            **context,
        )
        return Response(status, body.encode(), HTML, cookies=cookies)

    # -- pages -------------------------------------------------------------------------------

    def _overview(self, request: Request) -> dict[str, Any]:
        window_key = _one(request, "window", "1h")
        window = WINDOWS.get(window_key, WINDOWS["1h"])
        db_now, nodes = read.nodes(self._store)
        activity = self._store.views.activity(window, buckets=60)
        live = [n for n in nodes if n["status"] == NodeStatus.RUNNING.value]
        return {
            "page": "overview",
            "db_now": db_now,
            "nodes": nodes,
            "live": len(live),
            "chart": chart(activity),
            "window": window_key if window_key in WINDOWS else "1h",
            "windows": list(WINDOWS),
            "failures": read.failures(self._store, limit=10),
        }

    def _tasks(self, request: Request) -> dict[str, Any]:
        name = _one(request, "q", "").strip()
        found = self._store.views.tasks(name_contains=name or None, limit=500)
        db_now, rows = read.tasks(self._store, found, outcomes=True)
        return {"page": "tasks", "db_now": db_now, "tasks": rows, "q": name, "limit": 500}

    def _task(self, request: Request) -> dict[str, Any]:
        name = _one(request, "name", "")
        try:
            found = [self._store.tasks.get(name)]
        except TaskNotFoundError:
            found = []
        db_now, rows = read.tasks(self._store, found, outcomes=True)
        runs = read.runs(self._store, task=name, limit=20) if rows else []
        upcoming = read.runs(self._store, task=name, limit=10, upcoming=True) if rows else []
        return {
            "page": "tasks",
            "db_now": db_now,
            "name": name,
            "task": rows[0] if rows else None,
            "runs": runs,
            "upcoming": upcoming,
            "paused": TaskStatus.PAUSED.value,
        }

    def _runs(self, request: Request) -> dict[str, Any]:
        task = _one(request, "task", "").strip() or None
        status_text = _one(request, "status", "").upper()
        status = RunStatus(status_text) if status_text in RunStatus.__members__ else None
        node = _one(request, "node", "").strip() or None
        limit_text = _one(request, "limit", str(RUN_LIMITS[1]))
        limit = int(limit_text) if limit_text.isdigit() and int(limit_text) in RUN_LIMITS else 200
        db_now, nodes = read.nodes(self._store)
        filters = {"task": task, "status": status, "node": node}
        return {
            "page": "runs",
            "db_now": db_now,
            "runs": read.runs(self._store, limit=limit, **filters),  # type: ignore[arg-type]
            "upcoming": []
            if status is not None
            else read.runs(self._store, task=task, node=node, limit=UPCOMING, upcoming=True),
            "task": task or "",
            "status": status.value if status else "",
            "statuses": [s.value for s in RunStatus],
            "node": node or "",
            "node_ids": [n["node_id"] for n in nodes],
            "limit": limit,
            "limits": RUN_LIMITS,
        }

    def _run(self, request: Request) -> dict[str, Any]:
        text = _one(request, "id", "").strip()
        number = text.isascii() and text.isdigit() and len(text) <= 18  # within a 64-bit id
        found = read.run(self._store, int(text)) if number else None
        return {"page": "runs", "id": text, "run": found}

    def _failures(self, request: Request) -> dict[str, Any]:
        return {"page": "failures", "failures": read.failures(self._store, limit=100)}

    def _audit(self, request: Request) -> dict[str, Any]:
        entries = self._store.audit.entries(limit=200) if self._access is not None else []
        return {"page": "audit", "entries": entries}

    def _login_page(self, request: Request) -> dict[str, Any]:
        return {"page": "login", "message": None, "token_only": self._token_only()}

    def _token_only(self) -> bool:
        return self._access is not None and not self._access.users

    # -- actions -----------------------------------------------------------------------------

    def _post(self, request: Request) -> Response:
        if self._access is None:
            return self._result(request, 403, "refused", "the dashboard is read-only here")
        if request.path == "/login":
            return self._login(request, self._access)
        session = self._session(request)
        if session is None:
            return self._refused(request, None, "log in first (or the session expired)")
        if not hmac.compare_digest(_one_form(request, "csrf").encode(), session.csrf.encode()):
            return self._refused(
                request, session.actor, "the form's CSRF token is missing or wrong"
            )
        if request.path == "/logout":
            expired = f"{COOKIE}=; Path={request.root or '/'}; Max-Age=0; HttpOnly; SameSite=Strict"
            return self._result(request, 200, "ok", "logged out", cookies=(expired,), session=None)
        name = request.path.removeprefix("/act/")
        action = ACTIONS.get(name) if request.path.startswith("/act/") else None
        if action is None:
            return self._result(request, 404, "refused", f"no action at {request.path}")
        detail = _detail(request)
        try:
            done = action(self._store, request.form)
        except (EasyJobError, ValueError) as err:
            target = _one_form(request, "task") or _one_form(request, "run") or None
            self._record(request, session.actor, name, target, "refused", str(err), detail)
            return self._result(request, 400, "refused", str(err))
        except Exception as err:  # e.g. the database failed past its retries: answered 500
            target = _one_form(request, "task") or _one_form(request, "run") or None
            why = f"{type(err).__name__}: {str(err).strip()[:300]}"
            self._record(request, session.actor, name, target, "error", why, detail)
            raise
        self._record(request, session.actor, name, done.target, "ok", done.message, detail)
        return self._result(request, 200, "ok", done.message)

    def _login(self, request: Request, access: Access) -> Response:
        user = _one_form(request, "user").strip()
        actor = access.login(user, _one_form(request, "password"))
        who = actor or user or "token"
        if actor is None:
            self._record(request, who, "login", None, "refused", "wrong user or password", None)
            context = {"message": "wrong user or password", "token_only": self._token_only()}
            return self._page(request, "login.html", context, 403)
        self._record(request, actor, "login", None, "ok", "logged in", None)
        secure = "; Secure" if request.secure else ""
        value = access.issue(actor, self._clock)
        cookie = (
            f"{COOKIE}={value}; Path={request.root or '/'}; "
            f"Max-Age={access.session_s}; HttpOnly; SameSite=Strict{secure}"
        )
        session = access.session(value, self._clock)
        message = f"logged in as {actor}"
        return self._result(request, 200, "ok", message, cookies=(cookie,), session=session)

    def _refused(self, request: Request, actor: str | None, why: str) -> Response:
        name = request.path.removeprefix("/act/")
        target = _one_form(request, "task") or _one_form(request, "run") or None
        self._record(request, actor or "anonymous", name, target, "refused", why, _detail(request))
        return self._result(request, 403, "refused", why)

    def _record(
        self,
        request: Request,
        actor: str,
        action: str,
        target: str | None,
        result: str,
        message: str,
        detail: dict[str, str] | None,
    ) -> None:
        self._store.audit.record(
            actor=actor,
            action=action,
            target=target,
            result=result,
            message=message,
            detail=detail,
            remote=request.remote,
        )

    def _result(
        self,
        request: Request,
        status: int,
        result: str,
        message: str,
        *,
        cookies: tuple[str, ...] = (),
        session: Session | bool | None = True,
    ) -> Response:
        context: dict[str, Any] = {"page": "result", "result": result, "message": message}
        return self._page(request, "result.html", context, status, cookies, session)


#: Pages that never reload themselves (a reload would resend or lose a form).
_STILL = frozenset({"login.html", "result.html", "task.html"})


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _one(request: Request, name: str, default: str) -> str:
    values = request.query.get(name)
    return values[0] if values else default


def _one_form(request: Request, name: str) -> str:
    values = request.form.get(name)
    return values[0] if values else ""


def _detail(request: Request) -> dict[str, str]:
    return {
        name: values[0][:_DETAIL_CHARS]
        for name, values in sorted(request.form.items())
        if name not in ("csrf", "password") and values and values[0].strip()
    }


def dashboard_app(
    url: str,
    *,
    access: Access | None = None,
    refresh_s: int = 10,
) -> WSGIApp:
    """The dashboard of the database at *url* as a WSGI application, to mount in an
    application's own web server (``docs/embedding.md``): read-only without *access*
    (the database opened read-only); with it, the operators' actions are on."""
    from easyjob.store import Store as SqlStore

    store = SqlStore.open(url, read_only=access is None)
    return Dashboard(store, refresh_s=refresh_s, access=access).wsgi()
