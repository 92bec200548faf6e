"""The per-stage memory stack picture of a memory ledger.

Owns: `memory_svg(report, title=...)`: one stacked bar per pipeline stage whose segments are
the ledger's components (parameters, gradients, optimizer states, activations, buffers) in
the ledger's order, the usable capacity as a line, the binding stage marked, an
out-of-memory verdict when the peak exceeds the capacity, and each stage's host-memory
components as a second, thinner bar. Every segment carries its bytes as a data attribute,
exactly as the ledger gives them. Must not: size anything or change a byte count.
"""

from api_schemas.plan import MemoryReport
from service.pictures.stacks import gib_grid, memory_heading, memory_segments
from service.pictures.svg import (
    CRITICAL_STROKE,
    INK,
    MUTED,
    document,
    element,
    text,
    tooltip,
)
from service.render import gib

LEFT = 70
TOP = 70
PLOT_H = 320
BAR_W = 36
HOST_W = 10
STAGE_GAP = 26
MAX_PLOT_W = 1080


def _stage_bars(report: MemoryReport, *, step: float, bar_w: float, host_w: float,
                scale: float) -> list[str]:
    """One GPU and one host stack per stage, with its stage number and the peak marked."""
    stages = report.stages
    base_y = TOP + PLOT_H
    parts = []
    for index, stage in enumerate(stages):
        x = LEFT + 10 + index * step
        parts.append(element(
            "g", memory_segments(stage.components, label=f"stage {stage.stage}", x=x,
                                 width=bar_w, scale=scale, base_y=base_y, tier="gpu",
                                 where={"data_stage": stage.stage})
            + memory_segments(stage.host_components, label=f"stage {stage.stage}",
                              x=x + bar_w + 1, width=host_w, scale=scale, base_y=base_y,
                              tier="host", where={"data_stage": stage.stage}),
            class_="stage" + (" binding" if stage.stage == report.binding_stage else ""),
            data_stage=stage.stage, data_total_bytes=stage.total_bytes,
            data_host_bytes=stage.host_bytes))
        if len(stages) <= 32 or index % max(1, len(stages) // 16) == 0:
            parts.append(text(str(stage.stage), x=f"{x + bar_w / 2:.2f}",
                              y=f"{base_y + 16:.2f}", font_size=11, fill=INK,
                              text_anchor="middle"))
        if stage.stage == report.binding_stage:
            top = base_y - stage.total_bytes * scale
            parts.append(text("peak", x=f"{x + bar_w / 2:.2f}", y=f"{top - 6:.2f}",
                              font_size=10, fill=INK, text_anchor="middle"))
    return parts


def _limit_lines(report: MemoryReport, *, right: float, scale: float) -> list[str]:
    """The usable capacity and, under a safety margin, the limit below it."""
    base_y = TOP + PLOT_H
    parts = []
    capacity_y = base_y - report.capacity_bytes * scale
    parts.append(element("line", tooltip(f"usable capacity {gib(report.capacity_bytes)}"),
                         x1=LEFT, y1=f"{capacity_y:.2f}", x2=f"{right:.2f}",
                         y2=f"{capacity_y:.2f}", stroke=CRITICAL_STROKE, stroke_width=2,
                         class_="capacity", data_bytes=report.capacity_bytes))
    if report.margin_bytes:
        limit_y = base_y - report.limit_bytes * scale
        parts.append(element("line", tooltip(f"limit after the {gib(report.margin_bytes)} "
                                             f"safety margin {gib(report.limit_bytes)}"),
                             x1=LEFT, y1=f"{limit_y:.2f}", x2=f"{right:.2f}",
                             y2=f"{limit_y:.2f}", stroke=CRITICAL_STROKE, stroke_width=1,
                             stroke_dasharray="6 4", class_="margin-limit",
                             data_bytes=report.limit_bytes))
    return parts


def memory_svg(report: MemoryReport, *, title: str = "Per-stage memory") -> str:
    """The memory stack of every stage of `report` as an SVG document."""
    stages = report.stages
    tallest = max([report.capacity_bytes, report.peak_bytes]
                  + [s.host_bytes for s in stages] + [1])
    scale = PLOT_H / (tallest * 1.05)
    step = min(BAR_W + HOST_W + STAGE_GAP, max(8.0, MAX_PLOT_W / max(1, len(stages))))
    bar_w = max(4.0, step * BAR_W / (BAR_W + HOST_W + STAGE_GAP))
    host_w = max(2.0, step * HOST_W / (BAR_W + HOST_W + STAGE_GAP))
    base_y = TOP + PLOT_H
    width = LEFT + step * len(stages) + 60
    width = max(width, 760.0)
    verdict = ("fits" if report.fits else
               f"OUT OF MEMORY on stage {report.binding_stage}")
    margin = f" less a {gib(report.margin_bytes)} margin" if report.margin_bytes else ""
    heading = (f"{title}: peak {gib(report.peak_bytes)} on stage {report.binding_stage} of "
               f"{gib(report.capacity_bytes)} usable{margin}: {verdict}")
    parts = memory_heading(heading, fits=report.fits, left=LEFT,
                           host_note="thin bar: host memory")
    parts.append(gib_grid(tallest, left=LEFT, right=width - 40, base_y=base_y, scale=scale))
    parts += _stage_bars(report, step=step, bar_w=bar_w, host_w=host_w, scale=scale)
    parts += _limit_lines(report, right=width - 40, scale=scale)
    parts.append(text("pipeline stage", x=LEFT, y=f"{base_y + 34:.2f}", font_size=11,
                      fill=MUTED))
    description = (f"{len(stages)} stages; stacked bars are the ledger's components in bytes; "
                   f"{verdict}")
    return document("".join(parts), width=width, height=base_y + 70, title=title,
                    description=description, kind="memory")


__all__ = ["memory_svg"]
