"""The read-only dashboard: pages rendered on the server from the store's reads.

Templates are Jinja2 with autoescape on for every template, so every value from the
database (a task named ``<script>``, an error message) is shown as text. The pages use no
script and nothing from outside the package (the stylesheet is served from it); they
reload themselves every ``refresh_s`` seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from easyjob.cli import views
from easyjob.cli.output import seconds
from easyjob.core.states import NodeStatus, RunStatus
from easyjob.observe.http import Response
from easyjob.store.contract import Store
from easyjob.web.chart import chart

__all__ = ["Dashboard"]

HTML = "text/html; charset=utf-8"
#: Chart windows offered, by query value.
WINDOWS = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
}
RUN_LIMITS = (50, 200, 1000)


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
    """Maps GET paths to pages; *store* should be opened read-only (``read_only=True``)."""

    def __init__(self, store: Store, *, refresh_s: int = 10) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self._env = Environment(
            loader=PackageLoader("easyjob.web", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            undefined=StrictUndefined,
        )
        self._env.filters.update(when=_when, secs=seconds, late=_lateness, first_line=_first_line)
        self._css = (files("easyjob.web") / "static" / "style.css").read_bytes()
        self._pages: dict[str, Callable[[dict[str, list[str]]], dict[str, Any]]] = {
            "/": self._overview,
            "/tasks": self._tasks,
            "/runs": self._runs,
            "/failures": self._failures,
        }

    def __call__(self, path: str, query: dict[str, list[str]]) -> Response:
        if path in ("/healthz", "/readyz"):  # serving, with the tables found at start
            return Response(200, b'{"status": "ok"}\n', "application/json")
        if path == "/static/style.css":
            return Response(200, self._css, "text/css; charset=utf-8")
        page = self._pages.get(path)
        if page is None:
            return Response(404, self._render("missing.html", {"path": path}), HTML)
        return Response(
            200, self._render(f"{path.strip('/') or 'overview'}.html", page(query)), HTML
        )

    def _render(self, template: str, context: dict[str, Any]) -> bytes:
        page = self._env.get_template(template)
        return page.render(refresh_s=self._refresh_s, **context).encode()

    def _nodes(self) -> tuple[datetime, list[views.Row]]:
        db_now, nodes = self._store.nodes.all()
        return db_now, views.node_rows(nodes, self._store.runs.held_counts())

    def _overview(self, query: dict[str, list[str]]) -> dict[str, Any]:
        window_key = _one(query, "window", "1h")
        window = WINDOWS.get(window_key, WINDOWS["1h"])
        db_now, nodes = self._nodes()
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
            "failures": views.run_rows(self._store.history.failures(limit=10)),
        }

    def _tasks(self, query: dict[str, list[str]]) -> dict[str, Any]:
        name = _one(query, "q", "").strip()
        db_now, backlog = self._store.history.backlog()
        _, known = self._store.nodes.all()
        starts = [n.started_at for n in known if n.status == NodeStatus.RUNNING]
        found = self._store.views.tasks(name_contains=name or None, limit=500)
        upcoming = self._store.views.next_fires([task.id for task in found])
        rows = views.task_rows(found, db_now, backlog, min(starts, default=None), upcoming)
        outcomes = self._store.views.last_outcomes([task.id for task in found])
        for row in rows:
            row["last"] = outcomes.get(row["id"])
        return {"page": "tasks", "db_now": db_now, "tasks": rows, "q": name, "limit": 500}

    def _runs(self, query: dict[str, list[str]]) -> dict[str, Any]:
        task = _one(query, "task", "").strip() or None
        status_text = _one(query, "status", "").upper()
        status = RunStatus(status_text) if status_text in RunStatus.__members__ else None
        node = _one(query, "node", "").strip() or None
        limit_text = _one(query, "limit", str(RUN_LIMITS[1]))
        limit = int(limit_text) if limit_text.isdigit() and int(limit_text) in RUN_LIMITS else 200
        db_now, nodes = self._nodes()
        runs = self._store.history.runs(task=task, status=status, node=node, limit=limit)
        return {
            "page": "runs",
            "db_now": db_now,
            "runs": views.run_rows(runs),
            "task": task or "",
            "status": status.value if status else "",
            "statuses": [s.value for s in RunStatus],
            "node": node or "",
            "node_ids": [n["node_id"] for n in nodes],
            "limit": limit,
            "limits": RUN_LIMITS,
        }

    def _failures(self, query: dict[str, list[str]]) -> dict[str, Any]:
        db_now, _ = self._store.nodes.all()
        failures = views.run_rows(self._store.history.failures(limit=100))
        return {"page": "failures", "db_now": db_now, "failures": failures}


def _one(query: dict[str, list[str]], name: str, default: str) -> str:
    values = query.get(name)
    return values[0] if values else default
