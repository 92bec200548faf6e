"""MoonEP redundant-expert placement, its baselines and the intra-rank expert-GEMM order.

Owns: the placement problem and its lower bounds (`problem`), its routes (`routes`) and
accounting (`results`), the online constructive planner
(`constructive`), the exact CP-SAT reference (`exact`), the EPLB-style and no-redundancy
baselines (`eplb`), the expert-GEMM tile schedules (`gemm_order`) and the request handler
of POST /v1/moe/placement (`api`); the public names below, each imported with its module on
first use, so that the constructive planner loads neither OR-Tools nor the API schemas.
Must not: do I/O, or import OR-Tools except through `solver.cpsat`.
"""

from typing import TYPE_CHECKING, Any

from solver.lazy_names import lazy_name

if TYPE_CHECKING:
    from solver.placement.api import placement_response, plan_placement, plan_placement_layers
    from solver.placement.constructive import (
        ConstructiveRule,
        constructive_allocation,
        pair_balances,
        plan_constructive,
        plan_constructive_layers,
    )
    from solver.placement.eplb import (
        BaselineLoads,
        EplbPlan,
        eplb_loads,
        eplb_rank_loads,
        no_redundancy_loads,
        rebalance_experts,
    )
    from solver.placement.exact import ExactObjective, ExactPlacement, build_cp_model, plan_exact
    from solver.placement.gemm_order import (
        GemmSchedule,
        GemmTile,
        gemm_tiles,
        schedule_exact,
        schedule_fixed_order,
        schedule_lpt,
    )
    from solver.placement.problem import (
        LayerBatch,
        PlacementProblem,
        placement_layers,
        placement_problem,
        redundancy_lower_bounds,
    )
    from solver.placement.results import PlacementResult, build_result, build_results
    from solver.placement.routes import Routes, routes_from_allocation

_LAZY = {
    "BaselineLoads": "solver.placement.eplb",
    "ConstructiveRule": "solver.placement.constructive",
    "EplbPlan": "solver.placement.eplb",
    "ExactObjective": "solver.placement.exact",
    "ExactPlacement": "solver.placement.exact",
    "GemmSchedule": "solver.placement.gemm_order",
    "GemmTile": "solver.placement.gemm_order",
    "LayerBatch": "solver.placement.problem",
    "PlacementProblem": "solver.placement.problem",
    "PlacementResult": "solver.placement.results",
    "Routes": "solver.placement.routes",
    "build_cp_model": "solver.placement.exact",
    "build_result": "solver.placement.results",
    "build_results": "solver.placement.results",
    "constructive_allocation": "solver.placement.constructive",
    "eplb_loads": "solver.placement.eplb",
    "eplb_rank_loads": "solver.placement.eplb",
    "gemm_tiles": "solver.placement.gemm_order",
    "no_redundancy_loads": "solver.placement.eplb",
    "pair_balances": "solver.placement.constructive",
    "placement_layers": "solver.placement.problem",
    "placement_problem": "solver.placement.problem",
    "placement_response": "solver.placement.api",
    "plan_constructive": "solver.placement.constructive",
    "plan_constructive_layers": "solver.placement.constructive",
    "plan_exact": "solver.placement.exact",
    "plan_placement": "solver.placement.api",
    "plan_placement_layers": "solver.placement.api",
    "rebalance_experts": "solver.placement.eplb",
    "redundancy_lower_bounds": "solver.placement.problem",
    "routes_from_allocation": "solver.placement.routes",
    "schedule_exact": "solver.placement.gemm_order",
    "schedule_fixed_order": "solver.placement.gemm_order",
    "schedule_lpt": "solver.placement.gemm_order",
}

def __getattr__(name: str) -> Any:
    """Import a public name's module on first access."""
    return lazy_name(__name__, _LAZY, name)


__all__ = [
    "BaselineLoads",
    "ConstructiveRule",
    "EplbPlan",
    "ExactObjective",
    "ExactPlacement",
    "GemmSchedule",
    "GemmTile",
    "LayerBatch",
    "PlacementProblem",
    "PlacementResult",
    "Routes",
    "build_cp_model",
    "build_result",
    "build_results",
    "constructive_allocation",
    "eplb_loads",
    "eplb_rank_loads",
    "gemm_tiles",
    "no_redundancy_loads",
    "pair_balances",
    "placement_layers",
    "placement_problem",
    "placement_response",
    "plan_constructive",
    "plan_constructive_layers",
    "plan_exact",
    "plan_placement",
    "plan_placement_layers",
    "rebalance_experts",
    "redundancy_lower_bounds",
    "routes_from_allocation",
    "schedule_exact",
    "schedule_fixed_order",
    "schedule_lpt",
]
