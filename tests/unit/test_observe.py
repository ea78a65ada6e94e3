"""NodeMetrics (bounded task labels, scrape-time gauges), health checks and addresses."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from easyjob.cli import main
from easyjob.core.store_values import DB_ERROR_KINDS
from easyjob.errors import ConfigError
from easyjob.observe.endpoint import Probe, check, endpoint_app
from easyjob.observe.http import HttpServer, Request, Response, parse_address
from easyjob.observe.metrics import OTHER, Gauges
from easyjob.observe.prometheus import NodeMetrics
from easyjob.observe.wsgi import as_wsgi


def values(metrics: NodeMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_task_labels_are_capped_and_the_rest_fold_into_other() -> None:
    metrics = NodeMetrics("n1", task_labels=3)
    for i in range(1000):
        metrics.run_started(f"task-{i}", 0.01)
        metrics.run_finished(f"task-{i}", "success", 0.002)
    metrics.misfired("task-999", 2)
    found = values(metrics)
    tasks = {dict(labels).get("task") for name, labels in found if name.startswith("easyjob_run")}
    assert tasks == {"task-0", "task-1", "task-2", OTHER}
    assert metrics.task_labels() == ["task-0", "task-1", "task-2"]
    assert found[("easyjob_runs_started_total", frozenset({("task", OTHER)}))] == 997
    finished_other = frozenset({("task", OTHER), ("outcome", "success")})
    assert found[("easyjob_runs_finished_total", finished_other)] == 997
    assert found[("easyjob_misfires_total", frozenset({("task", OTHER)}))] == 2
    assert found[("easyjob_run_lateness_seconds_count", frozenset({("task", "task-1")}))] == 1


def test_claims_recoveries_and_scrape_time_gauges() -> None:
    metrics = NodeMetrics("n1")
    metrics.claims(5, 2)
    metrics.claims(1, 0)
    metrics.recovered(3)
    counts = {"statements": 40, "commits": 9, "errors.connection": 2, "errors.deadlock": 1}
    counts.update({"rows_written": 7, "rows_written.easy_job_task": 2})
    counts["rows_written.easy_job_task_detail"] = 5
    counts["rows_by_write.advance_tasks.easy_job_task_detail.MISSED"] = 3
    metrics.watch(
        Gauges(
            held=lambda: 4,
            running=lambda: 3,
            stuck=lambda: 1,
            heartbeat_age_s=lambda: 0.25,
            clock_offset_s=lambda: -1.5,
            live_nodes=lambda: 3,
            planner_behind=lambda: True,
            planner_rate=lambda: 40.0,
            planner_behind_episodes=lambda: 2,
            fires_written=lambda: 1234,
        ),
        lambda: counts,
    )
    found = values(metrics)
    assert found[("easyjob_claims_total", frozenset())] == 6
    assert found[("easyjob_claims_lost_total", frozenset())] == 2
    assert found[("easyjob_recovered_runs_total", frozenset())] == 3
    assert found[("easyjob_runs_held", frozenset())] == 4
    assert found[("easyjob_runs_running", frozenset())] == 3
    assert found[("easyjob_stuck_threads", frozenset())] == 1
    assert found[("easyjob_heartbeat_age_seconds", frozenset())] == 0.25
    assert found[("easyjob_live_nodes", frozenset())] == 3
    assert found[("easyjob_planner_behind", frozenset())] == 1
    assert found[("easyjob_planner_rate", frozenset())] == 40.0
    assert found[("easyjob_planner_behind_episodes_total", frozenset())] == 2
    assert found[("easyjob_fires_written_total", frozenset())] == 1234
    assert found[("easyjob_clock_offset_seconds", frozenset())] == -1.5
    assert found[("easyjob_db_round_trips_total", frozenset({("kind", "commit")}))] == 9
    assert found[("easyjob_db_errors_total", frozenset({("kind", "connection")}))] == 2
    rows = {k: v for k, v in found.items() if k[0] == "easyjob_db_rows_written_total"}
    assert rows == {
        ("easyjob_db_rows_written_total", frozenset({("table", "easy_job_task")})): 2,
        ("easyjob_db_rows_written_total", frozenset({("table", "easy_job_task_detail")})): 5,
    }
    by_write = ("write", "advance_tasks"), ("table", "easy_job_task_detail"), ("status", "MISSED")
    assert found[("easyjob_db_rows_written_by_write_total", frozenset(by_write))] == 3
    counts["statements"] = 41  # read again at the next scrape
    assert (
        values(metrics)[("easyjob_db_round_trips_total", frozenset({("kind", "statement")}))] == 41
    )


def probe(*, age: float | None, threads: dict[str, bool], stopping: bool = False) -> Probe:
    return Probe(lambda: threads, lambda: age, 1.0, lambda: stopping)


def test_health_names_what_is_wrong() -> None:
    up = {"loader": True, "heartbeat": True}
    assert check(probe(age=0.2, threads=up)) == (True, {"status": "ok", "heartbeat_age_s": 0.2})
    ok, body = check(probe(age=0.2, threads={**up, "loader": False}))
    assert (ok, body["reason"]) == (False, "thread(s) not running: loader")
    ok, body = check(probe(age=2.5, threads=up))
    assert not ok
    assert body["reason"] == (
        "heartbeat is stale: last accepted 2.5 s ago, peers judge a node dead after 1 s"
    )
    assert check(probe(age=None, threads=up))[1]["reason"].startswith(
        "heartbeat is stale: last accepted never"
    )
    # stopping: the loader has ended on purpose; healthy, but no longer ready
    stopping = probe(age=0.2, threads={**up, "loader": False}, stopping=True)
    assert check(stopping)[0] is True
    assert check(stopping, ready=True) == (
        False,
        {"status": "fail", "reason": "node is stopping", "heartbeat_age_s": 0.2},
    )


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("9100", ("127.0.0.1", 9100)),
        (":9100", ("127.0.0.1", 9100)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        ("metrics.local:9100", ("metrics.local", 9100)),
        ("[::1]:9100", ("::1", 9100)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
    ],
)
def test_addresses(text: str, address: tuple[str, int]) -> None:
    assert parse_address(text) == address


@pytest.mark.parametrize("text", ["", "host", "host:", "1:2:3", "host:65536", "::1:80", "h:-1"])
def test_bad_addresses_are_named(text: str) -> None:
    with pytest.raises(ValueError, match=f"invalid address {text!r}: use HOST:PORT"):
        parse_address(text)


def test_bad_http_options_are_usage_errors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["run", "jobs.py", "--http", "host:99999"]) == 2
    assert "argument --http: invalid address 'host:99999'" in capsys.readouterr().err
    monkeypatch.setenv("EASYJOB_DASHBOARD_HTTP", "nowhere")
    assert main(["dashboard"]) == 2
    assert "invalid address 'nowhere'" in capsys.readouterr().err


def test_a_busy_port_is_named() -> None:
    empty = as_wsgi(lambda request: Response(200, b""))
    first = HttpServer(("127.0.0.1", 0), empty, name="t")
    port = int(first.url.rsplit(":", 1)[1])
    try:
        with pytest.raises(ConfigError, match=f"cannot serve HTTP on 127.0.0.1:{port}: "):
            HttpServer(("127.0.0.1", port), empty, name="t")
    finally:
        first.close()


def test_every_series_is_there_at_0_from_the_start() -> None:
    metrics = NodeMetrics("n1")
    metrics.watch(
        Gauges(lambda: 0, lambda: 0, lambda: 0, lambda: 0.1, lambda: 0.0, lambda: 1),
        lambda: {"statements": 1, "commits": 1},  # no error yet
    )
    metrics.declare(["a", "b"])
    found = values(metrics)
    for kind in DB_ERROR_KINDS:
        assert found[("easyjob_db_errors_total", frozenset({("kind", kind)}))] == 0
    for task in ("a", "b"):
        assert found[("easyjob_runs_started_total", frozenset({("task", task)}))] == 0
        assert found[("easyjob_misfires_total", frozenset({("task", task)}))] == 0
        for outcome in ("success", "failure"):
            labels = frozenset({("task", task), ("outcome", outcome)})
            assert found[("easyjob_runs_finished_total", labels)] == 0


def _request(url: str, method: str) -> tuple[int, bytes, dict[str, str]]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read(), dict(err.headers)


def test_head_is_answered_like_get_without_a_body() -> None:
    metrics = NodeMetrics("n1")
    app = endpoint_app(metrics, probe(age=0.1, threads={"loader": True}))
    server = HttpServer(("127.0.0.1", 0), app, name="t")
    server.start()
    try:
        status, body, headers = _request(server.url + "/metrics", "GET")
        assert status == 200 and body
        head_status, head_body, head_headers = _request(server.url + "/metrics", "HEAD")
        assert (head_status, head_body) == (200, b"")
        assert head_headers["Content-Type"] == headers["Content-Type"]
        assert _request(server.url + "/healthz", "HEAD")[:2] == (200, b"")
        assert _request(server.url + "/nope", "HEAD")[:2] == (404, b"")
        assert _request(server.url + "/metrics", "PUT")[0] == 405
    finally:
        server.close()


def test_the_server_and_its_requests_run_on_threads_named_for_it() -> None:
    linux = sys.platform.startswith("linux")
    seen: list[tuple[str, str | None]] = []
    requests: list[int | None] = []

    def where(request: Request) -> Response:
        comm = Path(f"/proc/self/task/{threading.get_native_id()}/comm")
        seen.append((threading.current_thread().name, comm.read_text().strip() if linux else None))
        requests.append(threading.current_thread().ident)
        return Response(200, b"")

    server = HttpServer(("127.0.0.1", 0), as_wsgi(where), name="metrics")
    server.start()
    try:
        assert _request(server.url, "GET")[0] == 200
        # the request's thread may not have ended yet: the server's is the other one
        serving = [
            t.name
            for t in threading.enumerate()
            if t.name == "ej-metrics" and t.ident not in requests
        ]
    finally:
        server.close()
    assert serving == ["ej-metrics"]
    assert seen == [("ej-metrics", "ej-metrics" if linux else None)]
