"""MoE expert placement (MoonEP): redundant experts that balance every rank exactly.

Owns: POST /v1/moe/placement (schema in -> `solver.placement.api.plan_placement`, or
`plan_placement_layers` for a request with `layers` -> schema out): the constructive planner
on a request thread, the exact CP-SAT planner in the solver pool with its time limit
clamped; the bounds on the token matrices. Must not: place experts.
"""

from functools import partial
from typing import Annotated

from anyio import to_thread
from fastapi import APIRouter, Body, Header, Query, Response

from api_schemas.moe import (
    MoePlacementLayersResponse,
    MoePlacementRequest,
    MoePlacementResponse,
    PlacementPlanner,
    RouteListing,
)
from models.errors import InvalidSpecError
from models.moe.balance import home_rank_loads
from service import limits
from service.core import call_core
from service.deps import ContextDep
from service.media import Format, model_response, svg_content, svg_response, wanted_format
from service.openapi import problem_responses
from service.pictures import placement_svg
from service.searches import run_search, with_clamped_time_limit
from service.settings import Settings
from service.solver_calls import plan_placement, plan_placement_layers

router = APIRouter(tags=["moe"])

PLACEMENT_EXAMPLES = {
    "4-ranks-8-experts": {
        "summary": "4 ranks, 8 experts, top-2: 8 tokens per rank",
        "value": {"num_experts": 8, "top_k": 2,
                  "tokens": [[6, 2, 1, 1, 2, 1, 2, 1], [5, 3, 2, 0, 1, 2, 1, 2],
                             [4, 4, 1, 1, 2, 0, 2, 2], [6, 3, 0, 2, 1, 1, 2, 1]],
                  "expert_weight_bytes": 88080384, "expert_grad_bytes": 176160768},
    },
    "all-layers": {
        "summary": "Two layers of one model in one call (`layers`): one placement per layer",
        "value": {"num_experts": 8, "top_k": 2,
                  "layers": [[[6, 2, 1, 1, 2, 1, 2, 1], [5, 3, 2, 0, 1, 2, 1, 2],
                              [4, 4, 1, 1, 2, 0, 2, 2], [6, 3, 0, 2, 1, 1, 2, 1]],
                             [[1, 2, 6, 1, 2, 1, 2, 1], [2, 3, 5, 0, 1, 2, 1, 2],
                              [1, 4, 4, 1, 2, 0, 2, 2], [0, 3, 6, 2, 1, 1, 2, 1]]]},
    },
    "exact-reference": {
        "summary": "The same layer with the exact CP-SAT reference planner",
        "value": {"num_experts": 8, "top_k": 2, "planner": "exact", "time_limit_s": 5,
                  "tokens": [[6, 2, 1, 1, 2, 1, 2, 1], [5, 3, 2, 0, 1, 2, 1, 2],
                             [4, 4, 1, 1, 2, 0, 2, 2], [6, 3, 0, 2, 1, 1, 2, 1]]},
    },
}

EXACT_PHASES = 2
"""The exact planner runs CP-SAT twice (fewest replicas, then fewest remote tokens), each
phase with the request's time limit."""


def check_placement_bounds(request: MoePlacementRequest, settings: Settings) -> None:
    """Ranks, experts, layers, matrix size and counts within the documented bounds.

    With `layers`, the cells of all layers together count against the placement bound.
    """
    named = limits.bounds(settings)
    matrices = [request.tokens] if request.tokens is not None else request.layers or []
    ranks, experts = len(matrices[0]), request.num_experts
    limits.check_bound(experts, named["experts"], field="num_experts", what="the experts")
    field = "tokens" if request.tokens is not None else "layers"
    limits.check_bound(ranks, named["world_size"], field=field, what="the rows (ranks)")
    if request.layers is not None:
        limits.check_bound(len(request.layers), named["layers"], field="layers",
                           what="the layers")
    cells = "exact_placement_cells" if request.planner == PlacementPlanner.EXACT \
        else "placement_cells"
    limits.check_bound(len(matrices) * ranks * experts, named[cells], field=field,
                       what=f"the token matrix (layers x ranks x experts) for the "
                       f"{request.planner} planner" if request.layers is not None else
                       f"the token matrix (ranks x experts) for the {request.planner} planner")
    largest = max(max(row) for matrix in matrices for row in matrix)
    limits.check_bound(largest, named["token_count"], field=field, what="the largest count")


@router.post("/v1/moe/placement", summary="Redundant-expert placement with exact balance",
             response_model=MoePlacementResponse | MoePlacementLayersResponse,
             responses={200: {"description": "The placement (JSON) or its picture "
                              "(`?format=svg` or `Accept: image/svg+xml`): rank loads before "
                              "and after, replicas and routes. With `layers`: one placement "
                              "per layer (JSON only).",
                              "content": svg_content("The placement picture.")},
                        **problem_responses("invalid-spec", "solver-time-limit",
                                            "overloaded")})
async def moe_placement(
    request: Annotated[MoePlacementRequest, Body(openapi_examples=PLACEMENT_EXAMPLES)],
    context: ContextDep,
    format: Annotated[Format | None, Query(
        description="'json' (default) or 'svg'; without it, `Accept: image/svg+xml` selects "
        "SVG.")] = None,
    accept: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    """From the router's token counts (row r: tokens on source rank r per expert), the
    foreign experts each rank hosts (at most E/R) and every token route, so that every rank
    computes exactly S*K tokens; with prefetch and gradient-reduce bytes. `constructive` is
    the online planner; `exact` is the CP-SAT reference for small instances. With `layers`
    instead of `tokens`, every layer of a model is placed in one call, one placement per
    layer."""
    settings = context.settings
    check_placement_bounds(request, settings)
    as_svg = wanted_format(format, accept) == Format.SVG
    if request.layers is not None:
        if as_svg:
            raise InvalidSpecError("the placement picture shows one layer: send it as "
                                   "`tokens`, or ask for JSON", field="format")
        layers = await to_thread.run_sync(call_core, plan_placement_layers, request)
        limits.require_finite(layers)
        return model_response(layers)
    if as_svg and request.routes != RouteListing.ALL:
        raise InvalidSpecError(f"the placement picture draws every route: drop "
                               f"routes={request.routes.value!r}, or ask for JSON",
                               field="routes")
    if request.planner != PlacementPlanner.EXACT:
        response = await to_thread.run_sync(call_core, plan_placement, request)
    else:
        clamped = with_clamped_time_limit(request, requested_s=request.time_limit_s,
                                          settings=settings)
        timeout_s = EXACT_PHASES * clamped.time_limit_s + settings.time_limit_grace_s
        response = await run_search(clamped, partial(call_core, plan_placement),
                                    kind="moe-placement",
                                    pool=context.pool, timeout_s=timeout_s)
    limits.require_finite(response)
    if as_svg and request.tokens is not None:
        expert_loads = [sum(column) for column in zip(*request.tokens, strict=True)]
        before = call_core(partial(home_rank_loads, num_ranks=len(request.tokens)),
                           expert_loads)
        return svg_response(placement_svg(response, home_loads=before.tolist()),
                            filename="placement.svg")
    return model_response(response)


__all__ = ["check_placement_bounds", "router"]
