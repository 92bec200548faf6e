"""Answer a POST /v1/moe/placement request with the chosen planner.

Owns: mapping `MoePlacementRequest` onto `plan_constructive` / `plan_exact` and a
`PlacementResult` onto `MoePlacementResponse`. Must not: do I/O (the service wires it).
"""


import numpy as np

from api_schemas.moe import (
    MoePlacementRequest,
    MoePlacementResponse,
    MoeRoute,
    PlacementPlanner,
    PlacementStatus,
)
from models.errors import InvalidSpecError
from models.moe import imbalance_factor
from solver.cpsat import SolverConfig, SolveStatus
from solver.placement.constructive import plan_constructive
from solver.placement.exact import plan_exact
from solver.placement.problem import PlacementResult


def plan_placement(
    request: MoePlacementRequest, *, config: SolverConfig | None = None
) -> MoePlacementResponse:
    """Plan one layer's placement as the request asks.

    Raises:
        InvalidSpecError: on counts the planners cannot accept (field `tokens`).
    """
    if any(len(row) != request.num_experts for row in request.tokens):
        raise InvalidSpecError(
            f"every row of tokens needs num_experts={request.num_experts} counts",
            field="tokens",
        )
    k, weight, grad = request.top_k, request.expert_weight_bytes, request.expert_grad_bytes
    if request.planner == PlacementPlanner.EXACT:
        cfg = config or SolverConfig(max_time_s=request.time_limit_s)
        exact = plan_exact(request.tokens, top_k=k, weight_bytes_per_expert=weight,
                           grad_bytes_per_expert=grad, config=cfg)
        result = exact.placement
        proven = exact.status == SolveStatus.OPTIMAL
    else:
        result = plan_constructive(request.tokens, top_k=k, weight_bytes_per_expert=weight,
                                   grad_bytes_per_expert=grad)
        proven = result.num_redundant == int(result.lower_bound_per_rank.sum())
    return placement_response(result, planner=request.planner, proven=proven)


def placement_response(
    result: PlacementResult, *, planner: PlacementPlanner, proven: bool
) -> MoePlacementResponse:
    """The API view of a placement."""
    r = result.routes
    routes = [MoeRoute(source=s, expert=e, destination=d, tokens=t)
              for s, e, d, t in zip(r.source.tolist(), r.expert.tolist(),
                                    r.destination.tolist(), r.tokens.tolist(), strict=True)]
    p = result.problem
    return MoePlacementResponse(
        planner=planner,
        status=PlacementStatus.OPTIMAL if proven else PlacementStatus.FEASIBLE,
        tokens_per_rank=p.tokens_per_rank, capacity_per_rank=p.capacity,
        rank_loads=result.rank_loads.tolist(),
        redundant_experts=[list(x) for x in result.redundant_experts], routes=routes,
        num_redundant_experts=result.num_redundant,
        max_redundant_per_rank=result.max_redundant_per_rank,
        redundant_bound_per_rank=result.redundant_bound_per_rank,
        lower_bound_per_rank=result.lower_bound_per_rank.tolist(),
        bound_holds=result.bound_holds, remote_tokens=result.remote_tokens,
        migrated_tokens=result.migrated_tokens, prefetch_bytes=result.prefetch_bytes,
        grad_reduce_bytes=result.grad_reduce_bytes,
        no_redundancy_imbalance=imbalance_factor(np.asarray(p.home_loads)),
        wall_time_s=result.wall_time_s,
    )


__all__ = ["placement_response", "plan_placement"]
