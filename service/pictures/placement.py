"""The MoE placement picture: rank loads before and after, replicas and token routes.

Owns: `placement_svg(result, home_loads=...)`: per rank, the load with every expert on its
home rank only (given by the caller, from the cost model) beside the load after placement,
the S*K capacity line, the foreign experts each rank hosts, and the source-to-destination
token matrix of the routes (local on the diagonal, remote elsewhere). Must not: place
experts or compute a load.
"""

from collections.abc import Sequence

from api_schemas.moe import MoePlacementResponse
from service.pictures.svg import (
    CRITICAL_STROKE,
    INK,
    MUTED,
    OP_COLOURS,
    document,
    element,
    text,
    tooltip,
)

LEFT = 60
TOP = 70
PLOT_H = 220
BAR_W = 18
RANK_GAP = 20
MATRIX_CELL = 26


def _bars(result: MoePlacementResponse, home_loads: Sequence[int], scale: float,
          base_y: float) -> str:
    parts = []
    for rank, (before, after) in enumerate(zip(home_loads, result.rank_loads, strict=True)):
        x = LEFT + rank * (2 * BAR_W + RANK_GAP)
        for offset, value, kind, colour in ((0, before, "before", "#9ca3af"),
                                            (BAR_W, after, "after", OP_COLOURS["F"])):
            height = value * scale
            parts.append(element(
                "rect", tooltip(f"rank {rank} {kind} placement: {value} tokens"),
                x=x + offset, y=f"{base_y - height:.2f}", width=BAR_W - 2,
                height=f"{height:.2f}", fill=colour, class_=f"load {kind}", data_rank=rank,
                data_tokens=value))
        hosted = result.redundant_experts[rank]
        parts.append(text(f"r{rank}", x=x + BAR_W, y=f"{base_y + 14:.0f}", font_size=11,
                          fill=INK, text_anchor="middle"))
        parts.append(text("+" + ",".join(map(str, hosted)) if hosted else "-", x=x + BAR_W,
                          y=f"{base_y + 28:.0f}", font_size=9, fill=MUTED,
                          text_anchor="middle", class_="replicas", data_rank=rank))
    return "".join(parts)


def _matrix(result: MoePlacementResponse, x0: float, y0: float) -> str:
    ranks = len(result.rank_loads)
    flow = [[0] * ranks for _ in range(ranks)]
    for route in result.routes:
        flow[route.source][route.destination] += route.tokens
    largest = max((max(row) for row in flow), default=1) or 1
    parts = [text("tokens routed: source rank (row) to computing rank (column)", x=x0,
                  y=y0 - 10, font_size=12, font_weight="600", fill=INK)]
    for src in range(ranks):
        for dst in range(ranks):
            value = flow[src][dst]
            colour = OP_COLOURS["B"] if src == dst else OP_COLOURS["W"]
            parts.append(element(
                "rect", tooltip(f"rank {src} -> rank {dst}: {value} tokens"),
                x=x0 + dst * MATRIX_CELL, y=y0 + src * MATRIX_CELL, width=MATRIX_CELL - 2,
                height=MATRIX_CELL - 2, fill=colour,
                fill_opacity=f"{0.08 + 0.92 * value / largest:.2f}", class_="route",
                data_source=src, data_destination=dst, data_tokens=value))
    return "".join(parts)


def placement_svg(result: MoePlacementResponse, *, home_loads: Sequence[int],
                  title: str = "MoE expert placement") -> str:
    """Loads before and after `result`'s placement, its replicas and its routes."""
    ranks = len(result.rank_loads)
    tallest = max([result.capacity_per_rank, *home_loads, *result.rank_loads, 1])
    scale = PLOT_H / (tallest * 1.1)
    base_y = TOP + PLOT_H
    capacity_y = base_y - result.capacity_per_rank * scale
    bars_w = ranks * (2 * BAR_W + RANK_GAP)
    heading = (f"{title} ({result.planner.value}, {result.status.value}): every rank computes "
               f"{result.capacity_per_rank} tokens with {result.num_redundant_experts} "
               f"replicas; before: max/mean {result.no_redundancy_imbalance:.3f}")
    parts = [text(heading, x=LEFT, y=24, font_size=15, font_weight="600", fill=INK),
             text("grey: home-rank load without replicas; blue: after placement; "
                  "under each rank: the foreign experts it hosts", x=LEFT, y=46,
                  font_size=11, fill=MUTED),
             _bars(result, home_loads, scale, base_y),
             element("line", tooltip(f"S*K = {result.capacity_per_rank} tokens per rank"),
                     x1=LEFT - 6, y1=f"{capacity_y:.2f}", x2=f"{LEFT + bars_w:.2f}",
                     y2=f"{capacity_y:.2f}", stroke=CRITICAL_STROKE, stroke_width=2,
                     class_="capacity", data_tokens=result.capacity_per_rank),
             text(f"S*K {result.capacity_per_rank}", x=LEFT - 8, y=f"{capacity_y + 4:.2f}",
                  font_size=10, fill=CRITICAL_STROKE, text_anchor="end")]
    matrix_y = base_y + 70
    parts.append(_matrix(result, LEFT, matrix_y))
    footer_y = matrix_y + ranks * MATRIX_CELL + 24
    parts.append(text(f"remote tokens {result.remote_tokens}, migrated "
                      f"{result.migrated_tokens}; replicas per rank at most "
                      f"{result.redundant_bound_per_rank} (E/R)", x=LEFT, y=footer_y,
                      font_size=11, fill=INK))
    width = max(LEFT + bars_w + 40, LEFT + ranks * MATRIX_CELL + 40, 820)
    description = (f"{ranks} ranks; loads before and after placement in tokens; "
                   f"{len(result.routes)} routes")
    return document("".join(parts), width=width, height=footer_y + 40, title=title,
                    description=description, kind="placement")


__all__ = ["placement_svg"]
