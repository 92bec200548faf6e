"""A plan as a DeepSpeed config (the `ds_config.json` dictionary).

Owns: the DeepSpeed keys this exporter may write (`DEEPSPEED_KEYS`) and the translation of
batch, precision, ZeRO stage, activation checkpointing, AutoTP and AutoEP; what DeepSpeed
sets in model code (pipeline stages, which layers are checkpointed) or cannot do at all
becomes a note; a plan's optimizer offload (ZeRO-Offload of the whole ZeRO shard) is
written as `offload_optimizer`. Must not: size anything.

Target: DeepSpeed `docs/_pages/config-json.md`. `tensor_parallel.autotp_size` (AutoTP
training) needs DeepSpeed 0.16.4 or newer; `expert_parallel` (AutoEP) needs 0.19.2 or newer.
"""

import logging
from dataclasses import dataclass
from typing import Any

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.parallel import FullLayers, ParallelConfig, RecomputeMode
from api_schemas.training import OptimizerKind, PipeEngineP2P, TrainingSpec
from models.core.pipeline import schedule_traits
from models.core.runtime_features import grad_reduce_overlapped, grouped_gemm_on
from solver.export.common import batch_shape, rank_layer_counts, unified_policy

logger = logging.getLogger(__name__)

AUTOTP_MIN_VERSION = "0.16.4"
AUTOEP_MIN_VERSION = "0.19.2"

DEEPSPEED_KEYS: frozenset[str] = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "optimizer.type",
    "bf16.enabled", "bf16.bf16_master_weights_and_grads", "bf16.bf16_optimizer_states",
    "fp16.enabled", "data_types.grad_accum_dtype",
    "zero_optimization.stage", "zero_optimization.overlap_comm",
    "zero_optimization.contiguous_gradients",
    "zero_optimization.offload_optimizer.device", "zero_optimization.offload_optimizer.pin_memory",
    "activation_checkpointing.partition_activations",
    "activation_checkpointing.cpu_checkpointing",
    "activation_checkpointing.contiguous_memory_optimization",
    "activation_checkpointing.number_checkpoints",
    "tensor_parallel.autotp_size", "tensor_parallel.tp_overlap_comm",
    "expert_parallel.enabled", "expert_parallel.autoep_size", "expert_parallel.score_func",
    "expert_parallel.use_grouped_mm",
})
"""Every dotted key this exporter may write, each documented in DeepSpeed's config-json.md
(`expert_parallel.score_func` in DeepSpeed 0.19.8 `module_inject/auto_ep_config.py`
`parse_autoep_config`, which validates it against "auto", "softmax" and "sigmoid";
`expert_parallel.use_grouped_mm` in config-json.md of 0.19.2 and later)."""

_OPTIMIZER_TYPES: dict[OptimizerKind, str] = {
    OptimizerKind.ADAM: "Adam", OptimizerKind.ADAMW: "AdamW", OptimizerKind.SGD: "SGD",
    OptimizerKind.SGD_MOMENTUM: "SGD", OptimizerKind.MUON: "Muon",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class DeepSpeedExport:
    """The config dictionary and the notes on what it leaves out."""

    config: dict[str, Any]
    notes: tuple[str, ...]


def deepspeed_export(spec: ModelSpec, training: TrainingSpec,
                     parallel: ParallelConfig) -> DeepSpeedExport:
    """Config and notes of one plan (see `deepspeed_config`).

    Raises:
        InvalidSpecError: the batch is not a whole number of micro-batches per replica, or
            `layers_per_stage` does not add up to the model's layers.
    """
    shape = batch_shape(training, parallel)
    notes: list[str] = []
    config: dict[str, Any] = {
        "train_batch_size": shape.global_batch_size,
        "train_micro_batch_size_per_gpu": shape.micro_batch_size,
        "gradient_accumulation_steps": shape.num_micro_batches,
        "optimizer": {"type": _OPTIMIZER_TYPES[training.optimizer]},
    }
    config.update(_precision(training, parallel, notes))
    config["zero_optimization"] = _zero(training, parallel, notes)
    checkpointing = _activation_checkpointing(spec, parallel, notes)
    if checkpointing:
        config["activation_checkpointing"] = checkpointing
    config.update(_model_parallel(spec, training, parallel, notes))
    notes += _pipeline_notes(spec, parallel)
    notes += _pipe_engine_notes(training, parallel)
    notes += _unsupported_notes(training, parallel)
    logger.debug("deepspeed export: %d top-level keys, %d notes", len(config), len(notes))
    return DeepSpeedExport(config=config, notes=tuple(notes))


def deepspeed_config(spec: ModelSpec, training: TrainingSpec,
                     parallel: ParallelConfig) -> dict[str, Any]:
    """The DeepSpeed config dictionary of a plan (JSON-serialisable).

    `train_batch_size` = `train_micro_batch_size_per_gpu` x `gradient_accumulation_steps`
    x dp, as DeepSpeed asserts; with pipeline parallelism the accumulation steps are the
    pipeline's micro-batches. Optimizer offload of the whole shard is written as
    `zero_optimization.offload_optimizer` (a partial share is a note). Only keys in
    `DEEPSPEED_KEYS` appear.

    Args:
        spec: the LLM architecture.
        training: batch, sequence and precision recipe.
        parallel: the plan's parallel configuration.

    Raises:
        InvalidSpecError: the batch does not divide into micro-batches, or the layer split
            does not add up.
    """
    return deepspeed_export(spec, training, parallel).config


def deepspeed_notes(spec: ModelSpec, training: TrainingSpec,
                    parallel: ParallelConfig) -> list[str]:
    """What the plan asks for that the DeepSpeed config cannot say (same arguments)."""
    return list(deepspeed_export(spec, training, parallel).notes)


def _precision(training: TrainingSpec, parallel: ParallelConfig,
               notes: list[str]) -> dict[str, Any]:
    param = training.param_dtype
    if param == DType.FP16:
        return {"fp16": {"enabled": True}}
    if param != DType.BF16:
        if param != DType.FP32:
            notes.append(f"param_dtype='{param}' has no DeepSpeed precision mode; exported as fp32")
        return {}
    bf16: dict[str, Any] = {"enabled": True}
    config: dict[str, Any] = {"bf16": bf16}
    master, states = training.master_dtype, training.optimizer_state_dtype
    if master == DType.BF16 and states == DType.BF16 and parallel.zero_stage >= 1:
        bf16["bf16_master_weights_and_grads"] = True
        bf16["bf16_optimizer_states"] = True
    elif master not in (DType.FP32, None) or states != DType.FP32:
        notes.append(f"master_dtype='{master}', optimizer_state_dtype='{states}': DeepSpeed keeps "
                     "bf16 master weights on the GPU only together with bf16 optimizer states "
                     "and ZeRO >= 1; exported with fp32 master weights and states")
    if training.grad_dtype == DType.FP32:
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    return config


def _zero(training: TrainingSpec, parallel: ParallelConfig, notes: list[str]) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": parallel.zero_stage,
                            "overlap_comm": grad_reduce_overlapped(training)}
    if parallel.zero_stage >= 2:
        zero["contiguous_gradients"] = True
    if parallel.pp > 1 and parallel.zero_stage >= 2:
        notes.append(f"zero_stage={parallel.zero_stage} with pp={parallel.pp}: DeepSpeed's "
                     "PipelineEngine rejects ZeRO-2 and ZeRO-3; use zero_stage <= 1 or no "
                     "pipeline parallelism")
    offload = parallel.optimizer_offload_frac
    if offload >= 1.0 and parallel.zero_stage >= 1:
        # ZeRO-Offload (arXiv:2101.06840): the shard's optimizer states and the Adam step on
        # the CPU; pinned host buffers for the copies (config-json.md offload_optimizer).
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    elif offload > 0:
        notes.append(f"optimizer offload of {offload:.0%} of the states"
                     + (" with zero_stage=0" if parallel.zero_stage == 0 else "")
                     + ": DeepSpeed's offload_optimizer moves the whole ZeRO shard (stages "
                     "1-3), so it is not written")
    if parallel.gradient_host_shards:
        notes.append("Pipeline ZeRO-2 (gradient shards in host memory, two GPU buffers) has no "
                     "DeepSpeed key; offload_optimizer moves optimizer states, which is a "
                     "different plan, so it is not written")
    if parallel.remote_activation_offload:
        notes.append("remote activation offload (stored activations in other pipeline ranks' "
                     "memory; Kimi K3) has no DeepSpeed key; it needs an extension")
    return zero


def _activation_checkpointing(spec: ModelSpec, parallel: ParallelConfig,
                              notes: list[str]) -> dict[str, Any]:
    unified = unified_policy(parallel, framework="DeepSpeed")
    notes += unified.notes
    policy = unified.policy
    recompute = policy.recompute
    if policy.offload_frac > 0 and not isinstance(recompute, FullLayers) \
            and recompute != RecomputeMode.FULL:
        notes.append("activation offload without full recompute has no DeepSpeed key "
                     "(cpu_checkpointing offloads only checkpointed layer inputs)")
    full_layers: int | None
    most = max(rank_layer_counts(spec, parallel))
    if isinstance(recompute, FullLayers):
        full_layers = min(recompute.full_layers, most)
        if recompute.others == "selective":
            notes.append("selective recompute on the layers not fully recomputed has no "
                         "DeepSpeed key; those layers keep all their activations")
    elif recompute == RecomputeMode.FULL:
        full_layers = most
    else:
        if recompute == RecomputeMode.SELECTIVE:
            notes.append("selective (module-level) recompute has no DeepSpeed config key; "
                         "recompute the chosen modules in model code with "
                         "deepspeed.checkpointing.checkpoint")
        return {}
    if not full_layers:
        return {}
    offload_all = policy.offload_frac == 1.0
    if 0.0 < policy.offload_frac < 1.0:
        notes.append(f"activation offload fraction {policy.offload_frac:g} has no DeepSpeed "
                     "key; cpu_checkpointing offloads all checkpointed layer inputs, so it is "
                     "left off")
    notes.append(f"which layers are recomputed is set in model code: wrap the first "
                 f"{full_layers} transformer layer(s) of each pipeline stage with "
                 "deepspeed.checkpointing.checkpoint (PipelineModule: "
                 "activation_checkpoint_interval=1 for every layer)")
    return {
        "partition_activations": parallel.tp > 1 and parallel.sequence_parallel,
        "cpu_checkpointing": offload_all,
        "contiguous_memory_optimization": False,
        "number_checkpoints": full_layers,
    }


def _model_parallel(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                    notes: list[str]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if parallel.tp > 1:
        tensor: dict[str, Any] = {"autotp_size": parallel.tp}
        if training.overlap_tp_comm:
            tensor["tp_overlap_comm"] = True
        config["tensor_parallel"] = tensor
        notes.append(f"tensor_parallel.autotp_size (AutoTP training) needs DeepSpeed >= "
                     f"{AUTOTP_MIN_VERSION}; older releases have no such key")
        if parallel.sequence_parallel:
            notes.append("sequence_parallel=true: AutoTP has no Megatron-style sequence "
                         "parallelism, so norm and dropout activations are not split over tp "
                         "(more activation memory than planned); with recompute, "
                         "partition_activations splits the checkpointed layer inputs over tp")
    if spec.moe is not None and parallel.ep > 1:
        # AutoEP's "auto" score function reads the Hugging Face `scoring_func`, which Llama 4
        # lacks (its router is sigmoid); the spec says which one the model uses.
        config["expert_parallel"] = {"enabled": True, "autoep_size": parallel.ep,
                                     "score_func": spec.moe.router_score_function.value}
        if not grouped_gemm_on(training):
            # AutoEP's default is the grouped GEMM; the plan chose the per-expert loop.
            config["expert_parallel"]["use_grouped_mm"] = False
        notes.append(f"expert_parallel (AutoEP) needs DeepSpeed >= {AUTOEP_MIN_VERSION}; older "
                     "releases have no such key")
        if parallel.etp > 1:
            notes.append(f"etp={parallel.etp}: AutoEP accepts expert_tensor_parallel_size=1 "
                         "only; experts are not tensor-parallel in this config")
        if parallel.tp > 1:
            pipeline = ("; with this plan's pipeline it cannot yet be combined and needs a "
                        "framework extension") if parallel.pp > 1 else ""
            notes.append("AutoEP with AutoTP (autotp_size > 1) needs DeepSpeed 0.19.8's "
                         "AutoEP+AutoTP folding, which supports pp = 1 only and not with Ulysses "
                         f"sequence parallelism{pipeline}")
    return config


def _pipeline_notes(spec: ModelSpec, parallel: ParallelConfig) -> list[str]:
    if parallel.pp == 1:
        return []
    counts = rank_layer_counts(spec, parallel)
    notes = [f"pipeline parallelism is set in code, not in the config: "
             f"deepspeed.pipe.PipelineModule(num_stages={parallel.pp}, ...) with "
             f"{counts} transformer layers per stage; gradient_accumulation_steps is the "
             "pipeline's micro-batch count"]
    if len(set(counts)) > 1:
        notes.append("the layer split is uneven; PipelineModule's partition_method "
                     "('parameters', 'uniform', 'type:<regex>') balances automatically, so the "
                     "planned split needs a custom partition")
    if not schedule_traits(parallel.schedule).exports.deepspeed_native:
        notes.append(f"schedule '{parallel.schedule}': DeepSpeed's PipelineEngine runs its 1F1B "
                     "train schedule only; this schedule needs a framework extension")
    return notes


def _pipe_engine_notes(training: TrainingSpec, parallel: ParallelConfig) -> list[str]:
    """What the plan's step time assumed of the stage-boundary transfers, beside what
    DeepSpeed's PipelineEngine does with this config (no `pipeline` key written, so its
    defaults: `pipe_partitioned` and `grad_partitioned` true, deepspeed/runtime/config.py
    at v0.19.5; models/data/frameworks.json `pipe_engine_p2p`)."""
    if parallel.pp == 1:
        return []
    p2p = training.pipe_engine_p2p
    if p2p == PipeEngineP2P.DEEPSPEED_PARTITIONED:
        return ["stage-boundary transfers are timed as DeepSpeed's PipelineEngine runs them "
                "(pipe_engine_p2p='deepspeed_partitioned'): blocking sends and receives that "
                "hold both neighbouring stages, with tp > 1 as 1/tp slices (activation and "
                "gradient, pipeline.pipe_partitioned and grad_partitioned true by default) "
                "rebuilt by an all-gather over the TP group"]
    if p2p == PipeEngineP2P.DEEPSPEED_FULL_GRAD:
        return ["pipe_engine_p2p='deepspeed_full_grad' (whole gradients, DeepSpeed before "
                "0.5.4): this DeepSpeed partitions the gradient by default; set "
                "\"pipeline\": {\"grad_partitioned\": false} to run the timed transfers"]
    return ["the step time assumes Megatron-style stage-boundary transfers (a latency "
            "between neighbouring stages); DeepSpeed's PipelineEngine runs them as blocking "
            "sends and receives that hold both neighbours (pipe_engine_p2p="
            "'deepspeed_partitioned'), which is slower"]


def _unsupported_notes(training: TrainingSpec, parallel: ParallelConfig) -> list[str]:
    notes = []
    stages = [parallel.policy_of(stage) for stage in range(parallel.pp)]
    if training.compute_dtype == DType.FP8:
        notes.append("compute_dtype='fp8' has no DeepSpeed config key; FP8 GEMMs come from "
                     "Transformer Engine layers in model code")
    if parallel.cp > 1:
        notes.append(f"cp={parallel.cp} ({parallel.cp_kind}): context/sequence parallelism is "
                     "set up in model code (DeepSpeed-Ulysses), not by this config")
    if any(policy.fp8_activations for policy in stages):
        notes.append("FP8 storage of MLP/expert inputs has no DeepSpeed key")
    if parallel.norm_saves_output or training.memory_efficient_norm:
        notes.append("norm_saves_output=true (or memory_efficient_norm=true) has no DeepSpeed "
                     "key: a norm that keeps its output (Apex "
                     "FusedRMSNorm(memory_efficient=True)) is chosen in model code")
    if training.optimizer == OptimizerKind.MUON and parallel.zero_stage == 0:
        notes.append("DeepSpeed's Muon optimizer runs with ZeRO stages 1-3 only; zero_stage=0 "
                     "needs stage 1 or another optimizer")
    notes.append("optimizer params (learning rate, betas, weight decay), scheduler and "
                 "gradient clipping are not part of the plan; add them by hand")
    return notes


__all__ = [
    "AUTOEP_MIN_VERSION",
    "AUTOTP_MIN_VERSION",
    "DEEPSPEED_KEYS",
    "DeepSpeedExport",
    "deepspeed_config",
    "deepspeed_export",
    "deepspeed_notes",
]
