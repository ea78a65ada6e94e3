"""The dashboard's chart as numbers: bars of runs (stacked by final status) and lines of
lateness per time bucket. The template draws them as inline SVG; nothing here is markup."""

from __future__ import annotations

from dataclasses import dataclass

from easyjob.store.contract import Activity

__all__ = ["Chart", "chart"]

WIDTH, HEIGHT = 960, 150
#: Stacking order, bottom up, and each status's colour (also in the legend).
COLOURS = {
    "SUCCESS": "#3a8f3a",
    "FAILED": "#c0392b",
    "MISSED": "#e08e0b",
    "ABANDONED": "#8e44ad",
    "SKIPPED": "#95a5a6",
    "CANCELLED": "#34495e",
}


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    colour: str
    title: str


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class Chart:
    """Two panels of ``WIDTH`` x ``HEIGHT``: runs (bars) and lateness (two polylines)."""

    width: int
    height: int
    bars: list[Rect]
    runs_max: int
    late_avg: str  # SVG polyline points
    late_max: str
    late_top_s: float
    ticks: list[Tick]
    total_runs: int
    colours: dict[str, str]


def chart(activity: Activity) -> Chart:
    """Lay out *activity*: one bar slot per bucket, scaled to the busiest bucket."""
    buckets = activity.buckets
    slot = WIDTH / len(buckets)
    runs_max = max((b.runs for b in buckets), default=0)
    late_top = max((b.lateness_max_s for b in buckets), default=0.0)
    bars: list[Rect] = []
    avg_points, max_points = [], []
    for i, bucket in enumerate(buckets):
        x = i * slot
        y = float(HEIGHT)
        when = bucket.start.strftime("%H:%M:%S")
        for status, count in sorted(bucket.by_status.items(), key=_stack_order):
            height = HEIGHT * count / runs_max if runs_max else 0.0
            y -= height
            colour = COLOURS.get(status, "#7f8c8d")
            bars.append(
                Rect(x + 1, y, max(slot - 2, 1), height, colour, f"{when} {status} {count}")
            )
        centre = round(x + slot / 2, 1)
        avg_points.append(f"{centre},{_scaled(bucket.lateness_avg_s, late_top)}")
        max_points.append(f"{centre},{_scaled(bucket.lateness_max_s, late_top)}")
    every = max(1, len(buckets) // 6)
    ticks = [
        Tick(i * slot, buckets[i].start.strftime("%H:%M")) for i in range(0, len(buckets), every)
    ]
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        bars=bars,
        runs_max=runs_max,
        late_avg=" ".join(avg_points),
        late_max=" ".join(max_points),
        late_top_s=late_top,
        ticks=ticks,
        total_runs=sum(b.runs for b in buckets),
        colours=COLOURS,
    )


def _stack_order(item: tuple[str, int]) -> int:
    order = list(COLOURS)
    return order.index(item[0]) if item[0] in order else len(order)


def _scaled(value: float, top: float) -> float:
    return round(HEIGHT - (HEIGHT * value / top if top else 0.0), 1)
