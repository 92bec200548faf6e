"""The RL memory seesaw picture: one GPU's memory in each phase of a colocated iteration.

Owns: `seesaw_svg(report, title=...)`: one stacked bar per phase (rollout, reference
forward, train, weight update) whose segments are the phase's components, a thinner bar of
the GPU's share of host memory beside it, the usable capacity as a line, and between
consecutive phases the transitions that lead from one to the next with their seconds (the
last arrow wraps around to the rollout). Every segment carries its bytes as a data
attribute, exactly as the report gives them. Must not: size or time anything.
"""

from api_schemas.rl_seesaw import RlSeesawResponse
from service.pictures.stacks import gib_grid, memory_heading, memory_segments
from service.pictures.svg import (
    CRITICAL_STROKE,
    INK,
    MUTED,
    document,
    element,
    fmt_seconds,
    text,
    tooltip,
)
from service.render import gib

LEFT = 70
TOP = 70
PLOT_H = 320
BAR_W = 60
HOST_W = 16
STEP = 190
LABELS = {"rollout": "rollout", "reference_forward": "reference forward", "train": "train",
          "weight_sync": "weight update"}


def _arrow(report: RlSeesawResponse, index: int, *, x1: float, x2: float, y: float) -> str:
    """The transitions from phase `index` to the next (wrapping) and their total time."""
    phases = report.phases
    before, after = phases[index].name, phases[(index + 1) % len(phases)].name
    moves = [t for t in report.transitions if t.before == before and t.after == after]
    seconds = sum(t.seconds for t in moves)
    names = "; ".join(f"{t.name}: {fmt_seconds(t.seconds)} ({t.link})" for t in moves)
    label = fmt_seconds(seconds) if moves else "no transfer"
    return element(
        "g", tooltip(names or f"{before} to {after}: nothing moves")
        + element("line", x1=f"{x1:.2f}", y1=f"{y:.2f}", x2=f"{x2 - 6:.2f}", y2=f"{y:.2f}",
                  stroke=MUTED, stroke_width=1.5)
        + element("polygon", points=f"{x2:.2f},{y:.2f} {x2 - 7:.2f},{y - 4:.2f} "
                                    f"{x2 - 7:.2f},{y + 4:.2f}", fill=MUTED)
        + text(label, x=f"{(x1 + x2) / 2:.2f}", y=f"{y - 6:.2f}", font_size=11, fill=INK,
               text_anchor="middle"),
        class_="transition", data_before=before, data_after=after,
        data_seconds=repr(seconds))


def seesaw_svg(report: RlSeesawResponse, *, title: str = "RL memory seesaw") -> str:
    """The memory of every phase of `report` as an SVG document."""
    phases = report.phases
    tallest = max([report.capacity_bytes, 1]
                  + [max(p.gpu_bytes, p.host_bytes_per_gpu) for p in phases])
    scale = PLOT_H / (tallest * 1.05)
    base_y = TOP + PLOT_H
    width = max(760.0, LEFT + STEP * len(phases) + 40)
    worst = max(phases, key=lambda p: p.gpu_bytes)
    verdict = "fits" if report.fits else "DOES NOT FIT"
    heading = (f"{title}: peak {gib(worst.gpu_bytes)} in {LABELS.get(worst.name, worst.name)} "
               f"of {gib(report.capacity_bytes)} usable; transitions "
               f"{fmt_seconds(report.transition_s)}: {verdict}")
    parts = memory_heading(heading, fits=report.fits, left=LEFT,
                           host_note="thin bar: host memory per GPU")
    parts.append(gib_grid(tallest, left=LEFT, right=width - 30, base_y=base_y, scale=scale))
    for index, phase in enumerate(phases):
        x = LEFT + 20 + index * STEP
        parts.append(element(
            "g", memory_segments(phase.components, label=LABELS.get(phase.name, phase.name),
                                 x=x, width=BAR_W, scale=scale, base_y=base_y, tier="gpu",
                                 where={"data_phase": phase.name})
            + memory_segments(phase.host_components, label=LABELS.get(phase.name, phase.name),
                              x=x + BAR_W + 2, width=HOST_W, scale=scale, base_y=base_y,
                              tier="host", where={"data_phase": phase.name}),
            class_="phase" + ("" if phase.fits_gpu else " over"), data_phase=phase.name,
            data_gpu_bytes=phase.gpu_bytes, data_host_bytes=phase.host_bytes_per_gpu))
        parts.append(text(LABELS.get(phase.name, phase.name), x=f"{x + BAR_W / 2:.2f}",
                          y=f"{base_y + 16:.2f}", font_size=11, fill=INK, text_anchor="middle"))
        parts.append(text(gib(phase.gpu_bytes), x=f"{x + BAR_W / 2:.2f}",
                          y=f"{base_y - phase.gpu_bytes * scale - 6:.2f}", font_size=10,
                          fill=INK if phase.fits_gpu else CRITICAL_STROKE,
                          text_anchor="middle"))
        right = x + BAR_W + HOST_W + 8
        if index + 1 < len(phases):
            parts.append(_arrow(report, index, x1=right, x2=x + STEP - 4, y=TOP + 8))
        else:
            parts.append(_arrow(report, index, x1=right, x2=width - 34, y=TOP + 8))
            parts.append(text("to rollout", x=f"{width - 34:.2f}", y=f"{TOP + 24:.2f}",
                              font_size=10, fill=MUTED, text_anchor="end"))
    capacity_y = base_y - report.capacity_bytes * scale
    parts.append(element("line", tooltip(f"usable capacity {gib(report.capacity_bytes)}"),
                         x1=LEFT, y1=f"{capacity_y:.2f}", x2=f"{width - 30:.2f}",
                         y2=f"{capacity_y:.2f}", stroke=CRITICAL_STROKE, stroke_width=2,
                         class_="capacity", data_bytes=report.capacity_bytes))
    parts.append(text(f"phase of the iteration (training stage {report.binding_stage}'s GPU)",
                      x=LEFT, y=f"{base_y + 34:.2f}", font_size=11, fill=MUTED))
    description = (f"{len(phases)} phases; stacked bars are each phase's GPU bytes, arrows the "
                   f"transitions with their seconds; {verdict}")
    return document("".join(parts), width=width, height=base_y + 70, title=title,
                    description=description, kind="seesaw")


__all__ = ["seesaw_svg"]
