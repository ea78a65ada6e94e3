"""`easyjob bench` end to end (small), and its percentile arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easyjob.bench.metrics import percentile
from easyjob.bench.trial import TrialConfig
from easyjob.cli import main
from easyjob.core.config import NodeConfig
from easyjob.store.schema import task_detail_table as d


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.99), percentile([], 0.5)) == (
        50.0,
        99.0,
        0.0,
    )


def test_a_tuning_flag_at_its_default_tunes_nothing() -> None:
    """``--workers 64`` (the default) ran a second default-settings trial labelled tuned,
    and a second trial on the same database came out slower: read as a tuning effect."""
    assert TrialConfig(db="sqlite://", workers=NodeConfig().workers).settings == "default"
    assert TrialConfig(db="sqlite://", workers=8).settings == "tuned"
    assert TrialConfig(db="sqlite://", poll=NodeConfig().poll, heartbeat=0.5).settings == "tuned"


def _bench(url: str, workdir: Path, *extra: str) -> list[str]:
    """A small bench: 2 nodes, 5 every-second tasks, 4 s, no probe, JSON out."""
    return [
        "bench",
        "--db",
        url,
        "--nodes",
        "2",
        "--tasks",
        "5",
        "--duration",
        "4",
        "--no-probe",
        "--json",
        "--workdir",
        str(workdir),
        *extra,
    ]


@pytest.mark.cluster
def test_bench_measures_a_small_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_bench(f"sqlite:///{tmp_path}/bench.db", tmp_path / "work")) == 0
    doc = json.loads(capsys.readouterr().out)
    (trial,) = doc["trials"]
    assert (trial["expected"], trial["runs"], trial["missed"], trial["duplicates"]) == (
        20,
        20,
        0,
        0,
    )
    assert trial["nodes"] == 2 and set(trial["cpu_s_per_node"]) == {"bench-node-0", "bench-node-1"}
    assert 0 <= trial["lateness_ms"]["p50"] <= trial["lateness_ms"]["max"]
    assert trial["round_trips_per_run"] > 0
    assert trial["stale_at_end"] == 0  # nothing waited past its grace
    assert (trial["missed_after_insert"], trial["missed_summaries"]) == (0, 0)
    # over the window: each run is at least inserted and moved on; the tasks advance
    assert trial["window_runs"] >= 20 and trial["window_statements_per_run"] > 0
    assert trial["run_rows_per_run"] >= 2 and 0 <= trial["task_rows_per_run"] < 1
    parts = trial["run_rows_per_run"] + trial["task_rows_per_run"]
    assert parts - 0.01 <= trial["rows_per_run"] <= parts + 1  # + the node table's rows
    window_rows = trial["rows_written"]["easy_job_task_detail"]
    assert window_rows == pytest.approx(trial["run_rows_per_run"] * trial["window_runs"], abs=1)
    assert trial["rows_written_life"]["easy_job_task_detail"] > window_rows
    # by kind of write: every run row written is one of a kind, idle runs the direct way
    kinds = trial["rows_by_kind"]
    assert sum(n for k, n in kinds.items() if k not in ("task-row advance", "other")) == (
        window_rows
    )
    assert kinds["claim-and-start"] > 0 and kinds["end"] > 0  # (fires were written ahead)
    assert trial["rows_by_write"]["runs_success.easy_job_task_detail."] == kinds["end"]
    assert trial["rows_per_run_by_kind"]["end"] == pytest.approx(1.0, abs=0.2)
    assert trial["window_cpu_ms_per_run"] > 0
    # SQLite has no server process
    assert (trial["db_cpu_ms_per_run"], trial["db_cpu_s"]) == (None, None)
    assert trial["db_cpu_note"] == "SQLite runs inside the nodes: its CPU is part of theirs"
    assert doc["claim_pattern_share"] is None  # --no-probe


@pytest.mark.cluster
def test_bench_prints_rows_and_cpu_per_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _bench(f"sqlite:///{tmp_path}/bench.db", tmp_path / "work", "--nodes", "1")
    argv.remove("--json")
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if "run rows" in line)
    assert " ".join(lines[header].split()) == (
        "settings nodes tasks runs/s | runs st/run rows/run run rows task rows node ms db ms "
        "db s | rt rt/s/node cpu s/node cpu ms"
    )
    assert lines[header - 1].split("|")[0].strip() == "over the window, per run finished in it"
    row = lines[header + 1].split()
    assert row[:3] == ["default", "1", "5"]
    rows, run_rows, task_rows = (float(v) for v in row[7:10])
    assert run_rows >= 2 and 0 <= task_rows < 1 and rows >= run_rows + task_rows - 0.01
    assert row[11:13] == ["n/a", "n/a"]  # db ms, db s: SQLite has no server process
    assert "database CPU: SQLite runs inside the nodes: its CPU is part of theirs" in lines


def test_bench_refuses_a_database_with_other_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from easyjob.core.records import TaskSpec
    from easyjob.store import Store

    url = f"sqlite:///{tmp_path}/app.db"
    store = Store.open(url, create=True)
    store.tasks.upsert([TaskSpec(name="real", func="app:f", cron="@hourly")])
    store.close()
    assert main(["bench", "--db", url, "--workdir", str(tmp_path / "w"), "--no-probe"]) == 2
    assert "holds 1 task(s) that are not benchmark tasks" in capsys.readouterr().err


@pytest.mark.cluster
def test_bench_with_skip_locked_claims_and_an_idle_catalogue(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from easyjob.store import Store

    store = Store.open(db_url, create=True)
    try:
        if not store.db.skip_locked:
            argv = _bench(db_url, tmp_path / "w", "--claim-mode", "skip_locked")
            assert main(argv) == 2
            assert "claim mode skip_locked is offered on PostgreSQL only" in (
                capsys.readouterr().err
            )
            return
        argv = _bench(db_url, tmp_path / "w", "--claim-mode", "skip_locked", "--idle-tasks", "300")
        assert main(argv) == 0
        doc = json.loads(capsys.readouterr().out)
        (trial,) = doc["trials"]
        assert (trial["expected"], trial["runs"], trial["missed"], trial["duplicates"]) == (
            20,
            20,
            0,
            0,
        )
        assert (trial["claim_mode"], trial["claims_lost"], trial["idle_tasks"]) == (
            "skip_locked",
            0,
            300,
        )
        assert trial["window_start"] < trial["window_end"]
        assert doc["backend"].startswith("postgresql ")
        # the server was found by its port: its CPU over the window, per run
        assert trial["db_cpu_s"] > 0 and trial["db_cpu_ms_per_run"] > 0
        assert trial["db_cpu_note"].startswith("pid ")
        assert len(store.tasks.all()) == 305  # the catalogue, registered once by the bench
    finally:
        store.close()


def test_a_backlog_that_does_not_shrink_ends_the_wait_with_one_line(tmp_path: Path) -> None:
    """A saturated cluster never clears its start-up backlog: the bench says so once and
    measures, instead of waiting minutes and printing a line per second."""
    from datetime import timedelta

    from easyjob.bench.trial import _wait_caught_up
    from easyjob.store import Store
    from tests.store.conftest import make_pending

    store = Store.open(f"sqlite:///{tmp_path / 'bench.db'}", create=True)
    try:
        make_pending(store, "bench-late", fires=3)
        past = store.now() - timedelta(minutes=5)
        store.db.write("age", lambda conn: conn.execute(d.update().values(due_time=past)))
        lines: list[str] = []
        _wait_caught_up(store, lines.append, budget_s=60, stalled_s=0)
        assert lines == [
            "start-up backlog not shrinking for 0 s (3 fires overdue): the cluster runs fewer "
            "fires than are due; measuring anyway"
        ]
    finally:
        store.close()
