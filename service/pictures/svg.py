"""The SVG vocabulary shared by every picture: escaping, elements, colours and the label.

Owns: `element()` and `text()` (escaped SVG markup), `document()` (the root element with an
accessible title and description and the "deterministic model, not a measurement" footer,
widened so that no line of text runs past its edge),
number formats for axes, and the colour of each op, memory kind and group. Must not: know
any API result or compute anything beyond layout.
"""

import re
from html import escape, unescape

MODEL_LABEL = "deterministic model, not a measurement"
"""Carried by every figure the service draws."""

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"

OP_COLOURS = {"F": "#3b82f6", "B": "#16a34a", "W": "#f59e0b", "BW": "#0d9488",
              "FB": "#8b5cf6"}
"""Fill of each pipeline op kind (forward, input gradient, weight gradient, fused, pair)."""

MEMORY_COLOURS = {"parameters": "#3b82f6", "gradients": "#f59e0b", "optimizer": "#a855f7",
                  "activations": "#16a34a", "other": "#94a3b8"}
"""Fill of each memory component kind."""

PALETTE = ("#3b82f6", "#f59e0b", "#16a34a", "#ef4444", "#8b5cf6", "#06b6d4", "#ec4899",
           "#84cc16", "#f97316", "#6366f1", "#14b8a6", "#eab308", "#a855f7", "#22c55e",
           "#0ea5e9", "#d946ef")
"""Categorical colours, cycled by group index."""

BUBBLE_FILL = "#e5e7eb"
CRITICAL_STROKE = "#dc2626"
INK = "#111827"
MUTED = "#6b7280"


def attrs(values: dict[str, object]) -> str:
    """` name="value"` pairs, escaped; None values are left out, '_' becomes '-'."""
    return "".join(f' {name.rstrip("_").replace("_", "-")}="{escape(str(value), quote=True)}"'
                   for name, value in values.items() if value is not None)


def element(tag: str, children: str = "", /, **values: object) -> str:
    """One SVG element; `children` is markup already escaped."""
    if not children:
        return f"<{tag}{attrs(values)}/>"
    return f"<{tag}{attrs(values)}>{children}</{tag}>"


def text(content: str, /, **values: object) -> str:
    """A <text> element with escaped content."""
    return f"<text{attrs(values)}>{escape(content)}</text>"


def tooltip(content: str) -> str:
    """A <title> child: the hover text of the shape it sits in."""
    return f"<title>{escape(content)}</title>"


def fmt_seconds(value_s: float) -> str:
    """A time with a readable unit: '12.5 ms', '1.20 s', '840 us'."""
    size = abs(value_s)
    if size == 0:
        return "0"
    if size >= 1.0:
        return f"{value_s:.3g} s" if size < 100 else f"{value_s:.0f} s"
    if size >= 1e-3:
        return f"{value_s * 1e3:.3g} ms"
    return f"{value_s * 1e6:.3g} us"


def nice_ticks(maximum: float, *, count: int = 8) -> list[float]:
    """Round tick positions from 0 to at least `maximum` (about `count` of them)."""
    if maximum <= 0:
        return [0.0]
    raw = maximum / count
    magnitude = 10 ** _floor_log10(raw)
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    ticks, value = [], 0.0
    while value <= maximum * (1 + 1e-9):
        ticks.append(value)
        value += step
    return ticks


def _floor_log10(value: float) -> int:
    exponent = 0
    while value >= 10:
        value /= 10
        exponent += 1
    while value < 1:
        value *= 10
        exponent -= 1
    return exponent


EM_PER_CHARACTER = {"normal": 0.62, "bold": 0.68}
"""Width of one character in em, a little over the average of the sans-serif fonts a browser
falls back to (DejaVu Sans, the widest common one, averages about 0.6 em on text like the
headings here; bold is wider), so that an estimated line is never shorter than drawn."""

_TEXT = re.compile(r"<text([^>]*)>([^<]*)</text>")
_ATTRIBUTE = re.compile(r' ([a-z-]+)="([^"]*)"')


def text_right_edge(markup: str) -> float:
    """The rightmost x any <text> of `markup` (as `text()` writes it, outside any transform)
    is estimated to reach: its anchor x plus its estimated width, or half of it when
    centred, nothing past x when end-anchored."""
    right = 0.0
    for match in _TEXT.finditer(markup):
        values = dict(_ATTRIBUTE.findall(match.group(1)))
        size = float(values.get("font-size", 16))
        weight = "bold" if values.get("font-weight", "normal") in ("600", "700", "bold") \
            else "normal"
        extent = len(unescape(match.group(2))) * size * EM_PER_CHARACTER[weight]
        share = {"end": 0.0, "middle": 0.5}.get(values.get("text-anchor", "start"), 1.0)
        right = max(right, float(values.get("x", 0)) + share * extent)
    return right


def document(body: str, *, width: float, height: float, title: str, description: str,
             kind: str) -> str:
    """The root <svg>: title and description for assistive technology, a white background,
    the body, and the model label in the bottom-left corner. The picture is widened where a
    line of its text would otherwise run past its right edge."""
    footer = text(f"{title}: {MODEL_LABEL}", x=8, y=height - 8, font_size=11, fill=MUTED,
                  class_="model-label")
    width = max(width, text_right_edge(body + footer) + 8)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        + element("svg",
                  element("title", escape(title), id=f"{kind}-title")
                  + element("desc", escape(f"{description} ({MODEL_LABEL})"),
                            id=f"{kind}-desc")
                  + element("rect", x=0, y=0, width=f"{width:.0f}", height=f"{height:.0f}",
                            fill="#ffffff")
                  + body + footer,
                  xmlns="http://www.w3.org/2000/svg", role="img",
                  aria_labelledby=f"{kind}-title {kind}-desc", width=f"{width:.0f}",
                  height=f"{height:.0f}", viewBox=f"0 0 {width:.0f} {height:.0f}",
                  font_family=FONT, class_=f"atlas-picture {kind}",
                  data_label=MODEL_LABEL)
        + "\n")


__all__ = [
    "BUBBLE_FILL",
    "CRITICAL_STROKE",
    "EM_PER_CHARACTER",
    "INK",
    "MEMORY_COLOURS",
    "MODEL_LABEL",
    "MUTED",
    "OP_COLOURS",
    "PALETTE",
    "attrs",
    "document",
    "element",
    "fmt_seconds",
    "nice_ticks",
    "text",
    "text_right_edge",
    "tooltip",
]
