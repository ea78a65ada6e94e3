"""Printing benchmark figures: two tables per run (speed, then cost per run), or JSON."""

from __future__ import annotations

from collections.abc import Sequence

from easyjob.bench.metrics import TrialFigures

__all__ = ["probe_share", "render"]

LEGEND = (
    "runs/s and lateness (from the fire time to the call of the job) over the steady window; "
    "lost = claim races lost; stale = runs PENDING or CLAIMED longer than their misfire "
    "grace when the window ended. Over the window, per run the nodes finished in it "
    "(runs): st/run = statements; rows/run = rows the nodes' statements inserted, updated or "
    "deleted, of which run rows in easy_job_task_detail and task rows in easy_job_task; "
    "node ms = the nodes' CPU; db ms = the database server's CPU (its process tree), db s "
    "its total. Over the nodes' life (start-up included), per run completed: rt = "
    "statements + commits; rt/s/node = statements + commits per second per node; cpu s/node "
    "= a node's CPU; cpu ms = the nodes' CPU. settings: default = no tuning flag"
)


def probe_share(trials: Sequence[TrialFigures], probe: float | None) -> float | None:
    """The best trial's runs/s as a fraction of the probe's rows/s, or None without a probe."""
    if not probe or not trials:
        return None
    return round(max(f.runs_per_s for f in trials) / probe, 4)


def render(trials: Sequence[TrialFigures], probe: float | None, backend: str) -> str:
    lines = [f"easyjob bench on {backend}", *_speed(trials), "", *_cost(trials)]
    share = probe_share(trials, probe)
    if probe is not None and share is not None:
        best = max(trials, key=lambda f: f.runs_per_s)
        rows = ""
        if best.rows_per_run is not None:
            rows = f", {best.runs_per_s * best.rows_per_run:,.0f} rows/s written"
        lines.append(
            f"database claim-pattern limit here: {probe:,.0f} rows/s; easyjob's best "
            f"{best.runs_per_s:,.0f} runs/s ({best.settings} settings{rows}) is {share:.0%} "
            "of it"
        )
    for f in trials:
        if f.missed_after_insert or f.missed_summaries:
            lines.append(
                f"{f.settings} {f.nodes} x {f.tasks}: fires missed after their run row was "
                f"written {f.missed_after_insert:,} ({f.missed_after_insert / max(f.runs, 1):.2f} "
                f"per run), MISSED summary rows {f.missed_summaries:,}"
            )
    for f in trials:
        if f.rows_per_run_by_kind:
            split = ", ".join(f"{kind} {n:.2f}" for kind, n in f.rows_per_run_by_kind.items())
            lines.append(f"{f.settings} {f.nodes} x {f.tasks}: rows/run by write: {split}")
    modes = sorted({f.claim_mode for f in trials})
    overlaps = sorted({f.overlap for f in trials})
    lines.append(f"claim mode: {', '.join(modes)}; tasks' overlap: {', '.join(overlaps)}")
    notes = sorted({f.db_cpu_note for f in trials if f.db_cpu_note})
    lines.extend(f"database CPU: {note}" for note in notes)
    if any(f.idle_tasks for f in trials):
        lines.append(
            f"plus {trials[0].idle_tasks:,} registered tasks that never fire in the window"
        )
    lines.append(LEGEND)
    return "\n".join(lines)


def _speed(trials: Sequence[TrialFigures]) -> list[str]:
    lines = [
        f"{'settings':>8} {'nodes':>5} {'tasks':>7} {'expected/s':>10} {'runs/s':>9} "
        f"{'missed':>7} {'dups':>5} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'lost':>6} {'stale':>5}"
    ]
    for f in trials:
        lat = f.lateness_ms
        lines.append(
            f"{f.settings:>8} {f.nodes:>5} {f.tasks:>7} {f.expected_per_s:>10.0f} "
            f"{f.runs_per_s:>9.1f} {f.missed:>7} {f.duplicates:>5} {lat['p50']:>8.1f} "
            f"{lat['p95']:>8.1f} {lat['p99']:>8.1f} {lat['max']:>8.1f} {f.claims_lost:>6} "
            f"{f.stale_at_end:>5}"
        )
    return lines


def _cost(trials: Sequence[TrialFigures]) -> list[str]:
    left = f"{'settings':>8} {'nodes':>5} {'tasks':>7} {'runs/s':>9} | "
    window = (
        f"{'runs':>7} {'st/run':>6} {'rows/run':>8} {'run rows':>8} {'task rows':>9} "
        f"{'node ms':>7} {'db ms':>6} {'db s':>6} | "
    )
    life = f"{'rt':>6} {'rt/s/node':>9} {'cpu s/node':>10} {'cpu ms':>6}"
    title = "over the window, per run finished in it".ljust(len(window) - 2)
    lines = [f"{'':{len(left)}}{title}| over the nodes' life, per run", left + window + life]
    for f in trials:
        cpu = sum(f.cpu_s_per_node.values()) / max(1, len(f.cpu_s_per_node))
        lines.append(
            f"{f.settings:>8} {f.nodes:>5} {f.tasks:>7} {f.runs_per_s:>9.1f} | "
            f"{f.window_runs:>7} {_opt(f.window_statements_per_run, 6, 2)} "
            f"{_opt(f.rows_per_run, 8, 2)} {_opt(f.run_rows_per_run, 8, 2)} "
            f"{_opt(f.task_rows_per_run, 9, 2)} {_opt(f.window_cpu_ms_per_run, 7, 3)} "
            f"{_opt(f.db_cpu_ms_per_run, 6, 3)} {_opt(f.db_cpu_s, 6, 1)} | "
            f"{f.round_trips_per_run:>6.2f} {f.round_trips_per_node_s:>9.1f} {cpu:>10.1f} "
            f"{f.cpu_ms_per_run:>6.3f}"
        )
    return lines


def _opt(value: float | None, width: int, digits: int) -> str:
    return f"{'n/a':>{width}}" if value is None else f"{value:>{width}.{digits}f}"
