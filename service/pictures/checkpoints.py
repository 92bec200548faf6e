"""The checkpoint-interval picture: goodput of a run against how often it saves.

Owns: `checkpoint_svg(estimate, title=...)`: the run's goodput at each interval of
`goodput_by_interval` as a line over a log-scaled interval axis, with Young's and Daly's
optima and the interval evaluated as vertical marks, and the run's checkpoint size, save
time and job MTBF in the heading. Every point carries its interval and goodput as data
attributes, exactly as the estimate gives them. Must not: compute any goodput or interval.
"""

import math
from dataclasses import dataclass

from api_schemas.run_level import IntervalGoodput, ReliabilityEstimate
from service.pictures.svg import (
    CRITICAL_STROKE,
    INK,
    MUTED,
    PALETTE,
    document,
    element,
    fmt_seconds,
    text,
    tooltip,
)
from service.render import gib

LEFT = 70
TOP = 70
PLOT_W = 600
PLOT_H = 280
WIDTH = LEFT + PLOT_W + 40
LINE = PALETTE[0]
TICKS_S = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 2 * 3600, 3 * 3600,
           6 * 3600, 12 * 3600, 86400, 2 * 86400, 5 * 86400, 10 * 86400)
"""Interval axis ticks: durations people plan checkpoints in."""
MARKS = (("young", "Young", MUTED, "4 3"), ("daly", "Daly", PALETTE[2], "6 3"),
         ("chosen", "evaluated", CRITICAL_STROKE, None))


def _duration(value_s: float) -> str:
    """An interval in the unit people plan checkpoints in."""
    if value_s >= 3600:
        return f"{value_s / 3600:.3g} h"
    if value_s >= 60:
        return f"{value_s / 60:.3g} min"
    return fmt_seconds(value_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Axes:
    """The log-scaled interval axis and the goodput axis of one picture."""

    low: float
    high: float
    floor: float
    grain: float

    def x_of(self, interval_s: float) -> float:
        return LEFT + PLOT_W * math.log(interval_s / self.low) / math.log(self.high / self.low)

    def y_of(self, goodput: float) -> float:
        return TOP + PLOT_H * (1 - (goodput - self.floor) / (1.0 - self.floor))


def _axes(estimate: ReliabilityEstimate) -> _Axes:
    """Intervals from the shortest to the longest shown; goodput from a round floor to 1."""
    points = estimate.goodput_by_interval
    intervals = [p.interval_s for p in points] + [estimate.checkpoint_interval_s]
    low, high = min(intervals), max(intervals)
    if high <= low:
        high = low * 10
    lowest = min([p.goodput for p in points] + [estimate.goodput])
    grain = 0.01 if lowest > 0.95 else 0.05 if lowest > 0.75 else 0.1
    floor = max(0.0, math.floor(lowest / grain - 1e-9) * grain)
    return _Axes(low=low, high=high, floor=floor, grain=grain)


def _grid(axes: _Axes) -> list[str]:
    """Goodput grid lines and labels, then the interval ticks."""
    parts = []
    base_y = TOP + PLOT_H
    steps = 5
    for index in range(steps + 1):
        goodput = axes.floor + (1.0 - axes.floor) * index / steps
        y = axes.y_of(goodput)
        parts.append(element("line", x1=LEFT, y1=f"{y:.2f}", x2=LEFT + PLOT_W, y2=f"{y:.2f}",
                             stroke="#e5e7eb", stroke_width=1))
        label = f"{goodput:.1%}" if axes.grain < 0.05 else f"{goodput:.0%}"
        parts.append(text(label, x=LEFT - 6, y=f"{y + 4:.2f}", font_size=10, fill=MUTED,
                          text_anchor="end"))
    shown = [tick for tick in TICKS_S if axes.low <= tick <= axes.high]
    stride = max(1, math.ceil(len(shown) / 8))
    for tick in shown[::stride]:
        x = axes.x_of(tick)
        parts.append(element("line", x1=f"{x:.2f}", y1=base_y, x2=f"{x:.2f}", y2=base_y + 4,
                             stroke=MUTED, stroke_width=1))
        parts.append(text(_duration(tick), x=f"{x:.2f}", y=base_y + 16, font_size=10,
                          fill=MUTED, text_anchor="middle"))
    return parts


def _curve(points: list[IntervalGoodput], axes: _Axes) -> list[str]:
    """The goodput line and one point per interval with its data."""
    x_of, y_of = axes.x_of, axes.y_of
    path = " ".join(f"{'M' if i == 0 else 'L'}{x_of(p.interval_s):.2f},{y_of(p.goodput):.2f}"
                    for i, p in enumerate(points))
    parts = ([element("path", d=path, fill="none", stroke=LINE, stroke_width=2,
                      class_="goodput")] if path else [])
    for p in points:
        parts.append(element(
            "circle", tooltip(f"every {_duration(p.interval_s)}: goodput {p.goodput:.2%}"),
            cx=f"{x_of(p.interval_s):.2f}", cy=f"{y_of(p.goodput):.2f}", r=2.5, fill=LINE,
            class_="point", data_interval_s=repr(p.interval_s), data_goodput=repr(p.goodput)))
    return parts


def _marks(estimate: ReliabilityEstimate, axes: _Axes) -> list[str]:
    """Young's and Daly's optima and the evaluated interval, where the axis shows them."""
    marks = {"young": estimate.young_interval_s, "daly": estimate.daly_interval_s,
             "chosen": estimate.checkpoint_interval_s}
    base_y = TOP + PLOT_H
    parts = []
    for index, (key, label, colour, dash) in enumerate(MARKS):
        interval = marks[key]
        if not axes.low <= interval <= axes.high:
            continue
        x = axes.x_of(interval)
        parts.append(element(
            "g", tooltip(f"{label}: {_duration(interval)}")
            + element("line", x1=f"{x:.2f}", y1=TOP, x2=f"{x:.2f}", y2=base_y, stroke=colour,
                      stroke_width=1.5, stroke_dasharray=dash)
            + text(f"{label} {_duration(interval)}", x=f"{x + 4:.2f}",
                   y=f"{TOP + 12 + 14 * index:.2f}", font_size=10, fill=colour),
            class_="mark", data_mark=key, data_interval_s=repr(interval)))
    return parts


def checkpoint_svg(estimate: ReliabilityEstimate, *,
                   title: str = "Checkpoint interval") -> str:
    """Goodput against checkpoint interval for `estimate`, as an SVG document."""
    points = estimate.goodput_by_interval
    axes = _axes(estimate)
    heading = (f"{title}: goodput {estimate.goodput:.1%} saving every "
               f"{_duration(estimate.checkpoint_interval_s)}")
    detail = (f"checkpoint {gib(estimate.checkpoint_bytes)}, "
              f"{fmt_seconds(estimate.checkpoint_blocking_s)} of training stopped per save; "
              f"job MTBF {_duration(estimate.job_mtbf_s)}; "
              f"{estimate.expected_failures:.0f} failures expected")
    base_y = TOP + PLOT_H
    parts = [text(heading, x=LEFT, y=22, font_size=14, font_weight="600", fill=INK,
                  class_="verdict"),
             text(detail, x=LEFT, y=40, font_size=11, fill=MUTED),
             *_grid(axes), *_curve(points, axes), *_marks(estimate, axes),
             text("checkpoint interval (training time between saves, log scale)",
                  x=LEFT, y=base_y + 34, font_size=11, fill=MUTED),
             text("goodput", x=12, y=TOP - 10, font_size=11, fill=MUTED)]
    description = (f"goodput at {len(points)} checkpoint intervals with Young's and Daly's "
                   f"optima marked; {estimate.expected_failures:.0f} failures expected")
    return document("".join(parts), width=WIDTH, height=base_y + 62, title=title,
                    description=description, kind="checkpoints")


__all__ = ["checkpoint_svg"]
