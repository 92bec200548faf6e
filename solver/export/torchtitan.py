"""A plan as a torchtitan job config in the TOML era.

Owns: the torchtitan keys this exporter may write (`TORCHTITAN_KEYS`), the map from our
schedule names to `torch.distributed.pipelining` schedule keys (`TORCHTITAN_SCHEDULES`), the
translation of degrees, batch, ZeRO stage, activation checkpointing and FP8 into
`[training]`, `[parallelism]`, `[activation_checkpoint]` and `[quantize.linear.float8]`.
What torchtitan cannot run becomes a TOML comment and a note. Must not:
name torchtitan model flavors (the plan does not know them) or size anything.

Target: torchtitan v0.2.2 (2026-02-20), the last release configured by TOML files
(`torchtitan/config/job_config.py`); torchtitan replaced TOML with Python dataclass configs
on 2026-02-23 (PR #2386). Schedule names resolve through
`torch.distributed.pipelining.schedules.get_schedule_class`, case-insensitively.
"""

import logging
import math
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.parallel import (
    ContextParallelKind,
    FullLayers,
    ParallelConfig,
    PipelineSchedule,
    RecomputeMode,
)
from api_schemas.training import Fp8WeightStorage, MoeDispatcher, OptimizerKind, TrainingSpec
from models.core.frameworks import micro_batch_features
from models.core.layer_kinds import has_routed_experts
from models.core.layout import virtual_stage_sizes
from models.core.pipeline import SCHEDULES, schedule_traits
from models.core.runtime_features import dispatcher
from solver.export.common import batch_shape, rank_layer_counts, unified_policy
from solver.export.toml_text import Entry, render_toml

logger = logging.getLogger(__name__)

S = PipelineSchedule
TORCHTITAN_VERSION = "v0.2.2"

TORCHTITAN_SCHEDULES: dict[PipelineSchedule, str] = {
    name: traits.exports.torchtitan for name, traits in SCHEDULES.items()
}
"""`get_schedule_class` keys (PyTorch `torch/distributed/pipelining/schedules.py`), from
each schedule's record; a schedule torch lacks maps to its nearest class, with a note."""

TORCHTITAN_KEYS: frozenset[str] = frozenset({
    "model.converters",
    "training.local_batch_size", "training.global_batch_size", "training.seq_len",
    "training.dtype", "training.mixed_precision_param", "training.mixed_precision_reduce",
    "parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree",
    "parallelism.fsdp_reshard_after_forward", "parallelism.tensor_parallel_degree",
    "parallelism.enable_async_tensor_parallel", "parallelism.pipeline_parallel_degree",
    "parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_microbatch_size",
    "parallelism.module_fqns_per_model_part",
    "parallelism.pipeline_parallel_expert_parallel_overlap",
    "parallelism.context_parallel_degree", "parallelism.context_parallel_rotate_method",
    "parallelism.expert_parallel_degree", "parallelism.expert_tensor_parallel_degree",
    "parallelism.expert_parallel_comm_backend",
    "activation_checkpoint.mode", "activation_checkpoint.selective_ac_option",
    "compile.enable", "compile.components",
    "quantize.linear.float8.recipe_name", "quantize.linear.float8.enable_fsdp_float8_all_gather",
    "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
    "quantize.linear.float8.filter_fqns", "quantize.grouped_mm.float8.fqns",
})
"""Every dotted key this exporter may write; each is a field of torchtitan v0.2.2
`JobConfig`."""

@dataclass(frozen=True, slots=True, kw_only=True)
class TorchtitanExport:
    """The TOML text and the notes on what it leaves out."""

    toml: str
    notes: tuple[str, ...]


def torchtitan_export(spec: ModelSpec, training: TrainingSpec,
                      parallel: ParallelConfig) -> TorchtitanExport:
    """TOML and notes of one plan (see `torchtitan_toml`).

    Raises:
        InvalidSpecError: the batch is not a whole number of micro-batches per replica, or
            `layers_per_stage` does not add up to the model's layers.
    """
    notes: list[str] = []
    sections: dict[str, list[Entry]] = {
        "model": _model_entries(spec, training),
        "training": _training_entries(training, parallel, notes),
        "parallelism": _parallelism_entries(spec, training, parallel, notes),
        "activation_checkpoint": _checkpoint_entries(spec, parallel, notes),
    }
    if parallel.tp > 1 and training.overlap_tp_comm:
        sections["compile"] = [Entry(key="enable", value=True,
                                     comment="async TP takes effect only when compiled"),
                               Entry(key="components", value=["model", "loss"])]
    if training.compute_dtype == DType.FP8:
        sections.update(_float8_sections(spec, training, parallel, notes))
    notes += _unsupported_notes(spec, training, parallel)
    text = render_toml(header=_header(spec), sections=sections)
    logger.debug("torchtitan export: %d sections, %d notes", len(sections), len(notes))
    return TorchtitanExport(toml=text, notes=tuple(notes))


def torchtitan_toml(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig) -> str:
    """The torchtitan (v0.2.2, TOML era) job config of a plan.

    Args:
        spec: the LLM architecture.
        training: batch, sequence and precision recipe.
        parallel: the plan's parallel configuration.

    Returns:
        TOML text with `[model]`, `[training]`, `[parallelism]`, `[activation_checkpoint]`
        and, for FP8 compute, `[quantize.linear.float8]`; settings torchtitan cannot run are
        stated in comments. Only keys in `TORCHTITAN_KEYS` are written.

    Raises:
        InvalidSpecError: the batch does not divide into micro-batches, or the layer split
            does not add up.
    """
    return torchtitan_export(spec, training, parallel).toml


def torchtitan_notes(spec: ModelSpec, training: TrainingSpec,
                     parallel: ParallelConfig) -> list[str]:
    """What the plan asks for that the torchtitan config cannot say (same arguments)."""
    return list(torchtitan_export(spec, training, parallel).notes)


def _header(spec: ModelSpec) -> list[str]:
    return [
        f"torchtitan job config for {spec.name!r}, written by atlas-planner from a",
        "deterministic cost-model plan (a model, not a measurement).",
        f"Assumes torchtitan {TORCHTITAN_VERSION} (2026-02-20), the last release configured by",
        "TOML files (torchtitan/config/job_config.py); later releases use Python dataclasses.",
        "Pipeline schedule names are torch.distributed.pipelining get_schedule_class keys.",
        "Set [model] name, flavor and hf_assets_path, [optimizer] and the data by hand.",
    ]


def _model_entries(spec: ModelSpec, training: TrainingSpec) -> list[Entry]:
    if training.compute_dtype != DType.FP8:
        return []
    converters = ["quantize.linear.float8"]
    if spec.moe is not None:
        converters.append("quantize.grouped_mm.float8")
    return [Entry(key="converters", value=converters)]


def _training_entries(training: TrainingSpec, parallel: ParallelConfig,
                      notes: list[str]) -> list[Entry]:
    shape = batch_shape(training, parallel)
    if parallel.pp > 1:
        local, comment = shape.micro_batch_size * shape.num_micro_batches, (
            f"{shape.num_micro_batches} pipeline micro-batches of "
            f"{shape.micro_batch_size} per step")
    else:
        local, comment = shape.micro_batch_size, (
            f"{shape.num_micro_batches} gradient-accumulation steps per optimizer step")
    pure_bf16 = training.master_dtype is None and training.param_dtype == DType.BF16
    if training.master_dtype is None and not pure_bf16:
        notes.append("master_dtype=null with a non-bf16 param_dtype has no torchtitan form "
                     "(training.dtype is bfloat16 or float32); exported with fp32 master weights")
    if pure_bf16 and training.optimizer_state_dtype != DType.BF16:
        notes.append("master_dtype=null is exported as training.dtype='bfloat16', which also "
                     f"keeps optimizer states in bf16 (planned: {training.optimizer_state_dtype})")
    if not pure_bf16 and training.optimizer_state_dtype != DType.FP32:
        notes.append(f"optimizer_state_dtype='{training.optimizer_state_dtype}' with fp32 master "
                     "weights has no torchtitan setting; optimizer states stay fp32")
    if training.param_dtype not in (DType.BF16, DType.FP32):
        notes.append(f"param_dtype='{training.param_dtype}': torchtitan's mixed precision takes "
                     "bfloat16 or float32; exported as bfloat16")
    if training.grad_dtype != DType.FP32 and not pure_bf16:
        notes.append(f"grad_dtype='{training.grad_dtype}': torchtitan reduces gradients in "
                     "float32 only; exported as float32")
    return [
        Entry(key="local_batch_size", value=local, comment=comment),
        Entry(key="global_batch_size", value=shape.global_batch_size),
        Entry(key="seq_len", value=training.sequence_length),
        Entry(key="dtype", value="bfloat16" if pure_bf16 else "float32"),
        Entry(key="mixed_precision_param",
              value="float32" if training.param_dtype == DType.FP32 else "bfloat16"),
        Entry(key="mixed_precision_reduce", value="float32"),
    ]


def _parallelism_entries(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                         notes: list[str]) -> list[Entry]:
    entries = _data_parallel_entries(spec, parallel, notes)
    entries += [Entry(key="tensor_parallel_degree", value=parallel.tp)]
    if parallel.tp > 1:
        entries.append(Entry(key="enable_async_tensor_parallel",
                             value=bool(training.overlap_tp_comm)))
        if not parallel.sequence_parallel:
            notes.append("sequence_parallel=false: torchtitan's tensor parallelism always shards "
                         "norms and dropout along the sequence (Megatron-style SP), so "
                         "activations take less memory than planned")
    entries += _pipeline_entries(spec, parallel)
    entries.append(Entry(key="context_parallel_degree", value=parallel.cp))
    if parallel.cp > 1:
        entries.append(Entry(key="context_parallel_rotate_method", value="alltoall",
                             comment="ring rotation of K/V shards"))
        if parallel.cp_kind != ContextParallelKind.RING:
            notes.append(f"cp_kind='{parallel.cp_kind}': torchtitan {TORCHTITAN_VERSION} has "
                         "ring-style context parallelism only; exported as ring (alltoall "
                         "rotation); Ulysses needs a framework extension")
    if spec.moe is not None:
        entries += [Entry(key="expert_parallel_degree", value=parallel.ep),
                    Entry(key="expert_tensor_parallel_degree", value=parallel.etp)]
        # torchtitan v0.2.2 models/moe/moe.py MoEArgs.score_func (default "sigmoid"); its
        # deepseek_v3 flavors "16B" and "236B" say "softmax", "671B" "sigmoid".
        notes.append(f"the router scores experts by {spec.moe.router_score_function.value}: "
                     "torchtitan sets this in the model flavor (MoEArgs.score_func), not in "
                     "the job config; check the chosen flavor says the same")
        if parallel.ep > 1 and dispatcher(training) == MoeDispatcher.DEEPEP:
            entries.append(Entry(key="expert_parallel_comm_backend", value="deepep",
                                 comment="DeepEP kernels (DeepEP installed)"))
        if parallel.ep > 1 and parallel.etp not in (1, parallel.tp):
            notes.append(f"etp={parallel.etp}: torchtitan supports expert tensor parallelism "
                         f"equal to 1 or to tp={parallel.tp} only")
    return entries


def _data_parallel_entries(spec: ModelSpec, parallel: ParallelConfig,
                           notes: list[str]) -> list[Entry]:
    """ZeRO stage -> DDP replicas or FSDP2 shards (torchtitan has no ZeRO-1/2 proper)."""
    dp, zero = parallel.dp, parallel.zero_stage
    expert_room = parallel.cp * parallel.tp // parallel.etp
    if zero == 0 and not (spec.moe is not None and expert_room % parallel.ep):
        return [Entry(key="data_parallel_replicate_degree", value=dp),
                Entry(key="data_parallel_shard_degree", value=1, comment="DDP (zero_stage 0)")]
    if zero == 3:
        return [Entry(key="data_parallel_replicate_degree", value=1),
                Entry(key="data_parallel_shard_degree", value=dp),
                Entry(key="fsdp_reshard_after_forward", value="always",
                      comment="ZeRO-3: parameters gathered per layer in forward and backward")]
    if zero == 0:
        notes.append(f"zero_stage=0 with ep={parallel.ep}: torchtitan builds the expert mesh "
                     "inside data_parallel_shard x cp x tp, so the data-parallel ranks are "
                     "exported as FSDP2 shards (less memory, more traffic than planned)")
    else:
        notes.append(f"zero_stage={zero}: torchtitan has no ZeRO-{zero}; exported as FSDP2 "
                     "without resharding after forward, which also shards parameters outside "
                     "forward/backward (less memory, more all-gather traffic than planned)")
    return [Entry(key="data_parallel_replicate_degree", value=1),
            Entry(key="data_parallel_shard_degree", value=dp),
            Entry(key="fsdp_reshard_after_forward", value="never",
                  comment=f"nearest to ZeRO-{zero}")]


def _pipeline_entries(spec: ModelSpec, parallel: ParallelConfig) -> list[Entry]:
    entries = [Entry(key="pipeline_parallel_degree", value=parallel.pp)]
    if parallel.pp == 1:
        return entries
    schedule = parallel.schedule
    traits = schedule_traits(schedule)
    if traits.fixed_chunks is None and parallel.vpp == 1:
        traits = schedule_traits(S.ONE_F_ONE_B)
    sizes = (rank_layer_counts(spec, parallel) if traits.num_pipes == 2
             else virtual_stage_sizes(spec, parallel))
    entries += [
        Entry(key="pipeline_parallel_schedule", value=traits.exports.torchtitan,
              comment=traits.exports.torchtitan_note),
        Entry(key="pipeline_parallel_microbatch_size", value=parallel.micro_batch_size),
        Entry(key="module_fqns_per_model_part", value=module_fqns(sizes),
              comment=f"layers per virtual stage: {sizes}"),
    ]
    if traits.overlapped_pairs and traits.exports.torchtitan_fallback == "" and (
            spec.moe is not None and parallel.ep > 1):
        entries.append(Entry(key="pipeline_parallel_expert_parallel_overlap", value=True,
                             comment="overlap expert all-to-all with the paired chunk"))
    return entries


def module_fqns(sizes: list[int]) -> list[list[str]]:
    """Module names of each virtual stage for torchtitan's decoder models.

    The first stage holds `tok_embeddings`, the last `norm` and `output`; stage i holds its
    `layers.<index>` in order.
    """
    parts: list[list[str]] = []
    start = 0
    for size in sizes:
        parts.append([f"layers.{index}" for index in range(start, start + size)])
        start += size
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


def _checkpoint_entries(spec: ModelSpec, parallel: ParallelConfig,
                        notes: list[str]) -> list[Entry]:
    unified = unified_policy(parallel, framework="torchtitan")
    notes += unified.notes
    recompute = unified.policy.recompute
    if isinstance(recompute, FullLayers):
        if recompute.others == "selective" and recompute.full_layers:
            notes.append("recompute with full layers plus selective on the rest: torchtitan has "
                         "one mode; only the full-layer part is exported")
        most = max(rank_layer_counts(spec, parallel))
        if recompute.full_layers == 0:
            recompute = RecomputeMode(recompute.others)
        elif recompute.full_layers >= most:
            recompute = RecomputeMode.FULL
        else:
            every = max(1, most // recompute.full_layers)
            notes.append(f"recompute full_layers={recompute.full_layers}: torchtitan checkpoints "
                         f"every n-th layer; n={every} recomputes {math.ceil(most / every)} of "
                         f"{most} layers on the fullest rank (at least the planned number)")
            if every == 1:
                return [Entry(key="mode", value="full")]
            return [Entry(key="mode", value="selective"),
                    Entry(key="selective_ac_option", value=str(every),
                          comment="full recompute of every n-th layer")]
    if recompute == RecomputeMode.FULL:
        return [Entry(key="mode", value="full")]
    if recompute == RecomputeMode.SELECTIVE:
        notes.append("selective recompute is exported as torchtitan's per-op policy ('op'), "
                     "which saves matmul and attention outputs and recomputes the rest; it is "
                     "not module-level --recompute-modules, so memory differs from the plan")
        return [Entry(key="mode", value="selective"),
                Entry(key="selective_ac_option", value="op")]
    return [Entry(key="mode", value="none")]


def _float8_sections(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                     notes: list[str]) -> dict[str, list[Entry]]:
    sharded = parallel.zero_stage >= 1 and parallel.dp > 1
    fp8_gather = training.fp8_weight_storage == Fp8WeightStorage.FP8_ONLY and sharded
    recipe = "tensorwise" if fp8_gather else "rowwise"
    notes.append(f"compute_dtype='fp8' is exported as torchao float8 '{recipe}' scaling; the "
                 "DeepSeek-V3 block-wise recipe is not among torchtitan's float8 recipes")
    filters = ["output"] + (["router.gate"] if spec.moe is not None else [])
    # torchtitan v0.2.2 rejects enable_fsdp_float8_all_gather together with recipe_name
    # (FP8 all-gather is a tensorwise-only feature, and tensorwise is the default recipe).
    recipe_entry = [] if fp8_gather else [Entry(key="recipe_name", value=recipe)]
    sections = {"quantize.linear.float8": [
        *recipe_entry,
        Entry(key="enable_fsdp_float8_all_gather", value=fp8_gather,
              comment="FP8 weights only: all-gather in FP8" if fp8_gather else ""),
        Entry(key="precompute_float8_dynamic_scale_for_fsdp", value=fp8_gather),
        Entry(key="filter_fqns", value=filters),
    ]}
    if spec.moe is not None:
        sections["quantize.grouped_mm.float8"] = [
            Entry(key="fqns", value=["experts"], comment="prototype in torchtitan v0.2.2")]
    return sections


def _unsupported_notes(spec: ModelSpec, training: TrainingSpec,
                       parallel: ParallelConfig) -> list[str]:
    notes = []
    stages = [parallel.policy_of(stage) for stage in range(parallel.pp)]
    if spec.num_mtp_layers:
        notes.append(f"{spec.num_mtp_layers} multi-token-prediction module(s): torchtitan "
                     f"{TORCHTITAN_VERSION} models have no MTP module; it needs a model extension")
    traits = schedule_traits(parallel.schedule)
    if traits.exports.torchtitan_fallback and parallel.pp > 1:
        notes.append(traits.exports.torchtitan_fallback)
    m = parallel.num_micro_batches or training.global_batch_size // (
        parallel.micro_batch_size * parallel.dp)
    if micro_batch_features(parallel.schedule, pp=parallel.pp, vpp=parallel.vpp,
                            num_micro_batches=m):
        notes.append(f"{m} micro-batches through {parallel.pp} pipeline stages: torch's "
                     "Schedule1F1B refuses fewer micro-batches than stages; Megatron-LM and "
                     "DeepSpeed run this plan; torchtitan needs at least as many (a smaller "
                     "pipeline_parallel_microbatch_size or a larger local batch)")
    if traits.exports.torchtitan == "DualPipeV" and any(
            policy.recompute != RecomputeMode.NONE for policy in stages):
        notes.append("torchtitan's DualPipeV expert-parallel overlap does not support "
                     "activation checkpointing in v0.2.2")
    if any(policy.fp8_activations for policy in stages):
        notes.append("FP8 storage of MLP/expert inputs has no torchtitan setting; it needs a "
                     "model extension")
    if any(policy.offload_frac > 0 for policy in stages):
        notes.append("activation offload to host has no torchtitan v0.2.2 setting for a "
                     "fraction of activations; it needs an extension")
    if parallel.gradient_host_shards:
        notes.append("Pipeline ZeRO-2 (gradient shards in host memory) has no torchtitan setting")
    if parallel.remote_activation_offload:
        notes.append("remote activation offload (stored activations in other pipeline ranks' "
                     "memory; Kimi K3) has no torchtitan setting; it needs an extension")
    if training.optimizer not in (OptimizerKind.ADAM, OptimizerKind.ADAMW):
        notes.append(f"optimizer='{training.optimizer}': set [optimizer] name by hand")
    if has_routed_experts(spec) and training.moe_grouped_gemm is False:
        notes.append(f"moe_grouped_gemm=false: torchtitan {TORCHTITAN_VERSION} has no "
                     "job-config key for MoEArgs.use_grouped_mm (on from compute capability "
                     "9.0), so the experts run as one torch._grouped_mm, faster than planned")
    if training.fused_cross_entropy:
        notes.append("torchtitan's loss is F.cross_entropy on fp32 logits (components/loss.py), "
                     "not a fused one: its backward holds about 8 x vocab bytes per token more, "
                     "and the allocator keeps the freed 16-bit logits (2 x vocab) reserved, on "
                     "the last stage than planned; plan with fused_cross_entropy=false")
    if parallel.tp > 1 and parallel.sequence_parallel and not (
            parallel.sequence_parallel_saves_gathered):
        notes.append("torchtitan's tensor parallelism (DTensor PrepareModuleInput to Replicate) "
                     "saves each column-parallel linear's all-gathered input for backward, "
                     "not its sequence shard; plan with sequence_parallel_saves_gathered=true")
    if parallel.norm_saves_output or training.memory_efficient_norm:
        notes.append("norm_saves_output=true (or memory_efficient_norm=true): torchtitan's "
                     "RMSNorm keeps its input for backward (no memory-efficient variant), so "
                     "each layer stores two more norm inputs than planned (memory "
                     "under-counted)")
    if parallel.pp > 1 and parallel.fsdp and not parallel.fsdp_defer_grad_sync:
        notes.append("torchtitan's FSDP2 pipeline stages reduce-scatter gradients only after "
                     "the last micro-batch and hold the stage's unsharded fp32 gradients until "
                     "then (torch pipelining); plan with fsdp_defer_grad_sync=true")
    return notes


__all__ = [
    "TORCHTITAN_KEYS",
    "TORCHTITAN_SCHEDULES",
    "TORCHTITAN_VERSION",
    "TorchtitanExport",
    "module_fqns",
    "torchtitan_export",
    "torchtitan_notes",
    "torchtitan_toml",
]
