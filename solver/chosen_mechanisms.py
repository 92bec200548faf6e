"""Why the search chose a mechanism the request only allowed (the same mesh's best plan
without it), and why it left a runtime feature off (the same mesh's best plan with it).

Owns: for Pipeline ZeRO-2, remote activation offload and optimizer offload chosen by the
search (allowed by `constraints.allow_gradient_host_shards` / `allow_remote_offload` /
`allow_optimizer_offload`, not pinned), one note
per mechanism saying whether the chosen mesh has any plan without it, and if so how much
slower its best one is; for each runtime feature the search could have turned on and left
off (`runtime_why_off`), the mesh's best plan with it fixed on; optimizer offload as one of
the plan's runtime features (`optimizer_offload_use`: on or off, who decided it, each
framework's flag, and when the search left it off, the mesh's best plan with it). Must
not: change the plan it explains, or say what a mechanism costs (`solver/mechanisms.py`
does).
"""

import time

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.plan import RuntimeFeatureUse
from api_schemas.requests import Constraints
from api_schemas.training import MoeDispatcher, TrainingSpec
from models.core.frameworks import frameworks
from models.core.runtime_features import DEEPEP, RUNTIME_FEATURES
from models.core.step_time.step_terms import CPU_OPTIMIZER_TERM
from models.errors import InvalidSpecError
from solver import cpsat
from solver.candidate_eval import Rejection, ScoredPlan, refine_policies
from solver.explain import excess_text
from solver.runtime_choice import RUNTIME_NAMES, runtime_feature_set
from solver.targets import allows_per_stage_policies, evaluate_for_targets, target_frameworks


def _chosen(plan: ScoredPlan, constraints: Constraints) -> list[tuple[str, str]]:
    """(mechanism name, the permission to withdraw) of each mechanism the search chose."""
    parallel = plan.parallel
    out = []
    if (parallel.gradient_host_shards and not constraints.gradient_host_shards
            and constraints.allow_gradient_host_shards):
        out.append(("Pipeline ZeRO-2", "allow_gradient_host_shards"))
    if parallel.remote_activation_offload and constraints.allow_remote_offload:
        out.append(("remote activation offload", "allow_remote_offload"))
    if (parallel.optimizer_offload_frac > 0 and constraints.optimizer_offload_frac is None
            and constraints.allow_optimizer_offload):
        out.append(("optimizer offload", "allow_optimizer_offload"))
    return out


def chosen_mechanism_notes(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                           plan: ScoredPlan, constraints: Constraints,
                           config: cpsat.SolverConfig, *, deadline: float | None = None
                           ) -> list[str]:
    """One note per mechanism the search chose: the chosen mesh re-evaluated with the
    permission withdrawn (the same ladder, then the per-stage policy subproblem where the
    target allows it), either 'no plan fits without it' or its best step time beside this
    plan's. `training` is the request's recipe: the runtime features it leaves open are
    decided again without the mechanism (`solver.runtime_choice`). Past `deadline` (a
    `time.perf_counter()` value) a mechanism's note says that the limit ended first."""
    notes = []
    step = plan.estimate.step_time_s
    for name, permission in _chosen(plan, constraints):
        if deadline is not None and time.perf_counter() >= deadline:
            notes.append(f"{name} chosen by the search (constraints.{permission}): the time "
                         "limit ended before the mesh was re-evaluated without it")
            continue
        without = constraints.model_copy(update={permission: False})
        try:
            other = evaluate_for_targets(spec, training, cluster, plan.candidate, without)
            if isinstance(other, ScoredPlan) and allows_per_stage_policies(without):
                other = refine_policies(spec, other.training or training, cluster, other,
                                        without, config, deadline=deadline)
        except InvalidSpecError:
            continue
        head = f"{name} chosen by the search (constraints.{permission})"
        if isinstance(other, Rejection):
            excess = excess_text(other)
            detail = f", {excess}" if excess else ""
            notes.append(f"{head}: without it no plan of this mesh fits{detail}")
            continue
        if not isinstance(other, ScoredPlan):
            continue
        other_step = other.estimate.step_time_s
        saved = other_step - step
        verdict = (f"it saves {saved:.3f} s ({saved / other_step:.1%})" if saved > 0
                   else "it is no faster")
        notes.append(f"{head}: without it this mesh's best plan takes {other_step:.3f} s per "
                     f"step against {step:.3f} s with it; {verdict}")
    return notes


def runtime_why_off(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                    plan: ScoredPlan, constraints: Constraints, *,
                    deadline: float | None = None) -> dict[str, str]:
    """For each runtime feature the request left open, a target offers and the plan leaves
    off, why: the chosen mesh re-evaluated with the feature fixed on (its best plan's step
    time beside this plan's, or why none fits or runs). Features whose prerequisites the
    mesh lacks are answered by `solver.runtime_choice.runtime_feature_uses` itself."""
    chosen = plan.training or training
    on = runtime_feature_set(spec, chosen, plan.candidate)
    targets = target_frameworks(constraints)
    offered = (RUNTIME_NAMES if targets is None
               else RUNTIME_NAMES & set().union(*(fw.features.keys() for fw in targets)))
    step = plan.estimate.step_time_s
    out: dict[str, str] = {}
    for feature in RUNTIME_FEATURES:
        if (feature.name in on or feature.name not in offered
                or getattr(training, feature.field) is not None):
            continue
        if deadline is not None and time.perf_counter() >= deadline:
            out[feature.name] = "the time limit ended before the mesh was tried with it"
            continue
        value: object = MoeDispatcher.DEEPEP if feature.name == DEEPEP else True
        pinned = training.model_copy(update={feature.field: value})
        if feature.name not in runtime_feature_set(spec, pinned, plan.candidate):
            continue  # prerequisites unmet: said by runtime_feature_uses
        try:
            other = evaluate_for_targets(spec, pinned, cluster, plan.candidate, constraints)
        except InvalidSpecError as error:
            out[feature.name] = f"with it this mesh is refused: {error.detail}"
            continue
        if isinstance(other, ScoredPlan):
            other_step = other.estimate.step_time_s
            out[feature.name] = (f"with it this mesh's best plan takes {other_step:.3f} s per "
                                 f"step against {step:.3f} s without"
                                 + (" (it costs memory, so the plan recomputes more)"
                                    if feature.costs_memory and other_step > step else ""))
        elif isinstance(other, Rejection):
            detail = f": {excess_text(other) or other.reason}"
            out[feature.name] = f"with it no plan of this mesh fits or runs{detail}"
    return out


OPTIMIZER_OFFLOAD = "optimizer_offload"
"""The capability name of optimizer offload (`models/data/frameworks.json`)."""

OPTIMIZER_OFFLOAD_SOURCE = (
    "Ren et al. 2021, ZeRO-Offload, arXiv:2101.06840 Sec. 4.1-4.2 (optimizer states and the "
    "Adam step on the CPU); Megatron-LM core_v0.14.0 --optimizer-cpu-offload (needs the "
    "distributed optimizer); DeepSpeed 0.19.8 zero_optimization.offload_optimizer (ZeRO "
    "stages 1-3)")


def optimizer_offload_use(plan: ParallelConfig, framework_ids: list[str], *,
                          fixed: str | None = None, why_off: str = "") -> RuntimeFeatureUse:
    """Optimizer offload as a runtime feature of a configuration: on where it keeps a share
    of its optimizer states in host memory; `fixed` names the request field that decided it
    (its path, e.g. 'constraints.allow_optimizer_offload'; None: the planner did); each
    framework of `framework_ids` that offers it with its flag; when off, why (`why_off`, the
    search's reason, else who fixed it or the frameworks that lack it)."""
    tables = frameworks()
    on = plan.optimizer_offload_frac > 0
    flags = {fid: tables[fid].features[OPTIMIZER_OFFLOAD].how for fid in framework_ids
             if fid in tables and OPTIMIZER_OFFLOAD in tables[fid].features}
    reason = ""
    if not on:
        lacking = [tables[fid].name for fid in framework_ids
                   if fid in tables and OPTIMIZER_OFFLOAD not in tables[fid].features]
        reason = (f"fixed off by the request ({fixed})" if fixed
                  else why_off or (f"not offered by {', '.join(lacking)}" if lacking
                                   else "the plan is faster or only fits without it"))
    return RuntimeFeatureUse(feature=OPTIMIZER_OFFLOAD, on=on,
                             decided_by="request" if fixed else "planner", flags=flags,
                             why_not=reason, source=OPTIMIZER_OFFLOAD_SOURCE)


def offload_fixed_by(asked: Constraints) -> str | None:
    """The request field that fixes optimizer offload on or off (None: the search
    chooses it)."""
    if asked.optimizer_offload_frac is not None:
        return "constraints.optimizer_offload_frac"
    return None if asked.allow_optimizer_offload else "constraints.allow_optimizer_offload"


def offload_why_off(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                    plan: ScoredPlan, constraints: Constraints, *,
                    deadline: float | None = None) -> str:
    """Why the search left optimizer offload off the plan it chose, where some target
    framework offers it for the plan's mesh: the mesh re-evaluated with the whole optimizer
    shard in host memory (its best plan's step time beside this plan's, with the CPU step it
    adds, or why none fits or runs); empty where the search could not choose it."""
    if (plan.parallel.optimizer_offload_frac > 0 or constraints.optimizer_offload_frac
            is not None or not constraints.allow_optimizer_offload):
        return ""
    if deadline is not None and time.perf_counter() >= deadline:
        return "the time limit ended before the mesh was tried with it"
    pinned = constraints.model_copy(update={"optimizer_offload_frac": 1.0})
    try:
        other = evaluate_for_targets(spec, training, cluster, plan.candidate, pinned)
    except InvalidSpecError as error:
        return f"with it this mesh is refused: {error.detail}"
    if isinstance(other, ScoredPlan):
        cpu = other.estimate.overheads_s.get(CPU_OPTIMIZER_TERM, 0.0)
        return (f"with it this mesh's best plan takes {other.estimate.step_time_s:.3f} s per "
                f"step against {plan.estimate.step_time_s:.3f} s without (its CPU optimizer "
                f"step adds {cpu:.3f} s)")
    if isinstance(other, Rejection):
        return f"with it no plan of this mesh fits or runs: {other.reason}"
    return ""


def features_why_off(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                     plan: ScoredPlan, constraints: Constraints, *,
                     deadline: float | None = None) -> dict[str, str]:
    """Why the plan leaves off each runtime feature the search could have turned on
    (`runtime_why_off`) and optimizer offload (`offload_why_off`, under its capability
    name), by name."""
    out = runtime_why_off(spec, training, cluster, plan, constraints, deadline=deadline)
    offload = offload_why_off(spec, training, cluster, plan, constraints, deadline=deadline)
    if offload:
        out[OPTIMIZER_OFFLOAD] = offload
    return out


__all__ = ["OPTIMIZER_OFFLOAD", "chosen_mechanism_notes", "features_why_off", "offload_fixed_by",
           "offload_why_off", "optimizer_offload_use", "runtime_why_off"]
