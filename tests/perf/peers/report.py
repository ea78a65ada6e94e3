"""The peer benchmark's tables: every run's figures, and easyjob beside the peers with ratios.

A report is a dict with the keys ``run_peers.run_peer`` produces (``peer``, ``backend``,
``schedules``, ``processes``, ``window_s``, ``expected``, ``runs``, ``runs_per_s``, ``missed``,
``duplicates``, ``lateness_ms`` with ``p50``/``p95``/``p99``/``max``, ``cpu_s``,
``cpu_ms_per_run``, ``db_cpu_window_s``, ``error``); easyjob's (``easyjob_trial``) uses the same
keys with ``peer`` set to ``"easyjob"``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["TARGETS", "compare", "failed", "format_table", "kept_up"]

#: Issue 5's targets: easyjob's sustained rate at least this many times the peer's, with a
#: lower lateness p99.
TARGETS = {"apscheduler4": 25.0, "apscheduler3": 3.0}

Report = dict[str, Any]


def failed(base: Report, error: str) -> Report:
    """A report for a run that produced no figures (setup failed, no virtualenv, a crash)."""
    result = dict(base)
    result.update(
        window_s=0,
        expected=0,
        executions=0,
        runs=0,
        runs_per_s=0.0,
        missed=0,
        duplicates=0,
        unexpected=0,
        lateness_ms={"p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0},
        cpu_s=[],
        error=error,
    )
    return result


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec)


def _render(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _errors(reports: Sequence[Report]) -> str:
    lines = [
        f"{r['peer']} on {r['backend']} ({r['schedules']}): {r['error']}"
        for r in reports
        if r.get("error")
    ]
    return "\n\nerrors:\n" + "\n".join(lines) if lines else ""


def format_table(results: Sequence[Report]) -> str:
    """Every run's figures, one row each."""
    header = [
        "peer", "backend", "sched", "procs", "window s", "expected", "runs", "runs/s",
        "missed", "dups", "p50 ms", "p95 ms", "p99 ms", "max ms", "cpu s", "cpu ms/run",
    ]  # fmt: skip
    rows = []
    for r in results:
        lat = r.get("lateness_ms") or {}
        rows.append(
            [
                r["peer"],
                r["backend"],
                str(r["schedules"]),
                str(r.get("processes", "-")),
                _fmt(r.get("window_s")),
                _fmt(r.get("expected"), ","),
                _fmt(r.get("runs"), ","),
                _fmt(r.get("runs_per_s"), ",.1f"),
                _fmt(r.get("missed"), ","),
                _fmt(r.get("duplicates"), ","),
                *(_fmt(lat.get(k), ",.1f") for k in ("p50", "p95", "p99", "max")),
                _fmt(sum(r["cpu_s"]) if r.get("cpu_s") else None, ".1f"),
                _fmt(r.get("cpu_ms_per_run"), ".2f"),
            ]
        )
    return _render(header, rows) + _errors(results)


def kept_up(report: Report) -> bool:
    """True if every expected fire ran: the rate was capped by the schedules, not by the
    scheduler, so it says nothing about the scheduler's limit."""
    expected, runs = report.get("expected") or 0, report.get("runs") or 0
    return expected > 0 and report.get("missed") == 0 and runs >= expected


def _ratio(ours: Report, peer: Report) -> tuple[str, str]:
    """The ratio cell (easyjob's runs/s over the peer's) and the target verdict."""
    e_rate = float(ours.get("runs_per_s") or 0.0)
    rate = float(peer.get("runs_per_s") or 0.0)
    if peer.get("error") and not rate:
        return "-", "peer failed"
    if ours.get("error") and not e_rate:
        return "-", "easyjob failed"
    ratio = e_rate / rate if rate > 0 else math.inf
    e_capped, p_capped = kept_up(ours), kept_up(peer)
    target = TARGETS.get(peer.get("peer", ""))
    if p_capped and e_capped:
        shown, verdict = "-", "both kept up: raise M"
    else:
        bound = "<=" if p_capped else ">=" if e_capped else ""
        shown = "inf" if math.isinf(ratio) else f"{bound}{ratio:,.1f}x"
        if target is None:
            verdict = ""
        elif ratio >= target:
            verdict = f">= {target:g}x " + ("unproven (peer kept up)" if p_capped else "met")
        else:
            verdict = f">= {target:g}x " + ("unproven (easyjob kept up)" if e_capped else "MISSED")
    e_p99 = (ours.get("lateness_ms") or {}).get("p99")
    p99 = (peer.get("lateness_ms") or {}).get("p99")
    lower = e_p99 is not None and p99 is not None and e_p99 < p99
    verdict += (", " if verdict else "") + "p99 " + ("lower" if lower else "NOT lower")
    return shown, verdict


def _row(report: Report, name: str, ratio: str, verdict: str) -> list[str]:
    lat = (report.get("lateness_ms") or {}) if report.get("runs") else {}  # none: not 0 ms
    return [
        name,
        str(report.get("backend")),
        str(report.get("schedules")),
        str(report.get("processes", "-")),
        _fmt(report.get("expected"), ","),
        _fmt(report.get("runs_per_s"), ",.1f"),
        _fmt(report.get("missed"), ","),
        _fmt(report.get("duplicates"), ","),
        *(_fmt(lat.get(k), ",.0f") for k in ("p50", "p95", "p99", "max")),
        _fmt(report.get("cpu_ms_per_run"), ".2f"),
        _fmt(report.get("db_cpu_window_s"), ".1f"),
        _fmt((report.get("load_avg_1m") or [None])[0], ".2f"),
        ratio,
        verdict,
    ]


def _key(report: Report) -> tuple[Any, Any]:
    return report.get("backend"), report.get("schedules")


def compare(
    easyjob: Report | Sequence[Report], peers: Sequence[Report], notes: Sequence[str] = ()
) -> str:
    """One table: each easyjob run, then the peers' runs with the same backend and schedule
    count, each with the ratio of the sustained rates and issue 5's target.

    ``runs/s`` is the fires of the window that ran (each once) over the window's seconds. The
    ratio is easyjob's runs/s divided by the peer's. The target column checks issue 5's goals
    (at least 25x APScheduler 4's rate and 3x APScheduler 3's, with a lower p99 lateness). A
    ratio means something only where both sides are saturated: a side that ran every fire was
    capped by M, so the ratio is marked ``<=`` (the peer kept up: the peer may go faster) or
    ``>=`` (easyjob kept up), and is left out when both kept up. A peer without an easyjob run
    of its backend and schedule count is compared with the only easyjob run, marked ``*``.
    *notes* are printed under the table.
    """
    ours = [easyjob] if isinstance(easyjob, dict) else list(easyjob)
    header = [
        "scheduler", "backend", "sched", "procs", "expected", "runs/s", "missed", "dups",
        "p50 ms", "p95 ms", "p99 ms", "max ms", "cpu ms/run", "db cpu s", "load", "ratio",
        "target",
    ]  # fmt: skip
    rows = []
    matched: set[int] = set()
    for e in ours:
        rows.append(_row(e, "easyjob", "", ""))
        for i, p in enumerate(peers):
            if i not in matched and _key(p) == _key(e):
                matched.add(i)
                rows.append(_row(p, p.get("peer", "?"), *_ratio(e, p)))
    others = [p for i, p in enumerate(peers) if i not in matched]
    for p in others:
        if len(ours) == 1:
            rows.append(_row(p, p.get("peer", "?") + " *", *_ratio(ours[0], p)))
        else:
            rows.append(_row(p, p.get("peer", "?"), "-", "no easyjob run"))
    text = _render(header, rows)
    footnotes = [
        "runs/s: fires of the window that ran, each counted once, over the window's seconds; "
        "ratio: easyjob's runs/s / the peer's"
    ]
    if any(r[-2].startswith(("<=", ">=")) or r[-2] == "-" for r in rows):
        footnotes.append(
            "<= / >= / -: that side ran every fire (its rate is capped by M, not by its limit);"
            " compare at saturation"
        )
    if others and len(ours) == 1:
        footnotes.append(
            f"* measured on another backend or schedule count than easyjob "
            f"({ours[0].get('backend')}, {ours[0].get('schedules')} schedules)"
        )
    footnotes.append("load: the machine's 1-minute load average when the run's window began")
    footnotes += notes
    return text + "\n" + "\n".join(footnotes) + _errors([*ours, *peers])
