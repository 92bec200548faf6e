"""Stacked memory bars shared by the memory pictures (per pipeline stage, per RL phase).

Owns: `memory_segments` (one bar's component segments, bottom up, each with its bytes and a
tooltip), `memory_legend` (the component kinds' colours, the capacity line and what the
thin host bar means), `memory_heading` (the verdict line above that legend) and `gib_grid`
(the horizontal GiB lines and their labels). Must not: size anything or change a byte
count; where a bar stands and what it is called are the caller's.
"""

from api_schemas.plan import MemoryComponentReport
from api_schemas.units import GIB
from service.pictures.svg import (
    CRITICAL_STROKE,
    INK,
    MEMORY_COLOURS,
    MUTED,
    element,
    nice_ticks,
    text,
    tooltip,
)
from service.render import gib


def memory_segments(components: list[MemoryComponentReport], *, label: str, x: float,
                    width: float, scale: float, base_y: float, tier: str,
                    where: dict[str, object]) -> str:
    """The segments of one stacked bar, bottom up from `base_y` (`scale` pixels per byte):
    each a rect coloured by its kind, its tooltip `label tier: name bytes (note)`, and as data
    its tier, kind, name, bytes and index, with the caller's `where` attributes (for example
    `data_stage` or `data_phase`) first."""
    parts, cursor = [], base_y
    for index, component in enumerate(components):
        height = component.bytes * scale
        cursor -= height
        note = f" ({component.note})" if component.note else ""
        parts.append(element(
            "rect", tooltip(f"{label} {tier}: {component.name} "
                            f"{gib(component.bytes)}{note}"),
            x=f"{x:.2f}", y=f"{cursor:.2f}", width=f"{width:.2f}", height=f"{height:.2f}",
            fill=MEMORY_COLOURS.get(component.kind, MEMORY_COLOURS["other"]),
            fill_opacity="1" if tier == "gpu" else "0.6", stroke="#ffffff", stroke_width=0.4,
            class_=f"segment {tier}", **where, data_tier=tier, data_kind=component.kind,
            data_name=component.name, data_bytes=component.bytes, data_index=index))
    return "".join(parts)


def memory_legend(y: float, *, left: float, host_note: str) -> str:
    """One legend row at `y`: a swatch per component kind, the capacity line, `host_note`."""
    parts, cursor = [], float(left)
    for kind, colour in MEMORY_COLOURS.items():
        parts.append(element("rect", x=f"{cursor:.0f}", y=f"{y - 10:.0f}", width=12, height=12,
                             fill=colour))
        parts.append(text(kind, x=f"{cursor + 16:.0f}", y=f"{y:.0f}", font_size=11, fill=INK))
        cursor += 30 + 7 * len(kind)
    parts.append(element("line", x1=f"{cursor:.0f}", y1=f"{y - 4:.0f}", x2=f"{cursor + 20:.0f}",
                         y2=f"{y - 4:.0f}", stroke=CRITICAL_STROKE, stroke_width=2))
    parts.append(text("usable capacity", x=f"{cursor + 24:.0f}", y=f"{y:.0f}", font_size=11,
                      fill=INK))
    parts.append(text(host_note, x=f"{cursor + 140:.0f}", y=f"{y:.0f}", font_size=11,
                      fill=MUTED))
    return "".join(parts)


def memory_heading(heading: str, *, fits: bool, left: float, host_note: str) -> list[str]:
    """The verdict line (ink when it fits, the critical colour when not) and the legend
    below it."""
    return [text(heading, x=left, y=22, font_size=15, font_weight="600",
                 fill=INK if fits else CRITICAL_STROKE, class_="verdict",
                 data_fits=str(fits).lower()),
            memory_legend(46, left=left, host_note=host_note)]


def gib_grid(tallest_bytes: float, *, left: float, right: float, base_y: float,
             scale: float) -> str:
    """A grid line and a "N GiB" label at each round value up to `tallest_bytes`, from
    `left` to `right` (`scale` pixels per byte above `base_y`)."""
    parts = []
    for tick in nice_ticks(tallest_bytes / GIB, count=6):
        y = base_y - tick * GIB * scale
        parts.append(element("line", x1=left - 4, y1=f"{y:.2f}", x2=f"{right:.2f}",
                             y2=f"{y:.2f}", stroke="#f3f4f6"))
        parts.append(text(f"{tick:g} GiB", x=left - 8, y=f"{y + 4:.2f}", font_size=10,
                          fill=MUTED, text_anchor="end"))
    return "".join(parts)


__all__ = ["gib_grid", "memory_legend", "memory_segments"]
