"""The rank mesh picture: ranks on a node grid, coloured by group, with cross-node traffic.

Owns: `mesh_svg(report, colour_by=...)`: one row per node and one cell per GPU holding its
rank and coordinates, cells of the same `colour_by` group (tp, cp, dp, pp, ep, ...) in the
same colour, a table of every group kind with where its groups sit and the collectives it
runs, the frequent ones (per layer or per micro-batch) that leave a node marked, and the
rules the configuration breaks. Must not: build groups or place ranks (it draws the mesh
report the API returns).
"""

from api_schemas.mesh import MeshResponse, RankOut
from service.pictures.svg import (
    CRITICAL_STROKE,
    EM_PER_CHARACTER,
    INK,
    MUTED,
    PALETTE,
    document,
    element,
    text,
    tooltip,
)

LEFT = 24
TOP = 70
CELL_W = 74
CELL_H = 44
COORDS_FONT = 8
"""Font size of a cell's coordinate line."""
NODE_GAP = 12
NODE_LABEL_W = 64
FREQUENT = ("per_layer_per_micro_batch", "per_micro_batch")
"""Collective frequencies that count as frequent."""


def _group_colours(ranks: list[RankOut], colour_by: str) -> dict[int, str]:
    leaders: dict[int, int] = {}
    colours = {}
    for rank in ranks:
        members = rank.groups.get(colour_by, [rank.rank])
        leader = min(members) if members else rank.rank
        index = leaders.setdefault(leader, len(leaders))
        colours[rank.rank] = PALETTE[index % len(PALETTE)]
    return colours


def _coords(rank: RankOut, degrees: dict[str, int]) -> str:
    """The coordinates along the axes of degree > 1 (tp, cp, dp, pp, ep)."""
    return " ".join(f"{axis}{value}" for axis, value in rank.coords.items()
                    if axis in ("tp", "cp", "dp", "pp", "ep") and degrees.get(axis, 1) > 1)


def _cell_width(report: MeshResponse) -> float:
    """CELL_W, or wider where a rank's coordinate line (8 px text) would not fit in it."""
    longest = max((len(_coords(rank, report.degrees)) for rank in report.ranks), default=0)
    return max(float(CELL_W), longest * COORDS_FONT * EM_PER_CHARACTER["normal"] + 12)


def _cells(report: MeshResponse, colour_by: str, per_node: int,
           cell_w: float) -> tuple[str, int]:
    colours = _group_colours(report.ranks, colour_by)
    nodes = sorted({rank.node for rank in report.ranks})
    parts = []
    for row, node in enumerate(nodes):
        y = TOP + row * (CELL_H + NODE_GAP)
        parts.append(text(f"node {node}", x=LEFT, y=f"{y + CELL_H / 2 + 4:.0f}", font_size=12,
                          fill=INK))
        parts.append(element("rect", x=LEFT + NODE_LABEL_W - 4, y=y - 4,
                             width=f"{per_node * cell_w + 8:.0f}", height=CELL_H + 8, rx=6,
                             fill="none", stroke="#9ca3af", class_="node"))
    row_of = {node: row for row, node in enumerate(nodes)}
    for rank in report.ranks:
        x = LEFT + NODE_LABEL_W + rank.local_rank * cell_w
        y = TOP + row_of[rank.node] * (CELL_H + NODE_GAP)
        members = rank.groups.get(colour_by, [])
        groups = "; ".join(f"{kind} {members_}" for kind, members_ in rank.groups.items())
        parts.append(element(
            "g",
            tooltip(f"rank {rank.rank} on node {rank.node} GPU {rank.local_rank}: "
                    f"{_coords(rank, report.degrees)}; groups {groups}")
            + element("rect", x=f"{x + 2:.1f}", y=y, width=f"{cell_w - 4:.1f}", height=CELL_H,
                      rx=4,
                      fill=colours[rank.rank], fill_opacity="0.85")
            + text(f"rank {rank.rank}", x=f"{x + cell_w / 2:.1f}", y=y + 17, font_size=11,
                   fill="#ffffff", font_weight="600", text_anchor="middle")
            + text(_coords(rank, report.degrees), x=f"{x + cell_w / 2:.1f}", y=y + 33,
                   font_size=COORDS_FONT,
                   fill="#ffffff",
                   text_anchor="middle"),
            class_="rank", data_rank=rank.rank, data_node=rank.node,
            data_local_rank=rank.local_rank, data_group=",".join(map(str, members))))
    return "".join(parts), len(nodes)


def _axes(report: MeshResponse, y: float) -> tuple[str, float]:
    parts = [text("group kind, size x count: placement; collectives (frequency)", x=LEFT, y=y,
                  font_size=12, font_weight="600", fill=INK)]
    for axis in report.axes:
        y += 18
        crossing = [c for c in axis.collectives
                    if c.frequency in FREQUENT and not axis.all_intra_node]
        where = ("inside a node" if axis.all_intra_node else
                 f"spans {axis.max_nodes_spanned} nodes ({axis.ranks_per_node} per node)")
        calls = ", ".join(f"{c.collective.value} ({c.frequency.replace('_', ' ')})"
                          for c in axis.collectives) or "none"
        marker = "crosses nodes, frequent: " if crossing else ""
        parts.append(text(f"{axis.kind} {axis.group_size} x {axis.num_groups}: {where}; "
                          f"{marker}{calls}", x=LEFT, y=f"{y:.0f}", font_size=11,
                          fill=CRITICAL_STROKE if crossing else INK,
                          class_="axis" + (" cross-node" if crossing else ""),
                          data_kind=axis.kind))
    return "".join(parts), y


def _problems(report: MeshResponse, y: float) -> tuple[str, float]:
    parts = []
    for problem in report.problems:
        y += 18
        parts.append(text(f"{problem.severity.value}: {problem.rule}: {problem.message}"[:190],
                          x=LEFT, y=f"{y:.0f}", font_size=11,
                          fill=CRITICAL_STROKE if problem.severity.value == "error" else INK,
                          class_=f"problem {problem.severity.value}"))
    return "".join(parts), y


def mesh_svg(report: MeshResponse, *, colour_by: str = "tp",
             title: str = "Parallel mesh") -> str:
    """The ranks of `report` on their nodes, coloured by their `colour_by` group."""
    per_node = max((rank.local_rank for rank in report.ranks), default=0) + 1
    degrees = " ".join(f"{k}{v}" for k, v in report.degrees.items() if v > 1) or "1 GPU"
    verdict = "valid" if report.valid else "INVALID"
    heading = (f"{title}: {report.world_size} GPUs, {degrees}, order {report.order}: "
               f"{verdict}; colour = {colour_by} group")
    cell_w = _cell_width(report)
    cells, num_nodes = _cells(report, colour_by, per_node, cell_w)
    y = float(TOP + num_nodes * (CELL_H + NODE_GAP) + 16)
    if report.ranks_truncated:
        parts_note = text(f"first {len(report.ranks)} of {report.world_size} ranks shown",
                          x=LEFT, y=y, font_size=11, fill=MUTED)
        y += 20
    else:
        parts_note = ""
    axes, y = _axes(report, y)
    problems, y = _problems(report, y + 8)
    body = (text(heading, x=LEFT, y=24, font_size=15, font_weight="600",
                 fill=INK if report.valid else CRITICAL_STROKE, class_="verdict",
                 data_valid=str(report.valid).lower())
            + text("cells: rank, then its coordinates; red rows: frequent collectives that "
                   "leave a node", x=LEFT, y=46, font_size=11, fill=MUTED)
            + cells + parts_note + axes + problems)
    width = max(LEFT + NODE_LABEL_W + per_node * cell_w + 24, 900)
    description = (f"{len(report.ranks)} ranks on {num_nodes} nodes, {len(report.axes)} "
                   f"group kinds, {len(report.problems)} problems")
    return document(body, width=width, height=y + 40, title=title, description=description,
                    kind="mesh")


__all__ = ["mesh_svg"]
