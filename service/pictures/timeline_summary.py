"""The summary picture of a simulated iteration too long to draw op by op.

Owns: `timeline_summary_svg(result, title=...)`: one lane per pipeline rank on the same time
axis as the full timeline, where the ops of a rank that follow each other closer than one
pixel are drawn as one busy span (its op count, the sum of its op durations, its start and
end as data attributes) and the gaps of a pixel or more as bubbles. The number of shapes is
bounded by the picture's width, not by the ops. Must not: simulate, or change a time it was
given; a span's busy seconds are sums of the simulator's op durations.
"""

from dataclasses import dataclass

from api_schemas.pipeline import PipelineSimulateResponse, PipelineTimelineEntry
from service.pictures.svg import (
    BUBBLE_FILL,
    INK,
    MUTED,
    document,
    element,
    fmt_seconds,
    text,
    tooltip,
)
from service.pictures.timeline import LANE_GAP, LANE_H, LEFT, PLOT_W, RIGHT, TOP, Scale, axis

BUSY_FILL = "#475569"
"""Fill of a busy span (ops of every kind together)."""


@dataclass
class _Span:
    """Consecutive ops of one rank, closer than a pixel to each other."""

    start: float
    end: float
    busy_s: float
    ops: int


def _spans(entries: list[PipelineTimelineEntry], pixel_s: float) -> list[_Span]:
    spans: list[_Span] = []
    for entry in sorted(entries, key=lambda e: (e.start, e.end)):
        duration = entry.end - entry.start
        if spans and entry.start - spans[-1].end < pixel_s:
            last = spans[-1]
            last.end = max(last.end, entry.end)
            last.busy_s += duration
            last.ops += 1
        else:
            spans.append(_Span(entry.start, entry.end, duration, 1))
    return spans


def _lane(rank: int, spans: list[_Span], makespan: float, x: Scale, y: float) -> str:
    parts, cursor = [], 0.0
    for span in spans:
        if span.start > cursor:
            parts.append(_rect(f"rank {rank} idle {fmt_seconds(span.start - cursor)}", cursor,
                               span.start, x, y, fill=BUBBLE_FILL, class_="bubble",
                               data_stage=rank))
        parts.append(_rect(
            f"rank {rank}: {span.ops} ops, busy {fmt_seconds(span.busy_s)}, "
            f"{fmt_seconds(span.start)} to {fmt_seconds(span.end)}", span.start, span.end, x,
            y, fill=BUSY_FILL, class_="busy", data_stage=rank, data_ops=span.ops,
            data_busy_s=repr(span.busy_s)))
        cursor = max(cursor, span.end)
    if makespan > cursor:
        parts.append(_rect(f"rank {rank} idle {fmt_seconds(makespan - cursor)}", cursor,
                           makespan, x, y, fill=BUBBLE_FILL, class_="bubble", data_stage=rank))
    return "".join(parts)


def _rect(label: str, start: float, end: float, x: Scale, y: float, **values: object) -> str:
    return element("rect", tooltip(label), x=f"{x(start):.2f}", y=f"{y:.2f}",
                   width=f"{max(x(end) - x(start), 0.5):.2f}", height=LANE_H,
                   data_start=repr(start), data_end=repr(end), **values)


def timeline_summary_svg(result: PipelineSimulateResponse, *,
                         title: str = "Pipeline timeline") -> str:
    """The busy spans and bubbles of every rank of `result` (which must carry its
    `timeline`) as an SVG document."""
    ranks = len(result.busy_s)
    x = Scale(result.makespan)
    pixel_s = result.makespan / PLOT_W
    by_rank: dict[int, list[PipelineTimelineEntry]] = {rank: [] for rank in range(ranks)}
    for entry in result.timeline:
        by_rank[entry.stage].append(entry)
    lane_y = {rank: float(TOP + rank * (LANE_H + LANE_GAP)) for rank in range(ranks)}
    bottom = TOP + ranks * (LANE_H + LANE_GAP)
    heading = (f"{title}: makespan {fmt_seconds(result.makespan)}, bubble "
               f"{result.bubble_fraction:.1%}, {len(result.timeline):,} ops")
    note = ("too many ops to draw one by one: each dark bar is the ops of a rank that follow "
            "each other closer than a pixel; grey: idle")
    lanes = "".join(
        text(f"rank {rank}", x=LEFT - 8, y=f"{lane_y[rank] + LANE_H / 2 + 4:.2f}",
             font_size=12, fill=INK, text_anchor="end")
        + _lane(rank, _spans(by_rank[rank], pixel_s), result.makespan, x, lane_y[rank])
        for rank in range(ranks))
    body = (text(heading, x=LEFT, y=22, font_size=15, font_weight="600", fill=INK)
            + text(note, x=LEFT, y=44, font_size=11, fill=MUTED) + lanes
            + axis(result.makespan, x, bottom))
    description = (f"{ranks} pipeline ranks, {len(result.timeline)} ops drawn as busy spans "
                   "at one-pixel resolution; bars are start to end in seconds")
    return document(body, width=LEFT + PLOT_W + RIGHT, height=bottom + 70, title=title,
                    description=description, kind="timeline-summary")


__all__ = ["BUSY_FILL", "timeline_summary_svg"]
