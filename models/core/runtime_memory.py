"""Memory a training process holds besides model states and stored activations.

Owns: the named runtime items of a rank's ledger: the CUDA context with its kernel images
and library workspaces, the NCCL communicator buffers (one set per process group the mesh
uses), the workspace of the fused attention kernel in backward, the communication staging
buffers (TP gather, PP send/receive, EP dispatch/combine) and the caching allocator's
fragmentation. Must not: count model states or stored activations (see `models/core/memory.py`),
or estimate time.

Calibration: the constants below are named, sourced values; `research/validate_memory.py`
checks the whole ledger against measured peaks (research/MEMORY_PEAKS.md).
"""

import math
from typing import NamedTuple

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.parallel import ContextParallelKind, ParallelConfig
from api_schemas.training import Fp8WeightStorage, MoeDispatcher, OptimizerKind, TrainingSpec
from models.core.activations import ACTIVATION_BYTES
from models.core.layer_kinds import attention_kind
from models.core.ledger_items import MemoryComponent, RankParameters
from models.core.linear_attention import kcp_fragment_bytes
from models.core.precision import state_bytes_per_param
from models.core.runtime_features import deepep_buffer_bytes, dispatcher
from models.core.sharded_states import zero3_gather_buffers

FP8_BYTES = 1
"""Bytes of an FP8 (E4M3/E5M2) element."""

CUDA_CONTEXT_BYTES = 512 * 2**20
"""CUDA context, loaded kernel images (PyTorch, cuBLAS, cuDNN, NCCL) and the cuBLAS
workspaces of the default streams, outside the caching allocator. Source: PyTorch "CUDA
semantics" notes (memory outside the caching allocator is not reported by
memory_allocated); measured as nvidia-smi minus torch.cuda.memory_reserved, about 0.3-0.6
GiB on A100/H100 with recent CUDA (lazy module loading); the upper end is taken."""

NCCL_BUFFER_BYTES = 4 * 2**20
"""NCCL_BUFFSIZE default: 4 MiB per channel, peer and direction for the Simple protocol.
Source: NCCL environment variable reference (NCCL_BUFFSIZE)."""

NCCL_CHANNELS = 16
"""Channels a communicator opens on NVSwitch/InfiniBand systems (NCCL picks 16-32 on
Hopper/Ampere nodes; 16 taken). Source: NCCL environment reference (NCCL_MIN_NCHANNELS,
NCCL_MAX_NCHANNELS)."""

ALLOCATOR_FRAGMENTATION_FRAC = 0.05
"""Share of the dynamic bytes (activations and transient buffers) lost to the caching
allocator's block rounding and fragmentation (2 MiB segments, blocks split but never
merged across segments). Source: PyTorch CUDA caching allocator notes; a named reserve."""

FLASH_DQ_ACCUMULATOR_BYTES = 4
"""FlashAttention-2 backward accumulates dQ in fp32 (one element per query element).
Source: FlashAttention-2, arXiv:2307.08691 Sec. 3.1.2 (dQ accumulated across K/V blocks);
flash-attn `dq_accum` buffer."""


def communicator_count(parallel: ParallelConfig) -> int:
    """Process groups whose NCCL buffers a rank holds: the default (world) group plus one
    per mesh axis of size > 1 (tp, cp, dp, ep; the pipeline's two neighbours count as two
    point-to-point peers)."""
    axes = [parallel.tp, parallel.cp, parallel.dp, parallel.ep * parallel.etp]
    count = 1 + sum([1 for size in axes if size > 1])
    return count + (2 if parallel.pp > 1 else 0)


def nccl_buffer_bytes(parallel: ParallelConfig) -> int:
    """NCCL buffers of one rank: channels x 2 directions x buffer size per communicator.

    Source: NCCL environment reference (NCCL_BUFFSIZE 4 MiB, 16+ channels per
    communicator on NVSwitch/InfiniBand nodes).
    """
    per_communicator = NCCL_CHANNELS * 2 * NCCL_BUFFER_BYTES
    return communicator_count(parallel) * per_communicator


def attention_workspace_bytes(*, tokens: float, heads_per_rank: float, head_dim: int,
                              seq_len_per_rank: float, flash_attention: bool) -> int:
    """Transient bytes of one layer's attention backward.

    Flash: the fp32 dQ accumulator (tokens x heads x d x 4 bytes, arXiv:2307.08691 Sec.
    3.1.2). Materialised: the gradient of the s x s scores (2 bytes per score, Korthikanti
    et al. 2022 arXiv:2205.05198 Sec. 4.1 sizes the scores at 2 a s^2 b).
    Legend: tokens = s b / cp on the rank, heads_per_rank = a / t, d = head_dim.
    """
    if flash_attention:
        return math.ceil(tokens * heads_per_rank * head_dim * FLASH_DQ_ACCUMULATOR_BYTES)
    return math.ceil(2 * heads_per_rank * tokens * seq_len_per_rank)


def fsdp_root_unit_bytes(groups: RankParameters, parallel: ParallelConfig,
                         param_bytes: float) -> int:
    """Gathered bytes of the FSDP root unit (the parameters no transformer block wraps: the
    embedding and the output head) on this rank, held from the root's forward to the end of
    its backward, when the blocks are resharded after forward (without resharding every
    unit, the root included, is already resident in the model states).

    Source: PyTorch FSDP2 `FSDPState._lazy_init` ("For the root, do not reshard after
    forward since for training, the parameters would be freed and all-gathered
    immediately": the root group's `post_forward_mesh_info = None`); FSDP1 likewise frees
    only non-root handles after forward (`_post_forward_reshard`); torchtitan wraps each
    block and leaves the embedding, final norm and output to the root (parallelize_llama
    `apply_fsdp`). The root reduce-scatters only after the embedding's gradient, the last
    of the step. Checked against torchtitan's 8B long-context peaks (Table 2).
    Legend: bytes = (embedding + head parameters of the rank, TP-sharded) x param bytes.
    """
    if not (parallel.zero_stage == 3 and parallel.fsdp and parallel.fsdp_reshard_after_forward):
        return 0
    return math.ceil((groups.embedding + groups.head) * param_bytes)


def loss_logits_hole_bytes(spec: ModelSpec, training: TrainingSpec,
                           parallel: ParallelConfig) -> int:
    """Reserved but unusable bytes at the backward of an unfused (PyTorch) cross entropy on
    a rank that computes the loss: the free block the 16-bit logits leave, per micro-batch.

    The forward leaves, in allocation order, the 16-bit logits (2 V bytes per token), their
    fp32 copy (4 V) and the fp32 log-probabilities (4 V; `_log_softmax` under loss parallel
    also frees its fp32 `shifted` and `exp` temporaries beside them); the step frees the
    logits (`del pred`) and the fp32 copy, leaving one free run of 2 V + k x 4 V bytes before
    the kept log-probabilities. The backward then allocates fp32 logit-sized tensors only
    (the gradient `nll_loss` writes, the `log_softmax` input gradient; under loss parallel
    `zeros_like(x)`, `exp(x)`, their sum and the product): the caching allocator's best fit
    (`get_free_block`: the smallest free block at least as large) places the first k in
    that run, and the 2 V bytes left over can never hold a 4 V tensor, so the next one maps
    new memory while they stay reserved. With expandable segments (torchtitan's launcher sets
    `expandable_segments:True`) free pages stay mapped until `empty_cache`; with classic
    segments the logits had a segment of their own, cached and as unusable. Either way the
    reserved peak torchtitan logs (`reserved_bytes.all.peak`) counts them. It is reserved,
    not allocated, memory: an allocation that would fail first makes the allocator release
    cached free blocks, so on a nearly full GPU the term is a margin rather than an OOM.
    Source: PyTorch `c10/cuda/CUDACachingAllocator.cpp` (best-fit free-block search, block
    splitting, expandable segments, release of cached blocks before an OOM); torchtitan
    train.py at 9dec370 (`del pred` before `loss.backward()`);
    `torch.distributed.tensor.parallel.loss` (`_log_softmax`,
    `_nll_loss_and_log_softmax_backward`). Checked against torchtitan's eager 8B FSDP peaks
    (Tables 1 and 3) and the 70B FSDP x TP peak (Table 4), `research/validate_memory.py`.
    Legend: bytes = tokens x V / t x 2 on the loss rank (vocabulary-parallel logits)."""
    if training.fused_cross_entropy:
        return 0
    tokens = training.sequence_length * parallel.micro_batch_size / parallel.cp
    return math.ceil(tokens * spec.vocab_size / parallel.tp * ACTIVATION_BYTES)


def runtime_components(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                      groups: RankParameters, dynamic_bytes: int, *, num_heads: int = 0,
                      items: tuple[list[MemoryComponent], int] | None = None
                      ) -> list[MemoryComponent]:
    """Runtime items and transient buffers, each a named term (`models/runtime_memory`,
    `models/sharded_states`); `num_heads` output heads with their loss on this rank; `items`:
    `runtime_items` of these inputs when the caller already has them (a memo)."""
    listed, transient = items or runtime_items(spec, training, parallel, groups)
    return [*listed, fragmentation_component(dynamic_bytes, transient),
            *loss_hole_components(spec, training, parallel, num_heads=num_heads)]


def loss_hole_components(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                         *, num_heads: int) -> list[MemoryComponent]:
    """The reserved block the unfused loss's backward leaves (`loss_logits_hole_bytes`) on a
    rank with `num_heads` output heads; none elsewhere or with a fused loss."""
    hole = num_heads * loss_logits_hole_bytes(spec, training, parallel)
    if not hole:
        return []
    return [MemoryComponent(
        name="allocator: freed logits block at the loss backward", kind="other", bytes=hole,
        note="the 16-bit logits' freed block, too small for the unfused loss's fp32 "
             "backward tensors, stays reserved")]


class RuntimeInputs(NamedTuple):
    """Every input of `runtime_items` but the model and recipe: the rank's parameter groups
    and the configuration fields it reads. Ranks and configurations with equal records get
    equal items (a memo keyed by the record, `models.core.ledger_memo.LedgerMemo`)."""

    groups: RankParameters
    tp: int
    cp: int
    dp: int
    ep: int
    etp: int
    pp: int
    zero_stage: int
    fsdp: bool
    fsdp_reshard_after_forward: bool
    micro_batch_size: int
    sequence_parallel: bool
    cp_kind: ContextParallelKind

    @classmethod
    def of(cls, parallel: ParallelConfig, groups: RankParameters) -> "RuntimeInputs":
        """The record of a rank of `parallel` holding `groups`."""
        # Built as a tuple: the generated `__new__` costs a Python call per record.
        return tuple.__new__(cls, (
            groups, parallel.tp, parallel.cp, parallel.dp, parallel.ep, parallel.etp,
            parallel.pp, parallel.zero_stage, parallel.fsdp, parallel.fsdp_reshard_after_forward,
            parallel.micro_batch_size, parallel.sequence_parallel, parallel.cp_kind))


def fragmentation_bytes(dynamic_bytes: int, transient_bytes: int) -> int:
    """The caching allocator's fragmentation share of the dynamic (activation) and transient
    bytes (`ALLOCATOR_FRAGMENTATION_FRAC`)."""
    return math.ceil(ALLOCATOR_FRAGMENTATION_FRAC * (dynamic_bytes + transient_bytes))


def fragmentation_component(dynamic_bytes: int, transient_bytes: int) -> MemoryComponent:
    """`fragmentation_bytes` as a ledger line."""
    return MemoryComponent(
        name="allocator fragmentation", kind="other",
        bytes=fragmentation_bytes(dynamic_bytes, transient_bytes),
        note=f"{ALLOCATOR_FRAGMENTATION_FRAC:.0%} of dynamic bytes")


def runtime_items(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  groups: RankParameters) -> tuple[list[MemoryComponent], int]:
    """`runtime_components` but the allocator fragmentation (which reads the rank's
    activations), and the transient bytes among them (what fragmentation adds to)."""
    fixed = [MemoryComponent(name="CUDA context and library workspaces", kind="other",
                             bytes=CUDA_CONTEXT_BYTES,
                             note="context, kernel images, cuBLAS workspaces"),
             MemoryComponent(name="NCCL communicator buffers", kind="other",
                             bytes=nccl_buffer_bytes(parallel),
                             note=f"{communicator_count(parallel)} communicators x "
                                  f"{NCCL_CHANNELS} channels x 2 x 4 MiB")]
    tokens = training.sequence_length * parallel.micro_batch_size / parallel.cp
    transient = [*(_zero3_items(training, parallel, groups) if parallel.zero_stage == 3
                   else []),
                 *_fp8_weight_items(training, groups),
                 _attention_workspace(spec, training, parallel, tokens),
                 *_sequence_buffers(spec, parallel, tokens),
                 *_expert_and_optimizer_buffers(spec, training, parallel, groups, tokens)]
    return [*fixed, *transient], sum([c.bytes for c in transient])


def _zero3_items(training: TrainingSpec, parallel: ParallelConfig,
                 groups: RankParameters) -> list[MemoryComponent]:
    """ZeRO-3's gathered parameters, unsharded gradient and FSDP root unit."""
    out = []
    weight_bytes = state_bytes_per_param(training).weights
    buffers = zero3_gather_buffers(
        largest_unit_params=groups.largest_layer,
        largest_module_params=math.ceil(groups.largest_matrix / parallel.tp),
        param_bytes=weight_bytes, grad_bytes=training.grad_dtype.num_bytes,
        fsdp=parallel.fsdp, reshard_after_forward=parallel.fsdp_reshard_after_forward,
        rank_params=(groups.gemm + groups.vectors + groups.embedding + groups.head
                     + groups.experts))
    if buffers.gathered_parameters_bytes:
        out.append(MemoryComponent(name="ZeRO-3 gathered parameters", kind="other",
                                   bytes=buffers.gathered_parameters_bytes,
                                   note=buffers.note))
    out.append(MemoryComponent(name="unsharded gradient before reduce-scatter",
                               kind="other", bytes=buffers.unsharded_gradient_bytes,
                               note="FSDP unit" if parallel.fsdp else "reduce bucket"))
    root = fsdp_root_unit_bytes(groups, parallel, weight_bytes)
    if root:
        out.append(MemoryComponent(name="FSDP root unit gathered", kind="other",
                                   bytes=root,
                                   note="embedding and output head: FSDP never reshards "
                                        "the root after forward"))
    return out


def _fp8_weight_items(training: TrainingSpec, groups: RankParameters) -> list[MemoryComponent]:
    """One layer's FP8 weight transposes or on-the-fly quantised weights under FP8."""
    if training.compute_dtype != DType.FP8:
        return []
    storage = training.fp8_weight_storage
    if storage == Fp8WeightStorage.FP8_ONLY:
        return [MemoryComponent(name="FP8 weight transposes", kind="other",
                                bytes=groups.largest_layer,
                                note="one layer's FP8 transpose built for backward")]
    if storage == Fp8WeightStorage.ON_THE_FLY:
        return [MemoryComponent(name="FP8 weights quantised on the fly", kind="other",
                                bytes=math.ceil(2 * groups.largest_layer * FP8_BYTES),
                                note="one layer's FP8 weights and transposes")]
    return []


def _attention_workspace(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                         tokens: float) -> MemoryComponent:
    """The attention backward's workspace of one layer."""
    heads_per_rank = spec.num_attention_heads / parallel.tp
    head_dim = attention_kind(spec).head_dims(spec)[1]
    return MemoryComponent(
        name="attention backward workspace", kind="other",
        bytes=attention_workspace_bytes(
            tokens=tokens, heads_per_rank=heads_per_rank, head_dim=head_dim,
            seq_len_per_rank=training.sequence_length / parallel.cp,
            flash_attention=training.flash_attention),
        note="fp32 dQ accumulator" if training.flash_attention else "score gradients")


def _sequence_buffers(spec: ModelSpec, parallel: ParallelConfig,
                      tokens: float) -> list[MemoryComponent]:
    """Buffers of the sequence-splitting axes: TP's all-gather, CP's gathered K/V or state
    fragments, PP's send/receive buffers."""
    out = []
    h = spec.hidden_size
    if parallel.tp > 1:
        gathered = tokens * h * ACTIVATION_BYTES * (1 if parallel.sequence_parallel else 0)
        if gathered:
            out.append(MemoryComponent(name="TP all-gather buffer", kind="other",
                                       bytes=math.ceil(gathered),
                                       note="sequence-parallel input gathered for one GEMM"))
    if parallel.cp > 1 and parallel.cp_kind == ContextParallelKind.ALL_GATHER:
        # Imported here: models.core.traffic reads the ledger's micro-batch count.
        from models.core.traffic.context import head_dims

        dims = head_dims(spec, parallel.tp)
        out.append(MemoryComponent(
            name="CP gathered K/V", kind="other",
            bytes=math.ceil(tokens * parallel.cp * dims.kv_heads * (dims.qk_dim + dims.v_dim)
                            * ACTIVATION_BYTES),
            note="one layer's whole-sequence K and V (all-gather context parallelism)"))
    if parallel.cp > 1 and spec.linear_attention is not None:
        out.append(MemoryComponent(
            name="CP gathered state fragments", kind="other",
            bytes=parallel.cp * kcp_fragment_bytes(spec, tp=parallel.tp),
            note="one linear-attention layer's all-gathered fp32 states and transitions "
                 "(state-passing context parallelism), whatever the sequence length"))
    if parallel.pp > 1:
        shard = parallel.tp if parallel.sequence_parallel else 1
        out.append(MemoryComponent(name="PP send/receive buffers", kind="other",
                                   bytes=math.ceil(4 * tokens * h * ACTIVATION_BYTES / shard),
                                   note="activation and gradient, sent and received"))
    return out


def _expert_and_optimizer_buffers(spec: ModelSpec, training: TrainingSpec,
                                  parallel: ParallelConfig, groups: RankParameters,
                                  tokens: float) -> list[MemoryComponent]:
    """EP's dispatch/combine and DeepEP buffers, and Muon's full-matrix buffer."""
    out = []
    h = spec.hidden_size
    if spec.moe is not None and parallel.ep > 1:
        assignments = (tokens / parallel.tp * parallel.etp * spec.moe.top_k
                       * training.moe_load_imbalance)
        out.append(MemoryComponent(name="EP dispatch/combine buffers", kind="other",
                                   bytes=math.ceil(2 * assignments * h * ACTIVATION_BYTES),
                                   note="received tokens and combine output, S x K scale"))
    if spec.moe is not None and parallel.ep > 1 and dispatcher(training) == MoeDispatcher.DEEPEP:
        out.append(MemoryComponent(name="DeepEP buffers", kind="other",
                                   bytes=deepep_buffer_bytes(h, parallel.ep),
                                   note="NVLink and RDMA receive buffers of DeepEP's normal "
                                        "kernels (Megatron flex dispatcher)"))
    if training.optimizer == OptimizerKind.MUON and parallel.zero_stage >= 1:
        out.append(MemoryComponent(name="Muon full-matrix buffer", kind="other",
                                   bytes=math.ceil(groups.largest_matrix * 4),
                                   note="largest weight matrix gathered in fp32 for "
                                        "Newton-Schulz"))
    return out


__all__ = [
    "RuntimeInputs",
    "fsdp_root_unit_bytes",
    "loss_hole_components",
    "loss_logits_hole_bytes",
    "ALLOCATOR_FRAGMENTATION_FRAC",
    "CUDA_CONTEXT_BYTES",
    "FLASH_DQ_ACCUMULATOR_BYTES",
    "NCCL_BUFFER_BYTES",
    "NCCL_CHANNELS",
    "attention_workspace_bytes",
    "communicator_count",
    "fragmentation_bytes",
    "fragmentation_component",
    "nccl_buffer_bytes",
    "runtime_components",
    "runtime_items",
]
