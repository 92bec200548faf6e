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

from collections.abc import Sequence
from dataclasses import dataclass, replace

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import (
    ParallelConfig,
)
from api_schemas.training import TrainingSpec
from models.core.layout import StageLayout, pipeline_layout
from models.core.ledger_items import ComponentKind, MemoryComponent, RankParameters
from models.core.ledger_memo import (
    LedgerMemo,
    StatesInputs,
    layout_weight_kinds,
    runtime_sums,
    state_sums,
)
from models.core.memory_floors import pipeline_exceeds
from models.core.rank_activations import (
    STORED_ACTIVATIONS,
    ActivationInputs,
    ActivationParts,
    activation_parts,
    in_flight_counts,
    rank_activation_bytes,
    stored_activation_bytes,
)
from models.core.rank_states import StateParts, micro_batch_count, state_parts
from models.core.remote_activations import balance_remote_activations, fits_after_remote_offload
from models.core.runtime_memory import (
    ALLOCATOR_FRAGMENTATION_FRAC,
    RuntimeInputs,
    fragmentation_bytes,
    loss_hole_components,
    runtime_components,
    runtime_items,
)
from models.core.search_memo import kept
from models.core.vision_pipeline import vision_memory_components


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
        return sum([c.bytes for c in self.components])

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


def _first_stage_in_flight(parallel: ParallelConfig, layout: StageLayout, m: int) -> int:
    """Micro-batches the rank's first-stage chunks hold until their backward at once (where
    an encoder on stage 0 keeps its activations); 1 without a pipeline."""
    if parallel.pp == 1:
        return 1
    profile = in_flight_counts(parallel, m)
    peaks = profile.chunk_peaks_until_b[layout.rank]
    return max((peaks[c] for c in profile.first_stage_chunks[layout.rank]), default=0)


def _rank_parts(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                layout: StageLayout, num_micro_batches: int, memo: LedgerMemo | None
                ) -> tuple[StateParts, ActivationParts,
                           tuple[list[MemoryComponent], int] | None]:
    """A rank's model states, activations and (with a memo) runtime items but the
    allocator's share, from `memo` where it has them (it must serve these inputs)."""
    def states() -> StateParts:
        return state_parts(spec, training, parallel, layout)

    inputs = ActivationInputs.of(parallel, layout, num_micro_batches)
    if memo is None:
        return states(), activation_parts(spec, training, inputs), None
    parts = kept(memo.states, StatesInputs.of(spec, parallel, layout, memo), states)
    acts = kept(memo.activations, inputs, lambda: activation_parts(spec, training, inputs))
    groups = parts[0]
    items = kept(memo.runtime, RuntimeInputs.of(parallel, groups),
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
    groups, states_gpu, states_host = state_sums(spec, training, parallel, layout, memo)
    acts_key = ActivationInputs.of(parallel, layout, num_micro_batches)

    def activation_sums() -> tuple[int, int, int]:
        known = memo.activations.get(acts_key)
        if known is not None:
            activations, host_acts, _ = known
            return (sum([c.bytes for c in activations]), sum([c.bytes for c in host_acts]),
                    stored_activation_bytes(activations))
        numbers = rank_activation_bytes(spec, training, acts_key)
        return numbers.gpu_bytes, numbers.offloaded, numbers.stored_on_gpu

    dynamic, acts_host, stored = kept(memo.activation_sums, acts_key, activation_sums)
    listed, transient = runtime_sums(spec, training, parallel, groups, memo)
    hole = sum([c.bytes for c in loss_hole_components(spec, training, parallel,
                                                      num_heads=layout.num_heads)])
    gpu = states_gpu + dynamic + listed + fragmentation_bytes(dynamic, transient) + hole
    return gpu, states_host + acts_host, stored


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
            if pipeline_exceeds(spec, training, parallel, [layouts[rank] for rank in order],
                                 in_flight_counts(parallel, m), memo,
                                 cluster.capacity_bytes * len(layouts)):
                return False
        totals, movable = [], []
        capacity = cluster.capacity_bytes
        for rank in order:
            gpu, host, stored = _rank_bytes(spec, training, parallel, layouts[rank], m, memo)
            if host > host_capacity or gpu - stored > capacity:
                return False
            totals.append(gpu)
            movable.append(stored)
        return fits_after_remote_offload(totals=totals, movable=movable, capacity=capacity)
    profile = in_flight_counts(parallel, m) if len(layouts) > 1 else None
    checked: dict[tuple[object, ...], list[int]] = {}
    uniform = parallel.stage_policies is None
    capacity = cluster.capacity_bytes
    for rank in order:
        twin = _twin_key(spec, parallel, layouts[rank], memo, uniform=uniform)
        if profile is not None and twin is not None and any(
                profile.dominates(other, rank) for other in checked.get(twin, ())):
            continue  # holds no more than a rank already found to fit
        gpu, host, _ = _rank_bytes(spec, training, parallel, layouts[rank], m, memo)
        if gpu > capacity or host > host_capacity:
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
    kinds = layout_weight_kinds(spec, layout, memo)
    # Under one policy for every rank (`uniform`) the policy cannot tell ranks apart.
    return kinds, None if uniform else parallel.policy_of(layout.rank)


__all__ = [
    "ALLOCATOR_FRAGMENTATION_FRAC",
    "REMOTE_RECEIVED",
    "MemoryComponent",
    "MemoryLedger",
    "RankParameters",
    "StageMemory",
    "apply_remote_offload",
    "fits_memory",
    "memory_ledger",
    "stage_memory",
]
