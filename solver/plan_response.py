"""The public `PlanResponse` of one chosen plan.

Owns: turning a scored plan and the parts of its report (status, alternatives, explanation,
search statistics, framework target, why runtime features are off) into the response: the
time breakdown and throughput of its estimate, its memory report, predicted range, exports,
the frameworks it runs on, runtime features, context-parallel layers and extensions. Must
not: search, evaluate or explain (`solver.api` and the modules it calls do).
"""

from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.exports import PlanExports
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.plan import (
    Alternative,
    Explanation,
    ExtensionUse,
    PlanResponse,
    PlanStatus,
    RunsOn,
    SolverStats,
    Throughput,
    TimeBreakdown,
)
from api_schemas.training import TrainingSpec
from models.core.frameworks import RELEASED, extensions_used, plan_features, runs_on
from models.core.layer_kinds import has_routed_experts
from models.core.step_time import FLOP_CONVENTION, StepEstimate
from solver.alternatives import range_of
from solver.candidate_eval import ScoredPlan
from solver.chosen_mechanisms import OPTIMIZER_OFFLOAD, optimizer_offload_use
from solver.context_parallel_layers import context_parallel_layers
from solver.policy_summary import summarise_policies
from solver.reports import memory_report_from_ledger
from solver.runtime_choice import runtime_feature_uses


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportParts:
    """What a response says beside the chosen plan's own figures."""

    status: PlanStatus
    alternatives: list[Alternative]
    explanation: Explanation
    stats: SolverStats | None
    target: str
    """The framework target the exports and notes are for ('released', 'any', a name)."""
    why_off: dict[str, str] | None = None
    """Why each runtime feature the plan leaves off is off (the search's reasons)."""
    offload_fixed_by: str | None = "parallel.optimizer_offload_frac"
    """The request field that fixed optimizer offload (None: the search chose it; by
    default a given configuration's own field)."""


def time_breakdown(est: StepEstimate) -> TimeBreakdown:
    """The public breakdown of a step estimate."""
    return TimeBreakdown(
        step_time_s=est.step_time_s, compute_s=est.compute_s, recompute_s=est.recompute_s,
        bubble_s=est.bubble_s, exposed_comm_s=dict(est.exposed_comm_s),
        offload_stall_s=est.offload_stall_s, optimizer_s=est.optimizer_s,
        overheads_s=dict(est.overheads_s),
        details={"pipeline_makespan_s": est.pipeline_makespan_s,
                 "critical_stage": float(est.critical_stage)})


def throughput(est: StepEstimate) -> Throughput:
    """The public throughput figures of a step estimate."""
    return Throughput(tokens_per_s=est.tokens_per_s, tflops_per_gpu=est.tflops_per_gpu,
                      hardware_tflops_per_gpu=est.hardware_tflops_per_gpu,
                      mfu=min(1.0, est.mfu), hfu=est.hfu, flop_convention=FLOP_CONVENTION,
                      tflops_per_gpu_full_attention=est.tflops_per_gpu_full_attention,
                      mfu_full_attention=est.mfu_full_attention)


def _exports(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
             cluster: ClusterSpec) -> PlanExports:
    try:
        from solver.export import export_all
    except ImportError:  # the exporters are optional at this layer
        return PlanExports()
    return PlanExports.model_validate(export_all(
        spec, training, parallel, gpus_per_node=cluster.gpus_per_node,
        rail_optimized=cluster.rail_optimized))


def plan_response(best: ScoredPlan, parts: ReportParts, *, spec: ModelSpec,
                  training: TrainingSpec, cluster: ClusterSpec,
                  request_training: TrainingSpec | None = None) -> PlanResponse:
    """The response for `best` planned with `training` (the request's recipe with the
    runtime features decided; `request_training` the recipe as asked, when it differs)."""
    est = best.estimate
    parallel = summarise_policies(best.parallel)
    features = plan_features(spec, training, parallel)
    fits = runs_on(spec, training, parallel)
    framework_ids = [fit.framework for fit in fits] or list(RELEASED)
    uses = runtime_feature_uses(spec, request_training or training, training, best.candidate,
                                framework_ids, parts.why_off)
    uses.append(optimizer_offload_use(
        parallel, framework_ids, fixed=parts.offload_fixed_by,
        why_off=(parts.why_off or {}).get(OPTIMIZER_OFFLOAD, "")))
    return PlanResponse(
        status=parts.status, model_name=spec.name, gpu=cluster.gpu.id,
        world_size=est.world_size, parallel=parallel,
        num_micro_batches=est.num_micro_batches, memory=memory_report_from_ledger(best.ledger),
        time=time_breakdown(est), throughput=throughput(est),
        predicted_range=range_of(cluster, moe=has_routed_experts(spec), world_size=est.world_size,
                                 step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s,
                                 mfu=min(1.0, est.mfu)),
        alternatives=parts.alternatives,
        explanation=parts.explanation, solver=parts.stats, bottleneck=est.bottleneck,
        exports=_exports(spec, training, parallel, cluster), framework_target=parts.target,
        runs_on=[RunsOn(framework=fit.framework, name=fit.name, version=fit.version,
                        features=fit.features) for fit in fits],
        runtime_features=uses,
        context_parallel=context_parallel_layers(spec, training, parallel, cluster),
        extensions=[ExtensionUse(feature=feature, origin=origin)
                    for feature, origin in extensions_used(features).items()])


__all__ = ["ReportParts", "plan_response", "throughput", "time_breakdown"]
