"""Framework targets in the search: the request's `constraints.framework` turned into what
the planner may explore.

Owns: the frameworks a request admits (`target_frameworks`), the request-wide narrowing
(schedules, FP8 activation storage and offload no admitted framework runs), the
per-candidate variants (one per admitting framework, with its ZeRO stages and activation
policies: `candidate_variants`), the candidate's best plan over those variants
(`evaluate_for_targets`), and the check that a finished plan runs on the target
(`target_blockers`). The capability tables themselves are `models/core/frameworks.py`'s. Must
not: enumerate or order candidates, or size anything.
"""

import dataclasses
import math
import operator
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig, PipelineSchedule
from api_schemas.requests import Constraints
from api_schemas.training import TrainingSpec
from models.core.frameworks import (
    RELEASED,
    Framework,
    blockers,
    frameworks,
    mesh_features,
    micro_batch_features,
    optimizer_offload_features,
    plan_features,
)
from models.core.ledger_memo import LedgerMemo
from models.core.memory import memory_ledger
from models.core.step_time import estimate_step
from models.errors import InvalidSpecError
from solver.candidate_eval import (
    Dominated,
    PolicyCaps,
    Rejection,
    ScoredPlan,
    layer_split_options,
    least_memory_candidate,
)
from solver.ladder import allowed_zero_stages
from solver.runtime_choice import (
    RUNTIME_NAMES,
    runs_bf16_optimizer,
    runtime_feature_set,
    runtime_options,
    unset_features,
    with_bf16_optimizer,
)
from solver.space import MeshCandidate, permitted
from solver.variant_race import Variant, best_over_variants

ANY = "any"
"""The target that admits every feature the cost model knows."""


def target_frameworks(constraints: Constraints) -> tuple[Framework, ...] | None:
    """The frameworks a plan may run on (None: no restriction, target 'any')."""
    if constraints.framework == ANY:
        return None
    tables = frameworks()
    if constraints.framework is None:
        return tuple([tables[f] for f in RELEASED])
    return (tables[constraints.framework],)


def target_constraints(constraints: Constraints) -> Constraints:
    """The request narrowed to what at least one admitted framework can run: schedules,
    FP8 activation storage, activation offload, Pipeline ZeRO-2 and remote activation
    offload nobody runs are removed (from what the search may choose; a pinned Pipeline
    ZeRO-2 stays)."""
    targets = target_frameworks(constraints)
    if targets is None:
        return constraints
    runnable = set().union(*(fw.features for fw in targets))
    forbid = dict(constraints.forbid)
    schedules = [s.value for s in PipelineSchedule
                 if f"schedule:{s.value}" not in runnable and s != PipelineSchedule.ONE_F_ONE_B]
    if schedules:
        forbid["schedule"] = sorted({*map(str, forbid.get("schedule", [])), *schedules})
    return constraints.model_copy(update={
        "forbid": forbid,
        "allow_fp8_activations": constraints.allow_fp8_activations
        if "fp8_activation_storage" in runnable else False,
        "allow_offload": constraints.allow_offload and "activation_offload" in runnable,
        "allow_gradient_host_shards": constraints.allow_gradient_host_shards
        and "gradient_host_shards" in runnable,
        "allow_remote_offload": constraints.allow_remote_offload
        and "remote_activation_offload" in runnable,
        "allow_optimizer_offload": constraints.allow_optimizer_offload
        and "optimizer_offload" in runnable})


_MESH_ARGS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "schedule", "sequence_parallel",
              "cp_kind", "ulysses_degree")
"""The candidate fields `mesh_features` takes (by these keyword names)."""
_mesh_args = operator.attrgetter(*_MESH_ARGS)


def _mesh_key(candidate: MeshCandidate) -> tuple[object, ...]:
    """What a candidate's mesh features read: the `_MESH_ARGS` fields and whether the
    pipeline has fewer micro-batches than stages (`micro_batch_features`)."""
    return (*_mesh_args(candidate), candidate.num_micro_batches < candidate.pp)


_View = tuple[tuple[int, ...], bool, bool, PolicyCaps]
"""A framework's view of a mesh: its ZeRO stages, FP8 storage, offload and policies."""


def _view(framework_id: str, mesh: frozenset[str], max_version: str | None,
          zeros: tuple[int, ...], fp8: bool, offload: bool) -> _View | None:
    """What one framework allows on one mesh: ZeRO stages, FP8 storage, offload and the
    activation policies (None when it does not run the mesh)."""
    fw = frameworks()[framework_id]

    def ok(*extra: str) -> bool:
        return not blockers(fw, mesh | set(extra), max_version=max_version)

    if not ok():
        return None
    allowed = tuple(z for z in zeros if ok(f"zero:{z}"))
    if not allowed:
        return None

    def can(*extra: str) -> bool:
        return ok(*extra, "recompute:any")

    caps = PolicyCaps(
        selective=can("recompute:selective"),
        broad_modules=can("recompute:selective", "recompute:selective_modules"),
        full=can("recompute:full"), full_layers=can("recompute:full_layers"),
        full_layers_selective=can("recompute:full_layers", "recompute:full_layers+selective"),
        per_stage=can("recompute:per_stage"))
    return (allowed, fp8 and ok("fp8_activation_storage"),
            offload and ok("activation_offload"), caps)


@dataclass(frozen=True, slots=True, eq=False)
class TargetRequest:
    """One request (model, recipe and constraints) with what the framework checks derive
    from it: the ZeRO stages it permits, the mesh features of each mesh, the framework
    views and the narrowed constraints of each view (made on first use). Made once per
    search and passed explicitly (`candidate_variants`, `admits_mesh` take one in place of
    the constraints), so each derived piece lives on the object it derives from and dies
    with it, never in a module table under an object id. Compared by identity."""

    spec: ModelSpec
    training: TrainingSpec
    constraints: Constraints
    zeros: tuple[int, ...] = dataclasses.field(init=False)
    """The ZeRO stages the request permits, ascending."""
    open_features: frozenset[str] = dataclasses.field(init=False)
    """The runtime features the recipe leaves to the planner (`unset_features`)."""
    targets: tuple[Framework, ...] | None = dataclasses.field(init=False)
    """The frameworks a plan may run on (`target_frameworks`; None: target 'any')."""
    _meshes: dict[tuple[object, ...], frozenset[str]] = dataclasses.field(
        default_factory=dict, init=False, repr=False)
    _narrowed: dict[tuple[tuple[int, ...], bool, bool], Constraints] = dataclasses.field(
        default_factory=dict, init=False, repr=False)
    _views: dict[tuple[str, frozenset[str]], _View | None] = dataclasses.field(
        default_factory=dict, init=False, repr=False)
    _offload_views: dict[tuple[str, frozenset[str], tuple[int, ...], bool, bool],
                         Constraints | None] = dataclasses.field(
        default_factory=dict, init=False, repr=False)
    _wrapper_splits: dict[tuple[int, int], "_WrapperSplit"] = dataclasses.field(
        default_factory=dict, init=False, repr=False)
    _admitted: dict[tuple[object, ...], bool] = dataclasses.field(
        default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "zeros", tuple(
            z for z in (0, 1, 2, 3) if permitted("zero_stage", z, self.constraints)))
        object.__setattr__(self, "open_features", unset_features(self.training))
        object.__setattr__(self, "targets", target_frameworks(self.constraints))

    @classmethod
    def of(cls, spec: ModelSpec, training: TrainingSpec,
           constraints: "Constraints | TargetRequest") -> "TargetRequest":
        """`constraints` itself when it is the request of this model and recipe, else a new
        one."""
        if isinstance(constraints, TargetRequest):
            if constraints.spec is spec and constraints.training is training:
                return constraints
            constraints = constraints.constraints
        return cls(spec, training, constraints)

    def mesh(self, candidate: MeshCandidate) -> frozenset[str]:
        """The capability names the candidate's mesh, schedule and micro-batch count use
        (`mesh_features`, `micro_batch_features`), kept by the very arguments
        `mesh_features` is called with and whether the pipeline has fewer micro-batches than
        stages, so no field they read is left out of the key."""
        key = _mesh_key(candidate)
        found = self._meshes.get(key)
        if found is None:
            found = self._meshes[key] = frozenset(mesh_features(
                self.spec, self.training,
                **dict(zip(_MESH_ARGS, key[:-1], strict=True))  # type: ignore[arg-type]
            ) | micro_batch_features(candidate.schedule, pp=candidate.pp, vpp=candidate.vpp,
                                     num_micro_batches=candidate.num_micro_batches))
        return found

    def admits(self, candidate: MeshCandidate) -> bool:
        """Whether any target framework runs the candidate's mesh (`admits_mesh`), kept by
        the key of `mesh`: the verdict reads the candidate only through its mesh features,
        and the request's open features, targets and views are fixed."""
        key = _mesh_key(candidate)
        verdict = self._admitted.get(key)
        if verdict is None:
            assert self.targets is not None, "target 'any' admits every mesh"
            # A runtime feature the request leaves open is decided per framework (a
            # framework that lacks it runs the mesh with it off), so only the fixed ones
            # can shut a framework out.
            mesh = self.mesh(candidate) - self.open_features
            verdict = self._admitted[key] = any(
                self.view(fw.id, mesh) is not None for fw in self.targets)
        return verdict

    def view(self, framework_id: str, mesh: frozenset[str]) -> "_View | None":
        """What one framework allows this request on one mesh (`_view`, kept by its
        arguments: the request's own inputs to it are fixed)."""
        key = (framework_id, mesh)
        if key in self._views:
            return self._views[key]
        c = self.constraints
        found = self._views[key] = _view(framework_id, mesh, c.framework_version, self.zeros,
                                          bool(c.allow_fp8_activations), c.allow_offload)
        return found

    def optimizer_offload(self, fw: Framework, mesh: frozenset[str], allowed: tuple[int, ...],
                          fp8: bool, offload: bool) -> Constraints | None:
        """`_optimizer_offload_view` of one framework on one mesh for the request narrowed to
        a view (`narrowed` of `allowed`, `fp8`, `offload`), kept by those arguments: the
        request's own inputs to it are fixed."""
        key = (fw.id, mesh, allowed, fp8, offload)
        if key not in self._offload_views:
            self._offload_views[key] = _optimizer_offload_view(
                fw, mesh, self.narrowed(allowed, fp8, offload), allowed)
        return self._offload_views[key]

    def optimizer_wrappers(self, fw: Framework, recipe: TrainingSpec, constraints: Constraints
                           ) -> list[tuple[TrainingSpec, Constraints]]:
        """A framework variant's recipe and constraints split by the optimizer wrapper each
        ZeRO stage runs (`split_at_wrapper_stage`): at the stage of the framework's bf16
        optimizer wrapper, the recipe as the wrapper runs it (`with_bf16_optimizer`) without
        optimizer offload, and that stage with offload (the framework's ZeRO optimizer) and
        the other stages under the recipe as given; `[(recipe, constraints)]` where the
        wrapper does not apply. `constraints` is one of this request's narrowed objects
        (`optimizer_offload`), which live as long as the request, so the split is kept by
        its identity and the wrapper's stage."""
        stage = fw.bf16_optimizer_stage
        if stage is None or not runs_bf16_optimizer(fw, recipe):
            return [(recipe, constraints)]
        key = (id(constraints), stage)
        split = self._wrapper_splits.get(key)
        if split is None:
            split = self._wrapper_splits[key] = split_at_wrapper_stage(
                constraints, stage,
                overlap_pinned=self.training.overlap_grad_reduce is True)
        wrapped, others = split
        out = [] if wrapped is None else [(with_bf16_optimizer(recipe), wrapped)]
        return out + [(recipe, other) for other in others]

    def narrowed(self, allowed: tuple[int, ...], fp8: bool, offload: bool) -> Constraints:
        """The request narrowed to one framework view: its ZeRO stages, FP8 activation
        storage and offload (one object per view, kept by the arguments it is made of)."""
        key = (allowed, fp8, offload)
        found = self._narrowed.get(key)
        if found is None:
            forbid = dict(self.constraints.forbid)
            forbid["zero_stage"] = [z for z in (0, 1, 2, 3) if z not in allowed]
            found = self._narrowed[key] = self.constraints.model_copy(update={
                "forbid": forbid, "allow_fp8_activations": fp8, "allow_offload": offload})
        return found


_WrapperSplit = tuple[Constraints | None, tuple[Constraints, ...]]
"""The constraints of a bf16 optimizer wrapper's variant (None: none) and of the others."""


def _only_stages(constraints: Constraints, stages: Iterable[int],
                 **update: object) -> Constraints:
    """`constraints` with every ZeRO stage but `stages` forbidden (and `update` applied)."""
    kept = set(stages)
    forbid = dict(constraints.forbid)
    forbid["zero_stage"] = [z for z in (0, 1, 2, 3) if z not in kept]
    return constraints.model_copy(update={"forbid": forbid, **update})


def split_at_wrapper_stage(constraints: Constraints, stage: int, *,
                           overlap_pinned: bool) -> _WrapperSplit:
    """A framework variant's constraints split at the ZeRO stage of its bf16 optimizer
    wrapper (`models.core.frameworks.Framework.bf16_optimizer_stage`: DeepSpeed 0.19.8 takes
    BF16_Optimizer for bf16 weights with fp32 accumulation at stage 1 without CPU offload,
    `DeepSpeedEngine._do_optimizer_sanity_check`, and its ZeRO optimizer with offload):
    that stage alone without optimizer offload (the wrapper's variant; None where the stage
    is not allowed, where the request pins an offload share, or where it pins the gradient
    reduce overlap, which the wrapper does not run), that stage alone with the whole
    optimizer offloaded where the request allows offload, and the other allowed stages."""
    zeros = allowed_zero_stages(constraints)
    pinned = constraints.optimizer_offload_frac
    if stage not in zeros or (pinned is not None and pinned > 0):
        return None, (constraints,)
    others: list[Constraints] = []
    if constraints.allow_optimizer_offload and pinned is None:
        others.append(_only_stages(constraints, [stage], optimizer_offload_frac=1.0))
    if len(zeros) > 1:
        others.append(_only_stages(constraints, [z for z in zeros if z != stage]))
    wrapped = None if overlap_pinned else _only_stages(
        constraints, [stage], allow_optimizer_offload=False)
    return wrapped, tuple(others)


def _optimizer_offload_view(fw: Framework, mesh: frozenset[str], constraints: Constraints,
                            zeros: tuple[int, ...]) -> Constraints | None:
    """One framework's view of optimizer offload on a mesh: a pinned share keeps only the
    ZeRO stages the framework runs it with (None when there are none); otherwise the search
    may choose it only where the framework offers it at some allowed ZeRO stage
    (`models.core.frameworks.optimizer_offload_features`; Megatron-LM and DeepSpeed need a ZeRO
    optimizer, torchtitan has none)."""
    version = constraints.framework_version
    pinned = constraints.optimizer_offload_frac
    if pinned is not None and pinned > 0:
        extra = optimizer_offload_features(pinned)
        kept = tuple(z for z in zeros
                     if not blockers(fw, mesh | extra | {f"zero:{z}"}, max_version=version))
        if not kept:
            return None
        if kept == zeros:
            return constraints
        forbid = dict(constraints.forbid)
        forbid["zero_stage"] = [z for z in (0, 1, 2, 3) if z not in kept]
        return constraints.model_copy(update={"forbid": forbid})
    if not constraints.allow_optimizer_offload or pinned is not None:
        return constraints
    if any(not blockers(fw, mesh | {"optimizer_offload", f"zero:{z}"}, max_version=version)
           for z in zeros if z >= 1):
        return constraints
    return constraints.model_copy(update={"allow_optimizer_offload": False})


def candidate_variants(spec: ModelSpec, training: TrainingSpec, candidate: MeshCandidate,
                       constraints: Constraints | TargetRequest) -> list[Variant]:
    """One variant per admitted framework that runs the candidate's mesh, schedule and
    recipe; empty when none does. Target 'any' gives the request itself. A search passes
    its `TargetRequest` (the variants of its candidates then share their constraints)."""
    request = TargetRequest.of(spec, training, constraints)
    constraints = request.constraints
    targets = request.targets
    if targets is None:
        return [Variant(framework=ANY, constraints=constraints, caps=None, training=option)
                for option in runtime_options(spec, training, candidate, None)]
    mesh = request.mesh(candidate) - RUNTIME_NAMES
    out = []
    for fw in targets:
        for option in runtime_options(spec, training, candidate, fw):
            view = request.view(fw.id, mesh | runtime_feature_set(spec, option, candidate))
            if view is None:
                continue
            allowed, fp8, offload, caps = view
            narrowed = request.optimizer_offload(fw, mesh, allowed, fp8, offload)
            if narrowed is None:
                continue
            for recipe, stages in request.optimizer_wrappers(fw, option, narrowed):
                out.append(Variant(framework=fw.id, caps=caps, training=recipe,
                                   constraints=stages))
    return out


def admits_mesh(spec: ModelSpec, training: TrainingSpec, candidate: MeshCandidate,
                constraints: Constraints | TargetRequest) -> bool:
    """Whether any admitted framework runs the candidate's mesh (the search's filter)."""
    request = TargetRequest.of(spec, training, constraints)
    return request.targets is None or request.admits(candidate)


def evaluate_for_targets(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                         candidate: MeshCandidate, constraints: Constraints, *,
                         step_cutoff_s: float = math.inf,
                         zero3_bound_s: float = 0.0,
                         zero_floors_s: Mapping[int, float] | None = None,
                         least_memory: bool = False,
                         memo: LedgerMemo | None = None,
                         variants: list[Variant] | None = None
                         ) -> ScoredPlan | Rejection | Dominated:
    """The candidate's best plan over its framework variants (`evaluate_candidate` under
    each, in order, each under the cutoff lowered by the plans before it, or
    `least_memory_candidate` for the min_memory objective); a rejection when no framework
    runs it or none fits. `memo`: as `evaluate_candidate`'s (one per recipe: a variant
    whose runtime features differ from the request's gets its own). The plan keeps the
    recipe it was scored under (`ScoredPlan.training`). `variants`: the candidate's
    `candidate_variants` where the caller has them.

    The race between the variants (which are evaluated, in which order, and which result
    stands) is `solver.variant_race.best_over_variants`'s; a variant's memory rejection
    reads its ledger only where it is the answer (`Unfit`)."""
    if variants is None:
        variants = candidate_variants(spec, training, candidate, constraints)
    if not variants:
        return Rejection(candidate=candidate, reason="no framework of the target runs this "
                         "mesh and schedule")
    if least_memory:
        return _least_memory(spec, cluster, candidate, variants)
    return best_over_variants(spec, cluster, candidate, variants, step_cutoff_s=step_cutoff_s,
                              zero3_bound_s=zero3_bound_s, zero_floors_s=zero_floors_s,
                              memo=memo)


def _least_memory(spec: ModelSpec, cluster: ClusterSpec, candidate: MeshCandidate,
                  variants: list[Variant]) -> ScoredPlan | Rejection:
    """The least-memory plan over the variants (`least_memory_candidate` under each), else
    the first rejection."""
    best: ScoredPlan | None = None
    first: Rejection | None = None
    for variant in variants:
        result = least_memory_candidate(spec, variant.training, cluster, candidate,
                                        variant.constraints, caps=variant.caps)
        if isinstance(result, ScoredPlan):
            result = dataclasses.replace(result, training=variant.training)
            if best is None or _key(result, True) < _key(best, True):
                best = result
        elif first is None:
            first = result
    if best is not None:
        return best
    assert first is not None
    return first


def _key(plan: ScoredPlan, least_memory: bool) -> tuple[float, float]:
    if least_memory:
        return (plan.ledger.peak_bytes, plan.estimate.step_time_s)
    return (plan.estimate.step_time_s, 0.0)


def target_blockers(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                    constraints: Constraints) -> list[str]:
    """Why no admitted framework runs a finished configuration as given (empty when one
    does, or when the target is 'any')."""
    targets = target_frameworks(constraints)
    if targets is None:
        return []
    features = plan_features(spec, training, parallel)
    reasons: list[str] = []
    for fw in targets:
        found = blockers(fw, features, max_version=constraints.framework_version)
        if not found:
            return []
        reasons += found
    return reasons


def allows_per_stage_policies(constraints: Constraints) -> bool:
    """Whether the target may give pipeline ranks different activation policies."""
    targets = target_frameworks(constraints)
    return targets is None or any("recompute:per_stage" in fw.features for fw in targets)




def refine_layer_split(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                       plan: ScoredPlan, constraints: Constraints, *,
                       deadline: float | None = None) -> ScoredPlan:
    """For targets that apply one activation policy to every rank: the plan's uniform policy
    with each layer split of `layer_split_options` (lighter first and last ranks) that the
    target runs, kept only if it fits and the simulated step is faster."""
    best = plan
    if plan.parallel.pp == 1:
        return plan
    for split in layer_split_options(spec, plan.parallel):
        if split is None or (deadline is not None and time.perf_counter() >= deadline):
            continue
        parallel = plan.parallel.model_copy(update={"layers_per_stage": split})
        if target_blockers(spec, training, parallel, constraints):
            continue
        try:
            ledger = memory_ledger(spec, training, parallel, cluster)
            if not ledger.fits:
                continue
            estimate = estimate_step(spec, training, parallel, cluster)
        except InvalidSpecError:
            continue
        if estimate.step_time_s < best.estimate.step_time_s:
            best = ScoredPlan(candidate=plan.candidate, parallel=parallel, estimate=estimate,
                              ledger=ledger)
    return best


__all__ = [
    "ANY",
    "TargetRequest",
    "Variant",
    "admits_mesh",
    "allows_per_stage_policies",
    "candidate_variants",
    "evaluate_for_targets",
    "refine_layer_split",
    "target_blockers",
    "target_constraints",
    "target_frameworks",
]
