"""Lower bounds of a configuration's memory ledger that a search reads before (or instead
of) building the ledger.

Owns: the least runtime reserve of any rank, the floor of each rank's stored layer
activations (`stored_activation_floor_bytes`), the floor of the head rank's in-flight
micro-batches (`head_in_flight_floor`), the peak floor of a mesh's plans
(`peak_floor_bytes`) and the pipeline-sum floor a fit check under remote offload refutes
first (`pipeline_exceeds`). Every floor is at most the exact ledger's figure
(`models.core.memory`), which it bounds from beside, never from inside. Must not: build a
ledger or give a verdict.
"""

import math
from collections.abc import Sequence

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import (
    ParallelConfig,
    PipelineSchedule,
    StagePolicy,
)
from api_schemas.training import TrainingSpec
from models.core.layout import StageLayout, pipeline_layout
from models.core.ledger_memo import LedgerMemo, runtime_sums, state_sums
from models.core.pipeline import (
    SCHEDULES,
    InFlightProfile,
    peak_in_flight_chunks,
)
from models.core.rank_activations import (
    activation_context,
    chunk_stored_bytes,
    head_and_mtp_bytes,
    in_flight_bytes,
    in_flight_counts,
)
from models.core.rank_states import chunk_weight_kinds, micro_batch_count
from models.core.runtime_memory import (
    CUDA_CONTEXT_BYTES,
    NCCL_BUFFER_BYTES,
    NCCL_CHANNELS,
    fragmentation_bytes,
    loss_hole_components,
)

RUNTIME_RESERVE_BYTES = CUDA_CONTEXT_BYTES + NCCL_CHANNELS * 2 * NCCL_BUFFER_BYTES
"""The least runtime memory any rank holds (the CUDA context and the default group's NCCL
buffers): a lower bound the search may use before a ledger is built."""


ChunkKinds = tuple[tuple[tuple[bool, bool], ...], ...]
"""Per chunk, each layer's weight kind (`chunk_weight_kinds`)."""


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
    out: list[int] = []
    # A rank with the policy and the chunk layer kinds of the rank before stores the same
    # bytes per micro-batch: they are derived once for the run of such ranks.
    last: tuple[StagePolicy, ChunkKinds, tuple[int, ...]] | None = None
    for layout in pipeline_layout(spec, parallel):
        policy = parallel.policy_of(layout.rank)
        kinds = chunk_weight_kinds(spec, layout.chunks)
        if last is None or last[0] is not policy or last[1] != kinds:
            last = (policy, kinds, _chunk_bytes(spec, training, parallel, policy, kinds))
        out.append(math.floor(in_flight_bytes(profile, layout.rank, last[2])
                              * (1.0 - policy.offload_frac)))
    return tuple(out)


def _chunk_bytes(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                 policy: StagePolicy, kinds: ChunkKinds) -> tuple[int, ...]:
    """Stored bytes per micro-batch of each chunk holding layers of `kinds` under
    `policy`."""
    ctx = activation_context(training, parallel, policy.fp8_activations)
    chunk_bytes, _ = chunk_stored_bytes(spec, kinds, policy.recompute,
                                        policy.recompute_modules, ctx)
    return chunk_bytes


def _stored_floor(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  layout: StageLayout, profile: InFlightProfile) -> int:
    """One rank's term of `stored_activation_floor_bytes`."""
    policy = parallel.policy_of(layout.rank)
    chunk_bytes = _chunk_bytes(spec, training, parallel, policy,
                               chunk_weight_kinds(spec, layout.chunks))
    stored = in_flight_bytes(profile, layout.rank, chunk_bytes)
    return math.floor(stored * (1.0 - policy.offload_frac))


def pipeline_exceeds(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                      layouts: Sequence[StageLayout], profile: InFlightProfile,
                      memo: LedgerMemo, limit_bytes: int) -> bool:
    """True when the sum over the pipeline's ranks of a floor of `_rank_bytes`' GPU bytes
    exceeds `limit_bytes` (stopping as soon as a partial sum does). A rank's floor is read
    from the memo's shared pieces and its stored layer activations alone
    (`stored_activation_floor_bytes`' term): every other activation line, the staging
    buffers, the loss hole and their fragmentation share only add to it."""
    total = 0
    for layout in layouts:
        groups, states_gpu, _ = state_sums(spec, training, parallel, layout, memo)
        listed, transient = runtime_sums(spec, training, parallel, groups, memo)
        stored = _stored_floor(spec, training, parallel, layout, profile)
        total += states_gpu + stored + listed + fragmentation_bytes(stored, transient)
        if total > limit_bytes:
            return True
    return False


def head_in_flight_floor(schedule: PipelineSchedule, pp: int, num_micro_batches: int) -> int:
    """A lower bound of the micro-batches the schedule keeps in flight on the chunk holding
    the output head (the ledger's count is the generated order's, `in_flight_counts`): all
    of them where every stage runs its forwards before its backwards (GPipe), one elsewhere
    (the micro-batch whose backward follows its forward). Read from the schedule's traits
    rather than its generated order, which costs a first call of a new shape up to 0.15 s
    (Chimera)."""
    if pp > 1 and SCHEDULES[schedule].forwards_before_backwards:
        return num_micro_batches
    return 1


def _peak_chunks_floor(parallel: ParallelConfig, num_micro_batches: int, rank: int) -> int:
    """A lower bound of the micro-batch x chunk units rank `rank` holds at its peak: the
    schedule's closed form where its record has one (`peak_in_flight_chunks`, pinned to the
    generated order by the tests), else one. No op order is generated."""
    traits = SCHEDULES[parallel.schedule]
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
        groups, states_gpu, _ = state_sums(spec, training, parallel, layout, memo)
        listed, transient = runtime_sums(spec, training, bare, groups, memo)
        dynamic = _head_rank_activations_floor(spec, training, parallel, layout, m,
                                               pooled=pooled)
        hole = sum(c.bytes for c in loss_hole_components(spec, training, parallel,
                                                         num_heads=layout.num_heads))
        floor = (states_gpu + dynamic + listed + hole
                 + fragmentation_bytes(dynamic, transient))
        if limit_bytes is not None and floor > limit_bytes:
            return floor
        peak = max(peak, floor)
    return peak


def _head_rank_activations_floor(spec: ModelSpec, training: TrainingSpec,
                                 parallel: ParallelConfig, layout: StageLayout, m: int, *,
                                 pooled: bool) -> int:
    """`peak_floor_bytes`' activation term of a rank holding an output head: its head,
    logits and MTP activations for the micro-batches in flight on the head's chunk, and
    (unless `pooled`) its smallest chunk's stored bytes per micro-batch at the schedule's
    peak in-flight units, less the offloaded share."""
    policy = parallel.policy_of(layout.rank)
    ctx = activation_context(training, parallel, policy.fp8_activations)
    dynamic = (head_and_mtp_bytes(spec, layout, ctx)
               * head_in_flight_floor(parallel.schedule, parallel.pp, m))
    if not pooled:
        chunk_bytes, _ = chunk_stored_bytes(
            spec, chunk_weight_kinds(spec, layout.chunks), policy.recompute,
            policy.recompute_modules, ctx)
        dynamic += math.floor(_peak_chunks_floor(parallel, m, layout.rank)
                              * min(chunk_bytes, default=0) * (1.0 - policy.offload_frac))
    return dynamic


__all__ = [
    "RUNTIME_RESERVE_BYTES",
    "head_in_flight_floor",
    "peak_floor_bytes",
    "pipeline_exceeds",
    "stored_activation_floor_bytes",
]
