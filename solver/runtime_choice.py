"""Runtime features as choices of the search: which recipes a candidate is tried with, per
target framework.

Owns: the recipes (`TrainingSpec` with every runtime feature the request left unset decided)
a candidate is scored under for one framework (`runtime_options`): the features that only
lower the step time (`models.core.runtime_features.RUNTIME_FEATURES`, `costs_memory=False`:
the gradient-reduce and TP overlaps, the MoE grouped GEMM and permute fusion) are taken
whenever the framework offers them and the mesh meets their prerequisites, so they need no
branch (the TP input-gradient overlap under the weight-gradient GEMM included); a feature
that costs memory (DeepEP's buffers, the EP overlap's extra micro-batch) is tried on and off;
with PP > 1 a framework's own pipeline engine, where its table names a blocking one
(DeepSpeed's), is set on every recipe of that framework as a trait (`with_pipe_engine`), as
is its TP overlap runtime where it is not userbuffers (`with_tp_overlap_engine`, torchtitan's
async TP) and its bf16 optimizer wrapper at the ZeRO stage that takes it (`with_bf16_optimizer`,
applied by the caller, which knows the stage: `solver.targets`). Also
the recipe the search's lower bounds read (`optimistic_training`: every unset feature any
target offers, on), the recipe a given configuration is evaluated under (`decided_for`) and
the plan's account of its features (`runtime_feature_uses`). The
capability tables are `models/core/frameworks.py`'s. Must not: enumerate candidates or size
anything.
"""

from collections.abc import Iterable, Mapping

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.plan import RuntimeFeatureUse
from api_schemas.requests import RuntimeFeatureName, RuntimeFeatureRule
from api_schemas.training import MoeDispatcher, TrainingSpec
from models.core.frameworks import Framework, blockers, frameworks, plan_features
from models.core.layer_kinds import has_routed_experts
from models.core.memory import memory_ledger
from models.core.pipeline import schedule_traits
from models.core.runtime_features import (
    BY_NAME,
    DEEPEP,
    MEMORY_EFFICIENT_NORM,
    MOE_GROUPED_GEMM,
    MOE_PERMUTE_FUSION,
    OVERLAP_EP_COMM,
    OVERLAP_GRAD_REDUCE,
    OVERLAP_TP_COMM,
    RUNTIME_FEATURES,
    TP_DGRAD_OVERLAP,
    deepep_supports,
    effective_features,
    ep_overlap_mesh,
    userbuffers_tp_overlap,
    with_features,
)
from models.core.search_memo import current_memo
from models.core.step_time import estimate_step
from models.errors import InvalidSpecError
from solver.space import MeshCandidate

RUNTIME_NAMES = frozenset(feature.name for feature in RUNTIME_FEATURES)
"""The capability names of the runtime features."""

def resolved(training: TrainingSpec, on: frozenset[str]) -> TrainingSpec:
    """`training` with its unset runtime features decided: those in `on` on, the others
    off (in a search, one object per recipe object and set, kept on the search's memo
    beside the recipe it was decided from: every candidate that takes the same features
    shares it, and the ledger memos tell recipes apart by identity)."""
    return _kept_recipe(training, on, with_features(training, on))


def _kept_recipe(training: TrainingSpec, tag: frozenset[str],
                 update: Mapping[str, object]) -> TrainingSpec:
    """`training` with `update` applied (itself where `update` is empty), one object per
    recipe object and `tag` on the search's memo (`SearchMemo.recipes`), kept beside the
    recipe it was made from so that a recipe equal to it but not it is never served."""
    memo = current_memo()
    key = (training, tag)
    found = memo.recipes.get(key)
    if found is not None and found[0] is training:
        return found[1]
    out = training.model_copy(update=dict(update)) if update else training
    memo.recipes[key] = (training, out)
    return out


def with_rules(training: TrainingSpec,
               rules: Mapping[RuntimeFeatureName, RuntimeFeatureRule]) -> TrainingSpec:
    """The recipe with `constraints.runtime_features` applied: 'required' and 'forbidden'
    fix the field of that name (for `moe_dispatcher`: DeepEP or the NCCL all-to-all),
    'allowed' leaves it to the planner.

    Raises:
        InvalidSpecError: a rule contradicts a value the recipe fixes."""
    update: dict[str, object] = {}
    for name, rule in rules.items():
        if rule == "allowed":
            continue
        on = rule == "required"
        value: object = ((MoeDispatcher.DEEPEP if on else MoeDispatcher.ALLTOALL)
                         if name == "moe_dispatcher" else on)
        fixed = getattr(training, name)
        if fixed is not None and fixed != value:
            raise InvalidSpecError(
                f"constraints.runtime_features.{name}='{rule}' contradicts training.{name}="
                f"{fixed}; drop one of the two", field="constraints.runtime_features")
        update[name] = value
    return training.model_copy(update=update) if update else training


def unset_features(training: TrainingSpec) -> frozenset[str]:
    """The capability names of the runtime features `training` leaves to the planner."""
    return frozenset([f.name for f in RUNTIME_FEATURES if getattr(training, f.field) is None])


def _prerequisites_met(name: str, moe: bool, c: MeshCandidate) -> bool:
    """Whether the mesh meets a feature's prerequisites (`RuntimeFeature.needs`; `moe`: the
    model's `has_routed_experts`, read once by the caller for all its features); a
    framework's own refusals (EP overlap with full recomputation, or with PP > 1 and no
    interleaving) are its forbidden rules, checked by the caller."""
    if name == OVERLAP_GRAD_REDUCE:
        return c.dp > 1
    if name == OVERLAP_TP_COMM:
        return c.tp > 1 and c.sequence_parallel
    if name == TP_DGRAD_OVERLAP:
        return c.tp > 1
    if name == MEMORY_EFFICIENT_NORM:
        return True
    if name in (MOE_GROUPED_GEMM, MOE_PERMUTE_FUSION):
        return moe
    if name == DEEPEP:
        return moe and c.ep > 1 and deepep_supports(c.ep)
    if name == OVERLAP_EP_COMM:
        return moe and c.ep > 1 and ep_overlap_mesh(c.schedule, pp=c.pp,
                                                    num_micro_batches=c.num_micro_batches)
    raise ValueError(f"unknown runtime feature '{name}'")


def _engine_excludes(name: str, candidate: MeshCandidate, framework: Framework | None
                     ) -> bool:
    """Whether the framework's pipeline engine leaves a feature without effect on the mesh:
    DeepSpeed's engine reduces gradients after the step's last backward
    (`grad_reduce_overlapped`), so with PP > 1 `overlap_comm` is not offered as a choice."""
    return (name == OVERLAP_GRAD_REDUCE and candidate.pp > 1 and framework is not None
            and framework.pipe_engine_p2p is not None)


def with_pipe_engine(training: TrainingSpec, pp: int,
                     framework: Framework | None) -> TrainingSpec:
    """`training` as `framework`'s own pipeline engine runs a mesh of `pp` stages: with
    PP > 1 on a framework whose table names a blocking engine (`Framework.pipe_engine_p2p`,
    DeepSpeed's), its stage-boundary transfers (`TrainingSpec.pipe_engine_p2p`) set unless
    the request fixed them; unchanged otherwise (target 'any', the other frameworks, PP = 1).
    A trait of the framework, not a choice: no option is scored without it. In a search,
    one object per recipe object, kept on the search's memo as `resolved` keeps its own."""
    p2p = None if framework is None else framework.pipe_engine_p2p
    if p2p is None or pp == 1 or training.pipe_engine_p2p is not None:
        return training
    return _kept_recipe(training, frozenset({f"pipe_engine_p2p:{p2p.value}"}),
                        {"pipe_engine_p2p": p2p})


def with_offload_grad_buffers(training: TrainingSpec,
                              framework: Framework | None) -> TrainingSpec:
    """`training` as `framework`'s offloaded optimizer runs it: on a framework whose table
    names per-parameter host gradient buffers (`Framework.offload_grad_buffers`, DeepSpeed's
    ZeRO-Offload), `TrainingSpec.offload_grad_buffers` set unless the request fixed it (the
    cost model reads it only at ZeRO 1-2 with the optimizer offloaded); unchanged otherwise.
    A trait of the framework, not a choice. In a search, one object per recipe object, kept
    on the search's memo as `with_pipe_engine` keeps its own."""
    if framework is None or not framework.offload_grad_buffers \
            or training.offload_grad_buffers is not None:
        return training
    return _kept_recipe(training, frozenset({"offload_grad_buffers"}),
                        {"offload_grad_buffers": True})


def with_tp_overlap_engine(training: TrainingSpec,
                           framework: Framework | None) -> TrainingSpec:
    """`training` as `framework` overlaps its TP collectives: on a framework whose table
    names a TP overlap runtime other than Transformer Engine's userbuffers
    (`Framework.tp_overlap_engine`, torchtitan's async TP), `TrainingSpec.tp_overlap_engine`
    set on a recipe that turns `overlap_tp_comm` on, unless the request fixed it, so that
    the overlap is priced as that runtime runs it; unchanged otherwise. A trait of the
    framework, not a choice. In a search, one object per recipe object, kept on the search's
    memo as `with_pipe_engine` keeps its own."""
    engine = None if framework is None else framework.tp_overlap_engine
    if engine is None or not training.overlap_tp_comm or training.tp_overlap_engine is not None:
        return training
    return _kept_recipe(training, frozenset({f"tp_overlap_engine:{engine.value}"}),
                        {"tp_overlap_engine": engine})


def runs_bf16_optimizer(framework: Framework, training: TrainingSpec) -> bool:
    """Whether `framework` runs `training` through its bf16 optimizer wrapper at its ZeRO
    stage (`Framework.bf16_optimizer_stage`): bf16 weights with fp32 gradient accumulation,
    the wrapper's fp32 add not fixed by the request."""
    return (framework.bf16_optimizer_stage is not None
            and training.param_dtype == DType.BF16 and training.grad_dtype == DType.FP32
            and training.bf16_hp_grad_update is None)


def with_bf16_optimizer(training: TrainingSpec) -> TrainingSpec:
    """`training` as DeepSpeed's BF16_Optimizer runs it (`Framework.bf16_optimizer_stage`):
    each micro-batch's bf16 gradients added into the fp32 buffer after its backward
    (`bf16_hp_grad_update`), and the gradient reduction after the last backward instead of
    overlapped with it (`overlap_grad_reduce` off). A trait of the framework at that ZeRO
    stage, not a choice. In a search, one object per recipe object, kept on the search's
    memo as `with_pipe_engine` keeps its own."""
    return _kept_recipe(training, frozenset({"bf16_optimizer"}),
                        {"bf16_hp_grad_update": True, "overlap_grad_reduce": False})


def runtime_options(spec: ModelSpec, training: TrainingSpec, candidate: MeshCandidate,
                    framework: Framework | None) -> tuple[TrainingSpec, ...]:
    """The recipes to score `candidate` under for `framework` (None: target 'any', every
    feature the cost model knows): the time-only features on where offered and met, and
    each memory-trading one both on (first) and off; one that only frees memory
    (`tried_off_first`, the memory-efficient norm) off first, so that a plan which fits as
    fast without it keeps the framework's standard path. Each carries the framework's
    pipeline-engine trait for the candidate's PP (`with_pipe_engine`) and its TP overlap
    runtime (`with_tp_overlap_engine`)."""
    return tuple([with_tp_overlap_engine(with_offload_grad_buffers(
        with_pipe_engine(option, candidate.pp, framework), framework), framework)
        for option in _feature_options(spec, training, candidate, framework)])


def _feature_options(spec: ModelSpec, training: TrainingSpec, candidate: MeshCandidate,
                     framework: Framework | None) -> tuple[TrainingSpec, ...]:
    """`runtime_options` before the pipeline-engine trait: the runtime-feature choices."""
    unset = unset_features(training)
    if not unset:
        return (training,)
    offered = RUNTIME_NAMES if framework is None else RUNTIME_NAMES & framework.features.keys()
    moe = has_routed_experts(spec)
    usable = frozenset([name for name in unset & offered
                        if _prerequisites_met(name, moe, candidate)
                        and not _engine_excludes(name, candidate, framework)])
    base = frozenset([name for name in usable if not BY_NAME[name].costs_memory])
    options = [base]
    for name in sorted(usable - base):
        with_it = [option | {name} for option in options]
        options = options + with_it if BY_NAME[name].tried_off_first else with_it + options
    return tuple([resolved(training, option) for option in options])


def runtime_feature_set(spec: ModelSpec, training: TrainingSpec,
                        candidate: MeshCandidate) -> frozenset[str]:
    """The runtime features a decided recipe turns on for the candidate (capability
    names)."""
    return frozenset(effective_features(training, moe=has_routed_experts(spec), tp=candidate.tp,
                                        dp=candidate.dp, ep=candidate.ep,
                                        sequence_parallel=candidate.sequence_parallel))


def optimistic_training(training: TrainingSpec,
                        targets: Iterable[Framework] | None) -> TrainingSpec:
    """The recipe the search's lower bounds read: every unset runtime feature that some
    target offers, on (each only lowers a step's time in the cost model; the memory the EP
    overlap costs is not in the memory floors)."""
    offered = (RUNTIME_NAMES if targets is None
               else RUNTIME_NAMES & set().union(*(fw.features.keys() for fw in targets)))
    return resolved(training, frozenset(offered & unset_features(training)))


def decided_for(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                cluster: ClusterSpec, *, any_target: bool = False) -> TrainingSpec:
    """The recipe a given configuration is scored under when its request leaves runtime
    features unset (`POST /v1/evaluate`): as the search decides them for that configuration,
    each released framework that runs it offering its options (`runtime_options`; its TP
    overlap runtime included, so a configuration only torchtitan runs is priced with async
    TP), the fitting option with the shortest step kept (the first option when none fits or none
    runs; every feature the cost model knows when no released framework runs it). With
    `any_target` (the request admits features no released framework has), when no
    released framework's option fits, the options of target 'any' (the memory-efficient
    norm) are tried too, and kept if one fits."""
    if not unset_features(training):
        return training
    m = training.global_batch_size // (parallel.micro_batch_size * parallel.dp)
    candidate = MeshCandidate.of(parallel, max(1, m))
    options: list[TrainingSpec] = []
    for framework in frameworks().values():
        # The runtime features and the runtime that prices the framework's TP overlap
        # (`with_tp_overlap_engine`): a configuration evaluated on no named framework is
        # not given one framework's pipeline engine (`with_pipe_engine`).
        for feature_option in _feature_options(spec, training, candidate, framework):
            option = with_tp_overlap_engine(feature_option, framework)
            if option not in options and not blockers(
                    framework, plan_features(spec, option, parallel)):
                options.append(option)
    anywhere = list(_feature_options(spec, training, candidate, None))
    if not options:
        options = anywhere
    extra = ([option for option in anywhere if option not in options] if any_target
             else [])
    if len(options) == 1 and not extra:
        return options[0]
    keys: dict[int, tuple[bool, float]] = {}

    def key(option: TrainingSpec) -> tuple[bool, float]:
        if id(option) not in keys:
            try:
                fits = memory_ledger(spec, option, parallel, cluster).fits
                keys[id(option)] = (
                    not fits, estimate_step(spec, option, parallel, cluster).step_time_s)
            except InvalidSpecError:
                keys[id(option)] = (True, float("inf"))
        return keys[id(option)]

    best = min(options, key=key)
    if not key(best)[0] or not extra:
        return best
    other = min(extra, key=key)
    return other if not key(other)[0] else best


def runtime_feature_uses(spec: ModelSpec, request: TrainingSpec, chosen: TrainingSpec,
                         candidate: MeshCandidate, framework_ids: list[str],
                         why_off: dict[str, str] | None = None) -> list[RuntimeFeatureUse]:
    """Each runtime feature of a plan: on or off, who decided it, the flag of each framework
    that runs the plan, and why it is off (prerequisites, the frameworks that lack it, or
    `why_off` from the search)."""
    on = runtime_feature_set(spec, chosen, candidate)
    tables = frameworks()
    out = []
    for feature in RUNTIME_FEATURES:
        pinned = getattr(request, feature.field) is not None
        is_on = feature.name in on
        flags = {fid: tables[fid].features[feature.name].how for fid in framework_ids
                 if fid in tables and feature.name in tables[fid].features}
        reason = ""
        if not is_on:
            value = getattr(request, feature.field)
            if pinned and value not in (False, MoeDispatcher.ALLTOALL):
                reason = ("fixed on by the request, but the plan lacks what it needs: "
                          f"{feature.needs}")
            elif pinned:
                reason = "fixed off by the request"
            elif (feature.name == OVERLAP_EP_COMM
                  and schedule_traits(candidate.schedule).overlapped_pairs):
                reason = (f"the {candidate.schedule.value} schedule already overlaps the expert "
                          "all-to-alls with the paired micro-batch")
            elif (feature.name == TP_DGRAD_OVERLAP and candidate.tp > 1
                  and userbuffers_tp_overlap(chosen, candidate.sequence_parallel)):
                reason = ("the userbuffers TP overlap (overlap_tp_comm) already overlaps the "
                          "input-gradient reduce-scatter")
            elif not _prerequisites_met(feature.name, has_routed_experts(spec), candidate):
                reason = f"needs {feature.needs}"
            elif (feature.name == OVERLAP_GRAD_REDUCE and chosen.bf16_hp_grad_update
                  and request.bf16_hp_grad_update is None):
                reason = ("DeepSpeed runs bf16 weights with fp32 gradient accumulation at ZeRO "
                          "stage 1 through BF16_Optimizer, which reduces the gradients after "
                          "the last backward")
            elif why_off and feature.name in why_off:
                reason = why_off[feature.name]
            else:
                lacking = [tables[fid].name for fid in framework_ids
                           if fid in tables and feature.name not in tables[fid].features]
                reason = (f"not offered by {', '.join(lacking)}" if lacking
                          else "the plan is faster or only fits without it")
        out.append(RuntimeFeatureUse(feature=feature.name, on=is_on,
                                     decided_by="request" if pinned else "planner",
                                     flags=flags, why_not=reason, source=feature.source))
    return out


__all__ = [
    "RUNTIME_NAMES",
    "decided_for",
    "optimistic_training",
    "resolved",
    "runtime_feature_set",
    "runtime_feature_uses",
    "runtime_options",
    "runs_bf16_optimizer",
    "unset_features",
    "with_bf16_optimizer",
    "with_pipe_engine",
    "with_tp_overlap_engine",
    "with_rules",
]
