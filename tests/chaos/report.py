"""Render chaos reports (JSON lines, from ``EASYJOB_CHAOS_REPORT``) as a markdown table.

python -m tests.chaos.report results.jsonl > table.md
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any

from tests.chaos.checker import FAILOVER_SLACK_S, Report, check

__all__ = ["main", "render"]

HEADER = (
    "| scenario | db | expected | run | superseded | missing | dup (allowed) | stale accepted "
    "| max failover s (bound) | lateness p99 ms | died | stuck | invariants |"
)


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def row(report: dict[str, Any]) -> str:
    broken = check(Report(**report))
    bound = report["failover_bound_s"]
    failover = _num(report["max_failover_s"], ".2f")
    if bound is not None:
        failover += f" ({bound:.2f}+{FAILOVER_SLACK_S:g})"
    cells = [
        report["scenario"],
        report["db"],
        str(report["expected"]),
        str(report["run"]),
        str(report.get("superseded", 0)),
        str(report["missing"]),
        f"{report['duplicated']} ({report['duplicated_allowed']})",
        str(report["stale_accepted"]),
        failover,
        _num(report["lateness_p99_ms"], ".0f"),
        str(len(report["died"])),
        str(len(report["stuck"])),
        "ok" if not broken else "BROKEN: " + "; ".join(b.split(":")[0] for b in broken),
    ]
    return "| " + " | ".join(cells) + " |"


def render(reports: Iterable[dict[str, Any]]) -> str:
    lines = [HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
    lines += [row(r) for r in reports]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.chaos.report RESULTS.jsonl", file=sys.stderr)
        return 2
    with open(argv[0]) as results:
        reports = [json.loads(line) for line in results if line.strip()]
    sys.stdout.write(render(reports))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
