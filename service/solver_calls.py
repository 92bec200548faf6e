"""The solver entry points the service calls, imported on first use.

Owns: one function per solver entry point the routes and the app use, each importing its
module when first called, and `preload()`, which the lifespan runs off the event loop so
that the first search does not pay the import. The solver imports OR-Tools (and with it
pandas and numpy): seconds on a loaded host, which `import service.app` and a `serve`
worker's start no longer pay. Must not: add behaviour (each function is the entry point
it names, with its arguments).
"""

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from api_schemas.calibration import CalibrationRunsRequest
from api_schemas.moe import (
    MoePlacementLayersResponse,
    MoePlacementRequest,
    MoePlacementResponse,
)
from api_schemas.parallel import ParallelConfig
from api_schemas.pipeline import (
    PipelineOptimizeRequest,
    PipelineOptimizeResponse,
    PipelineSimulateRequest,
)
from api_schemas.plan import MemoryReport, PlanResponse
from api_schemas.requests import EvaluateRequest, PlanRequest
from api_schemas.run_level import (
    FrontierRequest,
    FrontierResponse,
    RunEstimateRequest,
    RunEstimateResponse,
    SensitivityRequest,
    SensitivityResponse,
)

if TYPE_CHECKING:
    from solver.calibration import CalibrationResult

PlanFn = Callable[..., PlanResponse]


def plan(request: PlanRequest, *, progress: Callable[[str], None] | None = None
         ) -> PlanResponse:
    """`solver.api.plan`."""
    from solver.api import plan as solver_plan

    return solver_plan(request, progress=progress)


def evaluate(request: EvaluateRequest) -> PlanResponse:
    """`solver.api.evaluate`."""
    from solver.api import evaluate as solver_evaluate

    return solver_evaluate(request)


def calibrate(request: CalibrationRunsRequest) -> "CalibrationResult":
    """`solver.calibration.calibrate`."""
    from solver.calibration import calibrate as solver_calibrate

    return solver_calibrate(request)


def memory_report(request: EvaluateRequest) -> MemoryReport:
    """`solver.memory_lab.memory_report`."""
    from solver.memory_lab import memory_report as solver_memory_report

    return solver_memory_report(request)


def plan_placement(request: MoePlacementRequest) -> MoePlacementResponse:
    """`solver.placement.api.plan_placement`."""
    from solver.placement.api import plan_placement as solver_plan_placement

    return solver_plan_placement(request)


def plan_placement_layers(request: MoePlacementRequest) -> MoePlacementLayersResponse:
    """`solver.placement.api.plan_placement_layers`."""
    from solver.placement.api import plan_placement_layers as solver_plan_layers

    return solver_plan_layers(request)


def placement_layers(
        request: MoePlacementRequest) -> tuple[float, Iterator[MoePlacementResponse]]:
    """`solver.placement.api.placement_layers`."""
    from solver.placement.api import placement_layers as solver_placement_layers

    return solver_placement_layers(request)


def plan_simulation_request(request: PlanRequest | EvaluateRequest,
                            parallel: ParallelConfig) -> PipelineSimulateRequest:
    """`solver.plan_pipeline.plan_simulation_request`."""
    from solver.plan_pipeline import plan_simulation_request as solver_request

    return solver_request(request, parallel)


def optimize_request(request: PipelineOptimizeRequest) -> PipelineOptimizeResponse:
    """`solver.schedule.requests.optimize_request`."""
    from solver.schedule.requests import optimize_request as solver_optimize

    return solver_optimize(request)


def estimate_run(request: RunEstimateRequest, *, planner: PlanFn) -> RunEstimateResponse:
    """`solver.run_level.estimate_run`."""
    from solver.run_level import estimate_run as solver_estimate_run

    return solver_estimate_run(request, planner=planner)


def frontier(request: FrontierRequest, *, planner: PlanFn) -> FrontierResponse:
    """`solver.run_level.frontier`."""
    from solver.run_level import frontier as solver_frontier

    return solver_frontier(request, planner=planner)


def sensitivity(request: SensitivityRequest, *, planner: PlanFn) -> SensitivityResponse:
    """`solver.run_level.sensitivity`."""
    from solver.run_level import sensitivity as solver_sensitivity

    return solver_sensitivity(request, planner=planner)


def preload() -> None:
    """Import every solver module the functions above use."""
    import solver.api
    import solver.calibration
    import solver.memory_lab
    import solver.placement.api
    import solver.plan_pipeline
    import solver.run_level
    import solver.schedule.requests  # noqa: F401


__all__ = [
    "calibrate",
    "estimate_run",
    "evaluate",
    "frontier",
    "memory_report",
    "optimize_request",
    "plan",
    "placement_layers",
    "plan_placement",
    "plan_placement_layers",
    "plan_simulation_request",
    "preload",
    "sensitivity",
]
