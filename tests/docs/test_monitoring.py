"""Every metric that docs/monitoring.md and the Grafana dashboard name is one a node exports;
its table of thread names is the names easyjob gives its threads."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from easyjob.observe.metrics import Gauges
from easyjob.observe.prometheus import NodeMetrics
from easyjob.threads import PREFIX

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\beasyjob_[a-z_]+")


def exported() -> set[str]:
    metrics = NodeMetrics("n1")
    metrics.run_started("t", 0.1)
    metrics.run_jittered("t", 4.2)
    metrics.run_finished("t", "failure", 0.2)
    metrics.misfired("t")
    metrics.watch(
        Gauges(
            lambda: 1,
            lambda: 1,
            lambda: 0,
            lambda: 0.1,
            lambda: 0.0,
            lambda: 2,
            planner_behind=lambda: True,  # its rate is exported only while behind
        ),
        lambda: {
            "statements": 1,
            "commits": 1,
            "errors.lock": 1,
            "rows_written.easy_job_task_detail": 1,
            "rows_by_write.runs_success.easy_job_task_detail.": 1,
        },
    )
    text = generate_latest(metrics.registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_documented_metrics_exist() -> None:
    names = exported()
    page = (ROOT / "docs" / "monitoring.md").read_text()
    board = json.loads((ROOT / "docs" / "grafana" / "easyjob.json").read_text())
    exprs = " ".join(t["expr"] for p in board["panels"] for t in p["targets"])
    used = set(NAME.findall(page)) | set(NAME.findall(exprs))
    histograms = {n.removesuffix("_bucket") for n in names if n.endswith("_bucket")}
    assert used, "no metric named"
    assert used - names - histograms == set()
    # and every exported family is documented
    families = {re.sub(r"_(bucket|count|sum|created)$", "", n) for n in names}
    assert {f for f in families if f not in page and f + "_total" not in page} == set()


def _named_roles() -> set[str]:
    """The roles easyjob's code names threads by: NamedThread's and name_this_thread's
    first argument, a loop's ``name``, an HTTP server's ``name``, the worker pool's."""
    roles = {"worker-N"}
    for path in (ROOT / "easyjob").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in ("NamedThread", "name_this_thread") and node.args:
                    roles.add(_text(node.args[0]))
                if node.func.id == "HttpServer":
                    roles |= {_text(k.value) for k in node.keywords if k.arg == "name"}
            elif isinstance(node, ast.ClassDef) and "Loop" in {ast.unparse(b) for b in node.bases}:
                for item in node.body:
                    if isinstance(item, ast.Assign) and ast.unparse(item.targets[0]) == "name":
                        roles.add(_text(item.value))
    return roles - {""}


def _text(node: ast.expr) -> str:
    """A string literal's value; "" for a role computed at run time."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def test_documented_threads_are_the_threads_easyjob_names() -> None:
    page = (ROOT / "docs" / "monitoring.md").read_text()
    section = page.split("## A node's threads", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    documented = {m.removeprefix(PREFIX) for row in rows for m in re.findall(r"`(ej-[^`]+)`", row)}
    assert documented == _named_roles()
