"""The pipeline timeline picture of a simulated iteration.

Owns: `timeline_svg(result, title=...)`: one lane per pipeline rank with a bar per op (F, B,
W, fused BW or an overlapped FB pair; shaded by chunk, labelled with its micro-batch), the
idle gaps of each rank as bubbles, a communication row under each lane with the interval
of every message the rank sends, and the critical path outlined and joined. Every bar
carries its op, micro-batch, chunk, start and end as data attributes, exactly as the
simulator returned them. Must not: simulate, or change a time it was given.
"""

from api_schemas.pipeline import PipelineSimulateResponse, PipelineTimelineEntry
from service.pictures.svg import (
    BUBBLE_FILL,
    CRITICAL_STROKE,
    INK,
    MUTED,
    OP_COLOURS,
    document,
    element,
    fmt_seconds,
    nice_ticks,
    text,
    tooltip,
)

LEFT = 86
RIGHT = 24
TOP = 64
LANE_H = 26
COMM_H = 8
LANE_GAP = 8
PLOT_W = 1100
LABEL_MIN_W = 18
"""Bars narrower than this many pixels carry no text."""


def _op_name(entry: PipelineTimelineEntry) -> str:
    name = f"{entry.op} micro-batch {entry.micro_batch} chunk {entry.chunk}"
    if entry.op == "FB":
        name += (f" + B micro-batch {entry.backward_micro_batch} chunk "
                 f"{entry.backward_chunk}")
    return name


def _bars(result: PipelineSimulateResponse, x: "Scale", lane_y: dict[int, float]) -> str:
    critical = set(result.critical_path)
    parts = []
    for index, entry in enumerate(result.timeline):
        x0, x1 = x(entry.start), x(entry.end)
        width = max(x1 - x0, 0.5)
        y = lane_y[entry.stage]
        on_path = index in critical
        label = (f"rank {entry.stage}: {_op_name(entry)}, {fmt_seconds(entry.start)} to "
                 f"{fmt_seconds(entry.end)}" + (" (critical path)" if on_path else ""))
        parts.append(element(
            "rect", tooltip(label), x=f"{x0:.2f}", y=f"{y:.2f}", width=f"{width:.2f}",
            height=LANE_H, fill=OP_COLOURS[entry.op],
            fill_opacity=f"{1.0 - 0.35 * (entry.chunk % 2):.2f}",
            stroke=CRITICAL_STROKE if on_path else "#ffffff",
            stroke_width=2 if on_path else 0.5,
            class_="op" + (" critical" if on_path else ""), data_index=index,
            data_stage=entry.stage, data_op=entry.op, data_micro_batch=entry.micro_batch,
            data_chunk=entry.chunk, data_start=repr(entry.start), data_end=repr(entry.end)))
        if width >= LABEL_MIN_W:
            parts.append(text(f"{entry.op}{entry.micro_batch}", x=f"{x0 + width / 2:.2f}",
                              y=f"{y + LANE_H / 2 + 4:.2f}", font_size=10, fill="#ffffff",
                              text_anchor="middle", pointer_events="none"))
    return "".join(parts)


def _bubbles(result: PipelineSimulateResponse, x: "Scale", lane_y: dict[int, float]) -> str:
    by_rank: dict[int, list[PipelineTimelineEntry]] = {}
    for entry in result.timeline:
        by_rank.setdefault(entry.stage, []).append(entry)
    parts = []
    for rank, entries in by_rank.items():
        cursor = 0.0
        for entry in sorted(entries, key=lambda e: e.start):
            if entry.start > cursor:
                parts.append(_bubble(rank, cursor, entry.start, x, lane_y[rank]))
            cursor = max(cursor, entry.end)
        if result.makespan > cursor:
            parts.append(_bubble(rank, cursor, result.makespan, x, lane_y[rank]))
    return "".join(parts)


def _bubble(rank: int, start: float, end: float, x: "Scale", y: float) -> str:
    return element("rect", tooltip(f"rank {rank} idle {fmt_seconds(end - start)}"),
                   x=f"{x(start):.2f}", y=f"{y:.2f}", width=f"{max(x(end) - x(start), 0.5):.2f}",
                   height=LANE_H, fill=BUBBLE_FILL, class_="bubble", data_stage=rank,
                   data_start=repr(start), data_end=repr(end))


def _transfers(result: PipelineSimulateResponse, x: "Scale", lane_y: dict[int, float]) -> str:
    parts = []
    for t in result.transfers:
        y = lane_y[t.src_stage] + LANE_H + 1
        colour = OP_COLOURS["F"] if t.kind == "activation" else OP_COLOURS["B"]
        parts.append(element(
            "rect", tooltip(f"rank {t.src_stage} -> {t.dst_stage}: {t.kind} of micro-batch "
                            f"{t.micro_batch}, {fmt_seconds(t.start)} to "
                            f"{fmt_seconds(t.end)}"),
            x=f"{x(t.start):.2f}", y=f"{y:.2f}", width=f"{max(x(t.end) - x(t.start), 1.0):.2f}",
            height=COMM_H - 2, fill=colour, fill_opacity="0.55", class_="transfer",
            data_src=t.src_stage, data_dst=t.dst_stage, data_kind=t.kind,
            data_start=repr(t.start), data_end=repr(t.end)))
    return "".join(parts)


def _critical_line(result: PipelineSimulateResponse, x: "Scale",
                   lane_y: dict[int, float]) -> str:
    if len(result.critical_path) < 2:
        return ""
    points = []
    for index in result.critical_path:
        entry = result.timeline[index]
        y = lane_y[entry.stage] + LANE_H / 2
        points.append(f"{x(entry.start):.2f},{y:.2f} {x(entry.end):.2f},{y:.2f}")
    return element("polyline", fill="none", stroke=CRITICAL_STROKE, stroke_width=1.5,
                   stroke_dasharray="4 2", points=" ".join(points), class_="critical-path",
                   pointer_events="none")


class Scale:
    """Seconds -> pixels over the plot area."""

    def __init__(self, makespan: float) -> None:
        self.per_s = PLOT_W / makespan if makespan > 0 else 0.0

    def __call__(self, value_s: float) -> float:
        return LEFT + value_s * self.per_s


def axis(makespan: float, x: Scale, bottom: float) -> str:
    """The time axis under the lanes, ticked in seconds up to `makespan`."""
    parts = [element("line", x1=LEFT, y1=f"{bottom:.2f}", x2=LEFT + PLOT_W, y2=f"{bottom:.2f}",
                     stroke=MUTED)]
    for tick in nice_ticks(makespan):
        if tick > makespan:
            break
        parts.append(element("line", x1=f"{x(tick):.2f}", y1=f"{bottom:.2f}",
                             x2=f"{x(tick):.2f}", y2=f"{bottom + 5:.2f}", stroke=MUTED))
        parts.append(text(fmt_seconds(tick), x=f"{x(tick):.2f}", y=f"{bottom + 18:.2f}",
                          font_size=10, fill=MUTED, text_anchor="middle"))
    return "".join(parts)


def _legend(y: float) -> str:
    items = [("F", "forward", OP_COLOURS["F"]), ("B", "input grad", OP_COLOURS["B"]),
             ("W", "weight grad", OP_COLOURS["W"]), ("BW", "fused B+W", OP_COLOURS["BW"]),
             ("FB", "F&B pair", OP_COLOURS["FB"]), ("idle", "bubble", BUBBLE_FILL)]
    parts, cursor = [], float(LEFT)
    for short, name, colour in items:
        parts.append(element("rect", x=f"{cursor:.0f}", y=f"{y - 10:.0f}", width=12, height=12,
                             fill=colour))
        parts.append(text(f"{short} {name}", x=f"{cursor + 16:.0f}", y=f"{y:.0f}", font_size=11,
                          fill=INK))
        cursor += 26 + 7 * len(f"{short} {name}")
    parts.append(element("line", x1=f"{cursor:.0f}", y1=f"{y - 4:.0f}", x2=f"{cursor + 20:.0f}",
                         y2=f"{y - 4:.0f}", stroke=CRITICAL_STROKE, stroke_width=2,
                         stroke_dasharray="4 2"))
    parts.append(text("critical path", x=f"{cursor + 24:.0f}", y=f"{y:.0f}", font_size=11,
                      fill=INK))
    parts.append(text("thin row under a lane: messages the rank sends", x=f"{cursor + 120:.0f}",
                      y=f"{y:.0f}", font_size=11, fill=MUTED))
    return "".join(parts)


def timeline_svg(result: PipelineSimulateResponse, *, title: str = "Pipeline timeline") -> str:
    """The timeline of `result` (which must carry its `timeline`) as an SVG document."""
    ranks = len(result.busy_s)
    lane_y = {rank: float(TOP + rank * (LANE_H + COMM_H + LANE_GAP)) for rank in range(ranks)}
    bottom = TOP + ranks * (LANE_H + COMM_H + LANE_GAP)
    height = bottom + 70
    width = LEFT + PLOT_W + RIGHT
    x = Scale(result.makespan)
    heading = (f"{title}: makespan {fmt_seconds(result.makespan)}, bubble "
               f"{result.bubble_fraction:.1%}, peak in-flight "
               f"{max(result.peak_in_flight, default=0.0):g} stage(s)")
    lanes = "".join(
        text(f"rank {rank}", x=LEFT - 8, y=f"{lane_y[rank] + LANE_H / 2 + 4:.2f}", font_size=12,
             fill=INK, text_anchor="end")
        for rank in range(ranks))
    body = (text(heading, x=LEFT, y=22, font_size=15, font_weight="600", fill=INK)
            + _legend(46) + lanes + _bubbles(result, x, lane_y) + _transfers(result, x, lane_y)
            + _bars(result, x, lane_y) + _critical_line(result, x, lane_y)
            + axis(result.makespan, x, bottom))
    description = (f"{ranks} pipeline ranks, {len(result.timeline)} ops, "
                   f"{len(result.transfers)} transfers; bars are op start to end in seconds")
    return document(body, width=width, height=height, title=title, description=description,
                    kind="timeline")


__all__ = ["LANE_GAP", "LANE_H", "LEFT", "PLOT_W", "RIGHT", "TOP", "Scale", "axis",
           "timeline_svg"]
