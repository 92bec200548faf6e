"""Answer a POST /v1/moe/placement request with the chosen planner.

Owns: mapping `MoePlacementRequest` onto `plan_constructive` / `plan_exact` (one layer,
`tokens`) or `plan_constructive_layers` (several, `layers`), a `PlacementResult` onto
`MoePlacementResponse`, and the expert work inside each rank that the placement leaves
(`models.core.moe.expert_gemm`). The exact planner and OR-Tools load only when a request asks
for them. Must not: do I/O (the service wires it).
"""

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from api_schemas.moe import (
    MoePlacementLayersResponse,
    MoePlacementRequest,
    MoePlacementResponse,
    MoeRoute,
    PlacementPlanner,
    PlacementStatus,
    RouteListing,
)
from models.catalog.presets import gpu_preset
from models.core.moe import DEFAULT_TILE_ROWS, imbalance_factor, padded_rows, rank_expert_gemm_s
from models.core.search_memo import within_search_memo
from models.errors import InvalidSpecError
from solver import cancel
from solver.placement.constructive import plan_constructive, plan_constructive_layers
from solver.placement.problem import IntArray
from solver.placement.results import PlacementResult

if TYPE_CHECKING:
    from solver.cpsat import SolverConfig


@within_search_memo
def plan_placement(
    request: MoePlacementRequest, *, config: "SolverConfig | None" = None
) -> MoePlacementResponse:
    """Plan one layer's placement as the request asks.

    Raises:
        InvalidSpecError: on counts the planners cannot accept (field `tokens`), or on a
            request with `layers` (answered by `plan_placement_layers`).
    """
    if request.tokens is None:
        raise InvalidSpecError("this request gives `layers`: plan it with "
                               "plan_placement_layers, or give one layer as `tokens`",
                               field="tokens")
    if any(len(row) != request.num_experts for row in request.tokens):
        raise InvalidSpecError(
            f"every row of tokens needs num_experts={request.num_experts} counts",
            field="tokens",
        )
    k, weight, grad = request.top_k, request.expert_weight_bytes, request.expert_grad_bytes
    if request.planner == PlacementPlanner.EXACT:
        from solver.cpsat import SolverConfig, SolveStatus
        from solver.placement.exact import plan_exact

        cfg = config or SolverConfig(max_time_s=request.time_limit_s)
        exact = plan_exact(request.tokens, top_k=k, weight_bytes_per_expert=weight,
                           grad_bytes_per_expert=grad, config=cfg)
        result = exact.placement
        proven = exact.status == SolveStatus.OPTIMAL
    else:
        result = plan_constructive(request.tokens, top_k=k, weight_bytes_per_expert=weight,
                                   grad_bytes_per_expert=grad)
        proven = result.num_redundant == int(result.lower_bound_per_rank.sum())
    response = placement_response(result, planner=request.planner, proven=proven,
                                  tile_rows=request.tile_rows, routes=request.routes)
    return response.model_copy(update=expert_times(request, response))


@within_search_memo
def plan_placement_layers(request: MoePlacementRequest) -> MoePlacementLayersResponse:
    """Plan every layer of a request with `layers` in one call (constructive planner).

    Each layer's placement equals the one `plan_placement` returns for that layer alone,
    apart from `wall_time_s` (the call's planning time over the layers).

    Raises:
        InvalidSpecError: without `layers` (field `layers`), or on counts the planner cannot
            accept (field `layers`, naming the layer).
    """
    wall_time_s, layers = placement_layers(request)
    return MoePlacementLayersResponse(layers=list(layers), wall_time_s=wall_time_s)


@within_search_memo
def placement_layers(
        request: MoePlacementRequest) -> tuple[float, Iterator[MoePlacementResponse]]:
    """`plan_placement_layers` one layer at a time: the planning time of all layers, and
    each layer's placement built only when the iterator reaches it (a caller that writes
    each layer out before taking the next holds one layer's routes, not every layer's).
    The iterator checks the thread's cancellation token before each layer.

    Raises:
        InvalidSpecError: as `plan_placement_layers` (before anything is planned).
    """
    if request.layers is None:
        raise InvalidSpecError("this request gives one layer as `tokens`: plan it with "
                               "plan_placement", field="layers")
    if request.planner != PlacementPlanner.CONSTRUCTIVE:
        raise InvalidSpecError("`layers` are planned by the constructive planner only",
                               field="planner")
    if any(len(row) != request.num_experts for layer in request.layers for row in layer):
        raise InvalidSpecError(
            f"every row of every layer needs num_experts={request.num_experts} counts",
            field="layers",
        )
    results = plan_constructive_layers(
        request.layers, top_k=request.top_k,
        weight_bytes_per_expert=request.expert_weight_bytes,
        grad_bytes_per_expert=request.expert_grad_bytes)

    def each() -> Iterator[MoePlacementResponse]:
        for result in results:
            cancel.check()
            response = placement_response(
                result, planner=PlacementPlanner.CONSTRUCTIVE,
                proven=result.num_redundant == int(result.lower_bound_per_rank.sum()),
                tile_rows=request.tile_rows, routes=request.routes)
            yield response.model_copy(update=expert_times(request, response))

    return sum(x.wall_time_s for x in results), each()


def rank_expert_tokens(result: PlacementResult) -> IntArray:
    """Tokens each rank computes per expert, [R, E]: the allocation's transpose (the routes
    into rank d for expert e add up to allocation[e, d])."""
    per_rank: IntArray = result.allocation.T.copy()
    return per_rank


def expert_times(request: MoePlacementRequest,
                 response: MoePlacementResponse) -> dict[str, Any]:
    """With a GPU and the expert shape: each rank's sum of expert GEMM times, their maximum
    over ranks (the layer waits for the slowest) and max/mean; nothing otherwise.

    Raises:
        InvalidSpecError: on an unknown GPU preset (field `gpu`).
    """
    if request.gpu is None or not request.hidden_size or not request.expert_ffn_hidden_size:
        return {}
    try:
        gpu = gpu_preset(request.gpu)
    except InvalidSpecError as exc:
        raise InvalidSpecError(str(exc), field="gpu") from exc
    times = [rank_expert_gemm_s(row, hidden_size=request.hidden_size,
                                expert_ffn_hidden_size=request.expert_ffn_hidden_size, gpu=gpu,
                                dtype=request.compute_dtype, tile_rows=request.tile_rows)
             for row in response.rank_expert_tokens]
    mean = sum(times) / len(times)
    return {"rank_expert_gemm_s": times, "expert_gemm_makespan_s": max(times),
            "expert_gemm_imbalance": max(times) / mean if mean > 0 else 1.0}


def listed_routes(result: PlacementResult, listing: RouteListing) -> list[MoeRoute]:
    """The routes of `result` that `listing` asks for: all of them, only the shared experts'
    (`Routes.shared_rows`, which leaves the count matrix unexpanded), or none."""
    if listing == RouteListing.NONE:
        return []
    r = result.routes
    columns = r.shared_rows if listing == RouteListing.SHARED else (
        r.source, r.expert, r.destination, r.tokens)
    return [MoeRoute(source=s, expert=e, destination=d, tokens=t)
            for s, e, d, t in zip(*(c.tolist() for c in columns), strict=True)]


def placement_response(
    result: PlacementResult, *, planner: PlacementPlanner, proven: bool,
    tile_rows: int = DEFAULT_TILE_ROWS, routes: RouteListing = RouteListing.ALL,
) -> MoePlacementResponse:
    """The API view of a placement: rank balance after placement, the routes `routes` asks
    for and, apart from them, the expert work inside each rank (tokens per expert, GEMM rows
    padded to `tile_rows`)."""
    per_rank = rank_expert_tokens(result)
    rows = [padded_rows(row.tolist(), tile_rows=tile_rows) for row in per_rank]
    p = result.problem
    return MoePlacementResponse(
        planner=planner,
        status=PlacementStatus.OPTIMAL if proven else PlacementStatus.FEASIBLE,
        tokens_per_rank=p.tokens_per_rank, capacity_per_rank=p.capacity,
        rank_loads=result.rank_loads.tolist(),
        redundant_experts=[list(x) for x in result.redundant_experts],
        routes=listed_routes(result, routes), routes_listed=routes,
        num_redundant_experts=result.num_redundant,
        max_redundant_per_rank=result.max_redundant_per_rank,
        redundant_bound_per_rank=result.redundant_bound_per_rank,
        lower_bound_per_rank=result.lower_bound_per_rank.tolist(),
        bound_holds=result.bound_holds, remote_tokens=result.remote_tokens,
        migrated_tokens=result.migrated_tokens, prefetch_bytes=result.prefetch_bytes,
        grad_reduce_bytes=result.grad_reduce_bytes,
        no_redundancy_imbalance=imbalance_factor(np.asarray(p.home_loads)),
        wall_time_s=result.wall_time_s,
        rank_load_imbalance=imbalance_factor(result.rank_loads),
        rank_expert_tokens=per_rank.tolist(), rank_gemm_rows=rows,
        gemm_rows_imbalance=imbalance_factor(rows) if sum(rows) else 1.0,
    )


__all__ = [
    "expert_times",
    "listed_routes",
    "placement_layers",
    "placement_response",
    "plan_placement",
    "plan_placement_layers",
    "rank_expert_tokens",
]
