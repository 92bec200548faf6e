"""The pipeline simulation behind a plan, as a request to the pipeline simulator.

Owns: `plan_simulation_request(request, parallel)`, which resolves a plan or evaluate
request's model and cluster and returns the `PipelineSimulateRequest` whose simulation is
the one the cost model ran for `parallel` (the same schedule, shape, per-virtual-stage
F / B / W and P2P latency), so a plan's timeline, pictures and trace come from the public
simulator. Must not: simulate, render or do I/O.
"""

from api_schemas.parallel import ParallelConfig
from api_schemas.pipeline import PipelineOpDurations, PipelineSimulateRequest
from api_schemas.requests import EvaluateRequest, PlanRequest
from models.catalog.resolve import resolve_cluster, resolve_model
from models.core.step_time import pipeline_inputs
from solver.runtime_choice import decided_for, with_rules


def _values(values: tuple[float, ...]) -> float | tuple[float, ...]:
    return values[0] if len(set(values)) == 1 else values


def plan_simulation_request(request: PlanRequest | EvaluateRequest,
                            parallel: ParallelConfig) -> PipelineSimulateRequest:
    """The simulate request that reproduces `parallel`'s pipeline under `request`.

    Raises:
        InvalidSpecError: the model or cluster cannot be resolved, or the configuration
            cannot be sized.
    """
    spec = resolve_model(request.model).spec
    cluster = resolve_cluster(request.cluster)
    # The runtime features the request leaves unset, decided as the plan decided them
    # (`solver.runtime_choice.decided_for`).
    training = request.training
    any_target = False
    if isinstance(request, PlanRequest):
        training = with_rules(training, request.constraints.runtime_features)
        any_target = request.constraints.framework == "any"
    training = decided_for(spec, training, parallel, cluster, any_target=any_target)
    inputs = pipeline_inputs(spec, training, parallel, cluster)
    durations = PipelineOpDurations(
        F=_values(inputs.durations.forward_s), B=_values(inputs.durations.backward_input_s),
        W=_values(inputs.durations.backward_weight_s))
    return PipelineSimulateRequest(
        schedule=inputs.schedule, num_stages=inputs.num_stages,
        num_micro_batches=inputs.num_micro_batches, num_chunks=inputs.num_chunks,
        durations=durations, p2p_latency_s=inputs.p2p_latency_s,
        group_size=inputs.group_size, include_timeline=True)


__all__ = ["plan_simulation_request"]
