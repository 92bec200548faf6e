"""The alternatives a plan answer lists beside the plan it shows, and their predicted ranges.

Owns: the runners-up as `Alternative`s (each with why it lost, its predicted range, whether it
lies within the optimum's error band and the experimental mechanisms it uses) and the first
rejected candidates. Must not: search or choose the plan shown (`solver.api`,
`solver.robust_choice`).
"""

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.plan import Alternative, PlanStatus, PredictedRange
from api_schemas.requests import PlanRequest
from api_schemas.training import TrainingSpec
from models.core.layer_kinds import has_routed_experts
from models.evidence.error_bands import cluster_band, predicted_range
from solver.candidate_eval import ScoredPlan
from solver.explain import why_not, why_rejected
from solver.planner import SearchResult
from solver.policy_summary import summarise_policies
from solver.robust_choice import experimental_features, within_band


def range_of(cluster: ClusterSpec, *, moe: bool, world_size: int, step_time_s: float,
             tokens_per_s: float | None = None, mfu: float | None = None) -> PredictedRange:
    """The predicted range of a configuration's figures (`models.evidence.error_bands`)."""
    band = cluster_band(cluster, moe=moe, num_gpus=world_size)
    return predicted_range(band, step_time_s=step_time_s, tokens_per_s=tokens_per_s, mfu=mfu)


def plan_alternatives(best: ScoredPlan, runners_up: list[ScoredPlan], result: SearchResult,
                      cluster: ClusterSpec, request: PlanRequest, *, optimum: ScoredPlan,
                      spec: ModelSpec) -> list[Alternative]:
    """Alternatives to the plan shown (`best`): the runners-up (the objective optimum among
    them when the robust choice showed another plan), each marked within the optimum's
    error band or not, then up to three rejected candidates."""
    moe, training, objective = has_routed_experts(spec), request.training, request.objective
    out = [Alternative(parallel=summarise_policies(other.parallel),
                       world_size=other.parallel.world_size,
                       step_time_s=other.estimate.step_time_s,
                       tokens_per_s=other.estimate.tokens_per_s,
                       peak_bytes=other.ledger.peak_bytes, fits=True,
                       delta_frac=other.estimate.step_time_s / best.estimate.step_time_s - 1.0,
                       why_not=(why_not(best, other, cluster) if other is not optimum else
                                _optimum_why(spec, training, optimum,
                                             proven=result.status == PlanStatus.OPTIMAL)),
                       predicted_range=range_of(cluster, moe=moe,
                                                world_size=other.parallel.world_size,
                                                step_time_s=other.estimate.step_time_s,
                                                tokens_per_s=other.estimate.tokens_per_s),
                       within_band=(None if other is optimum else within_band(
                           optimum, other, cluster, objective=objective, moe=moe)),
                       experimental=sorted(experimental_features(spec, training, other)))
           for other in runners_up]
    rejections = [r for r in result.rejections if r.stage is not None]
    for rejection in rejections[: min(3, request.solver.top_k)]:
        rejected = rejection.candidate.parallel()
        out.append(Alternative(parallel=rejected, world_size=rejected.world_size, fits=False,
                               why_not=why_rejected(rejection)))
    return out


def _optimum_why(spec: ModelSpec, training: TrainingSpec, optimum: ScoredPlan, *,
                 proven: bool) -> str:
    """Why the objective optimum (`proven`; else the best plan a search cut by its time
    limit found) is not the plan shown (`solver.robust_choice.pick`)."""
    name = "the objective optimum" if proven else "the best plan found (not proven optimal)"
    if experimental_features(spec, training, optimum):
        return (f"{name}; not shown because its experimental mechanisms do not "
                "win by more than the model's error band")
    return (f"{name}; not shown because it wins by less than the model's error "
            "on the difference of two plans, and the plan shown keeps more memory free or uses "
            "fewer or more common mechanisms (robust_choice)")


__all__ = ["plan_alternatives", "range_of"]
