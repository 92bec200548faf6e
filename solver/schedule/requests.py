"""The schedule optimizer behind POST /v1/pipeline/optimize: request in, response out.

Owns: `optimize_request`. Must not: know HTTP.
"""

from typing import Literal

from api_schemas.pipeline import PipelineOptimizeRequest, PipelineOptimizeResponse
from models.core.pipeline import simulate
from models.core.pipeline.requests import (
    activation_sizes_from,
    op_durations_from,
    simulation_fields,
)
from solver import cancel
from solver.cpsat import SolverConfig, SolveStatus
from solver.schedule.optimizer import optimize_schedule


def optimize_request(request: PipelineOptimizeRequest, *,
                     config: SolverConfig | None = None) -> PipelineOptimizeResponse:
    """Optimise the order of the requested schedule's placement under its memory limit.

    Args:
        request: the API request.
        config: solver settings; its time limit is replaced by `request.time_limit_s`.

    Raises:
        InvalidSpecError: bad parameters.
        InfeasibleError: the memory limit is below one micro-batch's activations.
        Cancelled: the thread's cancellation token was set.
    """
    base = config or SolverConfig()
    solver_config = SolverConfig(max_time_s=request.time_limit_s,
                                 num_workers=base.num_workers, random_seed=base.random_seed,
                                 relative_gap_limit=base.relative_gap_limit,
                                 log_search_progress=base.log_search_progress)
    durations = op_durations_from(request.durations)
    best = optimize_schedule(request.schedule, num_stages=request.num_stages,
                             num_micro_batches=request.num_micro_batches,
                             num_chunks=request.num_chunks, durations=durations,
                             memory_limit=request.memory_limit,
                             p2p_latency_s=request.p2p_latency_s, config=solver_config)
    result = best.simulation
    sizes = activation_sizes_from(request.activation_bytes)
    if sizes is not None:
        cancel.check()
        result = simulate(best.program, durations, p2p_latency_s=request.p2p_latency_s,
                          activation_sizes=sizes)
    status: Literal["optimal", "feasible"] = (
        "optimal" if best.status == SolveStatus.OPTIMAL else "feasible")
    return PipelineOptimizeResponse(
        **simulation_fields(result, include_timeline=request.include_timeline),
        status=status, lower_bound=best.lower_bound_s, gap=min(1.0, best.gap),
        baseline_schedule=best.baseline_schedule, baseline_makespan=best.baseline_makespan_s,
        method=best.method, memory_limit_chunks=best.memory_limit_chunks,
        time_quantum_s=best.time_quantum_s, wall_time_s=best.wall_time_s)


__all__ = ["optimize_request"]
