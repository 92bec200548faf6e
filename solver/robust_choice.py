"""Robust choice: which plans the cost model cannot tell apart, and which of them is shown.

Owns: the error-band test between two plans, the experimental mechanisms of a plan, and the
pick. Two plans are within the band when their predicted ranges overlap (the range of each
is its step time under the model's held-out error band, `models.evidence.error_bands.cluster_band`):
the worse plan's low end T_b (1 + e_low) is at most the better plan's high end
T_a (1 + e_high). The objectives that scale with the step time of a fixed mesh (throughput,
cost per token) compare their values the same way; fewest GPUs compares step times of plans
on the same GPU count only (a GPU less is never a tie); least memory is not a step-time
objective and gets no band.

The pick: the objective optimum is shown unless it uses an experimental mechanism (a
feature every released framework that has it marks `experimental` in `frameworks.json`, or
a schedule no released framework runs) and some plan within its band uses none; then the
best such plan is shown, and the optimum is reported beside it. Ties among common plans keep
the optimum (the search's answer stays the proven optimum), and the answer says how many
plans lie within the band. Must not: search or evaluate plans (it ranks what it is given).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import PipelineSchedule
from api_schemas.plan import RobustChoice
from api_schemas.requests import Objective
from api_schemas.training import TrainingSpec
from models.core.frameworks import extensions_used, frameworks, plan_features
from models.core.layer_kinds import has_routed_experts
from models.evidence.error_bands import ErrorBand, cluster_band
from solver.candidate_eval import ScoredPlan
from solver.explain import describe_parallel
from solver.planner import objective_value

BAND_OBJECTIVES = (Objective.THROUGHPUT, Objective.COST_PER_TOKEN, Objective.MIN_GPUS)
"""Objectives whose values move with the step time and so share its error band."""


def experimental_features(spec: ModelSpec, training: TrainingSpec,
                          plan: ScoredPlan) -> dict[str, str]:
    """The plan's mechanisms that are not yet a common path, each with why: a feature that
    every released framework providing it marks experimental, or a schedule no released
    framework runs."""
    features = plan_features(spec, plan.training or training, plan.parallel)
    tables = frameworks().values()
    out: dict[str, str] = {}
    for feature in sorted(features):
        having = [fw.features[feature] for fw in tables if feature in fw.features]
        if having and all(f.experimental for f in having):
            out[feature] = having[0].experimental
    for feature, origin in extensions_used(features).items():
        if feature.startswith("schedule:"):
            out[feature] = f"no released framework runs it ({origin})"
    return out


def experimental_schedules() -> list[str]:
    """Schedules that are experimental wherever they run (`experimental_features`' rule for
    a schedule alone), to forbid in a search for a common plan."""
    tables = frameworks().values()
    released = set().union(*(fw.features for fw in tables))
    out = []
    for schedule in PipelineSchedule:
        feature = f"schedule:{schedule.value}"
        having = [fw.features[feature] for fw in tables if feature in fw.features]
        if feature not in released or all(f.experimental for f in having):
            out.append(schedule.value)
    return out


def _band(cluster: ClusterSpec, plan: ScoredPlan, *, moe: bool) -> ErrorBand:
    return cluster_band(cluster, moe=moe, num_gpus=plan.estimate.world_size)


def band_frac(band: ErrorBand) -> float | None:
    """Relative difference below which two predictions with this band overlap."""
    if band.error_low is None or band.error_high is None or band.error_low <= -1.0:
        return None
    return (band.error_high - band.error_low) / (1.0 + band.error_low)


def within_band(better: ScoredPlan, worse: ScoredPlan, cluster: ClusterSpec, *,
                objective: Objective, moe: bool) -> bool | None:
    """Whether the predicted ranges of two plans overlap under the objective (None when no
    band backs either prediction or the objective has none)."""
    if objective not in BAND_OBJECTIVES:
        return None
    low, high = _band(cluster, worse, moe=moe), _band(cluster, better, moe=moe)
    if low.error_low is None or high.error_high is None:
        return None
    if objective == Objective.MIN_GPUS:
        if better.estimate.world_size != worse.estimate.world_size:
            return False
        a, b = better.estimate.step_time_s, worse.estimate.step_time_s
    else:
        a, b = objective_value(better, objective), objective_value(worse, objective)
    return b * (1.0 + low.error_low) <= a * (1.0 + high.error_high)


def relative_gap(better: ScoredPlan, worse: ScoredPlan, objective: Objective) -> float:
    """How much worse `worse` is under the objective, relative (for fewest GPUs, which
    ranks plans on the same GPU count by step time: the step times')."""
    if objective == Objective.MIN_GPUS:
        a, b = better.estimate.step_time_s, worse.estimate.step_time_s
    else:
        a, b = objective_value(better, objective), objective_value(worse, objective)
    return b / a - 1.0 if a > 0 else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Pick:
    """The plan to show and how it was chosen."""

    shown: ScoredPlan
    optimum: ScoredPlan
    report: RobustChoice


def _shape(plan: ScoredPlan) -> tuple[object, ...]:
    c = plan.candidate
    return (c.tp, c.pp, c.cp, c.ep, c.schedule, c.world_size)


def pick(optimum: ScoredPlan, others: Sequence[ScoredPlan], spec: ModelSpec,
         training: TrainingSpec, cluster: ClusterSpec, *, objective: Objective) -> Pick:
    """The plan to show among the objective optimum and the other scored plans `others`
    (see the module docstring); `others` may hold several plans of one mesh shape, of which
    the best counts."""
    moe = has_routed_experts(spec)
    best_value = objective_value(optimum, objective)
    seen = {_shape(optimum)}
    band: list[ScoredPlan] = []
    for other in sorted(others, key=lambda p: objective_value(p, objective)):
        if _shape(other) in seen or objective_value(other, objective) < best_value:
            continue
        seen.add(_shape(other))
        if within_band(optimum, other, cluster, objective=objective, moe=moe):
            band.append(other)
    frac = band_frac(_band(cluster, optimum, moe=moe)) if objective in BAND_OBJECTIVES else None
    exotic = experimental_features(spec, training, optimum)
    shown = optimum
    if exotic:
        common = [p for p in band if not experimental_features(spec, training, p)]
        if common:
            shown = common[0]
    delta = relative_gap(optimum, shown, objective)
    report = RobustChoice(
        picked="optimum" if shown is optimum else "robust", band_frac=frac,
        within_band=len(band), indistinguishable=bool(band),
        optimum_parallel=None if shown is optimum else optimum.parallel,
        optimum_world_size=optimum.estimate.world_size,
        optimum_step_time_s=optimum.estimate.step_time_s,
        optimum_objective=best_value if math.isfinite(best_value) else None,
        delta_frac=max(0.0, delta), experimental=sorted(exotic),
        text=(_text(optimum, shown, band, frac, exotic, delta,
                    nearest=relative_gap(optimum, band[0], objective) if band else 0.0)
              if objective in BAND_OBJECTIVES else
              "least memory is not a step-time objective: the model's error band does not "
              "apply"))
    return Pick(shown=shown, optimum=optimum, report=report)


def _text(optimum: ScoredPlan, shown: ScoredPlan, band: list[ScoredPlan], frac: float | None,
          exotic: dict[str, str], delta: float, *, nearest: float) -> str:
    if frac is None:
        return "no error band backs the prediction: plans are compared by the model alone"
    width = f"{100 * frac:.0f}%"
    if shown is not optimum:
        return (f"robust choice, not the objective optimum: the optimum "
                f"{describe_parallel(optimum.parallel)} uses {', '.join(sorted(exotic))} "
                f"(experimental) and wins by {100 * delta:.1f}%, less than the model's error "
                f"band ({width}); shown is the best plan within the band without an "
                f"experimental mechanism ({len(band)} plans lie within the band)")
    if band:
        return (f"indistinguishable within the model's error band ({width}): {len(band)} other "
                f"plan{'s lie' if len(band) != 1 else ' lies'} within it, the nearest "
                f"{describe_parallel(band[0].parallel)} {100 * nearest:+.1f}%; the plan shown "
                "is the objective optimum, not a measured winner")
    return f"no other scored plan lies within the model's error band ({width})"


__all__ = ["BAND_OBJECTIVES", "Pick", "band_frac", "experimental_features",
           "experimental_schedules", "pick", "relative_gap", "within_band"]
