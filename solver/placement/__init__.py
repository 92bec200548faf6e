"""MoonEP redundant-expert placement, its baselines and the intra-rank expert-GEMM order.

Owns: the placement problem and its accounting (`problem`), the online constructive planner
(`constructive`), the exact CP-SAT reference (`exact`), the EPLB-style and no-redundancy
baselines (`eplb`), the expert-GEMM tile schedules (`gemm_order`) and the request handler
of POST /v1/moe/placement (`api`). Must not: do I/O, or import OR-Tools except through
`solver.cpsat`.
"""

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
    PlacementResult,
    Routes,
    build_result,
    build_results,
    placement_layers,
    placement_problem,
    redundancy_lower_bounds,
    routes_from_allocation,
)

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
