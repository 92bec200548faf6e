"""A pipeline rank's activation ledger lines: stored layer activations at the schedule's
in-flight peak, embedding, head, logits and MTP activations, working sets and the offloaded
share.

Owns: the activation context of a configuration, the bytes each chunk stores per
micro-batch (`chunk_stored_bytes`), the schedule's in-flight profile for a configuration
(`in_flight_counts`) and the activation components of one rank
(`stage_activation_components`). Must not: count parameters or model states
(`models.core.rank_states`), build or judge a ledger (`models.core.memory`), bound one
(`models.core.memory_floors`), or estimate time.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.parallel import (
    FullLayers,
    ParallelConfig,
    PipelineSchedule,
    RecomputeMode,
    RecomputeModule,
    StagePolicy,
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
from models.core.layout import StageLayout
from models.core.ledger_items import MemoryComponent
from models.core.pipeline import (
    SCHEDULES,
    InFlightProfile,
    in_flight_profile,
)
from models.core.rank_states import chunk_weight_kinds
from models.core.runtime_features import ep_overlap_active
from models.core.search_memo import current_memo, kept
from models.errors import InvalidSpecError

STORED_ACTIVATIONS = "activations: layers"
"""Name of the ledger line of the layers' activations stored for backward (the in-flight
micro-batch x chunk units at the schedule's peak)."""


def stored_activation_bytes(components: Iterable[MemoryComponent]) -> int:
    """Bytes of the `STORED_ACTIVATIONS` line among a rank's components (what remote
    activation offload may move and per-stage policies trade)."""
    return sum(c.bytes for c in components if c.name == STORED_ACTIVATIONS)


ActivationParts = tuple[list[MemoryComponent], list[MemoryComponent], int]
"""A rank's activation components (GPU, host) and its peak in-flight chunks."""


class ActivationMesh(Protocol):
    """The configuration fields a rank's activation lines read beside its policy and layout:
    what `ParallelConfig` and `ActivationInputs` both give."""

    @property
    def micro_batch_size(self) -> int: ...
    @property
    def tp(self) -> int: ...
    @property
    def cp(self) -> int: ...
    @property
    def etp(self) -> int: ...
    @property
    def ep(self) -> int: ...
    @property
    def pp(self) -> int: ...
    @property
    def vpp(self) -> int: ...
    @property
    def sequence_parallel(self) -> bool: ...
    @property
    def sequence_parallel_saves_gathered(self) -> bool: ...
    @property
    def norm_saves_output(self) -> bool: ...
    @property
    def schedule(self) -> PipelineSchedule: ...
    @property
    def microbatch_group_size(self) -> int | None: ...


class ActivationInputs(NamedTuple):
    """Every input of one rank's activation lines (`activation_parts`) but the model and
    recipe: the rank's layout and policy, the micro-batches per step and the configuration
    fields of `ActivationMesh`. The lines are computed from this record alone, so a memo
    keyed by it cannot return another configuration's lines."""

    layout: StageLayout
    num_micro_batches: int
    policy: StagePolicy
    micro_batch_size: int
    tp: int
    cp: int
    etp: int
    ep: int
    pp: int
    vpp: int
    sequence_parallel: bool
    sequence_parallel_saves_gathered: bool
    norm_saves_output: bool
    schedule: PipelineSchedule
    microbatch_group_size: int | None

    @classmethod
    def of(cls, parallel: ParallelConfig, layout: StageLayout,
           num_micro_batches: int) -> "ActivationInputs":
        """The record of rank `layout.rank` of `parallel` at `num_micro_batches`."""
        # Built as a tuple: the generated `__new__` costs a Python call per record.
        return tuple.__new__(cls, (
            layout, num_micro_batches, parallel.policy_of(layout.rank),
            parallel.micro_batch_size, parallel.tp, parallel.cp, parallel.etp, parallel.ep,
            parallel.pp, parallel.vpp, parallel.sequence_parallel,
            parallel.sequence_parallel_saves_gathered, parallel.norm_saves_output,
            parallel.schedule, parallel.microbatch_group_size))


class ContextInputs(NamedTuple):
    """Every field of a `LayerActivationContext`, as the record its shared instance is kept
    by (`activation_context`)."""

    seq_len: int
    micro_batch_size: int
    tp: int
    cp: int
    etp: int
    sequence_parallel: bool
    dropout: bool
    flash_attention: bool
    fp8_storage: bool
    fp8_compute: bool
    moe_load_imbalance: float
    moe_keep_expert_outputs: bool
    norm_saves_output: bool
    gathered_inputs_saved: bool
    eager_elementwise: bool


def activation_context(training: TrainingSpec, parallel: ActivationMesh,
                       fp8_storage: bool) -> LayerActivationContext:
    """The activation context of a recipe and configuration with or without FP8 storage."""
    # Built as a tuple: the generated `__new__` costs a Python call per record.
    inputs = tuple.__new__(ContextInputs, (
        training.sequence_length, parallel.micro_batch_size, parallel.tp, parallel.cp,
        parallel.etp, parallel.sequence_parallel, training.dropout, training.flash_attention,
        fp8_storage, training.compute_dtype == DType.FP8, training.moe_load_imbalance,
        training.moe_keep_expert_outputs,
        parallel.norm_saves_output or bool(training.memory_efficient_norm),
        parallel.sequence_parallel_saves_gathered,
        training.elementwise_fusion == ElementwiseFusion.EAGER))
    # One shared (immutable) context per record on the search's memo: every rank of every
    # probed plan asks for one, and building the dataclass each time was a visible share of
    # a memory probe.
    memo = current_memo()
    return kept(memo.activation_contexts, inputs,
                lambda: LayerActivationContext(**inputs._asdict()))


def layer_stored_bytes_cap(spec: ModelSpec, index: int, training: TrainingSpec,
                           parallel: ParallelConfig) -> int:
    """The most bytes layer `index` can store per micro-batch on a rank under any activation
    policy of `parallel`'s mesh: every tensor it could keep (those only a per-op policy
    keeps included), or its input alone (full recomputation), in 16-bit or FP8 storage,
    whichever is larger. `stage_activation_components` never stores more per layer."""
    caps = []
    for fp8 in (False, True):
        layer = layer_activation_bytes(spec, index, activation_context(training, parallel, fp8))
        caps.append(max(sum(t.bytes for t in layer.tensors), layer.input_bytes))
    return max(caps)


def _mode_spans(policy_recompute: RecomputeMode | FullLayers, position: int,
                size: int) -> list[tuple[RecomputeMode, int, int]]:
    """The chunk's layers [start, stop)) under each recompute mode, for a chunk whose first
    layer is the rank's layer number `position`: under FullLayers(k) the rank's first k
    layers are fully recomputed and the others follow `others`."""
    if not isinstance(policy_recompute, FullLayers):
        return [(policy_recompute, 0, size)]
    full = min(size, max(0, policy_recompute.full_layers - position))
    spans = [(RecomputeMode.FULL, 0, full)] if full else []
    if full < size:
        spans.append((RecomputeMode(policy_recompute.others), full, size))
    return spans


def in_flight_counts(parallel: ActivationMesh, num_micro_batches: int) -> InFlightProfile:
    """The schedule's in-flight profile for this configuration: per rank, per local chunk,
    how many micro-batches its generated op order keeps live (memoised per schedule, p, m,
    chunks and interleaving group; `models.core.pipeline.in_flight`).

    Raises:
        InvalidSpecError: an unknown schedule, or parameters it refuses.
    """
    traits = SCHEDULES[parallel.schedule]
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


def chunk_stored_bytes(spec: ModelSpec, kinds: tuple[tuple[tuple[bool, bool], ...], ...],
                        recompute: RecomputeMode | FullLayers,
                        modules: tuple[RecomputeModule, ...], ctx: LayerActivationContext
                        ) -> tuple[tuple[int, ...], int]:
    """`_chunk_stored_bytes`, kept on the search's tables of the model."""
    memo = current_memo()
    table = memo.tables(spec).stored_bytes
    key = (kinds, recompute, modules, ctx)
    return kept(table, key, lambda: _chunk_stored_bytes(spec, kinds, recompute, modules, ctx))


def _chunk_stored_bytes(spec: ModelSpec, kinds: tuple[tuple[tuple[bool, bool], ...], ...],
                        recompute: RecomputeMode | FullLayers,
                        modules: tuple[RecomputeModule, ...], ctx: LayerActivationContext
                        ) -> tuple[tuple[int, ...], int]:
    """Bytes each chunk of a rank stores per micro-batch, and the recompute working set,
    for chunks whose layers are of the given weight kinds ((MoE block, linear-attention
    mixer), `chunk_weight_kinds`) in rank order.

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
            segment = chunk[start:stop]
            # Each kind in order of first appearance with its count (as a Counter's items).
            for kind in dict.fromkeys(segment):
                count = segment.count(kind)
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
class ActivationBytes:
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


def ep_overlap_extra_bytes(spec: ModelSpec, training: TrainingSpec, parallel: ActivationMesh,
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
    if spec.moe is None or SCHEDULES[parallel.schedule].overlapped_pairs:
        return 0
    if not ep_overlap_active(training, parallel.schedule, pp=parallel.pp, ep=parallel.ep,
                             num_micro_batches=num_micro_batches):
        return 0
    return max(chunk_bytes, default=0)


def head_and_mtp_bytes(spec: ModelSpec, layout: StageLayout,
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


def rank_activation_bytes(spec: ModelSpec, training: TrainingSpec,
                          inputs: ActivationInputs) -> ActivationBytes:
    """`activation_parts`' numbers, without building its lines (read from `inputs`
    alone)."""
    layout, num_micro_batches, policy = inputs.layout, inputs.num_micro_batches, inputs.policy
    ctx = activation_context(training, inputs, policy.fp8_activations)
    chunk_bytes, working_set = chunk_stored_bytes(
        spec, chunk_weight_kinds(spec, layout.chunks), policy.recompute,
        policy.recompute_modules, ctx)
    profile = in_flight_counts(inputs, num_micro_batches)
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
        extras += head_and_mtp_bytes(spec, layout, ctx) * head_in_flight
    stored += ep_overlap_extra_bytes(spec, training, inputs, num_micro_batches, chunk_bytes)
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
    return ActivationBytes(stored_on_gpu=on_gpu, extras=extras, working_set=working_set,
                            loss_extra=loss_extra,
                            offloaded=math.ceil(stored * offload) if offload else 0,
                            peak=profile.peak_chunks[rank], largest_chunk=largest)


def stage_activation_components(
    spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig, layout: StageLayout,
    *, num_micro_batches: int,
) -> ActivationParts:
    """Activation components of one rank (GPU and host) and its peak in-flight chunks.

    The stored bytes are the peak over the schedule's op order of the micro-batches each
    local chunk holds times that chunk's bytes (`in_flight_counts`, `in_flight_bytes`), so
    uneven chunks are counted exactly, neither under nor over.
    """
    return activation_parts(spec, training,
                            ActivationInputs.of(parallel, layout, num_micro_batches))


def activation_parts(spec: ModelSpec, training: TrainingSpec,
                     inputs: ActivationInputs) -> ActivationParts:
    """`stage_activation_components` of the rank and configuration `inputs` records."""
    numbers = rank_activation_bytes(spec, training, inputs)
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
    offload = inputs.policy.offload_frac
    if offload:
        host.append(MemoryComponent(name="offloaded activations", kind="activations",
                                    bytes=numbers.offloaded,
                                    note=f"{offload:.0%} of stored activations in host memory"))
    return gpu, host, numbers.peak


__all__ = [
    "STORED_ACTIVATIONS",
    "ActivationBytes",
    "ActivationInputs",
    "ActivationMesh",
    "ActivationParts",
    "activation_context",
    "activation_parts",
    "chunk_stored_bytes",
    "ep_overlap_extra_bytes",
    "head_and_mtp_bytes",
    "in_flight_bytes",
    "in_flight_counts",
    "layer_stored_bytes_cap",
    "rank_activation_bytes",
    "stage_activation_components",
    "stored_activation_bytes",
]
