"""The per-rank, per-stage memory ledger of a parallel configuration, in integer bytes.

Owns: composing parameters (`params`), bytes per state (`precision`), activations
(`activations`), the stage layout (`layout`) and the schedule's in-flight micro-batches
(`pipeline.closed_forms`) into one ledger per pipeline rank, component by component, with the
communication buffers and runtime reserves named; and the verdict against the GPU capacity
and the host memory. Must not: estimate time or search.

Conventions. Each component is rounded up to whole bytes. The worst rank of each pipeline
stage is reported (ranks of one stage differ only by rounding). Dense weights are sharded by
tp and pp; routed experts by ep x etp; ZeRO shards dense states over dp x cp (Megatron's
distributed optimizer group) and expert states over the expert-data-parallel degree
edp = tp x cp x dp / (ep x etp) (Megatron-LM PR #4687: never by tp).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import FullLayers, ParallelConfig, PipelineSchedule, RecomputeMode
from api_schemas.training import EmaPlacement, Fp8WeightStorage, OptimizerKind, TrainingSpec
from models.activations import (
    ACTIVATION_BYTES,
    LayerActivationBytes,
    LayerActivationContext,
    embedding_activation_bytes,
    head_activation_bytes,
    layer_activation_bytes,
)
from models.errors import InvalidSpecError
from models.layout import StageLayout, pipeline_layout
from models.params import (
    attention_params,
    head_params,
    largest_weight_matrix,
    layer_params,
    mlp_params,
    mtp_module_params,
    norm_params,
)
from models.pipeline.closed_forms import peak_in_flight_chunks
from models.precision import sharded_state_bytes, state_bytes_per_param
from models.runtime_memory import (
    ALLOCATOR_FRAGMENTATION_FRAC,
    CUDA_CONTEXT_BYTES,
    NCCL_BUFFER_BYTES,
    NCCL_CHANNELS,
    attention_workspace_bytes,
    communicator_count,
    nccl_buffer_bytes,
)
from models.sharded_states import optimizer_offload_bytes, zero3_gather_buffers

RUNTIME_RESERVE_BYTES = CUDA_CONTEXT_BYTES + NCCL_CHANNELS * 2 * NCCL_BUFFER_BYTES
"""The least runtime memory any rank holds (the CUDA context and the default group's NCCL
buffers): a lower bound the search may use before a ledger is built."""

FP8_BYTES = 1
"""Bytes of an FP8 (E4M3/E5M2) element."""

ComponentKind = Literal["parameters", "gradients", "optimizer", "activations", "other"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryComponent:
    """One named line of a rank's ledger."""

    name: str
    kind: ComponentKind
    bytes: int
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class StageMemory:
    """The ledger of one rank of a pipeline stage."""

    stage: int
    num_layers: int
    components: tuple[MemoryComponent, ...]
    host_components: tuple[MemoryComponent, ...]
    in_flight_chunks: int

    def bytes_of(self, kind: ComponentKind) -> int:
        """Sum of the GPU components of one kind."""
        return sum(c.bytes for c in self.components if c.kind == kind)

    @property
    def total_bytes(self) -> int:
        """All GPU bytes of the rank."""
        return sum(c.bytes for c in self.components)

    @property
    def host_bytes(self) -> int:
        """Host-memory bytes this rank uses (offloaded activations, gradient shards, EMA)."""
        return sum(c.bytes for c in self.host_components)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryLedger:
    """The per-stage ledger and its verdict."""

    stages: tuple[StageMemory, ...]
    capacity_bytes: int
    host_capacity_per_gpu_bytes: int
    num_micro_batches: int

    @property
    def peak_bytes(self) -> int:
        """Largest GPU total over the stages."""
        return max(stage.total_bytes for stage in self.stages)

    @property
    def binding_stage(self) -> int:
        """The stage with the largest GPU total."""
        return max(self.stages, key=lambda s: (s.total_bytes, -s.stage)).stage

    @property
    def host_peak_bytes(self) -> int:
        """Largest host-memory use of one rank."""
        return max(stage.host_bytes for stage in self.stages)

    @property
    def fits_gpu(self) -> bool:
        """Every rank's GPU total is within the capacity."""
        return self.peak_bytes <= self.capacity_bytes

    @property
    def fits_host(self) -> bool:
        """Every rank's host use is within its share of the node's host memory."""
        return self.host_peak_bytes <= self.host_capacity_per_gpu_bytes

    @property
    def fits(self) -> bool:
        """Both GPU and host memory suffice."""
        return self.fits_gpu and self.fits_host


@dataclass(frozen=True, slots=True, kw_only=True)
class RankParameters:
    """Parameters one rank holds, grouped by how they are sharded and stored (the single
    definition used by the ledger, the step time and the traffic ledger)."""

    gemm: int  # TP-sharded GEMM weights (attention, dense MLP, shared experts)
    vectors: int  # norms, router, biases, position table: replicated across tp
    embedding: int
    head: int
    experts: int  # routed experts, sharded by ep x etp
    largest_layer: int  # params of the largest layer shard (ZeRO-3 / FSDP unit)
    largest_matrix: int  # largest single weight matrix, unsharded (Muon)


def micro_batch_count(training: TrainingSpec, parallel: ParallelConfig) -> int:
    """Micro-batches per step per pipeline: global batch / (micro-batch x dp).

    Raises:
        InvalidSpecError: when the global batch does not divide evenly.
    """
    per_replica, rest = divmod(training.global_batch_size, parallel.micro_batch_size * parallel.dp)
    if rest or per_replica == 0:
        raise InvalidSpecError(
            f"global_batch_size={training.global_batch_size} is not a multiple of "
            f"micro_batch_size x dp = {parallel.micro_batch_size} x {parallel.dp}; pick a batch "
            f"that is (e.g. {max(1, per_replica) * parallel.micro_batch_size * parallel.dp})",
            field="training.global_batch_size")
    if parallel.num_micro_batches is not None and parallel.num_micro_batches != per_replica:
        raise InvalidSpecError(
            f"num_micro_batches={parallel.num_micro_batches} disagrees with global_batch_size / "
            f"(micro_batch_size x dp) = {per_replica}; drop it or make them agree",
            field="parallel.num_micro_batches")
    return per_replica


def expert_data_parallel_degree(spec: ModelSpec, parallel: ParallelConfig) -> int:
    """edp = tp x cp x dp / (ep x etp): replicas of each expert shard.

    Source: Megatron-LM `parallel_state` expert mesh (etp x ep x edp x pp over the same ranks
    as tp x cp x dp x pp). Raises InvalidSpecError when it is not a whole number.
    """
    folded = parallel.tp * parallel.cp * parallel.dp
    if spec.moe is None:
        return folded
    if folded % (parallel.ep * parallel.etp):
        raise InvalidSpecError(
            f"ep x etp = {parallel.ep} x {parallel.etp} does not divide tp x cp x dp = {folded}; "
            "expert parallelism folds into those ranks: pick ep x etp dividing it",
            field="parallel.ep")
    if spec.moe.num_experts % parallel.ep:
        raise InvalidSpecError(
            f"ep={parallel.ep} does not divide the {spec.moe.num_experts} routed experts; pick a "
            "divisor", field="parallel.ep")
    return folded // (parallel.ep * parallel.etp)


def _first_of_each_kind(spec: ModelSpec, layers: tuple[int, ...]) -> dict[bool, int]:
    """One layer index per kind (dense False, MoE True) among `layers`."""
    out: dict[bool, int] = {}
    for index in layers:
        out.setdefault(spec.is_moe_layer(index), index)
    return out


def rank_parameters(spec: ModelSpec, parallel: ParallelConfig, layout: StageLayout
                    ) -> RankParameters:
    """Parameters one rank holds by sharding group (cached per layer mix and degrees)."""
    counts = {False: 0, True: 0}
    for index in layout.layers:
        counts[spec.is_moe_layer(index)] += 1
    first = _first_of_each_kind(spec, layout.layers)
    return _rank_parameters(spec, parallel.tp, parallel.ep, parallel.etp, counts[False],
                            counts[True], first.get(False), first.get(True),
                            layout.num_embeddings, layout.num_heads, layout.num_mtp_modules)


@lru_cache(maxsize=16384)
def _rank_parameters(spec: ModelSpec, tp: int, ep: int, etp: int, num_dense: int,
                     num_moe: int, dense_index: int | None, moe_index: int | None,
                     num_embeddings: int, num_heads: int, num_mtp: int) -> RankParameters:
    gemm = vectors = experts = largest_layer = 0
    kinds = [(layer_params(spec, i), count) for i, count in
             ((dense_index, num_dense), (moe_index, num_moe)) if i is not None and count]
    if num_mtp:
        kinds.append((mtp_module_params(spec), num_mtp))
    attn_matrices = attention_params(spec, matrices_only=True)
    for layer, count in kinds:
        layer_gemm = attn_matrices
        if layer.dense_mlp:
            layer_gemm += mlp_params(spec, spec.ffn_hidden_size, matrices_only=True)
        if layer.shared_experts:
            moe = spec.moe
            assert moe is not None
            layer_gemm += mlp_params(spec, moe.shared_expert_ffn_hidden_size, matrices_only=True)
        layer_vectors = layer.dense_part - layer_gemm
        layer_experts = 0
        if layer.num_routed_experts:
            layer_experts = math.ceil(layer.num_routed_experts / ep * layer.routed_expert_each
                                      / etp)
        shard = math.ceil(layer_gemm / tp) + layer_vectors + layer_experts
        gemm += count * math.ceil(layer_gemm / tp)
        vectors += count * layer_vectors
        experts += count * layer_experts
        largest_layer = max(largest_layer, shard)
    vocab_shard = math.ceil(spec.vocab_size / tp) * spec.hidden_size
    positions = spec.learned_position_embeddings * spec.hidden_size
    embedding = num_embeddings * (vocab_shard + positions)
    head_copy = vocab_shard if head_params(spec) or num_embeddings == 0 else 0
    head = num_heads * head_copy
    vectors += num_heads * norm_params(spec, spec.hidden_size)
    return RankParameters(gemm=gemm, vectors=vectors, embedding=embedding, head=head,
                        experts=experts, largest_layer=largest_layer,
                        largest_matrix=largest_weight_matrix(spec))


def _model_state_components(training: TrainingSpec, parallel: ParallelConfig,
                            groups: RankParameters, edp: int,
                            max_chunk_params: int) -> tuple[list[MemoryComponent],
                                                            list[MemoryComponent]]:
    """Weights, gradients and optimizer states of one rank, GPU and host.

    FSDP without resharding after forward keeps every unit's parameters unsharded for the
    whole step beside the local shard (Llama 3, arXiv:2407.21783 Sec. 3.3.2); an optimizer
    offload share moves master weights and moments to host memory (ZeRO-Offload,
    arXiv:2101.06840 Sec. 4.1; `models/sharded_states`)."""
    dense_shard = parallel.dp * parallel.cp
    zero = parallel.zero_stage
    resident = zero == 3 and parallel.fsdp and not parallel.fsdp_reshard_after_forward
    gemm_bytes = state_bytes_per_param(training, is_gemm_weight=True, is_matrix=True)
    plain_bytes = state_bytes_per_param(training, is_gemm_weight=False, is_matrix=False)
    parts = [
        ("dense GEMM weights", groups.gemm, gemm_bytes, dense_shard),
        ("norms, biases, router", groups.vectors, plain_bytes, dense_shard),
        ("embedding", groups.embedding, plain_bytes, dense_shard),
        ("output head", groups.head, plain_bytes, dense_shard),
        ("routed experts", groups.experts, gemm_bytes, edp),
    ]
    gpu: list[MemoryComponent] = []
    host: list[MemoryComponent] = []
    offload = parallel.optimizer_offload_frac
    for label, count, per_param, shard in parts:
        if count == 0:
            continue
        states = sharded_state_bytes(count, per_param, zero_stage=zero, shard_degree=shard)
        weights, note = states.weights_bytes, f"{count} params"
        if zero == 3:
            note += f"; /{shard} under ZeRO-3"
        if resident:
            weights += math.ceil(count * (per_param.weights + per_param.fp8_copy))
            note += "; plus the unsharded copy kept from forward to the end of the step"
        gpu.append(MemoryComponent(name=f"weights: {label}", kind="parameters",
                                   bytes=weights, note=note))
        if parallel.gradient_host_shards:
            host.append(MemoryComponent(name=f"gradient shards: {label}", kind="gradients",
                                        bytes=math.ceil(count * per_param.gradients / shard),
                                        note="Pipeline ZeRO-2: sharded gradients in host memory"))
        else:
            gpu.append(MemoryComponent(name=f"gradients: {label}", kind="gradients",
                                       bytes=states.gradients_bytes))
        sharded = count / shard if zero else count
        moved = optimizer_offload_bytes(
            sharded_params=math.ceil(sharded), optimizer_bytes_per_param=per_param.optimizer,
            grad_bytes=per_param.gradients, param_bytes=per_param.weights,
            offload_frac=offload)
        on_gpu = max(0, states.optimizer_bytes - moved.host_bytes)
        gpu.append(MemoryComponent(name=f"optimizer: {label}", kind="optimizer",
                                   bytes=on_gpu,
                                   note=f"master + moments, /{shard}" if zero else
                                   "master + moments, replicated"))
        if moved.host_bytes:
            host.append(MemoryComponent(name=f"optimizer in host memory: {label}",
                                        kind="optimizer", bytes=moved.host_bytes,
                                        note=f"{offload:.0%} of master + moments, CPU update"))
    if parallel.gradient_host_shards:
        gpu.append(MemoryComponent(
            name="gradient buffers (2 chunks)", kind="gradients",
            bytes=math.ceil(2 * max_chunk_params * training.grad_dtype.num_bytes),
            note="Pipeline ZeRO-2 (Kimi K3): one chunk reducing, one accumulating"))
    return gpu, host


def _activation_context(training: TrainingSpec, parallel: ParallelConfig,
                        fp8_storage: bool) -> LayerActivationContext:
    return LayerActivationContext(
        seq_len=training.sequence_length, micro_batch_size=parallel.micro_batch_size,
        tp=parallel.tp, cp=parallel.cp, etp=parallel.etp,
        sequence_parallel=parallel.sequence_parallel, dropout=training.dropout,
        flash_attention=training.flash_attention, fp8_storage=fp8_storage,
        fp8_compute=training.compute_dtype == DType.FP8,
        moe_load_imbalance=training.moe_load_imbalance,
        moe_keep_expert_outputs=training.moe_keep_expert_outputs)


def _recompute_mode_of(policy_recompute: RecomputeMode | FullLayers,
                       position: int) -> RecomputeMode:
    if isinstance(policy_recompute, FullLayers):
        if position < policy_recompute.full_layers:
            return RecomputeMode.FULL
        return RecomputeMode(policy_recompute.others)
    return policy_recompute


def in_flight_bytes(chunk_bytes: list[int], *, peak_chunks: int,
                    micro_batches_per_chunk: int) -> int:
    """Bytes of `peak_chunks` in-flight micro-batch x chunk activations, as large as they can
    be: each chunk holds at most the micro-batches that cross it, heaviest chunks first.
    With equal chunks this is chunk bytes x peak; with uneven chunks it never exceeds what
    the heaviest selection could hold, so it is an upper bound of the true peak."""
    remaining, total = peak_chunks, 0
    for size in sorted(chunk_bytes, reverse=True):
        take = min(max(1, micro_batches_per_chunk), remaining)
        total += take * size
        remaining -= take
        if remaining <= 0:
            break
    if remaining > 0 and chunk_bytes:
        total += remaining * max(chunk_bytes)
    return total


def stage_activation_components(
    spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig, layout: StageLayout,
    *, num_micro_batches: int,
) -> tuple[list[MemoryComponent], list[MemoryComponent], int]:
    """Activation components of one rank (GPU and host) and its peak in-flight chunks.

    The stored bytes are the peak number of micro-batch x chunk activations the schedule
    keeps in flight on this rank (`peak_in_flight_chunks`), filled with the heaviest chunks
    first (`in_flight_bytes`), so uneven chunks are never under-counted.
    """
    policy = parallel.policy_of(layout.rank)
    ctx = _activation_context(training, parallel, policy.fp8_activations)
    position = 0
    chunk_bytes: list[int] = []
    working_set = 0
    by_kind: dict[bool, LayerActivationBytes] = {}  # dense and MoE layers are alike
    kept: dict[tuple[bool, RecomputeMode], int] = {}
    for chunk in layout.chunks:
        total = 0
        for index in chunk:
            kind = spec.is_moe_layer(index)
            if kind not in by_kind:
                by_kind[kind] = layer_activation_bytes(spec, index, ctx)
            layer = by_kind[kind]
            mode = _recompute_mode_of(policy.recompute, position)
            if (kind, mode) not in kept:
                kept[kind, mode] = layer.stored_bytes(mode, policy.recompute_modules)
            total += kept[kind, mode]
            if mode == RecomputeMode.FULL:
                # Backward rebuilds one layer; its input is already among the checkpoints.
                working_set = max(working_set, layer.total_bytes - layer.input_bytes)
            position += 1
        chunk_bytes.append(total)
    v = len(layout.chunks) if parallel.schedule != PipelineSchedule.DUALPIPE else 1
    peak = peak_in_flight_chunks(parallel.schedule, num_stages=parallel.pp,
                                 num_micro_batches=num_micro_batches, num_chunks=v,
                                 stage=layout.rank)
    stored = in_flight_bytes(chunk_bytes, peak_chunks=peak,
                             micro_batches_per_chunk=num_micro_batches // (
                                 2 if parallel.schedule == PipelineSchedule.DUALPIPE else 1))
    head_in_flight = num_micro_batches if parallel.schedule == PipelineSchedule.GPIPE else 1
    extras = layout.num_embeddings * embedding_activation_bytes(spec, ctx) * peak
    extras += layout.num_heads * head_activation_bytes(spec, ctx) * head_in_flight
    if layout.num_mtp_modules:
        mtp = layer_activation_bytes(spec, spec.num_layers - 1, ctx).total_bytes
        mtp += head_activation_bytes(spec, ctx)
        extras += layout.num_mtp_modules * mtp * head_in_flight
    offload = policy.offload_frac
    staging = min(stored, math.ceil(2 * max(chunk_bytes, default=0))) if offload else 0
    on_gpu = math.ceil(stored * (1.0 - offload)) + (math.ceil(staging * offload) if offload else 0)
    gpu = [MemoryComponent(name="activations: layers", kind="activations", bytes=on_gpu,
                           note=f"{peak} micro-batch x chunk units in flight x "
                                f"{max(chunk_bytes, default=0)} bytes")]
    if extras:
        gpu.append(MemoryComponent(name="activations: embedding, head, logits, MTP",
                                   kind="activations", bytes=extras))
    if working_set:
        gpu.append(MemoryComponent(name="recompute working set", kind="activations",
                                   bytes=working_set,
                                   note="one layer's full activations rebuilt in backward"))
    host = []
    if offload:
        host.append(MemoryComponent(name="offloaded activations", kind="activations",
                                    bytes=math.ceil(stored * offload),
                                    note=f"{offload:.0%} of stored activations in host memory"))
    return gpu, host, peak


def _other_components(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                      groups: RankParameters, dynamic_bytes: int) -> list[MemoryComponent]:
    """Runtime items and transient buffers, each a named term (`models/runtime_memory`,
    `models/sharded_states`)."""
    out = [MemoryComponent(name="CUDA context and library workspaces", kind="other",
                           bytes=CUDA_CONTEXT_BYTES,
                           note="context, kernel images, cuBLAS workspaces"),
           MemoryComponent(name="NCCL communicator buffers", kind="other",
                           bytes=nccl_buffer_bytes(parallel),
                           note=f"{communicator_count(parallel)} communicators x "
                                f"{NCCL_CHANNELS} channels x 2 x 4 MiB")]
    fixed = len(out)
    tokens = training.sequence_length * parallel.micro_batch_size / parallel.cp
    h = spec.hidden_size
    weight_bytes = state_bytes_per_param(training).weights
    if parallel.zero_stage == 3:
        buffers = zero3_gather_buffers(
            largest_unit_params=groups.largest_layer,
            largest_module_params=math.ceil(groups.largest_matrix / parallel.tp),
            param_bytes=weight_bytes, grad_bytes=training.grad_dtype.num_bytes,
            fsdp=parallel.fsdp, reshard_after_forward=parallel.fsdp_reshard_after_forward)
        if buffers.gathered_parameters_bytes:
            out.append(MemoryComponent(name="ZeRO-3 gathered parameters", kind="other",
                                       bytes=buffers.gathered_parameters_bytes,
                                       note=buffers.note))
        out.append(MemoryComponent(name="unsharded gradient before reduce-scatter",
                                   kind="other", bytes=buffers.unsharded_gradient_bytes,
                                   note="FSDP unit" if parallel.fsdp else "reduce bucket"))
    if training.compute_dtype == DType.FP8:
        storage = training.fp8_weight_storage
        if storage == Fp8WeightStorage.FP8_ONLY:
            out.append(MemoryComponent(name="FP8 weight transposes", kind="other",
                                       bytes=groups.largest_layer,
                                       note="one layer's FP8 transpose built for backward"))
        elif storage == Fp8WeightStorage.ON_THE_FLY:
            out.append(MemoryComponent(name="FP8 weights quantised on the fly", kind="other",
                                       bytes=math.ceil(2 * groups.largest_layer * FP8_BYTES),
                                       note="one layer's FP8 weights and transposes"))
    heads_per_rank = spec.num_attention_heads / parallel.tp
    head_dim = spec.mla.v_head_dim if spec.mla is not None else spec.dim_per_head
    out.append(MemoryComponent(
        name="attention backward workspace", kind="other",
        bytes=attention_workspace_bytes(
            tokens=tokens, heads_per_rank=heads_per_rank, head_dim=head_dim,
            seq_len_per_rank=training.sequence_length / parallel.cp,
            flash_attention=training.flash_attention),
        note="fp32 dQ accumulator" if training.flash_attention else "score gradients"))
    if parallel.tp > 1:
        gathered = tokens * h * ACTIVATION_BYTES * (1 if parallel.sequence_parallel else 0)
        if gathered:
            out.append(MemoryComponent(name="TP all-gather buffer", kind="other",
                                       bytes=math.ceil(gathered),
                                       note="sequence-parallel input gathered for one GEMM"))
    if parallel.pp > 1:
        shard = parallel.tp if parallel.sequence_parallel else 1
        out.append(MemoryComponent(name="PP send/receive buffers", kind="other",
                                   bytes=math.ceil(4 * tokens * h * ACTIVATION_BYTES / shard),
                                   note="activation and gradient, sent and received"))
    if spec.moe is not None and parallel.ep > 1:
        assignments = (tokens / parallel.tp * parallel.etp * spec.moe.top_k
                       * training.moe_load_imbalance)
        out.append(MemoryComponent(name="EP dispatch/combine buffers", kind="other",
                                   bytes=math.ceil(2 * assignments * h * ACTIVATION_BYTES),
                                   note="received tokens and combine output, S x K scale"))
    if training.optimizer == OptimizerKind.MUON and parallel.zero_stage >= 1:
        out.append(MemoryComponent(name="Muon full-matrix buffer", kind="other",
                                   bytes=math.ceil(groups.largest_matrix * 4),
                                   note="largest weight matrix gathered in fp32 for "
                                        "Newton-Schulz"))
    transient = sum(c.bytes for c in out[fixed:])
    out.append(MemoryComponent(
        name="allocator fragmentation", kind="other",
        bytes=math.ceil(ALLOCATOR_FRAGMENTATION_FRAC * (dynamic_bytes + transient)),
        note=f"{ALLOCATOR_FRAGMENTATION_FRAC:.0%} of dynamic bytes"))
    return out


def _ema_components(training: TrainingSpec, parallel: ParallelConfig,
                    total_params: int) -> tuple[list[MemoryComponent], list[MemoryComponent]]:
    if training.ema == EmaPlacement.NONE:
        return [], []
    shard = parallel.dp * parallel.cp if parallel.zero_stage >= 1 else 1
    line = MemoryComponent(name="parameter EMA", kind="optimizer",
                           bytes=math.ceil(total_params * 4 / shard), note="fp32 copy")
    return ([line], []) if training.ema == EmaPlacement.GPU else ([], [line])


def stage_memory(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                 layout: StageLayout, *, num_micro_batches: int) -> StageMemory:
    """The ledger of one rank of pipeline stage `layout.rank`."""
    edp = expert_data_parallel_degree(spec, parallel)
    groups = rank_parameters(spec, parallel, layout)
    per_kind = {kind: math.ceil(layer_params(spec, i).total / parallel.tp)
                for kind, i in _first_of_each_kind(spec, layout.layers).items()}
    chunk_params = max((sum(per_kind[spec.is_moe_layer(i)] for i in chunk)
                        for chunk in layout.chunks), default=0)
    states, host_states = _model_state_components(training, parallel, groups, edp, chunk_params)
    activations, host_acts, peak = stage_activation_components(
        spec, training, parallel, layout, num_micro_batches=num_micro_batches)
    total_params = groups.gemm + groups.vectors + groups.embedding + groups.head + groups.experts
    ema_gpu, ema_host = _ema_components(training, parallel, total_params)
    dynamic = sum(c.bytes for c in activations)
    others = _other_components(spec, training, parallel, groups, dynamic)
    return StageMemory(stage=layout.rank, num_layers=len(layout.layers),
                       components=tuple(states + ema_gpu + activations + others),
                       host_components=tuple(host_states + host_acts + ema_host),
                       in_flight_chunks=peak)


def memory_ledger(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  cluster: ClusterSpec, *, stages: Sequence[StageLayout] | None = None
                  ) -> MemoryLedger:
    """The per-stage memory ledger of a configuration and its verdict.

    Args:
        spec: the LLM architecture.
        training: batch, sequence and precision recipe.
        parallel: the configuration.
        cluster: capacity (after headroom) and host memory per node.
        stages: a precomputed layout (default: `pipeline_layout(spec, parallel)`).

    Raises:
        InvalidSpecError: the batch does not divide, experts do not shard, the schedule
            refuses these parameters, or layers do not fill the stages.
    """
    m = micro_batch_count(training, parallel)
    layouts = stages if stages is not None else pipeline_layout(spec, parallel)
    ledgers = tuple(stage_memory(spec, training, parallel, layout, num_micro_batches=m)
                    for layout in layouts)
    return MemoryLedger(stages=ledgers, capacity_bytes=cluster.capacity_bytes,
                        host_capacity_per_gpu_bytes=cluster.host_memory_bytes
                        // cluster.gpus_per_node,
                        num_micro_batches=m)


def fits_memory(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                cluster: ClusterSpec) -> bool:
    """`memory_ledger(...).fits`, stopping at the first rank that overflows.

    Ranks are checked first stage first, then last, then the middle ones (the first and
    last carry the embedding, the head and, under most schedules, the most in-flight
    micro-batches), so a configuration that does not fit is usually refuted after one
    or two ranks.

    Raises:
        InvalidSpecError: as `memory_ledger`.
    """
    m = micro_batch_count(training, parallel)
    layouts = pipeline_layout(spec, parallel)
    order = [0, len(layouts) - 1, *range(1, len(layouts) - 1)] if len(layouts) > 1 else [0]
    host_capacity = cluster.host_memory_bytes // cluster.gpus_per_node
    for rank in order:
        stage = stage_memory(spec, training, parallel, layouts[rank], num_micro_batches=m)
        if stage.total_bytes > cluster.capacity_bytes or stage.host_bytes > host_capacity:
            return False
    return True


__all__ = [
    "ALLOCATOR_FRAGMENTATION_FRAC",
    "RUNTIME_RESERVE_BYTES",
    "MemoryComponent",
    "MemoryLedger",
    "RankParameters",
    "StageMemory",
    "expert_data_parallel_degree",
    "fits_memory",
    "in_flight_bytes",
    "memory_ledger",
    "micro_batch_count",
    "rank_parameters",
    "stage_activation_components",
    "stage_memory",
]
