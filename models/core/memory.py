"""The per-rank, per-stage memory ledger of a parallel configuration, in integer bytes.

Owns: composing parameters (`params`), model states (`sharded_states`), activations
(`activations`), the stage layout (`layout`), the schedule's in-flight micro-batches
(`pipeline.in_flight`, counted per chunk from the op order) and the runtime items
(`runtime_memory`) into one ledger per pipeline rank, component by component; and the
verdict against the GPU capacity and the host memory. Must not: estimate time or search.

Conventions. Each component is rounded up to whole bytes. The worst rank of each pipeline
stage is reported (ranks of one stage differ only by rounding). Dense weights are sharded by
tp and pp; routed experts by ep x etp; ZeRO shards dense states over dp x cp (Megatron's
distributed optimizer group) and expert states over the expert-data-parallel degree
edp = tp x cp x dp / (ep x etp) (Megatron-LM PR #4687: never by tp).
"""

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TypeVar

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import (
    FullLayers,
    ParallelConfig,
    PipelineSchedule,
    RecomputeMode,
    RecomputeModule,
)
from api_schemas.training import ElementwiseFusion, TrainingSpec
from models.core.activations import (
    LayerActivationContext,
    embedding_activation_bytes,
    head_activation_bytes,
    kind_activation_bytes,
    layer_activation_bytes,
    loss_backward_working_bytes,
)
from models.core.layout import StageLayout, pipeline_layout
from models.core.ledger_items import ComponentKind, MemoryComponent, RankParameters
from models.core.mesh.layout import expert_data_parallel_size
from models.core.params import (
    head_params,
    largest_weight_matrix,
    layer_attention_params,
    layer_params,
    mlp_params,
    mtp_module_params,
    norm_params,
)
from models.core.pipeline import (
    InFlightProfile,
    in_flight_profile,
    peak_in_flight_chunks,
    schedule_traits,
)
from models.core.remote_activations import balance_remote_activations, fits_after_remote_offload
from models.core.runtime_features import ep_overlap_active
from models.core.runtime_memory import (
    ALLOCATOR_FRAGMENTATION_FRAC,
    CUDA_CONTEXT_BYTES,
    NCCL_BUFFER_BYTES,
    NCCL_CHANNELS,
    fragmentation_bytes,
    loss_hole_components,
    runtime_components,
    runtime_items,
    runtime_items_key,
)
from models.core.sharded_states import ema_components, model_state_components
from models.core.vision_pipeline import vision_memory_components
from models.errors import InvalidSpecError

RUNTIME_RESERVE_BYTES = CUDA_CONTEXT_BYTES + NCCL_CHANNELS * 2 * NCCL_BUFFER_BYTES
"""The least runtime memory any rank holds (the CUDA context and the default group's NCCL
buffers): a lower bound the search may use before a ledger is built."""

STORED_ACTIVATIONS = "activations: layers"
"""Name of the ledger line of the layers' activations stored for backward (the in-flight
micro-batch x chunk units at the schedule's peak)."""


def stored_activation_bytes(components: Iterable[MemoryComponent]) -> int:
    """Bytes of the `STORED_ACTIVATIONS` line among a rank's components (what remote
    activation offload may move and per-stage policies trade)."""
    return sum(c.bytes for c in components if c.name == STORED_ACTIVATIONS)


@dataclass(frozen=True, slots=True, kw_only=True)
class StageMemory:
    """The ledger of one rank of a pipeline stage."""

    stage: int
    num_layers: int
    components: tuple[MemoryComponent, ...]
    host_components: tuple[MemoryComponent, ...]
    in_flight_chunks: int
    remote_sent_bytes: int = 0
    """Stored activations this rank keeps in other pipeline ranks' memory at its peak
    (remote activation offload, `apply_remote_offload`)."""
    remote_received_bytes: int = 0
    """Other pipeline ranks' stored activations this rank holds."""

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
    """What a rank may use: the usable memory less the safety margin."""
    host_capacity_per_gpu_bytes: int
    num_micro_batches: int
    margin_bytes: int = 0
    """The safety margin kept free under the usable memory (`ClusterSpec.memory_margin_bytes`);
    the usable memory is capacity_bytes + margin_bytes."""
    margin_frac: float = 0.0
    """The margin as a share of the usable memory (`ClusterSpec.memory_margin_frac`)."""

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


_Key = TypeVar("_Key")
_Value = TypeVar("_Value")
_StateParts = tuple[RankParameters, list[MemoryComponent], list[MemoryComponent],
                    list[MemoryComponent], list[MemoryComponent]]
"""A rank's parameter groups, model states (GPU, host) and EMA (GPU, host)."""
_ActivationParts = tuple[list[MemoryComponent], list[MemoryComponent], int]
"""A rank's activation components (GPU, host) and its peak in-flight chunks."""


@dataclass(slots=True)
class LedgerMemo:
    """Rank-ledger pieces shared by the configurations of one mesh that a caller probes one
    after another (the ZeRO stages and activation policies of one candidate), for one model
    and recipe (`spec`, `training`: a memo given with others is ignored).

    The model states of a rank depend on its layers and its ZeRO and offload settings, not
    on the activation policy; its activations depend on its policy and layers, not on the
    ZeRO stage; its runtime items, the allocator's share of the activations aside, depend
    on neither policy. Each piece is kept under a key holding every configuration field it
    reads, so a memo hit returns the very components a fresh computation would."""

    spec: ModelSpec
    training: TrainingSpec
    states: dict[tuple[object, ...], _StateParts] = field(default_factory=dict)
    activations: dict[tuple[object, ...], _ActivationParts] = field(default_factory=dict)
    weight_kinds: dict[tuple[tuple[int, ...], ...], tuple[tuple[tuple[bool, bool], ...], ...]] = (
        field(default_factory=dict))
    """Layer weight kinds (`_chunk_weight_kinds`) of each chunk tuple (no hash of the spec)."""
    runtime: dict[tuple[object, ...], tuple[list[MemoryComponent], int]] = field(
        default_factory=dict)
    """Runtime items but the fragmentation share, by `runtime_items_key`."""
    state_sums: dict[tuple[object, ...], tuple[RankParameters, int, int]] = field(
        default_factory=dict)
    """Parameter groups and the GPU and host bytes of the model states and EMA, by the
    `states` key (what a memory probe reads of them)."""
    activation_sums: dict[tuple[object, ...], tuple[int, int, int]] = field(
        default_factory=dict)
    """GPU and host activation bytes and the `STORED_ACTIVATIONS` line, by the
    `activations` key."""
    runtime_sums: dict[tuple[object, ...], tuple[int, int]] = field(default_factory=dict)
    """The listed runtime items' bytes and the transient bytes, by `runtime_items_key`."""

    recipes: dict[TrainingSpec, "LedgerMemo"] = field(default_factory=dict)
    """The memos of the same model under other recipes (`for_recipe`), by the whole recipe."""

    def serves(self, spec: ModelSpec, training: TrainingSpec) -> bool:
        """Whether this memo was made for exactly these inputs (identity, not equality)."""
        return self.spec is spec and self.training is training

    def for_recipe(self, spec: ModelSpec, training: TrainingSpec) -> "LedgerMemo | None":
        """This memo where it serves `training`, else the one it keeps for that recipe (a
        framework variant's: its runtime features decided); None for another model."""
        if self.serves(spec, training):
            return self
        if self.spec is not spec:
            return None
        kept = self.recipes.get(training)
        if kept is None or kept.training is not training:
            kept = self.recipes[training] = LedgerMemo(spec=spec, training=training)
        return kept


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
    """Replicas of each expert shard (`models.core.mesh.layout.expert_data_parallel_size`); a
    dense model's are its tp x cp x dp ranks.

    Raises InvalidSpecError when ep x etp does not divide tp x cp x dp or ep does not divide
    the routed experts.
    """
    if spec.moe is None:
        return parallel.tp * parallel.cp * parallel.dp
    edp = expert_data_parallel_size(parallel)
    if spec.moe.num_experts % parallel.ep:
        raise InvalidSpecError(
            f"ep={parallel.ep} does not divide the {spec.moe.num_experts} routed experts; pick a "
            "divisor", field="parallel.ep")
    return edp


def _first_of_each_kind(spec: ModelSpec, layers: tuple[int, ...]) -> dict[bool, int]:
    """One layer index per kind (dense False, MoE True) among `layers`."""
    first_dense, first_moe = layer_mix(spec, layers)[2:]
    out: dict[bool, int] = {}
    if first_dense is not None:
        out[False] = first_dense
    if first_moe is not None:
        out[True] = first_moe
    return out


@lru_cache(maxsize=16384)
def layer_mix(spec: ModelSpec, layers: tuple[int, ...]
              ) -> tuple[int, int, int | None, int | None]:
    """(dense layers, MoE layers, first dense index, first MoE index) among `layers`."""
    counts = {False: 0, True: 0}
    first: dict[bool, int] = {}
    for index in layers:
        kind = spec.is_moe_layer(index)
        counts[kind] += 1
        first.setdefault(kind, index)
    return counts[False], counts[True], first.get(False), first.get(True)


@lru_cache(maxsize=16384)
def _weight_mix(spec: ModelSpec, layers: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """(a layer index, how many) per weight kind among `layers`: MoE or dense MLP, and
    linear or full attention (a hybrid model's token mixers differ in weights)."""
    counts: dict[tuple[bool, bool], int] = {}
    first: dict[tuple[bool, bool], int] = {}
    for index in layers:
        kind = (spec.is_moe_layer(index), spec.is_linear_attention_layer(index))
        counts[kind] = counts.get(kind, 0) + 1
        first.setdefault(kind, index)
    return tuple((first[kind], counts[kind]) for kind in first)


def rank_parameters(spec: ModelSpec, parallel: ParallelConfig, layout: StageLayout
                    ) -> RankParameters:
    """Parameters one rank holds by sharding group (cached per layer mix and degrees)."""
    return _rank_parameters(spec, parallel.tp, parallel.ep, parallel.etp,
                            _weight_mix(spec, layout.layers),
                            layout.num_embeddings, layout.num_heads, layout.num_mtp_modules)


@lru_cache(maxsize=16384)
def _rank_parameters(spec: ModelSpec, tp: int, ep: int, etp: int,
                     mix: tuple[tuple[int, int], ...],
                     num_embeddings: int, num_heads: int, num_mtp: int) -> RankParameters:
    gemm = vectors = experts = largest_layer = 0
    kinds = [(layer_params(spec, i), count, layer_attention_params(spec, i, matrices_only=True))
             for i, count in mix if count]
    if num_mtp:
        kinds.append((mtp_module_params(spec), num_mtp,
                      layer_attention_params(spec, spec.num_layers - 1, matrices_only=True)))
    for layer, count, attn_matrices in kinds:
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


def _layer_shard_params(spec: ModelSpec, parallel: ParallelConfig, index: int) -> int:
    """Parameters of layer `index` one rank holds: its GEMM weights / tp, its vectors, and
    its routed experts / (ep x etp), as `rank_parameters` shards them (the size of one
    layer's gradients in a Pipeline ZeRO-2 chunk buffer)."""
    one = _rank_parameters(spec, parallel.tp, parallel.ep, parallel.etp, ((index, 1),), 0, 0, 0)
    return one.gemm + one.vectors + one.experts


def _activation_context(training: TrainingSpec, parallel: ParallelConfig,
                        fp8_storage: bool) -> LayerActivationContext:
    return _shared_context(
        training.sequence_length, parallel.micro_batch_size, parallel.tp, parallel.cp,
        parallel.etp, parallel.sequence_parallel, training.dropout, training.flash_attention,
        fp8_storage, training.compute_dtype == DType.FP8, training.moe_load_imbalance,
        training.moe_keep_expert_outputs,
        parallel.norm_saves_output or bool(training.memory_efficient_norm),
        parallel.sequence_parallel_saves_gathered,
        training.elementwise_fusion == ElementwiseFusion.EAGER)


@lru_cache(maxsize=4096)
def _shared_context(seq_len: int, micro_batch_size: int, tp: int, cp: int, etp: int,
                    sequence_parallel: bool, dropout: bool, flash_attention: bool,
                    fp8_storage: bool, fp8_compute: bool, moe_load_imbalance: float,
                    moe_keep_expert_outputs: bool, norm_saves_output: bool,
                    gathered_inputs_saved: bool,
                    eager_elementwise: bool = False) -> LayerActivationContext:
    """One shared (immutable) context per setting: every rank of every probed plan asks for
    one, and building the dataclass each time was a visible share of a memory probe."""
    return LayerActivationContext(
        seq_len=seq_len, micro_batch_size=micro_batch_size, tp=tp, cp=cp, etp=etp,
        sequence_parallel=sequence_parallel, dropout=dropout,
        flash_attention=flash_attention, fp8_storage=fp8_storage, fp8_compute=fp8_compute,
        moe_load_imbalance=moe_load_imbalance,
        moe_keep_expert_outputs=moe_keep_expert_outputs,
        norm_saves_output=norm_saves_output, gathered_inputs_saved=gathered_inputs_saved,
        eager_elementwise=eager_elementwise)


def layer_stored_bytes_cap(spec: ModelSpec, index: int, training: TrainingSpec,
                           parallel: ParallelConfig) -> int:
    """The most bytes layer `index` can store per micro-batch on a rank under any activation
    policy of `parallel`'s mesh: every tensor it could keep (those only a per-op policy
    keeps included), or its input alone (full recomputation), in 16-bit or FP8 storage,
    whichever is larger. `stage_activation_components` never stores more per layer."""
    caps = []
    for fp8 in (False, True):
        layer = layer_activation_bytes(spec, index, _activation_context(training, parallel, fp8))
        caps.append(max(sum(t.bytes for t in layer.tensors), layer.input_bytes))
    return max(caps)


@lru_cache(maxsize=16384)
def _chunk_kind_runs(spec: ModelSpec, chunks: tuple[tuple[int, ...], ...]
                     ) -> tuple[tuple[int, ...], ...]:
    """Per chunk, the running count of MoE layers (entry j: MoE layers among the chunk's
    first j layers)."""
    out = []
    for chunk in chunks:
        prefix = [0]
        for index in chunk:
            prefix.append(prefix[-1] + spec.is_moe_layer(index))
        out.append(tuple(prefix))
    return tuple(out)


def _mode_spans(policy_recompute: RecomputeMode | FullLayers, position: int,
                size: int) -> list[tuple[RecomputeMode, int, int]]:
    """The chunk's layers [start, stop) under each recompute mode, for a chunk whose first
    layer is the rank's layer number `position`: under FullLayers(k) the rank's first k
    layers are fully recomputed and the others follow `others`."""
    if not isinstance(policy_recompute, FullLayers):
        return [(policy_recompute, 0, size)]
    full = min(size, max(0, policy_recompute.full_layers - position))
    spans = [(RecomputeMode.FULL, 0, full)] if full else []
    if full < size:
        spans.append((RecomputeMode(policy_recompute.others), full, size))
    return spans


def in_flight_counts(parallel: ParallelConfig, num_micro_batches: int) -> InFlightProfile:
    """The schedule's in-flight profile for this configuration: per rank, per local chunk,
    how many micro-batches its generated op order keeps live (memoised per schedule, p, m,
    chunks and interleaving group; `models.core.pipeline.in_flight`).

    Raises:
        InvalidSpecError: an unknown schedule, or parameters it refuses.
    """
    traits = schedule_traits(parallel.schedule)
    try:
        return in_flight_profile(parallel.schedule, num_stages=parallel.pp,
                                 num_micro_batches=num_micro_batches,
                                 num_chunks=traits.num_chunks(parallel.vpp),
                                 group_size=parallel.microbatch_group_size)
    except InvalidSpecError as error:
        if error.field != "group_size":
            raise
        raise InvalidSpecError(error.detail, field="parallel.microbatch_group_size") from None


def in_flight_bytes(profile: InFlightProfile, rank: int, chunk_bytes: Sequence[int]) -> int:
    """Peak bytes of the activations rank `rank` keeps until W, when each micro-batch on its
    local chunk c stores chunk_bytes[c]: the largest dot product of a live vector of the
    simulated order with the chunk sizes, exact for uneven chunks (an embedding-only first
    chunk, a loss-only last one).

    Source: the op orders of `models.core.pipeline` (reference Sec. 1.3 event counting).
    """
    return profile.peak_bytes(rank, chunk_bytes)


@lru_cache(maxsize=65536)
def _chunk_stored_bytes(spec: ModelSpec, kinds: tuple[tuple[tuple[bool, bool], ...], ...],
                        recompute: RecomputeMode | FullLayers,
                        modules: tuple[RecomputeModule, ...], ctx: LayerActivationContext
                        ) -> tuple[tuple[int, ...], int]:
    """Bytes each chunk of a rank stores per micro-batch, and the recompute working set,
    for chunks whose layers are of the given weight kinds ((MoE block, linear-attention
    mixer), `_chunk_weight_kinds`) in rank order.

    Layers of one kind under one mode store the same bytes (`kind_activation_bytes`), so
    each chunk's total is a sum of (layers of that kind and mode) x (their bytes); the
    first k positions of the rank are the fully recomputed ones under FullLayers(k). The
    result depends on the ranks' layers only through their kinds, so ranks with the same
    kinds share it."""
    chunk_bytes: list[int] = []
    working_set = 0
    kept: dict[tuple[tuple[bool, bool], RecomputeMode], int] = {}
    position = 0
    for chunk in kinds:
        size = len(chunk)
        total = 0
        for mode, start, stop in _mode_spans(recompute, position, size):
            for kind, count in Counter(chunk[start:stop]).items():
                moe, linear = kind
                layer = kind_activation_bytes(spec, moe, ctx, linear=linear)
                if (kind, mode) not in kept:
                    kept[kind, mode] = layer.stored_bytes(mode, modules)
                total += count * kept[kind, mode]
                if mode == RecomputeMode.FULL:
                    # Backward rebuilds one layer; its input is already among the
                    # checkpoints.
                    working_set = max(working_set, layer.total_bytes - layer.input_bytes)
        position += size
        chunk_bytes.append(total)
    return tuple(chunk_bytes), working_set


@dataclass(frozen=True, slots=True)
class _ActivationBytes:
    """The numbers behind a rank's activation lines (`stage_activation_components`)."""

    stored_on_gpu: int
    """The `STORED_ACTIVATIONS` line: stored layer activations less the offloaded share,
    plus the offload staging buffers."""
    extras: int
    """Embedding output, head, logits and MTP activations."""
    working_set: int
    """One fully recomputed layer's activations rebuilt in backward."""
    loss_extra: int
    """The unfused cross entropy's backward working set beyond `working_set`."""
    offloaded: int
    """Stored activations in host memory (0 without offload)."""
    peak: int
    """Peak in-flight micro-batch x chunk units."""
    largest_chunk: int
    """Bytes the rank's largest chunk stores per micro-batch."""

    @property
    def gpu_bytes(self) -> int:
        """The rank's GPU activation bytes (every line but the host one)."""
        return self.stored_on_gpu + self.extras + self.working_set + self.loss_extra


def ep_overlap_extra_bytes(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                           num_micro_batches: int, chunk_bytes: Sequence[int]) -> int:
    """Stored bytes the batch-level EP overlap adds on a rank: one more micro-batch of its
    largest chunk in flight.

    Source: Megatron-LM core_v0.14.0 `megatron/core/pipeline_parallel/schedules.py`
    (`get_pp_rank_microbatches`: with `overlap_moe_expert_parallel_comm` the interleaved
    schedule runs one extra warm-up forward "to ensure the forward and backward computations
    are independent in all 1f1b steps"; without a pipeline,
    `combined_1f1b_schedule_for_no_pipelining` runs micro-batch i+1's forward beside micro-batch
    i's backward, so two micro-batches' activations are live). DualPipe-style schedules
    already count their paired micro-batches in their op order (nothing added).
    """
    if spec.moe is None or schedule_traits(parallel.schedule).overlapped_pairs:
        return 0
    if not ep_overlap_active(training, parallel.schedule, pp=parallel.pp, ep=parallel.ep,
                             num_micro_batches=num_micro_batches):
        return 0
    return max(chunk_bytes, default=0)


def _head_and_mtp_bytes(spec: ModelSpec, layout: StageLayout,
                        ctx: LayerActivationContext) -> int:
    """Bytes a rank keeps per micro-batch for its output heads (`head_activation_bytes`)
    and MTP modules (one layer's activations and their own head each), until the last
    stage's B."""
    head = head_activation_bytes(spec, ctx)
    extras = layout.num_heads * head
    if layout.num_mtp_modules:
        mtp = layer_activation_bytes(spec, spec.num_layers - 1, ctx).total_bytes + head
        extras += layout.num_mtp_modules * mtp
    return extras


def _activation_bytes(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                      layout: StageLayout, num_micro_batches: int) -> _ActivationBytes:
    """`stage_activation_components`' numbers, without building its lines."""
    policy = parallel.policy_of(layout.rank)
    ctx = _activation_context(training, parallel, policy.fp8_activations)
    chunk_bytes, working_set = _chunk_stored_bytes(
        spec, _chunk_weight_kinds(spec, layout.chunks), policy.recompute,
        policy.recompute_modules, ctx)
    profile = in_flight_counts(parallel, num_micro_batches)
    rank = layout.rank
    stored = in_flight_bytes(profile, rank, chunk_bytes)
    # The embedding output is held with its chunk's layers (until W), so it joins that
    # chunk's bytes; the logits (and MTP) live until the last stage's B.
    extras = 0
    if layout.num_embeddings:
        embedding = embedding_activation_bytes(spec, ctx)
        with_embedding = list(chunk_bytes)
        for local in profile.first_stage_chunks[rank]:
            with_embedding[local] += embedding
        extras = in_flight_bytes(profile, rank, with_embedding) - stored
    if layout.num_heads or layout.num_mtp_modules:
        head_in_flight = max((profile.chunk_peaks_until_b[rank][c]
                              for c in profile.last_stage_chunks[rank]), default=1)
        extras += _head_and_mtp_bytes(spec, layout, ctx) * head_in_flight
    stored += ep_overlap_extra_bytes(spec, training, parallel, num_micro_batches, chunk_bytes)
    offload = policy.offload_frac
    largest = max(chunk_bytes, default=0)
    staging = min(stored, math.ceil(2 * largest)) if offload else 0
    on_gpu = math.ceil(stored * (1.0 - offload)) + (math.ceil(staging * offload) if offload else 0)
    loss_extra = 0
    if layout.num_heads and not training.fused_cross_entropy:
        # The loss backward runs before any layer is rebuilt: only its excess over the
        # recompute working set raises the peak.
        loss_extra = max(0, layout.num_heads * loss_backward_working_bytes(spec, ctx)
                         - working_set)
    return _ActivationBytes(stored_on_gpu=on_gpu, extras=extras, working_set=working_set,
                            loss_extra=loss_extra,
                            offloaded=math.ceil(stored * offload) if offload else 0,
                            peak=profile.peak_chunks[rank], largest_chunk=largest)


def stage_activation_components(
    spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig, layout: StageLayout,
    *, num_micro_batches: int,
) -> tuple[list[MemoryComponent], list[MemoryComponent], int]:
    """Activation components of one rank (GPU and host) and its peak in-flight chunks.

    The stored bytes are the peak over the schedule's op order of the micro-batches each
    local chunk holds times that chunk's bytes (`in_flight_counts`, `in_flight_bytes`), so
    uneven chunks are counted exactly, neither under nor over.
    """
    numbers = _activation_bytes(spec, training, parallel, layout, num_micro_batches)
    gpu = [MemoryComponent(name=STORED_ACTIVATIONS, kind="activations",
                           bytes=numbers.stored_on_gpu,
                           note=f"{numbers.peak} micro-batch x chunk units in flight x "
                                f"{numbers.largest_chunk} bytes")]
    if numbers.extras:
        gpu.append(MemoryComponent(name="activations: embedding, head, logits, MTP",
                                   kind="activations", bytes=numbers.extras))
    if numbers.working_set:
        gpu.append(MemoryComponent(name="recompute working set", kind="activations",
                                   bytes=numbers.working_set,
                                   note="one layer's full activations rebuilt in backward"))
    if numbers.loss_extra:
        gpu.append(MemoryComponent(
            name="cross-entropy backward working set", kind="activations",
            bytes=numbers.loss_extra,
            note="unfused (PyTorch) cross entropy: fp32 log-probabilities, their "
                 "gradient and the input gradient live at once (beyond the recompute "
                 "working set)"))
    host = []
    offload = parallel.policy_of(layout.rank).offload_frac
    if offload:
        host.append(MemoryComponent(name="offloaded activations", kind="activations",
                                    bytes=numbers.offloaded,
                                    note=f"{offload:.0%} of stored activations in host memory"))
    return gpu, host, numbers.peak


def stored_activation_floor_bytes(spec: ModelSpec, training: TrainingSpec,
                                  parallel: ParallelConfig) -> tuple[int, ...]:
    """Per pipeline rank, a floor of the GPU bytes of its `STORED_ACTIVATIONS` line under
    the rank's activation policy: the layers' stored tensors per micro-batch at the
    schedule's in-flight peak (`stage_activation_components`' per-chunk sums and profile),
    less the offloaded share, without the offload staging buffers. A rank's other
    activation lines (embedding, head, working sets) only add to it.

    Raises:
        InvalidSpecError: as `memory_ledger`.
    """
    profile = in_flight_counts(parallel, micro_batch_count(training, parallel))
    return tuple(_stored_floor(spec, training, parallel, layout, profile)
                 for layout in pipeline_layout(spec, parallel))


def _stored_floor(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  layout: StageLayout, profile: InFlightProfile) -> int:
    """One rank's term of `stored_activation_floor_bytes`."""
    policy = parallel.policy_of(layout.rank)
    ctx = _activation_context(training, parallel, policy.fp8_activations)
    chunk_bytes, _ = _chunk_stored_bytes(spec, _chunk_weight_kinds(spec, layout.chunks),
                                         policy.recompute, policy.recompute_modules, ctx)
    stored = in_flight_bytes(profile, layout.rank, chunk_bytes)
    return math.floor(stored * (1.0 - policy.offload_frac))


def _first_stage_in_flight(parallel: ParallelConfig, layout: StageLayout, m: int) -> int:
    """Micro-batches the rank's first-stage chunks hold until their backward at once (where
    an encoder on stage 0 keeps its activations); 1 without a pipeline."""
    if parallel.pp == 1:
        return 1
    profile = in_flight_counts(parallel, m)
    peaks = profile.chunk_peaks_until_b[layout.rank]
    return max((peaks[c] for c in profile.first_stage_chunks[layout.rank]), default=0)


def _state_parts(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                 layout: StageLayout) -> _StateParts:
    """A rank's parameter groups, model states (GPU, host) and EMA (GPU, host)."""
    edp = expert_data_parallel_degree(spec, parallel)
    groups = rank_parameters(spec, parallel, layout)
    per_kind = {kind: _layer_shard_params(spec, parallel, i)
                for kind, i in _first_of_each_kind(spec, layout.layers).items()}
    chunk_params = max(((len(chunk) - prefix[-1]) * per_kind.get(False, 0)
                        + prefix[-1] * per_kind.get(True, 0)
                        for chunk, prefix in zip(layout.chunks,
                                                 _chunk_kind_runs(spec, layout.chunks),
                                                 strict=True)), default=0)
    states, host_states = model_state_components(training, parallel, groups, edp, chunk_params)
    total_params = groups.gemm + groups.vectors + groups.embedding + groups.head + groups.experts
    ema_gpu, ema_host = ema_components(training, parallel, total_params)
    return groups, states, host_states, ema_gpu, ema_host


@lru_cache(maxsize=16384)
def _chunk_weight_kinds(spec: ModelSpec, chunks: tuple[tuple[int, ...], ...]
                        ) -> tuple[tuple[tuple[bool, bool], ...], ...]:
    """Per chunk, each layer's weight kind: (MoE block, linear-attention mixer)."""
    return tuple(tuple((spec.is_moe_layer(i), spec.is_linear_attention_layer(i)) for i in chunk)
                 for chunk in chunks)


def _layout_weight_kinds(spec: ModelSpec, layout: StageLayout, memo: LedgerMemo | None
                         ) -> tuple[tuple[tuple[bool, bool], ...], ...]:
    """`_chunk_weight_kinds` of a rank's chunks, read from `memo` where given (no hash of
    the spec)."""
    kinds = memo.weight_kinds.get(layout.chunks) if memo is not None else None
    if kinds is None:
        kinds = _chunk_weight_kinds(spec, layout.chunks)
        if memo is not None:
            memo.weight_kinds[layout.chunks] = kinds
    return kinds


def _states_key(spec: ModelSpec, parallel: ParallelConfig, layout: StageLayout,
                memo: LedgerMemo | None = None) -> tuple[object, ...]:
    """Every configuration field `_state_parts` reads (spec and recipe aside). The layout
    enters by its layers' weight kinds per chunk and its embeddings, heads and MTP modules,
    not by its rank or layer indices: every term reads a layer through the first layer of
    its kind (`_weight_mix`, `_first_of_each_kind`), and layers of one weight kind hold the
    same parameters, so ranks alike in these share their states."""
    return (_layout_weight_kinds(spec, layout, memo), layout.num_embeddings, layout.num_heads,
            layout.num_mtp_modules, parallel.tp, parallel.cp, parallel.dp, parallel.ep,
            parallel.etp,
            parallel.zero_stage, parallel.fsdp, parallel.fsdp_reshard_after_forward,
            parallel.fsdp_defer_grad_sync, parallel.optimizer_offload_frac,
            parallel.gradient_host_shards)


def _activations_key(parallel: ParallelConfig, layout: StageLayout,
                     num_micro_batches: int) -> tuple[object, ...]:
    """Every configuration field `stage_activation_components` reads (spec and recipe
    aside): the rank's policy, the activation context's degrees, the schedule's shape."""
    return (layout, num_micro_batches, parallel.policy_of(layout.rank),
            parallel.micro_batch_size, parallel.tp, parallel.cp, parallel.etp,
            parallel.sequence_parallel, parallel.sequence_parallel_saves_gathered,
            parallel.schedule, parallel.pp, parallel.vpp, parallel.microbatch_group_size)


def _memoised(table: dict[_Key, _Value], key: _Key, make: Callable[[], _Value]) -> _Value:
    """`table[key]`, made and kept on the first ask."""
    value = table.get(key)
    if value is None:
        value = table[key] = make()
    return value


def _rank_parts(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                layout: StageLayout, num_micro_batches: int, memo: LedgerMemo | None
                ) -> tuple[_StateParts, _ActivationParts,
                           tuple[list[MemoryComponent], int] | None]:
    """A rank's model states, activations and (with a memo) runtime items but the
    allocator's share, from `memo` where it has them (it must serve these inputs)."""
    def states() -> _StateParts:
        return _state_parts(spec, training, parallel, layout)

    def activations() -> _ActivationParts:
        return stage_activation_components(spec, training, parallel, layout,
                                           num_micro_batches=num_micro_batches)

    if memo is None:
        return states(), activations(), None
    parts = _memoised(memo.states, _states_key(spec, parallel, layout, memo), states)
    acts = _memoised(memo.activations, _activations_key(parallel, layout, num_micro_batches),
                     activations)
    groups = parts[0]
    items = _memoised(memo.runtime, runtime_items_key(parallel, groups),
                      lambda: runtime_items(spec, training, parallel, groups))
    return parts, acts, items


def stage_memory(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                 layout: StageLayout, *, num_micro_batches: int,
                 memo: LedgerMemo | None = None) -> StageMemory:
    """The ledger of one rank of pipeline stage `layout.rank` (`memo`: pieces shared with
    earlier configurations of the same mesh, `LedgerMemo`)."""
    if memo is not None and not memo.serves(spec, training):
        memo = None
    parts, acts, items = _rank_parts(spec, training, parallel, layout, num_micro_batches, memo)
    groups, states, host_states, ema_gpu, ema_host = parts
    activations, host_acts, peak = acts
    dynamic = sum(c.bytes for c in activations)
    others = runtime_components(spec, training, parallel, groups, dynamic,
                                num_heads=layout.num_heads, items=items)
    vision = vision_memory_components(
        spec, training, parallel, stage=layout.rank,
        in_flight=_first_stage_in_flight(parallel, layout, num_micro_batches),
        num_micro_batches=num_micro_batches) if training.vision is not None else []
    return StageMemory(stage=layout.rank, num_layers=len(layout.layers),
                       components=tuple(states + ema_gpu + activations + vision + others),
                       host_components=tuple(host_states + host_acts + ema_host),
                       in_flight_chunks=peak)


def _state_sums(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                layout: StageLayout, memo: LedgerMemo) -> tuple[RankParameters, int, int]:
    """A rank's parameter groups and its model states' GPU and host bytes (EMA included),
    from `memo` where it has them."""
    key = _states_key(spec, parallel, layout, memo)

    def state_sums() -> tuple[RankParameters, int, int]:
        groups, states, host_states, ema_gpu, ema_host = _memoised(
            memo.states, key, lambda: _state_parts(spec, training, parallel, layout))
        return (groups, sum(c.bytes for c in states) + sum(c.bytes for c in ema_gpu),
                sum(c.bytes for c in host_states) + sum(c.bytes for c in ema_host))

    return _memoised(memo.state_sums, key, state_sums)


def _runtime_sums(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  groups: RankParameters, memo: LedgerMemo) -> tuple[int, int]:
    """A rank's listed runtime bytes and its transient bytes, from `memo` where it has
    them."""
    items_key = runtime_items_key(parallel, groups)

    def runtime_sums() -> tuple[int, int]:
        listed, transient = _memoised(memo.runtime, items_key,
                                      lambda: runtime_items(spec, training, parallel, groups))
        return sum(c.bytes for c in listed), transient

    return _memoised(memo.runtime_sums, items_key, runtime_sums)


def _pipeline_exceeds(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                      layouts: Sequence[StageLayout], profile: InFlightProfile,
                      memo: LedgerMemo, limit_bytes: int) -> bool:
    """True when the sum over the pipeline's ranks of a floor of `_rank_bytes`' GPU bytes
    exceeds `limit_bytes` (stopping as soon as a partial sum does). A rank's floor is read
    from the memo's shared pieces and its stored layer activations alone
    (`stored_activation_floor_bytes`' term): every other activation line, the staging
    buffers, the loss hole and their fragmentation share only add to it."""
    total = 0
    for layout in layouts:
        groups, states_gpu, _ = _state_sums(spec, training, parallel, layout, memo)
        listed, transient = _runtime_sums(spec, training, parallel, groups, memo)
        stored = _stored_floor(spec, training, parallel, layout, profile)
        total += states_gpu + stored + listed + fragmentation_bytes(stored, transient)
        if total > limit_bytes:
            return True
    return False


def _rank_bytes(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                layout: StageLayout, num_micro_batches: int,
                memo: LedgerMemo | None) -> tuple[int, int, int]:
    """(`total_bytes`, `host_bytes`, the `STORED_ACTIVATIONS` line's bytes) of
    `stage_memory`'s ledger, summed from its parts without building the ledger lines where
    a memo holds the runtime items."""
    if memo is None or training.vision is not None:
        stage = stage_memory(spec, training, parallel, layout,
                             num_micro_batches=num_micro_batches, memo=memo)
        return stage.total_bytes, stage.host_bytes, stored_activation_bytes(stage.components)
    groups, states_gpu, states_host = _state_sums(spec, training, parallel, layout, memo)
    acts_key = _activations_key(parallel, layout, num_micro_batches)

    def activation_sums() -> tuple[int, int, int]:
        known = memo.activations.get(acts_key)
        if known is not None:
            activations, host_acts, _ = known
            return (sum(c.bytes for c in activations), sum(c.bytes for c in host_acts),
                    stored_activation_bytes(activations))
        numbers = _activation_bytes(spec, training, parallel, layout, num_micro_batches)
        return numbers.gpu_bytes, numbers.offloaded, numbers.stored_on_gpu

    dynamic, acts_host, stored = _memoised(memo.activation_sums, acts_key, activation_sums)
    listed, transient = _runtime_sums(spec, training, parallel, groups, memo)
    hole = sum(c.bytes for c in loss_hole_components(spec, training, parallel,
                                                     num_heads=layout.num_heads))
    gpu = states_gpu + dynamic + listed + fragmentation_bytes(dynamic, transient) + hole
    return gpu, states_host + acts_host, stored


def head_in_flight_floor(schedule: PipelineSchedule, pp: int, num_micro_batches: int) -> int:
    """A lower bound of the micro-batches the schedule keeps in flight on the chunk holding
    the output head (the ledger's count is the generated order's, `in_flight_counts`): all
    of them where every stage runs its forwards before its backwards (GPipe), one elsewhere
    (the micro-batch whose backward follows its forward). Read from the schedule's traits
    rather than its generated order, which costs a first call of a new shape up to 0.15 s
    (Chimera)."""
    if pp > 1 and schedule_traits(schedule).forwards_before_backwards:
        return num_micro_batches
    return 1


def _peak_chunks_floor(parallel: ParallelConfig, num_micro_batches: int, rank: int) -> int:
    """A lower bound of the micro-batch x chunk units rank `rank` holds at its peak: the
    schedule's closed form where its record has one (`peak_in_flight_chunks`, pinned to the
    generated order by the tests), else one. No op order is generated."""
    traits = schedule_traits(parallel.schedule)
    if traits.peak_form is None:
        return 1
    return peak_in_flight_chunks(parallel.schedule, num_stages=parallel.pp,
                                 num_micro_batches=num_micro_batches,
                                 num_chunks=traits.num_chunks(parallel.vpp), stage=rank,
                                 group_size=parallel.microbatch_group_size)


def peak_floor_bytes(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig, *,
                     memo: LedgerMemo, pooled: bool = False,
                     limit_bytes: int | None = None) -> int:
    """A lower bound of the ledger peak (`MemoryLedger.peak_bytes`) of `parallel` and of
    every configuration of its mesh and layer split that shards the model states no further
    and stores at least its activations: `parallel` at the strongest ZeRO stage with full
    recomputation, FP8 storage and the largest offload share a request allows bounds every
    plan of a search candidate.

    It reads the ranks holding an output head only: the peak is at least each rank's
    total, so one rank bounds it, at a cost that does not grow with the pipeline's depth,
    and without generating the schedule's op order (a search asks it of thousands of
    shapes). A rank's floor is the sum of ledger lines that no such configuration lowers, or
    lower bounds of them: its model states; its head, logits and MTP activations for the
    micro-batches in flight on the head's chunk (`head_in_flight_floor`); its stored layer
    activations, at least its smallest chunk's per micro-batch times the schedule's peak
    in-flight units (`_peak_chunks_floor`), less the offloaded share (full recomputation
    keeps only each layer's input, which every other policy keeps too); the runtime items
    that every ZeRO stage holds (`runtime_items` at ZeRO 0: the ZeRO-3 gather buffers and
    the optimizer's full-matrix buffer only add to them); the allocator's fragmentation
    share of those activations and transients; and the unfused loss's freed-logits block.
    The recompute working set is left out: a selective plan has none, and its stored bytes
    are not below full recomputation's by a known margin. `pooled` (remote activation
    offload may move stored activations between the pipeline's ranks): the stored layer
    activations are left out too. `limit_bytes`: the first rank whose floor exceeds it is
    returned at once (still a lower bound of the peak, above the limit exactly when the
    whole floor is).

    Where the output head's rank carries the logits of a long sequence, this is far above
    the mean over ranks that `solver.bounds.BoundTables.memory_bound_bytes` takes: DeepSeek-V3
    at 32k tokens with micro-batch 4 over cp 4 keeps 47 GiB of head, logits and MTP
    activations on that rank.

    Raises:
        InvalidSpecError: as `memory_ledger`.
    """
    m = micro_batch_count(training, parallel)
    bare = parallel.model_copy(update={"zero_stage": 0}) if parallel.zero_stage else parallel
    peak = 0
    for layout in pipeline_layout(spec, parallel):
        if not layout.num_heads:
            continue
        groups, states_gpu, _ = _state_sums(spec, training, parallel, layout, memo)
        listed, transient = _runtime_sums(spec, training, bare, groups, memo)
        policy = parallel.policy_of(layout.rank)
        ctx = _activation_context(training, parallel, policy.fp8_activations)
        dynamic = (_head_and_mtp_bytes(spec, layout, ctx)
                   * head_in_flight_floor(parallel.schedule, parallel.pp, m))
        if not pooled:
            chunk_bytes, _ = _chunk_stored_bytes(
                spec, _chunk_weight_kinds(spec, layout.chunks), policy.recompute,
                policy.recompute_modules, ctx)
            dynamic += math.floor(_peak_chunks_floor(parallel, m, layout.rank)
                                  * min(chunk_bytes, default=0) * (1.0 - policy.offload_frac))
        hole = sum(c.bytes for c in loss_hole_components(spec, training, parallel,
                                                         num_heads=layout.num_heads))
        floor = (states_gpu + dynamic + listed + hole
                 + fragmentation_bytes(dynamic, transient))
        if limit_bytes is not None and floor > limit_bytes:
            return floor
        peak = max(peak, floor)
    return peak


def memory_ledger(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  cluster: ClusterSpec, *, stages: Sequence[StageLayout] | None = None,
                  memo: LedgerMemo | None = None) -> MemoryLedger:
    """The per-stage memory ledger of a configuration and its verdict.

    Args:
        spec: the LLM architecture.
        training: batch, sequence and precision recipe.
        parallel: the configuration.
        cluster: capacity (after headroom and safety margin) and host memory per node.
        stages: a precomputed layout (default: `pipeline_layout(spec, parallel)`).
        memo: rank-ledger pieces shared with other configurations of the same mesh
            (`LedgerMemo`); the ledger is the same with or without it.

    Raises:
        InvalidSpecError: the batch does not divide, experts do not shard, the schedule
            refuses these parameters, or layers do not fill the stages.
    """
    m = micro_batch_count(training, parallel)
    layouts = stages if stages is not None else pipeline_layout(spec, parallel)
    ledgers = tuple(stage_memory(spec, training, parallel, layout, num_micro_batches=m,
                                 memo=memo)
                    for layout in layouts)
    if parallel.remote_activation_offload and len(ledgers) > 1:
        ledgers = apply_remote_offload(ledgers, cluster.capacity_bytes)
    return MemoryLedger(stages=ledgers, capacity_bytes=cluster.capacity_bytes,
                        host_capacity_per_gpu_bytes=cluster.host_memory_bytes
                        // cluster.gpus_per_node,
                        num_micro_batches=m, margin_bytes=cluster.memory_margin_bytes,
                        margin_frac=cluster.memory_margin_frac)


REMOTE_RECEIVED = "activations: held for other pipeline ranks"
"""Name of the ledger line of the stored activations a rank holds for other ranks of its
pipeline group under remote activation offload."""


def apply_remote_offload(stages: tuple[StageMemory, ...], capacity_bytes: int
                         ) -> tuple[StageMemory, ...]:
    """The pipeline's rank ledgers with remote activation offload: the ranks over the GPU
    capacity send the excess of their stored layer activations (`STORED_ACTIVATIONS`, what
    is left on the GPU after any host offload) to ranks with spare memory, each receiver
    kept within the capacity at its own ledger peak
    (`models.core.remote_activations.balance_remote_activations` with the capacity as the least
    level: only the bytes over it move). Source and assumptions: Kimi K3 arXiv:2607.24653
    (seed ledger Sec. 9.4-9.5), as `models.core.remote_activations` states them; the moved bytes
    keep their share of the allocator's fragmentation on the sender (the receiver holds
    them in one registered buffer). Ranks already within the capacity are unchanged, and a
    pipeline whose excess does not fit the room keeps the lowest level reachable (still
    over the capacity: the verdict says it does not fit)."""
    totals = [s.total_bytes for s in stages]
    if max(totals) <= capacity_bytes:
        return stages
    movable = [stored_activation_bytes(s.components) for s in stages]
    balance = balance_remote_activations(totals=totals, movable=movable,
                                         capacity=capacity_bytes, least_level=capacity_bytes)
    out = []
    for stage, sent, received in zip(stages, balance.sent, balance.received, strict=True):
        if not sent and not received:
            out.append(stage)
            continue
        parts = []
        for c in stage.components:
            if c.name == STORED_ACTIVATIONS and sent:
                c = MemoryComponent(name=c.name, kind=c.kind, bytes=c.bytes - sent,
                                    note=f"{c.note}; {sent} bytes held by other pipeline "
                                         "ranks (remote offload)")
            parts.append(c)
        if received:
            parts.append(MemoryComponent(
                name=REMOTE_RECEIVED, kind="activations", bytes=received,
                note="remote activation offload (Kimi K3): other ranks' stored activations "
                     "in this rank's spare memory"))
        out.append(replace(stage, components=tuple(parts), remote_sent_bytes=sent,
                           remote_received_bytes=received))
    return tuple(out)


def fits_memory(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                cluster: ClusterSpec, *, memo: LedgerMemo | None = None) -> bool:
    """`memory_ledger(...).fits`, stopping at the first rank that overflows (`memo` as in
    `memory_ledger`).

    Ranks are checked first stage first, then last, then the middle ones (the first and
    last carry the embedding, the head and, under most schedules, the most in-flight
    micro-batches), so a configuration that does not fit is usually refuted after one
    or two ranks.

    Raises:
        InvalidSpecError: as `memory_ledger`.
    """
    if memo is not None and not memo.serves(spec, training):
        memo = None
    m = micro_batch_count(training, parallel)
    layouts = pipeline_layout(spec, parallel)
    host_capacity = cluster.host_memory_bytes // cluster.gpus_per_node
    # The end ranks first: they hold the embedding, the head and, under most schedules,
    # the most in-flight micro-batches.
    order = [0, len(layouts) - 1, *range(1, len(layouts) - 1)] if len(layouts) > 1 else [0]
    if parallel.remote_activation_offload and len(layouts) > 1:
        # Whether a rank fits depends on the others' room: every rank is needed, and the
        # verdict of `apply_remote_offload`'s balance is its closed form. A rank whose bytes
        # that cannot move exceed the capacity refutes it at once (the closed form's first
        # condition).
        if memo is not None and training.vision is None:
            # The sum of the ranks' floors over the pipeline's capacity refutes the closed
            # form's second condition before any rank's full ledger is summed.
            if _pipeline_exceeds(spec, training, parallel, [layouts[rank] for rank in order],
                                 in_flight_counts(parallel, m), memo,
                                 cluster.capacity_bytes * len(layouts)):
                return False
        totals, movable = [], []
        for rank in order:
            gpu, host, stored = _rank_bytes(spec, training, parallel, layouts[rank], m, memo)
            if host > host_capacity or gpu - stored > cluster.capacity_bytes:
                return False
            totals.append(gpu)
            movable.append(stored)
        return fits_after_remote_offload(totals=totals, movable=movable,
                                         capacity=cluster.capacity_bytes)
    profile = in_flight_counts(parallel, m) if len(layouts) > 1 else None
    checked: dict[tuple[object, ...], list[int]] = {}
    uniform = parallel.stage_policies is None
    for rank in order:
        twin = _twin_key(spec, parallel, layouts[rank], memo, uniform=uniform)
        if profile is not None and twin is not None and any(
                profile.dominates(other, rank) for other in checked.get(twin, ())):
            continue  # holds no more than a rank already found to fit
        gpu, host, _ = _rank_bytes(spec, training, parallel, layouts[rank], m, memo)
        if gpu > cluster.capacity_bytes or host > host_capacity:
            return False
        if twin is not None:
            checked.setdefault(twin, []).append(rank)
    return True


def _twin_key(spec: ModelSpec, parallel: ParallelConfig, layout: StageLayout,
              memo: LedgerMemo | None = None, *,
              uniform: bool = False) -> tuple[object, ...] | None:
    """What makes two ranks' ledgers equal apart from their in-flight micro-batches, or None
    for ranks holding an embedding, a head or MTP modules (their extra terms read other rows
    of the profile).

    Every ledger term of a rank reads its layers by kind and position (the first layer of
    each kind stands for all of that kind), its policy, and the profile only through
    `InFlightProfile.peak_bytes` of its chunk sizes: two ranks with the same key and a live
    profile of one dominating the other's (`InFlightProfile.dominates`) differ only in the
    stored activations, and every GPU and host term is non-decreasing in them (offloaded
    and staged shares, the allocator's fragmentation share). So the dominated rank fits
    whenever the dominating one does."""
    if layout.num_embeddings or layout.num_heads or layout.num_mtp_modules:
        return None
    # The layers' weight kinds (MoE block, linear-attention mixer), not their MoE kinds
    # alone: a Kimi Linear rank with more KDA layers than another of the same MoE pattern
    # holds more parameters (a KDA mixer's weights exceed an MLA one's), so it is no twin.
    kinds = _layout_weight_kinds(spec, layout, memo)
    # Under one policy for every rank (`uniform`) the policy cannot tell ranks apart.
    return kinds, None if uniform else parallel.policy_of(layout.rank)


__all__ = [
    "ALLOCATOR_FRAGMENTATION_FRAC",
    "REMOTE_RECEIVED",
    "RUNTIME_RESERVE_BYTES",
    "STORED_ACTIVATIONS",
    "LedgerMemo",
    "MemoryComponent",
    "MemoryLedger",
    "RankParameters",
    "StageMemory",
    "apply_remote_offload",
    "expert_data_parallel_degree",
    "fits_memory",
    "head_in_flight_floor",
    "in_flight_bytes",
    "in_flight_counts",
    "layer_mix",
    "layer_stored_bytes_cap",
    "memory_ledger",
    "micro_batch_count",
    "peak_floor_bytes",
    "rank_parameters",
    "stage_activation_components",
    "stage_memory",
    "stored_activation_bytes",
    "stored_activation_floor_bytes",
]
