"""The peer benchmark's measurements and tables, on hand-made ledgers (fast, no peers)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from easyjob.bench.metrics import TrialFigures
from tests.perf.peers.easyjob_trial import figures_report
from tests.perf.peers.ledger import analyze, percentile
from tests.perf.peers.report import compare, failed, format_table

T0 = 1_700_000_000  # a whole epoch second


def line(job: str, fire: int, late_ms: float, pid: int = 1, fire_us: int = 0) -> str:
    fired = datetime.fromtimestamp(fire, UTC) + timedelta(microseconds=fire_us)
    started = fired + timedelta(milliseconds=late_ms)
    return f"{job} {fired.isoformat(timespec='microseconds')} {started.isoformat()} {pid}\n"


def test_counts_runs_missed_duplicates_and_lateness_in_the_window() -> None:
    lines = [
        line("j0", T0 - 1, 5000.0),  # before the window: ignored
        line("j0", T0, 10.0),
        line("j1", T0, 20.0, pid=2),
        line("j0", T0 + 1, 30.0),
        line("j0", T0 + 1, 40.0, pid=2),  # duplicate
        line("j9", T0 + 1, 50.0),  # unknown job
        line("j1", T0 + 1, 60.0, fire_us=500_000),  # off the second
        line("j0", T0 + 2, 1.0),  # after the window: ignored
        "garbage\n",
    ]
    stats = analyze(lines, ["j0", "j1"], T0, T0 + 2)
    assert (stats.window_s, stats.expected, stats.executions, stats.runs) == (2, 4, 6, 3)
    assert (stats.missed, stats.duplicates, stats.unexpected) == (1, 1, 2)  # j1 at T0+1
    assert stats.runs_per_s == 1.5  # fires run once each: no credit for duplicates or strays
    assert stats.lateness_ms == {"p50": 30.0, "p95": 60.0, "p99": 60.0, "max": 60.0}
    assert stats.runs_by_pid == {"1": 4, "2": 2}
    assert (stats.lines, stats.bad_lines) == (9, 1)


def test_an_empty_ledger_misses_everything() -> None:
    stats = analyze([], ["j0", "j1", "j2"], T0, T0 + 10)
    assert (stats.expected, stats.runs, stats.missed, stats.runs_per_s) == (30, 0, 30, 0.0)
    assert stats.lateness_ms["max"] == 0.0


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert [percentile(values, q) for q in (0.5, 0.95, 0.99, 1.0)] == [50.0, 95.0, 99.0, 100.0]
    assert percentile([], 0.5) == 0.0


def report(peer: str, runs_per_s: float, p99: float, **extra: object) -> dict[str, object]:
    """A report over a 15 s window of 1,000 schedules (so nobody kept up unless told)."""
    runs = int(runs_per_s * 15)
    base: dict[str, object] = {
        "peer": peer,
        "backend": "postgresql",
        "schedules": 1000,
        "processes": 1,
        "window_s": 15,
        "expected": 15_000,
        "runs": runs,
        "runs_per_s": runs_per_s,
        "missed": max(0, 15_000 - runs),
        "duplicates": 0,
        "lateness_ms": {"p50": p99 / 2, "p95": p99, "p99": p99, "max": p99},
        "cpu_s": [1.5],
        "cpu_ms_per_run": 0.5,
        "error": None,
    }
    base.update(extra)
    return base


def test_compare_shows_ratios_and_targets() -> None:
    easyjob = report("easyjob", 900.0, 20.0)
    peers = [
        report("apscheduler4", 30.0, 900.0),
        report("apscheduler3", 450.0, 10.0, backend="sqlite"),
    ]
    table = compare(easyjob, peers)
    rows = table.splitlines()
    assert "ratio" in rows[0] and rows[2].lstrip().startswith("easyjob")
    assert " 30.0x" in rows[3] and ">= 25x met, p99 lower" in rows[3]
    assert " 2.0x" in rows[4] and ">= 3x MISSED, p99 NOT lower" in rows[4]
    assert "apscheduler3 *" in rows[4] and "another backend" in table


def test_compare_marks_rates_capped_by_the_schedules() -> None:
    easyjob = report("easyjob", 1000.0, 5.0, missed=0)  # ran every fire
    slow = report("apscheduler4", 100.0, 2500.0)
    fast = report("apscheduler3", 1000.0, 50.0, missed=0)
    rows = compare(easyjob, [slow, fast]).splitlines()
    assert ">=10.0x" in rows[3] and "unproven (easyjob kept up)" in rows[3]
    assert "both kept up: raise M" in rows[4]
    capped_peer = compare(report("easyjob", 900.0, 5.0), [fast]).splitlines()[3]
    assert "<=0.9x" in capped_peer and "MISSED" in capped_peer


def test_compare_groups_each_easyjob_run_with_its_peers() -> None:
    ours = [report("easyjob", 200.0, 5.0, schedules=200), report("easyjob", 900.0, 9.0)]
    peers = [
        report("apscheduler3", 600.0, 2400.0),
        report("apscheduler3", 100.0, 500.0, schedules=200),
        report("apscheduler4", 50.0, 900.0, schedules=10),
    ]
    rows = compare(ours, peers, notes=["a note"]).splitlines()
    names = [row.split()[0] for row in rows[2:7]]
    assert names == ["easyjob", "apscheduler3", "easyjob", "apscheduler3", "apscheduler4"]
    assert " 2.0x" in rows[3] and " 1.5x" in rows[5]
    assert "no easyjob run" in rows[6] and "a note" in rows


def test_compare_and_table_survive_failed_runs() -> None:
    failed_peer = report("apscheduler4", 0.0, 0.0, backend="mariadb", error="1064")
    table = compare(report("easyjob", 5000.0, 20.0, backend="mariadb"), [failed_peer])
    assert "peer failed" in table and "errors:" in table and "1064" in table
    base = {"peer": "easyjob", "backend": "sqlite", "schedules": 1000, "processes": 4}
    crashed = failed(base, "RuntimeError: a benchmark node exited at start")
    assert "easyjob failed" in compare(crashed, [report("apscheduler3", 600.0, 2400.0)])
    table = format_table([failed_peer, report("apscheduler3", 600.0, 2400.0)])
    assert "apscheduler3" in table and "errors:" in table and "1064" in table


def test_trial_figures_map_onto_the_peers_keys() -> None:
    figures = TrialFigures(
        nodes=4,
        tasks=100,
        cron="* * * * * *",
        window_s=15.0,
        expected=1500,
        runs=1490,
        runs_per_s=99.3,
        expected_per_s=100.0,
        missed=10,
        duplicates=2,
        lateness_ms={"p50": 5.0, "p95": 9.0, "p99": 12.0, "max": 30.0},
        claims_lost=7,
        round_trips_per_run=0.5,
        statements_per_run=0.4,
        cpu_s_per_node={"bench-node-0": 1.234, "bench-node-1": 2.0},
    )
    got = figures_report(figures, {"peer": "easyjob", "backend": "sqlite", "schedules": 100})
    assert (got["window_s"], got["expected"], got["runs"], got["executions"]) == (
        15,
        1500,
        1490,
        1492,
    )
    assert (got["runs_per_s"], got["missed"], got["duplicates"]) == (99.3, 10, 2)
    assert got["lateness_ms"] == {"p50": 5.0, "p95": 9.0, "p99": 12.0, "max": 30.0}
    assert got["cpu_s"] == [1.23, 2.0] and got["peer"] == "easyjob"


def test_minute_bursts_from_a_ledger_skip_the_warm_up_and_count_each_burst() -> None:
    from tests.perf.peers.run_burst import format_table as burst_table
    from tests.perf.peers.run_burst import minutes_from_ledger

    lines = [line(f"j{i}", T0, 5.0) for i in range(3)]  # warm-up burst: skipped
    lines += [line("j0", T0 + 60, 10.0), line("j1", T0 + 60, 30.0), line("j1", T0 + 60, 40.0)]
    lines += [line("j2", T0 + 120, 2000.0), "a torn line\n"]
    first, second = minutes_from_ledger(lines, schedules=3)
    assert (first["runs"], first["missing"], first["duplicates"]) == (3, 1, 1)
    assert (first["drain_s"], first["late_p50_ms"], first["late_p99_ms"]) == (0.04, 30.0, 40.0)
    assert first["drain_runs_per_s"] == 75.0
    assert (second["runs"], second["missing"], second["drain_s"]) == (1, 2, 2.0)
    first["cpu_ms_per_run"], second["cpu_ms_per_run"] = 0.5, 0.7
    report = {"peer": "huey", "processes": 1, "minutes": [first, second]}
    table = burst_table([report])
    assert "huey (1 proc)" in table
    assert "target (goal 5): easyjob cpu ms/run <= Huey's (0.5-0.7)" in table
