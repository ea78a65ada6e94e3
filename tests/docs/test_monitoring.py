"""Every metric that docs/monitoring.md and the Grafana dashboard name is one a node exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from easyjob.observe.metrics import Gauges, NodeMetrics

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\beasyjob_[a-z_]+")


def exported() -> set[str]:
    metrics = NodeMetrics("n1")
    metrics.run_started("t", 0.1)
    metrics.run_jittered("t", 4.2)
    metrics.run_finished("t", "failure", 0.2)
    metrics.misfired("t")
    metrics.watch(
        Gauges(lambda: 1, lambda: 1, lambda: 0, lambda: 0.1, lambda: 0.0, lambda: 2),
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
