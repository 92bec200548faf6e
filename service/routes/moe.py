"""MoE expert placement (MoonEP): redundant experts that balance every rank exactly.

Owns: POST /v1/moe/placement and its picture POST /v1/moe/placement.svg (schema in -> bounds
-> `service.placement_answer` in the solver pool -> bytes out): the bounds on the token
matrices, the exact planner's clamped time limit, and the wait for each planner (the exact
one's two phases plus grace; the constructive one the search cap plus grace). Every planner
runs under the pool's admission control (503 overloaded with Retry-After when full), and the
answer is checked and serialised there, not on the event loop. Must not: place experts or
serialise answers.
"""

from collections.abc import Callable
from functools import partial

from anyio import to_thread
from fastapi import APIRouter, Request, Response

from api_schemas.moe import (
    MoePlacementLayersResponse,
    MoePlacementRequest,
    MoePlacementResponse,
    PlacementPlanner,
    RouteListing,
)
from models.errors import InvalidSpecError
from service import limits
from service.core import call_core
from service.deps import ContextDep
from service.media import (
    AcceptHeader,
    Format,
    FormatQuery,
    svg_response,
    svg_responses,
    wanted_format,
)
from service.offloop_body import json_body_openapi, parse_body
from service.placement_answer import layer_json, layer_svg, layers_json, placement_key
from service.searches import with_clamped_time_limit
from service.settings import Settings

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
             responses=svg_responses(
                 "The placement (JSON) or its picture (`?format=svg` or `Accept: image/svg+xml`): "
                 "rank loads before and after, replicas and routes. With `layers`: one placement "
                 "per layer (JSON only).",
                 "The placement picture.",
                 "invalid-spec", "solver-time-limit", "overloaded"),
             openapi_extra=json_body_openapi(MoePlacementRequest, PLACEMENT_EXAMPLES))
async def moe_placement(
    http: Request,
    context: ContextDep,
    format: FormatQuery = None,
    accept: AcceptHeader = None,
) -> Response:
    """From the router's token counts (row r: tokens on source rank r per expert), the
    foreign experts each rank hosts (at most E/R) and every token route, so that every rank
    computes exactly S*K tokens; with prefetch and gradient-reduce bytes. `constructive` is
    the online planner; `exact` is the CP-SAT reference for small instances. With `layers`
    instead of `tokens`, every layer of a model is placed in one call, one placement per
    layer."""
    return await _placement(http, context, as_svg=wanted_format(format, accept) == Format.SVG)


@router.post("/v1/moe/placement.svg", summary="Rank loads before and after placement (SVG)",
             response_class=Response,
             responses=svg_responses(
                 "Rank loads before and after, replicas and routes of one layer (what "
                 "`POST /v1/moe/placement?format=svg` answers).", "The placement picture.",
                 "invalid-spec", "solver-time-limit", "overloaded"),
             openapi_extra=json_body_openapi(MoePlacementRequest, PLACEMENT_EXAMPLES))
async def moe_placement_svg(http: Request, context: ContextDep) -> Response:
    """The placement of one layer (`tokens`, every route) of `POST /v1/moe/placement`
    drawn as SVG."""
    return await _placement(http, context, as_svg=True)


def _checked(body: bytes, settings: Settings, as_svg: bool) -> tuple[MoePlacementRequest, str]:
    """On a worker thread: the body parsed, validated and within bounds, and its
    de-duplication key (hashing a million counts is no work for the event loop either)."""
    request = parse_body(MoePlacementRequest, body)
    check_placement_bounds(request, settings)
    return request, f"{placement_key(request)}:{'svg' if as_svg else 'json'}"


async def _placement(http: Request, context: ContextDep, *, as_svg: bool) -> Response:
    settings = context.settings
    # Parsed, validated, bounded and keyed off the event loop: a 58-layer body takes about
    # 0.4 s of one core to parse, which /healthz would otherwise wait for.
    request, key = await to_thread.run_sync(_checked, await http.body(), settings, as_svg)
    if request.layers is not None and as_svg:
        raise InvalidSpecError("the placement picture shows one layer: send it as "
                               "`tokens`, or ask for JSON", field="format")
    if as_svg and request.routes != RouteListing.ALL:
        raise InvalidSpecError(f"the placement picture draws every route: drop "
                               f"routes={request.routes.value!r}, or ask for JSON",
                               field="routes")
    timeout_s = settings.max_time_limit_s + settings.time_limit_grace_s
    if request.planner == PlacementPlanner.EXACT:
        request = with_clamped_time_limit(request, requested_s=request.time_limit_s,
                                          settings=settings)
        timeout_s = EXACT_PHASES * request.time_limit_s + settings.time_limit_grace_s
    # Planning, the finiteness check and serialisation all run in the solver pool.
    work: Callable[[MoePlacementRequest], bytes | str]
    if as_svg:
        work = layer_svg
    elif request.layers is not None:
        work = partial(layers_json, settings=settings)
    else:
        work = partial(layer_json, settings=settings)
    answer = await context.pool.run(partial(call_core, work, request), key=key,
                                    timeout_s=timeout_s)
    if isinstance(answer, str):
        return svg_response(answer, filename="placement.svg")
    return Response(content=answer, media_type="application/json")


__all__ = ["check_placement_bounds", "router"]
