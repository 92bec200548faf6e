"""The `POST /v1/mesh` answer: a MeshRequest in, a MeshResponse out.

Owns: turning the mesh layout, its placement, the per-axis collectives and the problems into
the response schema. Must not: define rules or groups, or do I/O.
"""


from api_schemas.mesh import (
    AxisCollectiveOut,
    AxisOut,
    MeshAlternativeOut,
    MeshProblemOut,
    MeshRequest,
    MeshResponse,
    RankOut,
)
from models.core.mesh.candidates import Severity
from models.core.mesh.layout import GroupKind, build_mesh, expert_data_parallel_size, parse_order
from models.core.mesh.validation import mesh_problems
from models.core.traffic.step import axis_collectives
from models.errors import InvalidSpecError

_AXIS_OF_KIND = {GroupKind.TP: "tp", GroupKind.CP: "cp", GroupKind.PP: "pp",
                 GroupKind.DP_CP: "dp", GroupKind.EP: "ep", GroupKind.EDP: "edp"}


def mesh_report(request: MeshRequest) -> MeshResponse:
    """Rank coordinates, groups, placement, collectives and problems of a requested mesh."""
    cluster, p = request.cluster, request.parallel
    problems = mesh_problems(p, model=request.model, num_nodes=cluster.num_nodes,
                             gpus_per_node=cluster.gpus_per_node, training=request.training,
                             order=request.order)
    world = cluster.num_nodes * cluster.gpus_per_node
    degrees = {"tp": p.tp, "cp": p.cp, "dp": p.dp, "pp": p.pp, "ep": p.ep, "etp": p.etp}
    try:
        mesh = build_mesh(p, num_nodes=cluster.num_nodes, gpus_per_node=cluster.gpus_per_node,
                          order=request.order)
    except InvalidSpecError:
        mesh = None
    if mesh is not None:
        degrees["edp"] = expert_data_parallel_size(p)
        order = "-".join(mesh.order)
    else:
        order = _normalised_order(request)
    collectives = axis_collectives(p)
    axes, ranks = [], []
    if mesh is not None:
        for kind in GroupKind:
            place = mesh.placement(kind)
            axis = _AXIS_OF_KIND.get(kind)
            axes.append(AxisOut(
                kind=kind.value, group_size=place.group_size, num_groups=place.num_groups,
                all_intra_node=place.all_intra_node, max_nodes_spanned=place.max_nodes_spanned,
                ranks_per_node=place.ranks_per_node,
                collectives=[AxisCollectiveOut(collective=c.collective,
                                               frequency=c.frequency.value, purpose=c.purpose)
                             for c in collectives if axis is not None and c.axis.value == axis]))
        for rank in range(min(world, request.max_ranks)):
            ranks.append(RankOut(
                rank=rank, node=mesh.node_of(rank), local_rank=rank % cluster.gpus_per_node,
                coords=mesh.coords(rank),
                groups={k.value: list(mesh.group_of(k, rank).members) for k in GroupKind}))
    return MeshResponse(
        world_size=world, valid=not any(x.severity == Severity.ERROR for x in problems),
        order=order, degrees=degrees,
        problems=[MeshProblemOut(
            rule=x.rule, severity=x.severity, field=x.field, message=x.message,
            values=x.values,
            alternative=None if x.alternative is None else MeshAlternativeOut(
                parallel=x.alternative.parallel, order=x.alternative.order,
                change=x.alternative.change))
            for x in problems],
        axes=axes, ranks=ranks, ranks_truncated=world > request.max_ranks)


def _normalised_order(request: MeshRequest) -> str:
    p = request.parallel
    try:
        return "-".join(parse_order(request.order, sizes={"tp": p.tp, "cp": p.cp, "ep": p.ep,
                                                          "dp": p.dp, "pp": p.pp}))
    except InvalidSpecError:
        return request.order


__all__ = ["mesh_report"]
