"""A plan as Megatron-LM command-line arguments (core_v0.14.0 spellings).

Owns: the flag vocabulary this exporter may emit (`MEGATRON_FLAGS`), and the translation of
degrees, batch, ZeRO stage, precision, recompute and overlap settings into those flags; what
Megatron-LM cannot express (zero-bubble and DualPipe schedules, per-rank policies, FP8
activation storage, activation offload, Pipeline ZeRO-2, ...) becomes a note, never an
invented flag. Must not: validate the plan against a cluster or size anything.

Target: Megatron-LM tag core_v0.14.0 (Oct 2025), `megatron/training/arguments.py`, where each
flag below is an explicit `add_argument`. Later releases generate the same spellings from the
`ModelParallelConfig` / `TransformerConfig` dataclasses.
"""

import logging
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.parallel import (
    ContextParallelKind,
    FullLayers,
    ParallelConfig,
    RecomputeMode,
    RecomputeModule,
    StagePolicy,
)
from api_schemas.training import CudaGraphModule, Fp8WeightStorage, OptimizerKind, TrainingSpec
from models.core.layer_kinds import kind_recompute_modules
from models.core.layout import pipeline_layout
from models.core.pipeline import schedule_traits
from models.core.runtime_features import grad_reduce_overlapped, grouped_gemm_on
from solver.export.common import batch_shape, rank_layer_counts, unified_policy
from solver.export.megatron_model import model_args
from solver.export.megatron_pipeline import pipeline_args

logger = logging.getLogger(__name__)

MEGATRON_VERSION = "core_v0.14.0"

MEGATRON_REFERENCE_FLAGS: frozenset[str] = frozenset({
    # parallel layout
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
    "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
    "--microbatch-group-size-per-virtual-pipeline-stage",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
    "--pipeline-model-parallel-layout", "--context-parallel-size", "--cp-comm-type",
    "--hierarchical-context-parallel-sizes", "--expert-model-parallel-size",
    "--expert-tensor-parallel-size", "--sequence-parallel", "--tp-comm-overlap",
    # batch, data-parallel sharding, optimizer memory
    "--micro-batch-size", "--global-batch-size", "--rampup-batch-size",
    "--use-distributed-optimizer", "--num-distributed-optimizer-instances",
    "--overlap-grad-reduce", "--overlap-param-gather",
    "--overlap-param-gather-with-optimizer-step", "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy", "--use-torch-fsdp2", "--optimizer-cpu-offload",
    "--optimizer-offload-fraction", "--overlap-cpu-optimizer-d2h-h2d",
    # activation recomputation
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
    "--recompute-modules", "--distribute-saved-activations", "--moe-layer-recompute",
    # precision
    "--bf16", "--fp16", "--fp8-format", "--fp8-recipe", "--fp8-param-gather", "--fp8-margin",
    "--fp8-amax-history-len", "--first-last-layers-bf16",
    # model shape
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads",
    "--group-query-attention", "--num-query-groups", "--kv-channels", "--seq-length",
    "--max-position-embeddings", "--vocab-size", "--make-vocab-size-divisible-by",
    "--untie-embeddings-and-output-weights", "--swiglu", "--normalization",
    "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
    "--qk-pos-emb-head-dim", "--v-head-dim", "--mtp-num-layers", "--rotary-base",
    # mixture of experts
    "--num-experts", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq", "--moe-router-topk", "--moe-router-num-groups",
    "--moe-router-group-topk", "--moe-router-topk-scaling-factor",
    "--moe-router-score-function", "--moe-router-pre-softmax", "--moe-grouped-gemm",
    "--moe-token-dispatcher-type",
    "--moe-permute-fusion",
})
"""Flags of the project's Megatron-LM reference vocabulary (parallel layout, batch and
sharding, recomputation, precision, model shape, MoE), each an `add_argument` in
core_v0.14.0 `megatron/training/arguments.py`."""

MEGATRON_SUPPLEMENT_FLAGS: frozenset[str] = frozenset({
    "--position-embedding-type", "--disable-bias-linear", "--add-qkv-bias", "--qk-layernorm",
    "--moe-router-enable-expert-bias", "--moe-expert-capacity-factor", "--ckpt-format",
    "--no-gradient-accumulation-fusion", "--optimizer", "--use-precision-aware-optimizer",
    "--main-grads-dtype", "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype",
    "--moe-enable-deepep", "--overlap-moe-expert-parallel-comm", "--external-cuda-graph",
    "--cuda-graph-scope",
})
"""Further core_v0.14.0 flags the plan needs to be stated faithfully (RoPE vs learned
positions, biases, QK norm, expert-bias routing, capacity factor, Megatron FSDP's checkpoint
format and gradient-fusion switch, optimizer and its state precisions, the DeepEP dispatcher,
the batch-level EP overlap and per-layer CUDA graphs of attention), each checked against the
same `arguments.py`."""

MEGATRON_FLAGS: frozenset[str] = MEGATRON_REFERENCE_FLAGS | MEGATRON_SUPPLEMENT_FLAGS
"""Every flag this exporter may emit."""

FP8_FORMAT = "e4m3"
FP8_RECIPE = "blockwise"
"""FP8 settings emitted for compute_dtype='fp8': E4M3 everywhere with block-wise scaling, the
DeepSeek-V3 recipe (arXiv:2412.19437 Sec. 3.3) as the Megatron-MoE-ModelZoo 'PR=fp8' switch
spells it (`--fp8-recipe blockwise --fp8-format e4m3 --fp8-param-gather`)."""

_CP_COMM_TYPE: dict[ContextParallelKind, str] = {
    ContextParallelKind.RING: "p2p",
    ContextParallelKind.ULYSSES: "a2a",
    ContextParallelKind.USP: "a2a+p2p",
    ContextParallelKind.ALL_GATHER: "all_gather",
}

Part = tuple[list[str], list[str]]
"""Flags and notes one part of the translation contributes."""

_MEGATRON_DTYPES: dict[str, tuple[DType, ...]] = {
    "--main-grads-dtype": (DType.FP32, DType.BF16),
    "--main-params-dtype": (DType.FP32, DType.FP16),
    "--exp-avg-dtype": (DType.FP32, DType.FP16, DType.BF16, DType.FP8),
    "--exp-avg-sq-dtype": (DType.FP32, DType.FP16, DType.BF16, DType.FP8),
}
"""Choices of the precision-aware optimizer's dtype flags in core_v0.14.0."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MegatronExport:
    """The arguments and the notes on what they leave out."""

    args: tuple[str, ...]
    notes: tuple[str, ...]
    env: dict[str, str]
    """Environment variables the launch needs (`megatron_env`)."""


DEFAULT_DEVICE_MAX_CONNECTIONS = "8"
"""CUDA's default number of hardware work queues, what Megatron FSDP runs with."""


def megatron_env(parallel: ParallelConfig) -> dict[str, str]:
    """The launch environment of a plan: `CUDA_DEVICE_MAX_CONNECTIONS=1` where tensor or
    context parallelism runs without Megatron FSDP (core_v0.14.0
    `megatron/training/arguments.py` `validate_args` asserts it, so TP/CP communication
    kernels are queued before the compute they overlap), and more than one with
    `--use-megatron-fsdp` (the Megatron-FSDP user guide,
    `docs/discussions/megatron-fsdp-user-guide`, asks to leave it unset, i.e. CUDA's
    default of 8, so FSDP communication and compute run in parallel)."""
    if parallel.zero_stage >= 2:  # exported as --use-megatron-fsdp (`_sharding_args`)
        return {"CUDA_DEVICE_MAX_CONNECTIONS": DEFAULT_DEVICE_MAX_CONNECTIONS}
    if parallel.tp > 1 or parallel.cp > 1:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return {}


def megatron_export(spec: ModelSpec, training: TrainingSpec,
                    parallel: ParallelConfig) -> MegatronExport:
    """Arguments and notes of one plan (see `megatron_args`, `megatron_notes`).

    Raises:
        InvalidSpecError: the batch is not a whole number of micro-batches per replica, or
            `layers_per_stage` does not add up to the model's layers.
    """
    model = model_args(spec, training, parallel)
    pipeline = pipeline_args(spec, parallel)
    args = list(model.args) + _degree_args(spec, parallel) + list(pipeline.args)
    notes = list(model.notes) + list(pipeline.notes)
    for part_args, part_notes in (
            _batch_args(training, parallel), _sharding_args(parallel),
            _precision_args(training, parallel), _recompute_args(spec, training, parallel),
            _overlap_args(spec, training, parallel), _cuda_graph_args(training, parallel),
            _unsupported_notes(training, parallel)):
        args += part_args
        notes += part_notes
    unknown = [token for token in args if token.startswith("--") and token not in MEGATRON_FLAGS]
    assert not unknown, f"flags outside the vocabulary: {unknown}"
    logger.debug("megatron export: %d tokens, %d notes", len(args), len(notes))
    return MegatronExport(args=tuple(args), notes=tuple(notes), env=megatron_env(parallel))


def megatron_args(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig) -> list[str]:
    """Megatron-LM core_v0.14.0 command-line arguments of a plan, as argv tokens.

    Args:
        spec: the LLM architecture.
        training: batch, sequence and precision recipe.
        parallel: the plan's parallel configuration.

    Returns:
        Tokens such as ["--tensor-model-parallel-size", "8", "--sequence-parallel", ...];
        join with `shlex.join` for a shell. Only flags in `MEGATRON_FLAGS` appear.

    Raises:
        InvalidSpecError: the batch does not divide into micro-batches, or the layer split
            does not add up.
    """
    return list(megatron_export(spec, training, parallel).args)


def megatron_notes(spec: ModelSpec, training: TrainingSpec,
                   parallel: ParallelConfig) -> list[str]:
    """What the plan asks for that the exported Megatron-LM arguments cannot say.

    Each note names the setting, what was exported instead, and what needs a framework
    extension. Same arguments and errors as `megatron_args`.
    """
    return list(megatron_export(spec, training, parallel).notes)


def _degree_args(spec: ModelSpec, parallel: ParallelConfig) -> list[str]:
    args = ["--tensor-model-parallel-size", str(parallel.tp)]
    if parallel.cp > 1:
        args += ["--context-parallel-size", str(parallel.cp),
                 "--cp-comm-type", _CP_COMM_TYPE[parallel.cp_kind]]
        if parallel.cp_kind == ContextParallelKind.USP:
            ulysses = parallel.ulysses_degree
            assert ulysses is not None, "ParallelConfig validation guarantees it for usp"
            # Inner (first) level all-to-all, outer level ring, as Megatron's a2a+p2p expects.
            args += ["--hierarchical-context-parallel-sizes", str(ulysses),
                     str(parallel.cp // ulysses)]
    if spec.moe is not None:
        # Megatron's expert TP defaults to TP; the plan's etp is always stated.
        args += ["--expert-model-parallel-size", str(parallel.ep),
                 "--expert-tensor-parallel-size", str(parallel.etp)]
    if parallel.sequence_parallel and parallel.tp > 1:
        args.append("--sequence-parallel")
    return args


def _batch_args(training: TrainingSpec, parallel: ParallelConfig) -> Part:
    shape = batch_shape(training, parallel)
    notes = []
    if parallel.cp > 1 and training.sequence_length % (2 * parallel.cp):
        notes.append(f"sequence_length={training.sequence_length} is not a multiple of 2 x "
                     f"cp={2 * parallel.cp}, which Megatron-LM asserts for context parallelism")
    return ["--micro-batch-size", str(shape.micro_batch_size),
            "--global-batch-size", str(shape.global_batch_size)], notes


def _sharding_args(parallel: ParallelConfig) -> Part:
    args, notes = _zero_args(parallel)
    offload = parallel.optimizer_offload_frac
    if offload <= 0:
        return args, notes
    if parallel.zero_stage == 0:
        return args, [*notes, f"optimizer offload of {offload:.0%} of the states needs the "
                      "distributed optimizer (zero_stage >= 1) in Megatron-LM; not exported"]
    # HybridDeviceOptimizer (megatron/core/optimizer/cpu_offloading): the share's states and
    # Adam step on the CPU, the device-host copies overlapped as the cost model assumes.
    return [*args, "--optimizer-cpu-offload", "--optimizer-offload-fraction", f"{offload:g}",
            "--overlap-cpu-optimizer-d2h-h2d"], notes


def _zero_args(parallel: ParallelConfig) -> Part:
    zero = parallel.zero_stage
    if zero == 0:
        return [], []
    if zero == 1:
        return ["--use-distributed-optimizer"], []
    strategy = "optim_grads" if zero == 2 else "optim_grads_params"
    notes = [f"zero_stage={zero} is exported as Megatron FSDP (--use-megatron-fsdp "
             f"--data-parallel-sharding-strategy {strategy}, new in core_v0.14.0, which needs "
             "--ckpt-format fsdp_dtensor); its combination with pipeline parallelism is not "
             "covered by that release's tests"] if parallel.pp > 1 else []
    return ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy,
            "--use-distributed-optimizer", "--no-gradient-accumulation-fusion",
            "--ckpt-format", "fsdp_dtensor"], notes


def _precision_args(training: TrainingSpec, parallel: ParallelConfig) -> Part:
    args: list[str] = []
    notes: list[str] = []
    if training.param_dtype == DType.BF16:
        args.append("--bf16")
    elif training.param_dtype == DType.FP16:
        args.append("--fp16")
    elif training.param_dtype != DType.FP32:
        notes.append(f"param_dtype='{training.param_dtype}' has no Megatron-LM flag; "
                     "parameters stay in fp32 unless --bf16/--fp16 is given")
    if training.compute_dtype == DType.FP8:
        args += ["--fp8-format", FP8_FORMAT, "--fp8-recipe", FP8_RECIPE]
        notes.append("compute_dtype='fp8' is exported as E4M3 with block-wise scaling (the "
                     "DeepSeek-V3 recipe; needs Hopper-class GPUs and a recent Transformer "
                     "Engine); the cost model does not distinguish FP8 scaling recipes, so "
                     "--fp8-recipe tensorwise serves as well where blockwise is unavailable")
        if training.fp8_weight_storage == Fp8WeightStorage.FP8_ONLY:
            if parallel.zero_stage >= 1:
                args.append("--fp8-param-gather")
            else:
                notes.append("fp8_weight_storage='fp8_only' needs --fp8-param-gather, which "
                             "Megatron-LM allows only with the distributed optimizer "
                             "(zero_stage >= 1); not exported, so FP8 weights are kept beside "
                             "the high-precision copy")
    part_args, part_notes = _optimizer_args(training, parallel)
    return [*args, *part_args], [*notes, *part_notes]


def _optimizer_args(training: TrainingSpec, parallel: ParallelConfig) -> Part:
    optimizer = training.optimizer
    if optimizer == OptimizerKind.MUON:
        return [], ["optimizer='muon' is not in Megatron-LM core_v0.14.0 (choices: adam, sgd); "
                    "it needs a framework extension"]
    if optimizer in (OptimizerKind.SGD, OptimizerKind.SGD_MOMENTUM):
        return ["--optimizer", "sgd"], []
    args = ["--optimizer", "adam"]
    wanted = {"--main-grads-dtype": training.grad_dtype,
              "--main-params-dtype": training.master_dtype or DType.FP32,
              "--exp-avg-dtype": training.optimizer_state_dtype,
              "--exp-avg-sq-dtype": training.optimizer_state_dtype}
    notes = []
    if training.master_dtype is None:
        notes.append("master_dtype=null (no separate master copy): Megatron-LM's mixed-precision "
                     "optimizer always keeps a master copy; it is exported as fp32")
    changed = {flag: dtype for flag, dtype in wanted.items() if dtype != DType.FP32}
    if not changed:
        return args, notes
    if parallel.zero_stage == 0:
        return args, [
            *notes,
            "non-fp32 gradient, master or optimizer-state dtypes need Megatron-LM's "
            "--use-precision-aware-optimizer, which requires the distributed optimizer "
            "(zero_stage >= 1); not exported, so those states stay fp32"]
    args.append("--use-precision-aware-optimizer")
    for flag, dtype in changed.items():
        if dtype in _MEGATRON_DTYPES[flag]:
            args += [flag, str(dtype)]
        else:
            notes.append(f"{flag} accepts {[str(d) for d in _MEGATRON_DTYPES[flag]]} in "
                         f"core_v0.14.0, not '{dtype}'; left at fp32")
    return args, notes


def _recompute_args(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig) -> Part:
    unified = unified_policy(parallel, framework="Megatron-LM")
    policy = unified.policy
    notes = list(unified.notes)
    recompute = policy.recompute
    if isinstance(recompute, FullLayers):
        if recompute.full_layers == 0:
            recompute = RecomputeMode(recompute.others)
        else:
            args, more = _full_layers_args(spec, parallel, recompute)
            return args, notes + more
    if recompute == RecomputeMode.FULL:
        return ["--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "1"], notes
    if recompute == RecomputeMode.SELECTIVE:
        args, more = _selective_args(spec, policy, grouped=grouped_gemm_on(training))
        return args, notes + more
    return [], notes


def _full_layers_args(spec: ModelSpec, parallel: ParallelConfig, policy: FullLayers) -> Part:
    """Full recompute of the first n layers of each rank (Megatron's 'block' method).

    Megatron counts the n layers in each of its model chunks; the plan counts them over the
    rank's chunks in order. The per-chunk count that covers the plan on every rank is taken.
    """
    n = policy.full_layers
    chunks_of_rank = _megatron_chunks(spec, parallel)
    needed = 1
    for chunks in chunks_of_rank:
        before = 0
        for size in chunks:
            needed = max(needed, min(max(n - before, 0), size))
            before += size
    notes = []
    planned = [min(n, sum(chunks)) for chunks in chunks_of_rank]
    exported = [sum(min(needed, size) for size in chunks) for chunks in chunks_of_rank]
    if planned != exported:
        notes.append(f"recompute full_layers={n}: Megatron's block method recomputes the first "
                     f"--recompute-num-layers layers of every model chunk; {needed} per chunk is "
                     f"exported, recomputing {exported} layers per rank where the plan has "
                     f"{planned} (more compute, never more memory)")
    if policy.others == "selective":
        notes.append(f"recompute full_layers={n} with selective recompute on the other layers: "
                     "Megatron-LM has one recompute granularity, so the other layers keep all "
                     "their activations; mixing granularities needs a framework extension")
    return ["--recompute-granularity", "full", "--recompute-method", "block",
            "--recompute-num-layers", str(needed)], notes


def _megatron_chunks(spec: ModelSpec, parallel: ParallelConfig) -> list[list[int]]:
    """Layers of each Megatron model chunk per rank, as the exported flags place them."""
    traits = schedule_traits(parallel.schedule)
    if traits.exports.megatron_native and traits.fixed_chunks is None and parallel.pp > 1:
        return [[len(chunk) for chunk in stage.chunks]
                for stage in pipeline_layout(spec, parallel)]
    return [[count] for count in rank_layer_counts(spec, parallel)]


def _selective_args(spec: ModelSpec, policy: StagePolicy, *, grouped: bool) -> Part:
    kept = []
    notes = []
    offered = kind_recompute_modules(spec)
    for module in policy.recompute_modules:
        if module == RecomputeModule.MOE_ACT and module in offered and not grouped:
            # core_v0.14.0 TransformerConfig: 'moe_act in recompute_modules is only
            # supported with moe_grouped_gemm'.
            notes.append("recompute module 'moe_act' dropped: Megatron-LM recomputes the "
                         "expert activation only with --moe-grouped-gemm, which this plan "
                         "leaves off (more activation memory than planned)")
        elif module == RecomputeModule.MLA_UP_PROJ and module not in offered:
            notes.append("recompute module 'mla_up_proj' dropped: the model has no MLA")
        elif module in (RecomputeModule.MOE, RecomputeModule.MOE_ACT,
                        RecomputeModule.SHARED_EXPERTS) and module not in offered:
            notes.append(f"recompute module '{module}' dropped: the model has no MoE")
        elif module == RecomputeModule.OP_SAC:
            notes.append("recompute module 'op_sac' dropped: torchtitan's per-op policy has "
                         "no Megatron-LM module")
        else:
            kept.append(str(module))
    if not kept:
        return [], notes
    return ["--recompute-granularity", "selective", "--recompute-modules", *kept], notes


def _overlap_args(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig) -> Part:
    args: list[str] = []
    notes: list[str] = []
    if spec.moe is not None and parallel.ep > 1 and training.overlap_ep_comm:
        if parallel.pp > 1 and parallel.vpp == 1:
            notes.append("overlap_ep_comm=true needs interleaving in Megatron-LM when PP > 1 "
                         "(--overlap-moe-expert-parallel-comm asserts a virtual pipeline "
                         "size); not exported, so expert all-to-alls stay exposed")
        else:
            args.append("--overlap-moe-expert-parallel-comm")
    if grad_reduce_overlapped(training):
        args.append("--overlap-grad-reduce")
        if parallel.zero_stage >= 1:
            args.append("--overlap-param-gather")
    if training.overlap_tp_comm and parallel.tp > 1:
        if parallel.sequence_parallel:
            args.append("--tp-comm-overlap")
        else:
            notes.append("overlap_tp_comm=true needs sequence parallelism in Megatron-LM "
                         "(--tp-comm-overlap asserts --sequence-parallel); not exported, so TP "
                         "collectives stay exposed")
    if training.tp_dgrad_overlap is False and parallel.tp > 1:
        notes.append("tp_dgrad_overlap=false: Megatron-LM core_v0.14.0 always launches the "
                     "column-parallel input-gradient collective under the weight-gradient "
                     "GEMM (no flag turns it off), so the TP backward runs faster than "
                     "planned")
    return args, notes


def _cuda_graph_args(training: TrainingSpec, parallel: ParallelConfig) -> Part:
    """Per-layer CUDA graphs (`TrainingSpec.cuda_graph_modules`). core_v0.14.0 captures the
    attention block of a dropless MoE layer with `--external-cuda-graph --cuda-graph-scope
    attn` (MoE README, MCore v0.13 news; `--te-rng-tracker` is switched on for it by
    `validate_args`; full recomputation is refused); its `--cuda-graph-scope` choices are
    full, attn and full_iteration, so the router and preprocessing regions are notes
    (Megatron-Core 0.15 and later: `--cuda-graph-impl transformer_engine --cuda-graph-scope
    attn moe_router moe_preprocess`)."""
    modules = set(training.cuda_graph_modules)
    args: list[str] = []
    notes: list[str] = []
    if CudaGraphModule.ATTN in modules:
        recompute = unified_policy(parallel, framework="Megatron-LM").policy.recompute
        if recompute == RecomputeMode.FULL or (isinstance(recompute, FullLayers)
                                               and recompute.full_layers > 0):
            notes.append("cuda_graph_modules 'attn' not exported: Megatron-LM refuses CUDA "
                         "graphs with full recomputation, so attention is issued eagerly")
        else:
            args += ["--external-cuda-graph", "--cuda-graph-scope", "attn"]
    moe_regions = sorted(str(m) for m in modules - {CudaGraphModule.ATTN})
    if moe_regions:
        notes.append(f"cuda_graph_modules {', '.join(moe_regions)}: Megatron-LM "
                     f"{MEGATRON_VERSION} cannot capture them (Megatron-Core 0.15+: "
                     "--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router "
                     "moe_preprocess); not exported, so the host issues them eagerly")
    return args, notes


def _unsupported_notes(training: TrainingSpec, parallel: ParallelConfig) -> Part:
    notes = []
    if not training.fused_cross_entropy:
        notes.append("fused_cross_entropy=false: Megatron-LM's loss is its vocab-parallel "
                     "cross entropy, whose backward works in place on the saved softmax, so "
                     "the planned unfused-loss working set is not used (memory over-counted)")
    if parallel.sequence_parallel_saves_gathered:
        notes.append("sequence_parallel_saves_gathered=true: Megatron-LM's sequence "
                     "parallelism saves the sequence shard and all-gathers it again in "
                     "backward, so the planned gathered inputs are not kept (memory "
                     "over-counted)")
    if parallel.norm_saves_output or training.memory_efficient_norm:
        notes.append("norm_saves_output=true (or memory_efficient_norm=true): Megatron-LM's "
                     "memory-efficient norm (--memory-efficient-layer-norm) applies to the "
                     "local Apex LayerNorm only, not to Transformer Engine's; not exported, so "
                     "each norm keeps its input (memory under-counted by 4h/t bytes per token "
                     "per layer)")
    if parallel.fsdp_defer_grad_sync:
        notes.append("fsdp_defer_grad_sync=true has no Megatron-LM flag: Megatron FSDP "
                     "reduce-scatters gradient buckets during backward (memory over-counted)")
    stages = [parallel.policy_of(stage) for stage in range(parallel.pp)]
    if any(policy.fp8_activations for policy in stages):
        notes.append("FP8 storage of MLP/expert inputs (Kimi K2 style) has no Megatron-LM "
                     "core_v0.14.0 flag; it needs a framework extension, and without it those "
                     "activations take their 16-bit size")
    if any(policy.offload_frac > 0 for policy in stages):
        notes.append("activation offload to host: Megatron-LM core_v0.14.0's CPU offloading "
                     "moves whole layers rather than a fraction, and TransformerConfig rejects "
                     "it with pipeline parallelism or recomputation; the planned offload "
                     "fraction needs a framework extension")
    if parallel.gradient_host_shards:
        notes.append("Pipeline ZeRO-2 (gradient shards in host memory, two GPU gradient "
                     "buffers; Kimi K3) has no Megatron-LM flag; it needs a framework extension")
    if parallel.remote_activation_offload:
        notes.append("remote activation offload (stored activations in other pipeline ranks' "
                     "memory; Kimi K3) has no Megatron-LM flag; it needs a framework extension, "
                     "and without it the fullest ranks do not fit")
    if parallel.fsdp and parallel.zero_stage == 3:
        notes.append("fsdp=true is exported as Megatron FSDP with optim_grads_params; PyTorch "
                     "FSDP2 (--use-torch-fsdp2) is the alternative but rejects pipeline and "
                     "expert parallelism in core_v0.14.0")
    notes.append("not part of the plan and so not exported: tokenizer and data paths, "
                 "learning-rate schedule, RoPE base and scaling, norm epsilon, initialisation, "
                 "router score scaling and load-balancing losses; take them from the model's "
                 "own recipe")
    return [], notes


__all__ = [
    "FP8_FORMAT",
    "FP8_RECIPE",
    "MEGATRON_FLAGS",
    "MEGATRON_REFERENCE_FLAGS",
    "MEGATRON_SUPPLEMENT_FLAGS",
    "MEGATRON_VERSION",
    "MegatronExport",
    "megatron_args",
    "megatron_env",
    "megatron_export",
    "megatron_notes",
]
