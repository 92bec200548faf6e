"""The parallel mesh: rank coordinates, groups, placement and rule checks.

Owns: POST /v1/mesh and its picture POST /v1/mesh.svg (schema in ->
`models.core.mesh.report.mesh_report` -> schema out), with the bounds on the cluster size and on
how much of the mesh is listed. Must not: build groups.
"""

from typing import Annotated

from fastapi import APIRouter, Body, Query, Response

from api_schemas.mesh import MeshRequest, MeshResponse
from models.core.mesh.report import mesh_report
from service import limits
from service.core import call_core
from service.deps import SettingsDep
from service.media import (
    AcceptHeader,
    FormatQuery,
    json_or_svg,
    svg_response,
    svg_responses,
)
from service.pictures import mesh_svg as draw_mesh
from service.settings import Settings

router = APIRouter(tags=["estimates"])

MESH_EXAMPLES = {
    "moe-32-gpus": {
        "summary": "TP2 CP2 DP4 PP2 with EP4 x ETP2 on 4 nodes of 8 GPUs",
        "value": {"cluster": {"num_nodes": 4, "gpus_per_node": 8},
                  "parallel": {"tp": 2, "cp": 2, "dp": 4, "pp": 2, "ep": 4, "etp": 2,
                               "sequence_parallel": True},
                  "order": "tp-cp-ep-dp-pp", "max_ranks": 32},
    },
    "tp3-on-16-gpus": {
        "summary": "tp=3 x pp=2 x dp=2 on 16 GPUs (the answer names the problem and a fix)",
        "value": {"cluster": {"num_nodes": 2, "gpus_per_node": 8},
                  "parallel": {"tp": 3, "pp": 2, "dp": 2},
                  "order": "tp-cp-ep-dp-pp", "max_ranks": 16},
    },
}


GROUP_KINDS = ("tp", "cp", "dp", "pp", "dp_cp", "ep", "etp", "edp")

ColourBy = Annotated[str, Query(pattern="^(" + "|".join(GROUP_KINDS) + ")$",
                                description="SVG only: the group kind whose groups share a "
                                "colour.")]


@router.post("/v1/mesh", summary="Rank coordinates, groups and mesh problems",
             response_model=MeshResponse,
             responses=svg_responses(
                 "The mesh report (JSON) or its picture (`?format=svg` or `Accept: "
                 "image/svg+xml`): ranks on a node grid coloured by group, cross-node collectives "
                 "marked.",
                 "The mesh picture.",
                 "invalid-spec"))
def mesh(request: Annotated[MeshRequest, Body(openapi_examples=MESH_EXAMPLES)],
         settings: SettingsDep,
         format: FormatQuery = None,
         colour_by: ColourBy = "tp",
         accept: AcceptHeader = None,
         ) -> MeshResponse | Response:
    """Where every rank sits (node, coordinates), the members of its tp / cp / dp / pp / ep
    groups, which group kinds stay inside a node and which collectives they run how often,
    and every rule the configuration breaks, each with a valid alternative nearby."""
    return json_or_svg(_mesh_report(request, settings), format, accept,
                       draw=lambda report: draw_mesh(report, colour_by=colour_by),
                       filename="mesh.svg")


@router.post("/v1/mesh.svg", summary="Ranks on a node grid, coloured by group (SVG)",
             response_class=Response,
             responses=svg_responses(
                 "Ranks on a node grid coloured by group, cross-node collectives marked "
                 "(what `POST /v1/mesh?format=svg` answers).", "The mesh picture.",
                 "invalid-spec"))
def mesh_svg(request: Annotated[MeshRequest, Body(openapi_examples=MESH_EXAMPLES)],
             settings: SettingsDep, colour_by: ColourBy = "tp") -> Response:
    """The mesh of `POST /v1/mesh` drawn as SVG: every listed rank on its node, coloured by
    the groups of `colour_by`."""
    return svg_response(draw_mesh(_mesh_report(request, settings), colour_by=colour_by),
                        filename="mesh.svg")


def _mesh_report(request: MeshRequest, settings: Settings) -> MeshResponse:
    named = limits.bounds(settings)
    world = request.cluster.num_nodes * request.cluster.gpus_per_node
    limits.check_bound(world, named["world_size"], field="cluster.num_nodes",
                       what="the cluster's GPU count")
    limits.check_bound(request.max_ranks, named["mesh_ranks"], field="max_ranks",
                       what="the ranks to list")
    listed = min(world, request.max_ranks)
    limits.check_bound(limits.listed_group_members(request.parallel, listed_ranks=listed),
                       named["mesh_members"], field="max_ranks",
                       what="the group members listed (ranks x group sizes)")
    report: MeshResponse = call_core(mesh_report, request)
    return report


__all__ = ["router"]
