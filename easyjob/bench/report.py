"""Printing benchmark figures: one table per run, or JSON."""

from __future__ import annotations

from collections.abc import Sequence

from easyjob.bench.metrics import TrialFigures

__all__ = ["render"]


def render(trials: Sequence[TrialFigures], probe: float | None, backend: str) -> str:
    lines = [f"easyjob bench on {backend}"]
    header = (
        f"{'settings':>8} {'nodes':>5} {'tasks':>7} {'expected/s':>10} {'runs/s':>9} {'missed':>7} "
        f"{'dups':>5} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'lost':>6} {'rt/run':>7} {'rt/s/node':>9} {'cpu s/node':>10} {'cpu ms/run':>10} "
        f"{'stale':>5}"
    )
    lines.append(header)
    for f in trials:
        cpu = sum(f.cpu_s_per_node.values()) / max(1, len(f.cpu_s_per_node))
        lat = f.lateness_ms
        lines.append(
            f"{f.settings:>8} {f.nodes:>5} {f.tasks:>7} {f.expected_per_s:>10.0f} "
            f"{f.runs_per_s:>9.1f} "
            f"{f.missed:>7} {f.duplicates:>5} {lat['p50']:>8.1f} {lat['p95']:>8.1f} "
            f"{lat['p99']:>8.1f} {lat['max']:>8.1f} {f.claims_lost:>6} "
            f"{f.round_trips_per_run:>7.2f} {f.round_trips_per_node_s:>9.1f} {cpu:>10.1f} "
            f"{f.cpu_ms_per_run:>10.2f} {f.stale_at_end:>5}"
        )
    if probe is not None and trials:
        best = max(f.runs_per_s for f in trials)
        share = best / probe if probe else 0.0
        lines.append(
            f"database claim-pattern limit here: {probe:,.0f} rows/s; "
            f"easyjob's best {best:,.0f} runs/s is {share:.0%} of it"
        )
    modes = sorted({f.claim_mode for f in trials})
    lines.append(f"claim mode: {', '.join(modes)}")
    if any(f.idle_tasks for f in trials):
        lines.append(
            f"plus {trials[0].idle_tasks:,} registered tasks that never fire in the window"
        )
    lines.append(
        "runs/s and lateness (from the fire time to the call of the job) over the steady window; "
        "lost = claim races lost; rt/run = statements + commits per completed run; "
        "rt/s/node = statements + commits per second per node; cpu ms/run = the nodes' CPU "
        "over the trial per run of the window; stale = runs PENDING or CLAIMED longer than "
        "their misfire grace when the window ended; settings: default = no tuning flag"
    )
    return "\n".join(lines)
