"""Robust choice: which plans the cost model cannot tell apart, and which of them is shown.

Owns: the error-band test between two plans, the experimental mechanisms of a plan, and the
pick. Two plans are within the band when their predicted ranges overlap (the range of each
is its step time under the model's held-out error band, `models.evidence.error_bands.cluster_band`):
the worse plan's low end T_b (1 + e_low) is at most the better plan's high end
T_a (1 + e_high). The objectives that scale with the step time of a fixed mesh (throughput,
cost per token) compare their values the same way; fewest GPUs compares step times of plans
on the same GPU count only (a GPU less is never a tie); least memory is not a step-time
objective and gets no band.

The pick, in two steps. First the experimental rule: the objective optimum is the anchor
unless it uses an experimental mechanism (a feature every released framework that has it
marks `experimental` in `frameworks.json`, or a schedule no released framework runs) and some
plan within its (absolute) band uses none; then the best such plan is the anchor. The
absolute band is kept here because an experimental mechanism is what no published row
measured, so its error does not cancel between two plans. Then the tie break: plans without
an experimental mechanism whose objective is within the pairwise band of the anchor
(`models.evidence.pairwise_band`: the error of the predicted ratio of two runs on one
system, where the errors the two plans share cancel) are indistinguishable from it, and the
plan shown is the one with the most memory margin (capacity - peak); margins within
`MARGIN_RESOLUTION_FRAC` of the capacity count as equal, and among those a plan that more
released frameworks run, or that uses a strict subset of the mechanisms, wins over a
faster one (`simpler`); otherwise the best objective stays. The
objective optimum is reported beside a plan shown instead of it, and the answer lists the
indistinguishable plans and counts them. Must not: search or evaluate plans (it ranks what
it is given).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import PipelineSchedule
from api_schemas.plan import RobustChoice, TiedPlan
from api_schemas.requests import Objective
from api_schemas.training import TrainingSpec
from models.core.frameworks import (
    blockers,
    capabilities,
    extensions_used,
    frameworks,
    plan_features,
)
from models.core.layer_kinds import has_routed_experts
from models.evidence.error_bands import ErrorBand, cluster_band
from models.evidence.memory_margin import WORST_PREDICTED_OVER_MEASURED
from models.evidence.pairwise_band import cluster_pairwise_frac
from solver.candidate_eval import ScoredPlan
from solver.chosen_mechanisms import OPTIMIZER_OFFLOAD
from solver.explain import describe_parallel, gib
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


def experimental_offload() -> bool:
    """Whether optimizer offload is experimental wherever it runs (`experimental_features`'
    rule), to forbid in a search for a common plan."""
    having = [fw.features[OPTIMIZER_OFFLOAD] for fw in frameworks().values()
              if OPTIMIZER_OFFLOAD in fw.features]
    return bool(having) and all(f.experimental for f in having)


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


MARGIN_RESOLUTION_FRAC = 1.0 - WORST_PREDICTED_OVER_MEASURED
"""Memory margins closer than this share of the usable capacity count as equal in the tie
break: the memory ledger's worst under-prediction of a measured peak (1 - 0.9616 of the
peak, `models.evidence.memory_margin.WORST_PREDICTED_OVER_MEASURED`), below which the ledger
cannot say which of two plans keeps more memory free."""

MAX_TIED_LISTED = 8
"""Most indistinguishable plans the answer lists (it counts them all)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pick:
    """The plan to show and how it was chosen."""

    shown: ScoredPlan
    optimum: ScoredPlan
    report: RobustChoice


@dataclass(frozen=True, slots=True, kw_only=True)
class Traits:
    """What the tie break compares of one plan."""

    plan: ScoredPlan
    margin_bytes: int
    """Usable capacity less the peak of its fullest rank."""
    features: frozenset[str]
    """Framework-table capabilities it uses (`models.core.frameworks.capabilities`)."""
    frameworks: int
    """Released frameworks that run it as given."""

    @property
    def mechanisms(self) -> int:
        """How many capabilities it uses."""
        return len(self.features)


def traits(spec: ModelSpec, training: TrainingSpec, plan: ScoredPlan) -> Traits:
    """The margin, mechanisms and frameworks of a plan."""
    features = plan_features(spec, plan.training or training, plan.parallel)
    return Traits(plan=plan, margin_bytes=plan.ledger.capacity_bytes - plan.ledger.peak_bytes,
                  features=capabilities(features),
                  frameworks=sum(1 for fw in frameworks().values()
                                 if not blockers(fw, features)))


def simpler(a: Traits, b: Traits) -> bool:
    """Whether `a` uses more common or fewer mechanisms than `b`: more released frameworks
    run it, or as many and its capabilities are a strict subset of `b`'s (a plan that drops
    one mechanism and adds another is not simpler by a count)."""
    return a.frameworks > b.frameworks or (a.frameworks == b.frameworks
                                           and a.features < b.features)


def tie_break(tied: Sequence[Traits], *, capacity_bytes: int) -> Traits:
    """The plan shown among indistinguishable ones (`tied`, best objective first): the most
    memory margin; among those within `MARGIN_RESOLUTION_FRAC` of the capacity of it, the
    best objective unless a later one is `simpler` than the pick so far."""
    most = max(t.margin_bytes for t in tied)
    close = [t for t in tied if t.margin_bytes >= most - MARGIN_RESOLUTION_FRAC * capacity_bytes]
    chosen = close[0]
    for other in close[1:]:
        if simpler(other, chosen):
            chosen = other
    return chosen


def _shape(plan: ScoredPlan) -> tuple[object, ...]:
    c = plan.candidate
    return (c.tp, c.pp, c.cp, c.ep, c.schedule, c.world_size)


def _distinct(optimum: ScoredPlan, others: Sequence[ScoredPlan],
              objective: Objective) -> list[ScoredPlan]:
    """The best plan of each mesh shape other than the optimum's, best objective first."""
    best_value = objective_value(optimum, objective)
    seen = {_shape(optimum)}
    out = []
    for other in sorted(others, key=lambda p: objective_value(p, objective)):
        if _shape(other) in seen or objective_value(other, objective) < best_value:
            continue
        seen.add(_shape(other))
        out.append(other)
    return out


def _tied(anchor: ScoredPlan, distinct: Sequence[ScoredPlan], spec: ModelSpec,
          training: TrainingSpec, *, objective: Objective, frac: float | None) -> list[Traits]:
    """The anchor and the plans without an experimental mechanism within `frac` of it."""
    tied = [traits(spec, training, anchor)]
    if frac is None:
        return tied
    for other in distinct:
        if other is anchor or objective_value(other, objective) < objective_value(
                anchor, objective):
            continue
        if objective == Objective.MIN_GPUS and \
                other.estimate.world_size != anchor.estimate.world_size:
            continue
        if relative_gap(anchor, other, objective) <= frac and \
                not experimental_features(spec, training, other):
            tied.append(traits(spec, training, other))
    return tied


def pick(optimum: ScoredPlan, others: Sequence[ScoredPlan], spec: ModelSpec,
         training: TrainingSpec, cluster: ClusterSpec, *, objective: Objective,
         proven: bool = True) -> Pick:
    """The plan to show among the objective optimum and the other scored plans `others`
    (see the module docstring); `others` may hold several plans of one mesh shape, of which
    the best counts. `proven`: whether the search proved `optimum` optimal; where it did
    not (a search cut by its time limit), the text calls it the best plan found, not the
    optimum (the report's field names stay those of the API contract)."""
    moe = has_routed_experts(spec)
    best_value = objective_value(optimum, objective)
    distinct = _distinct(optimum, others, objective)
    band = [p for p in distinct
            if within_band(optimum, p, cluster, objective=objective, moe=moe)]
    scored = objective in BAND_OBJECTIVES
    frac = band_frac(_band(cluster, optimum, moe=moe)) if scored else None
    exotic = experimental_features(spec, training, optimum)
    anchor = optimum
    if exotic:
        common = [p for p in band if not experimental_features(spec, training, p)]
        if common:
            anchor = common[0]
    pair = cluster_pairwise_frac(cluster, moe=moe, num_gpus=optimum.estimate.world_size) \
        if scored and not (exotic and anchor is optimum) else None
    tied = _tied(anchor, distinct, spec, training, objective=objective, frac=pair)
    chosen = tie_break(tied, capacity_bytes=anchor.ledger.capacity_bytes)
    shown = chosen.plan
    delta = relative_gap(optimum, shown, objective)
    picked = "optimum" if shown is optimum else "robust" if shown is anchor else "margin"
    report = RobustChoice(
        picked=picked, band_frac=frac, pairwise_band_frac=pair,
        within_pairwise_band=len(tied) - 1, tied=_listed(tied, chosen, optimum, objective),
        within_band=len(band), indistinguishable=len(tied) > 1 or anchor is not optimum,
        optimum_parallel=None if shown is optimum else optimum.parallel,
        optimum_world_size=optimum.estimate.world_size,
        optimum_step_time_s=optimum.estimate.step_time_s,
        optimum_objective=best_value if math.isfinite(best_value) else None,
        delta_frac=max(0.0, delta), experimental=sorted(exotic),
        text=(_text(optimum, anchor, chosen, tied, (frac, pair), exotic, objective,
                    proven=proven)
              if scored else
              "least memory is not a step-time objective: the model's error band does not "
              "apply"))
    return Pick(shown=shown, optimum=optimum, report=report)


def _listed(tied: Sequence[Traits], chosen: Traits, optimum: ScoredPlan,
            objective: Objective) -> list[TiedPlan]:
    if len(tied) < 2:
        return []
    listed = list(tied[:MAX_TIED_LISTED])
    if chosen not in listed:
        listed[-1] = chosen
    return [TiedPlan(parallel=describe_parallel(t.plan.parallel),
                     step_time_s=t.plan.estimate.step_time_s,
                     delta_frac=max(0.0, relative_gap(optimum, t.plan, objective)),
                     memory_margin_bytes=max(0, t.margin_bytes), mechanisms=t.mechanisms,
                     frameworks=t.frameworks, shown=t is chosen)
            for t in listed]


def _text(optimum: ScoredPlan, anchor: ScoredPlan, chosen: Traits, tied: list[Traits],
          bands: tuple[float | None, float | None], exotic: dict[str, str],
          objective: Objective, *, proven: bool) -> str:
    """The report's sentence, given the bands (the absolute and the pairwise one); it calls
    `optimum` the optimum only where the search proved it (`proven`), the best plan found
    otherwise."""
    frac, pair = bands
    best_name = "the optimum" if proven else "the best plan found"
    if frac is None:
        return "no error band backs the prediction: plans are compared by the model alone"
    width = f"{100 * frac:.0f}%"
    lead = ""
    if anchor is not optimum:
        lead = (f"robust choice, not {'the objective optimum' if proven else best_name}: "
                f"{best_name} "
                f"{describe_parallel(optimum.parallel)} uses {', '.join(sorted(exotic))} "
                f"(experimental) and wins by {100 * relative_gap(optimum, anchor, objective):.1f}"
                f"%, less than the model's error band ({width}); the best plan within the band "
                "without an experimental mechanism is ")
        if chosen.plan is anchor:
            return lead + f"shown{_ties(tied, pair)}"
        lead += f"{describe_parallel(anchor.parallel)}, and "
    if exotic and anchor is optimum:
        return (f"{best_name} uses {', '.join(sorted(exotic))} (experimental) and wins by more "
                f"than the model's error band ({width}) over every scored plan without one")
    if pair is None or len(tied) < 2:
        return lead + (f"no other scored plan lies within the model's error band ({width})"
                       if not lead else "no plan ties with it")
    first = tied[0]
    if chosen is first:
        return (f"{lead}indistinguishable within the model's error on the difference of two "
                f"plans ({100 * pair:.0f}%): {len(tied) - 1} other plan"
                f"{'s lie' if len(tied) != 2 else ' lies'} within it, none with more memory "
                f"margin (by over {100 * MARGIN_RESOLUTION_FRAC:.1f}% of the capacity), or as "
                "much and fewer or more common mechanisms; the plan shown is the fastest of "
                "them, not a measured winner")
    roomier = (chosen.margin_bytes - first.margin_bytes
               > MARGIN_RESOLUTION_FRAC * anchor.ledger.capacity_bytes)
    why = (f"keeps {gib(chosen.margin_bytes)} free on its fullest GPU against "
           f"{gib(first.margin_bytes)}" if roomier else
           f"keeps as much memory free and uses {chosen.mechanisms} mechanisms, run by "
           f"{chosen.frameworks} released frameworks, against {first.mechanisms} run by "
           f"{first.frameworks}")
    toward = "memory margin" if roomier else "more common mechanisms"
    return (f"{lead}tie broken toward {toward}: {describe_parallel(first.plan.parallel)} "
            f"is faster by {100 * relative_gap(first.plan, chosen.plan, objective):.1f}%, less "
            f"than the model's error on the difference of two plans ({100 * pair:.0f}%), and "
            f"the plan shown {why}{_ties(tied, pair)}")


def _ties(tied: list[Traits], pair: float | None) -> str:
    if pair is None or len(tied) < 2:
        return ""
    return (f" ({len(tied) - 1} other plan{'s lie' if len(tied) != 2 else ' lies'} within "
            f"{100 * pair:.0f}% of it)")


__all__ = ["BAND_OBJECTIVES", "MARGIN_RESOLUTION_FRAC", "MAX_TIED_LISTED", "Pick", "Traits",
           "band_frac", "experimental_features", "experimental_offload",
           "experimental_schedules", "pick",
           "relative_gap", "simpler", "tie_break", "traits", "within_band"]
