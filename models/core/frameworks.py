"""What each training framework can run: the capability tables of `models/data/frameworks.json`
and the features a plan needs.

Owns: reading the tables (features with the release that provides each and its source,
forbidden combinations, and the origins of features no released framework has), naming
the features a configuration uses (`plan_features`), and deciding which frameworks run a
configuration as given (`runs_on`, `blockers`). Must not: search, export or size anything.
Reading its own package data is the only I/O it does.
"""

import json
import re
from dataclasses import dataclass
from typing import Any

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.parallel import (
    DEFAULT_RECOMPUTE_MODULES,
    ContextParallelKind,
    FullLayers,
    ParallelConfig,
    PipelineSchedule,
    RecomputeMode,
    StagePolicy,
)
from api_schemas.training import Fp8WeightStorage, PipeEngineP2P, TpOverlapEngine, TrainingSpec
from models.catalog.presets import DATA_DIR
from models.core.layer_kinds import attention_kind, has_routed_experts
from models.core.pipeline import schedule_traits
from models.core.runtime_features import effective_features
from models.core.traffic.context import head_dims
from models.errors import InvalidSpecError

RELEASED = ("megatron-lm", "torchtitan", "deepspeed")
"""Framework ids with a capability table, in the order plans list them."""

DESCRIPTORS = ("mesh:", "model:", "precision:", "recompute:any")
"""Feature prefixes that describe a plan for the forbidden-combination rules but are not
capabilities a framework must list."""
FP32_GRADS_OVER_16BIT = "precision:fp32_grads_over_16bit"
"""Descriptor: gradients accumulated in fp32 over 16-bit weights (`grad_dtype` fp32 with a
bf16 or fp16 `param_dtype`): Megatron-LM's main gradients, torchtitan's fp32 reduce, and in
DeepSpeed `data_types.grad_accum_dtype`, which only an optimizer wrapper (ZeRO, or
BF16Optimizer at ZeRO stage 1) can hold."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Feature:
    """One capability of one framework."""

    since: str
    """Earliest release known to provide it (the reference release where earlier ones were
    not checked)."""
    how: str
    """The argument, key or class that expresses it."""
    experimental: str = ""
    """Why the framework's feature is not yet a common path (empty: it is one)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Forbidden:
    """A combination of features a framework rejects or cannot run together."""

    features: frozenset[str]
    reason: str
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Framework:
    """One framework's capability table."""

    id: str
    name: str
    reference_release: str
    source: str
    features: dict[str, Feature]
    forbidden: tuple[Forbidden, ...]
    pipe_engine_p2p: PipeEngineP2P | None = None
    """How the framework's own pipeline engine moves stage-boundary tensors, when it is
    DeepSpeed's blocking engine (`TrainingSpec.pipe_engine_p2p`): a trait of every plan with
    PP > 1 on it, not a choice; None: the framework runs Megatron-style schedules whose
    transfer is the latency between neighbouring stages."""
    pipe_engine_source: str = ""
    """Where `pipe_engine_p2p` is read from (file and lines at a named release)."""
    bf16_optimizer_stage: int | None = None
    """The ZeRO stage at which the framework runs bf16 weights with fp32 gradient
    accumulation through its own bf16 optimizer wrapper (DeepSpeed's BF16_Optimizer at stage
    1): a full fp32 gradient buffer beside each parameter's bf16 `.grad`, an fp32 add of the
    two after every backward (`TrainingSpec.bf16_hp_grad_update`) and the gradient reduction
    after the last backward, not overlapped with it. None: the framework has no such
    wrapper."""
    bf16_optimizer_source: str = ""
    """Where `bf16_optimizer_stage` is read from (files and functions at a named release)."""
    offload_grad_buffers: bool = False
    """Whether the framework's offloaded optimizer at ZeRO 1-2 accumulates the gradients
    through per-parameter host buffers (`TrainingSpec.offload_grad_buffers`, DeepSpeed's
    ZeRO-Offload): a trait of its plans, not a choice; False: it keeps them on the GPU
    (Megatron Core's CPU optimizer)."""
    offload_grad_buffers_source: str = ""
    """Where `offload_grad_buffers` is read from (file and functions at a named release)."""
    tp_overlap_engine: TpOverlapEngine | None = None
    """The runtime behind the framework's `overlap_tp_comm` where it is not Transformer
    Engine's userbuffers (`TrainingSpec.tp_overlap_engine`: torchtitan's async TP): a trait
    of its plans, not a choice; None: userbuffers, or no TP overlap at all."""
    tp_overlap_engine_source: str = ""
    """Where `tp_overlap_engine` is read from (file and function at a named release)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fit:
    """A framework that runs a configuration as given, from `version` on."""

    framework: str
    name: str
    version: str
    features: dict[str, str]
    """Each capability the configuration uses -> the release that provides it."""


def version_key(version: str) -> tuple[int, ...]:
    """A release name as comparable numbers: 'core_v0.14.0' -> (0, 14, 0), 'v0.2.2' ->
    (0, 2, 2)."""
    numbers = re.findall(r"\d+", version)
    if not numbers:
        raise InvalidSpecError(f"'{version}' is not a release version (e.g. 'core_v0.14.0', "
                               "'v0.2.2', '0.19.8')", field="constraints.framework_version")
    return tuple(int(n) for n in numbers)


def _framework(fid: str, entry: dict[str, Any]) -> Framework:
    return Framework(
        id=fid, name=entry["name"], reference_release=entry["reference_release"],
        source=entry["source"],
        features={name: Feature(since=f["since"], how=f["how"],
                                experimental=f.get("experimental", ""))
                  for name, f in entry["features"].items()},
        forbidden=tuple(Forbidden(features=frozenset(r["all"]), reason=r["reason"],
                                  source=r["source"]) for r in entry["forbidden"]),
        pipe_engine_p2p=(PipeEngineP2P(entry["pipe_engine_p2p"]["value"])
                         if "pipe_engine_p2p" in entry else None),
        pipe_engine_source=entry.get("pipe_engine_p2p", {}).get("source", ""),
        bf16_optimizer_stage=entry.get("bf16_optimizer", {}).get("zero_stage"),
        bf16_optimizer_source=entry.get("bf16_optimizer", {}).get("source", ""),
        offload_grad_buffers="offload_grad_buffers" in entry,
        offload_grad_buffers_source=entry.get("offload_grad_buffers", {}).get("source", ""),
        tp_overlap_engine=(TpOverlapEngine(entry["tp_overlap_engine"]["value"])
                           if "tp_overlap_engine" in entry else None),
        tp_overlap_engine_source=entry.get("tp_overlap_engine", {}).get("source", ""))


@dataclass(frozen=True, slots=True)
class FrameworkCatalog:
    """The packaged frameworks table (data/frameworks.json), read once at import."""

    frameworks: dict[str, Framework]
    """Every released framework's capability table, by id."""
    extension_origins: dict[str, str]
    """Where each feature beyond the released frameworks comes from (paper or system)."""

    @classmethod
    def load(cls) -> "FrameworkCatalog":
        """The catalog read from the packaged table."""
        with (DATA_DIR / "frameworks.json").open(encoding="utf-8") as handle:
            table: dict[str, Any] = json.load(handle)
        return cls(frameworks={fid: _framework(fid, entry)
                               for fid, entry in table["frameworks"].items()},
                   extension_origins={name: entry["origin"]
                                      for name, entry in table["extensions"].items()})


CATALOG = FrameworkCatalog.load()
"""The frameworks catalog of this process."""


def frameworks() -> dict[str, Framework]:
    """Every released framework's capability table, by id (`CATALOG`)."""
    return CATALOG.frameworks


def extension_origins() -> dict[str, str]:
    """Where each feature beyond the released frameworks comes from (paper or system)."""
    return CATALOG.extension_origins


def _policy_features(policy: StagePolicy) -> set[str]:
    out: set[str] = set()
    recompute = policy.recompute
    if isinstance(recompute, FullLayers):
        if recompute.full_layers:
            out.add("recompute:full_layers")
        if recompute.others == "selective":
            out.add("recompute:full_layers+selective" if recompute.full_layers
                    else "recompute:selective")
    elif recompute == RecomputeMode.FULL:
        out.add("recompute:full")
    elif recompute == RecomputeMode.SELECTIVE:
        out.add("recompute:selective")
    selective = recompute == RecomputeMode.SELECTIVE or (
        isinstance(recompute, FullLayers) and recompute.others == "selective")
    if selective and tuple(policy.recompute_modules) != DEFAULT_RECOMPUTE_MODULES:
        out.add("recompute:selective_modules")
    if out:
        out.add("recompute:any")
    if policy.fp8_activations:
        out.add("fp8_activation_storage")
    if policy.offload_frac > 0:
        out.add("activation_offload")
    return out


def _layer_split_features(parallel: ParallelConfig) -> set[str]:
    split = parallel.layers_per_stage
    if split is None or len(set(split)) <= 1:
        return set()
    middle = split[1:-1]
    if len(set(middle)) <= 1:
        return {"uneven_layers"}
    return {"uneven_layers", "uneven_layers:middle"}


def mesh_features(spec: ModelSpec, training: TrainingSpec, *, tp: int, pp: int, dp: int,
                  cp: int, ep: int, etp: int, vpp: int, schedule: PipelineSchedule,
                  sequence_parallel: bool, cp_kind: ContextParallelKind,
                  ulysses_degree: int | None = None) -> set[str]:
    """The features of a mesh, schedule and recipe (no ZeRO stage or activation policy),
    with the runtime features the recipe turns on (`models.core.runtime_features`)."""
    out: set[str] = set()
    if pp > 1:
        out |= {"pp", f"schedule:{_schedule_run(schedule, vpp).value}"}
    if tp > 1:
        out |= {"tp", "sequence_parallel" if sequence_parallel else "tp_without_sp"}
    if cp > 1:
        kind = effective_cp_kind(cp, cp_kind, ulysses_degree)
        out.add(f"cp:{kind.value}")
        if _ulysses_replicates_kv(spec, tp, cp, kind, ulysses_degree):
            out.add("mesh:ulysses_kv_replicated")
    if has_routed_experts(spec):
        out.add("moe")
        if ep > 1:
            out.add("ep")
            if tp > 1:
                out.add("ep_with_tp")
        if etp > 1:
            out.add("etp")
    if (training.param_dtype in (DType.BF16, DType.FP16)
            and training.grad_dtype == DType.FP32):
        out.add(FP32_GRADS_OVER_16BIT)
    if training.compute_dtype == DType.FP8:
        out.add("fp8_compute")
        if training.fp8_weight_storage == Fp8WeightStorage.FP8_ONLY:
            out.add("fp8_weight_storage")
    out |= effective_features(training, moe=has_routed_experts(spec), tp=tp, dp=dp, ep=ep,
                              sequence_parallel=sequence_parallel)
    if sum([d > 1 for d in (dp, tp, pp, cp)]) > 1:
        out.add("mesh:multi_dim")
    if spec.name.lower().startswith("qwen3"):
        out.add("model:qwen3")
    if spec.attention_sinks:
        out.add("model:attention_sinks")
    out |= _attention_features(spec)
    return out


def _schedule_run(schedule: PipelineSchedule, vpp: int) -> PipelineSchedule:
    """The schedule that runs: a looped schedule with one chunk per rank is plain 1F1B
    (Megatron-LM runs it so without --num-layers-per-virtual-pipeline-stage)."""
    if schedule_traits(schedule).fixed_chunks is None and vpp == 1:
        return PipelineSchedule.ONE_F_ONE_B
    return schedule


FEW_MICRO_BATCHES = "schedule:1f1b:few_micro_batches"
"""The capability of running 1F1B with fewer micro-batches than pipeline stages."""


def micro_batch_features(schedule: PipelineSchedule, *, pp: int, vpp: int,
                         num_micro_batches: int) -> set[str]:
    """The features of a pipeline's micro-batch count: `FEW_MICRO_BATCHES` where 1F1B runs
    fewer micro-batches than stages (m < p), which Megatron-LM core_v0.14.0
    (`forward_backward_pipelining_without_interleaving`, warm-up min(p - rank - 1, m)) and
    DeepSpeed 0.19.8 (`TrainSchedule`, any micro-batch count) run and torch's
    `Schedule1F1B` refuses (its `__init__` raises for n_microbatches < stages, so torchtitan
    cannot)."""
    if pp > 1 and num_micro_batches < pp and \
            _schedule_run(schedule, vpp) == PipelineSchedule.ONE_F_ONE_B:
        return {FEW_MICRO_BATCHES}
    return set()


def effective_cp_kind(cp: int, cp_kind: ContextParallelKind,
                      ulysses_degree: int | None) -> ContextParallelKind:
    """The context-parallel kind that runs: USP whose Ulysses group is all of CP is Ulysses,
    USP with a Ulysses degree of 1 is the ring (Transformer Engine v2.9 and v2.14
    `context_parallel.py: attn_forward_func_with_cp` switches a2a+p2p to a2a or p2p when one
    of its two groups has one rank, and checks that type)."""
    if cp_kind != ContextParallelKind.USP:
        return cp_kind
    if ulysses_degree is None or ulysses_degree <= 1:
        return ContextParallelKind.RING
    if ulysses_degree >= cp:
        return ContextParallelKind.ULYSSES
    return cp_kind


def _ulysses_replicates_kv(spec: ModelSpec, tp: int, cp: int, kind: ContextParallelKind,
                           ulysses_degree: int | None) -> bool:
    """Whether the Ulysses all-to-all would need copies of KV heads: the KV heads of a TP
    rank (`models.core.traffic.context.head_dims`: every query head's own under MLA) are not a
    multiple of the Ulysses degree
    (`models.core.mesh.rules_shape.ulysses_heads` warns; Transformer Engine refuses it)."""
    if kind == ContextParallelKind.ULYSSES:
        degree = cp
    elif kind == ContextParallelKind.USP and ulysses_degree is not None:
        degree = ulysses_degree
    else:
        return False
    return head_dims(spec, tp).kv_heads % degree != 0


def _attention_features(spec: ModelSpec) -> set[str]:
    """The attention shapes that decide which context-parallel kernels can run a model: MLA
    (query-key heads wider than value heads), sliding windows and attention chunks (masks
    other than plain causal), each present in at least one layer."""
    out: set[str] = set(attention_kind(spec).framework_features)
    if spec.sliding_window is not None and spec.sliding_window_layers != ():
        out.add("model:sliding_window")
    if spec.attention_chunk_size is not None and spec.chunked_attention_layers != ():
        out.add("model:chunked_attention")
    return out


def plan_features(spec: ModelSpec, training: TrainingSpec,
                  parallel: ParallelConfig) -> frozenset[str]:
    """The features a configuration uses, in the vocabulary of `frameworks.json`."""
    p = parallel
    out = mesh_features(spec, training, tp=p.tp, pp=p.pp, dp=p.dp, cp=p.cp, ep=p.ep,
                        etp=p.etp, vpp=p.vpp, schedule=p.schedule,
                        sequence_parallel=p.sequence_parallel, cp_kind=p.cp_kind,
                        ulysses_degree=p.ulysses_degree)
    out |= _layer_split_features(parallel)
    out |= micro_batch_features(p.schedule, pp=p.pp, vpp=p.vpp, num_micro_batches=(
        p.num_micro_batches or training.global_batch_size // (p.micro_batch_size * p.dp)))
    out.add(f"zero:{parallel.zero_stage}")
    if parallel.fsdp:
        out.add("fsdp")
    if parallel.gradient_host_shards:
        out.add("gradient_host_shards")
    if parallel.remote_activation_offload:
        out.add("remote_activation_offload")
    out |= optimizer_offload_features(parallel.optimizer_offload_frac)
    policies = [parallel.policy_of(stage) for stage in range(parallel.pp)]
    for policy in policies:
        out |= _policy_features(policy)
    if any(policy != policies[0] for policy in policies):
        out.add("recompute:per_stage")
    return frozenset(out)


def optimizer_offload_features(share: float) -> set[str]:
    """The features of keeping `share` of a rank's optimizer states in host memory with a
    CPU optimizer step: 'optimizer_offload', and 'optimizer_offload:partial' for a share
    below 1 (Megatron-LM's --optimizer-offload-fraction; DeepSpeed's offload_optimizer moves
    the whole ZeRO shard)."""
    if share <= 0:
        return set()
    return {"optimizer_offload"} if share >= 1 else {"optimizer_offload",
                                                     "optimizer_offload:partial"}


def capabilities(features: frozenset[str]) -> frozenset[str]:
    """The features a framework must list (descriptors removed)."""
    return frozenset([f for f in features if not f.startswith(DESCRIPTORS)])


def blockers(framework: Framework, features: frozenset[str], *,
             max_version: str | None = None) -> list[str]:
    """Why `framework` cannot run a configuration using `features` (empty when it can);
    `max_version` excludes features added after that release."""
    return list(_blockers(framework.id, features, max_version))


def _blockers(framework_id: str, features: frozenset[str],
              max_version: str | None) -> tuple[str, ...]:
    framework = frameworks()[framework_id]
    out = []
    for feature in sorted(capabilities(features)):
        known = framework.features.get(feature)
        if known is None:
            out.append(f"{framework.name} {framework.reference_release} has no '{feature}'")
        elif max_version is not None and version_key(known.since) > version_key(max_version):
            out.append(f"'{feature}' needs {framework.name} {known.since}, after {max_version}")
    for rule in framework.forbidden:
        if rule.features <= features:
            out.append(f"{framework.name}: {rule.reason} ({rule.source})")
    return tuple(out)


def fit_of(framework: Framework, features: frozenset[str]) -> Fit:
    """The release from which `framework` runs a configuration (callers check `blockers`
    first)."""
    used = {f: framework.features[f].since for f in sorted(capabilities(features))}
    version = max(used.values(), key=version_key, default=framework.reference_release)
    return Fit(framework=framework.id, name=framework.name, version=version, features=used)


def runs_on(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig) -> list[Fit]:
    """The released frameworks that run a configuration as given, each with the release
    that adds the last feature it needs."""
    features = plan_features(spec, training, parallel)
    return [fit_of(fw, features) for fw in frameworks().values() if not blockers(fw, features)]


def extensions_used(features: frozenset[str]) -> dict[str, str]:
    """Features no released framework provides, each with where it comes from."""
    released = set().union(*(fw.features for fw in frameworks().values()))
    origins = extension_origins()
    return {f: origins.get(f, "this planner's cost model") for f in sorted(capabilities(features))
            if f not in released}


__all__ = [
    "CATALOG",
    "FEW_MICRO_BATCHES",
    "FP32_GRADS_OVER_16BIT",
    "FrameworkCatalog",
    "RELEASED",
    "Feature",
    "Fit",
    "Forbidden",
    "Framework",
    "blockers",
    "capabilities",
    "extension_origins",
    "extensions_used",
    "fit_of",
    "frameworks",
    "mesh_features",
    "micro_batch_features",
    "optimizer_offload_features",
    "plan_features",
    "runs_on",
    "version_key",
]
