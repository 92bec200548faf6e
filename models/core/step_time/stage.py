"""One pipeline rank's per-micro-batch work: compute, recomputation, exposed communication
and host-transfer stalls, folded into the F, B and W of each of its chunks.

Owns: `stage_time` and `stage_times` (the record, `StageTime`, is
`models.core.step_time.stage_record`; the frameworks' runtime traits folded in after it,
`models.core.step_time.runtime_traits`) (layer compute from `models.core.compute`, exposure from
`models.core.step_time.exposure`), the head and MTP modules on the chunk that ends the model,
the recompute mode of each held layer, and the offload stall. Invariant: the F + B + W of
the chunks equals compute + recompute + exposed communication + stalls + FP8 casts + ZeRO-3
copies + the fp32 gradient update + the offload round trip, term by term.
Must not: simulate the pipeline or add per-step terms (`models.core.step_time.assembly`).
"""

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import (
    FullLayers,
    ParallelConfig,
    RecomputeMode,
    RecomputeModule,
    StagePolicy,
)
from api_schemas.training import TrainingSpec
from models.catalog.kernels import memory_bound_time_s
from models.core.activations import LayerActivationContext, layer_activation_bytes
from models.core.collectives import Fabric
from models.core.collectives.fabric import host_link_bandwidth
from models.core.compute import (
    ComputeContext,
    LayerCompute,
    OpTimes,
    clear_compute_cache,
    head_compute,
    layer_compute,
)
from models.core.layout import StageLayout
from models.core.pipeline import SCHEDULES, StagePlacement
from models.core.rank_activations import layer_stored_bytes_cap, stage_activation_components
from models.core.runtime_features import dispatcher, grouped_gemm_on, permute_fused
from models.core.search_memo import current_memo, kept, model_tables, node_free_cluster
from models.core.step_time.exposure import (
    LayerComm,
    ep_overlapped,
    layer_comm,
    zero3_exposed_s,
    zero3_layer_copy_s,
    zero3_recompute_exposed_s,
)
from models.core.step_time.groups import AxisGroups
from models.core.step_time.layer_inputs import LayerPartsInputs, TimingKind
from models.core.step_time.runtime_traits import (
    framework_traits,
    offload_round_trips,
    with_boundary_transfers,
    with_grad_update,
    with_offload_round_trip,
)
from models.core.step_time.stage_record import StageTime
from models.core.step_time.timing_kinds import chunk_timing_kinds, kind_layers, timing_kind


def layer_mode(parallel: ParallelConfig, stage: int, position: int) -> RecomputeMode:
    """Recompute mode of the `position`-th layer held by pipeline rank `stage`."""
    return _mode(parallel.policy_of(stage).recompute, position)


def checkpoint_stops_early(training: TrainingSpec) -> bool:
    """Whether a wholly recomputed layer's recomputation stops at the last tensor its backward
    saved (`TrainingSpec.checkpoint_early_stop`; unset: PyTorch-native runtimes, eager or
    compiled, do). Source: PyTorch's non-reentrant `torch.utils.checkpoint` stops the
    recomputation once every saved tensor is rebuilt, by default since PyTorch 2.1 (pull
    request #96866, "Make early stop the default for checkpoint and expose a way to
    disable"; the rewrite of #90105 brought it); Megatron-LM's `tensor_parallel.checkpoint`
    and DeepSpeed's activation checkpointing are reentrant and rerun the whole forward."""
    if training.checkpoint_early_stop is not None:
        return training.checkpoint_early_stop
    return training.elementwise_fusion.pytorch_native


def compute_context(training: TrainingSpec, parallel: ParallelConfig,
                    cluster: ClusterSpec) -> ComputeContext:
    """The kernel-timing context of a configuration (the cluster's calibration profile, if
    any, scales the GEMM efficiency, `models.catalog.kernels.calibrated_profile`, and may set the
    MoE layer's eager host issue time, `models.core.moe.host_issue.moe_host_issue_s`)."""
    calibration = cluster.calibration
    scale = calibration.gemm_efficiency_scale if calibration is not None else 1.0
    attention = calibration.attention_efficiency_scale if calibration is not None else 1.0
    return ComputeContext(
        gpu=cluster.gpu, seq_len=training.sequence_length,
        micro_batch_size=parallel.micro_batch_size, tp=parallel.tp, cp=parallel.cp,
        ep=parallel.ep, etp=parallel.etp, sequence_parallel=parallel.sequence_parallel,
        compute_dtype=training.compute_dtype, flash_attention=training.flash_attention,
        dropout=training.dropout, moe_load_imbalance=training.moe_load_imbalance,
        moe_dispatcher=dispatcher(training), moe_grouped_gemm=grouped_gemm_on(training),
        moe_permute_fusion=permute_fused(training),
        elementwise_fusion=training.elementwise_fusion,
        attention_kernel=training.attention_kernel,
        checkpoint_early_stop=checkpoint_stops_early(training), gemm_efficiency_scale=scale,
        attention_efficiency_scale=attention, cuda_graph_modules=training.cuda_graph_modules,
        moe_host_issue_s=calibration.moe_host_issue_s if calibration is not None else None)


@dataclass(frozen=True, slots=True, kw_only=True)
class _LayerTerms:
    """One layer's per-micro-batch contribution under one recompute mode."""

    op: OpTimes
    compute_s: float
    recompute_s: float
    cast_s: float
    copy_s: float
    exposed_s: dict[str, float]


def _mode(policy: RecomputeMode | FullLayers, position: int) -> RecomputeMode:
    if isinstance(policy, FullLayers):
        return RecomputeMode.FULL if position < policy.full_layers else RecomputeMode(
            policy.others)
    return policy


def _layer_terms(lc: LayerCompute, comm: LayerComm, zero3: tuple[float, float],
                 copies: tuple[float, float], *, mode: RecomputeMode, cast: float,
                 modules: tuple[RecomputeModule, ...]) -> _LayerTerms:
    """F/B/W and the booked terms of one layer: full recomputation repeats its forward
    compute (recompute) and forward collectives (under their axis); FP8 casts split
    between forward (quantise) and backward (dequantise); ZeRO-3 copy kernels on the
    forward and backward of the unit."""
    zero3_f, zero3_b = zero3
    copy_f, copy_b = copies
    recompute = 0.0
    recompute_comm: dict[str, float] = {}
    if mode == RecomputeMode.FULL:
        recompute, recompute_comm = lc.recompute_full_s, comm.recompute_s
    elif mode == RecomputeMode.SELECTIVE:
        recompute = lc.recompute_s(modules)
    exposed: dict[str, float] = {}
    for part in (comm.forward_s, comm.backward_s, recompute_comm):
        for axis, t in part.items():
            exposed[axis] = exposed.get(axis, 0.0) + t
    if zero3_f or zero3_b:
        exposed["dp"] = exposed.get("dp", 0.0) + zero3_f + zero3_b
    op = lc.times + OpTimes(
        forward_s=sum(comm.forward_s.values()) + zero3_f + cast / 2 + copy_f,
        backward_input_s=(sum(comm.backward_s.values()) + recompute
                          + sum(recompute_comm.values()) + zero3_b + cast / 2 + copy_b))
    return _LayerTerms(op=op, compute_s=lc.times.total_s, recompute_s=recompute, cast_s=cast,
                       copy_s=copy_f + copy_b, exposed_s=exposed)


LayerParts = tuple[LayerCompute, LayerComm, tuple[float, float], tuple[float, float]]
"""One layer's compute, exposed collectives, exposed ZeRO-3 traffic and ZeRO-3 copy kernels
(forward, backward; no policy)."""


@dataclass(slots=True, kw_only=True)
class _RankTerms:
    """The terms of one rank's layers by (timing kind, recompute mode): layers of one timing
    kind (`timing_kind`) take the same time, so each kind is timed once, by the first layer
    of it the rank holds, and each (kind, mode) booked once (`_layer_terms`)."""

    spec: ModelSpec
    training: TrainingSpec
    parallel: ParallelConfig
    cluster: ClusterSpec
    fabric: Fabric
    groups: AxisGroups
    layer_memo: dict[LayerPartsInputs, LayerParts] | None
    policy: StagePolicy
    overlapped: bool
    parts: dict[TimingKind, LayerParts] = dataclasses.field(default_factory=dict)
    terms: dict[tuple[TimingKind, RecomputeMode], _LayerTerms] = dataclasses.field(
        default_factory=dict)

    def timed(self, kind: TimingKind, mode: RecomputeMode, first: int) -> _LayerTerms:
        """Time (kind, mode) by layer `first`, reading `layer_parts`' own memo first."""
        parts = self.parts.get(kind)
        if parts is None:
            memo = self.layer_memo
            found = (None if memo is None
                     else memo.get(LayerPartsInputs.of(kind, self.overlapped, self.parallel)))
            parts = self.parts[kind] = found or layer_parts(
                self.spec, self.training, self.parallel, self.cluster, first,
                fabric=self.fabric, groups=self.groups, memo=memo)
        policy = self.policy
        cast = (fp8_cast_s(self.spec, first, self.training, self.parallel, self.cluster, mode,
                           policy.recompute_modules) if policy.fp8_activations else 0.0)
        out = self.terms[kind, mode] = _layer_terms(*parts, mode=mode, cast=cast,
                                                    modules=policy.recompute_modules)
        return out

def layer_parts_memo(spec: ModelSpec, training: TrainingSpec,
                     cluster: ClusterSpec) -> dict[LayerPartsInputs, LayerParts]:
    """The memo of `layer_parts` for one model, recipe and cluster, on the search's tables
    of the model in force (where a caller set none, a fresh one that dies with its caller),
    by the cluster without its node count, which no part reads (`node_free_cluster`)."""
    memo = model_tables(spec).layer_parts
    key = (training, node_free_cluster(cluster))
    found = memo.get(key)
    if found is None:
        found = memo[key] = {}
    return found


def layer_parts(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                cluster: ClusterSpec, index: int, *, fabric: Fabric, groups: AxisGroups,
                memo: dict[LayerPartsInputs, LayerParts] | None = None) -> LayerParts:
    """Layer `index`'s compute (`models.core.compute.layer_compute`), exposed collectives
    (`layer_comm`), exposed ZeRO-3 traffic (`zero3_exposed_s`) and ZeRO-3 copy kernels
    (`zero3_layer_copy_s`) under `parallel`, none of which reads the activation policy or the
    layer split; `fabric` and `groups` are the cluster's and the configuration's. With `memo`
    (`layer_parts_memo` of these inputs) the parts are computed once per record of the
    inputs they are functions of (`LayerPartsInputs`: the layer's timing kind and the
    configuration fields the parts read)."""
    key: LayerPartsInputs | None = None
    if memo is not None:
        key = LayerPartsInputs.of(timing_kind(spec, index), ep_overlapped(parallel, training),
                                  parallel)
        found = memo.get(key)
        if found is not None:
            return found
    ctx = compute_context(training, parallel, cluster)
    lc = layer_compute(spec, index, ctx)
    comm = layer_comm(spec, index, training=training, parallel=parallel, groups=groups,
                      fabric=fabric, compute=lc,
                      attention_forward_s=lc.recompute_module_s.get(RecomputeModule.CORE_ATTN,
                                                                    0.0))
    zero3 = zero3_exposed_s(spec, index, training, parallel, groups, fabric, lc)
    regather = zero3_recompute_exposed_s(spec, index, training, parallel, groups, fabric, lc)
    if regather > 0.0:
        comm = dataclasses.replace(comm, recompute_s={
            **comm.recompute_s, "dp": comm.recompute_s.get("dp", 0.0) + regather})
    copies = zero3_layer_copy_s(spec, index, training, parallel, cluster.gpu)
    parts = (lc, comm, zero3, copies)
    if memo is not None and key is not None:
        memo[key] = parts
    return parts


KindCount = tuple[TimingKind, RecomputeMode, int, int]
"""A timing kind, the recompute mode of some of a chunk's layers of that kind, how many they
are, and the first layer of that kind the rank holds (the one it is timed by)."""


def _chunk_kind_counts(chunks: tuple[tuple[int, ...], ...],
                       kinds: tuple[tuple[TimingKind, ...], ...],
                       recompute: RecomputeMode | FullLayers) -> tuple[tuple[KindCount, ...], ...]:
    """`_count_chunk_kinds`, kept on the search's memo."""
    memo = current_memo()
    key = (chunks, kinds, recompute)
    return kept(memo.kind_counts, key,
                lambda: _count_chunk_kinds(chunks, kinds, recompute))


def _count_chunk_kinds(chunks: tuple[tuple[int, ...], ...],
                       kinds: tuple[tuple[TimingKind, ...], ...],
                       recompute: RecomputeMode | FullLayers) -> tuple[tuple[KindCount, ...], ...]:
    """Per chunk of a rank, its layers counted by (timing kind, recompute mode) in order of
    first appearance, each with the rank's first layer of that kind: what `stage_time`
    multiplies each kind's times by. The first k layers of the rank are the fully
    recomputed ones under FullLayers(k)."""
    first: dict[TimingKind, int] = {}
    out = []
    position = 0
    for chunk, chunk_kinds in zip(chunks, kinds, strict=True):
        counts: dict[tuple[TimingKind, RecomputeMode], int] = {}
        for index, kind in zip(chunk, chunk_kinds, strict=True):
            first.setdefault(kind, index)
            mode = _mode(recompute, position)
            position += 1
            counts[kind, mode] = counts.get((kind, mode), 0) + 1
        out.append(tuple((kind, mode, count, first[kind])
                         for (kind, mode), count in counts.items()))
    return tuple(out)


def stage_time(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
               cluster: ClusterSpec, layout: StageLayout, *, num_micro_batches: int,
               fabric: Fabric, groups: AxisGroups,
               layer_memo: dict[LayerPartsInputs, LayerParts] | None = None,
               kinds: tuple[tuple[TimingKind, ...], ...] | None = None) -> StageTime:
    """Per-micro-batch F/B/W of every chunk of one pipeline rank, with recomputation,
    exposed collectives, ZeRO-3 gathers and offload stalls folded in (`layer_memo`: as
    `layer_parts`'; `kinds`: the layout's `chunk_timing_kinds`, computed when not given).

    Full recomputation repeats the layer's forward compute (booked as recompute) and its
    forward collectives (booked under their axis, once per repetition)."""
    ctx = compute_context(training, parallel, cluster)
    policy = parallel.policy_of(layout.rank)
    if kinds is None:
        kinds = chunk_timing_kinds(spec, layout.chunks)
    timer = _RankTerms(spec=spec, training=training, parallel=parallel, cluster=cluster,
                       fabric=fabric, groups=groups, layer_memo=layer_memo, policy=policy,
                       overlapped=ep_overlapped(parallel, training))
    chunk_times: list[OpTimes] = []
    compute_total = recompute_total = cast_total = copy_total = 0.0
    exposed: dict[str, float] = {}
    chunk_counts = _chunk_kind_counts(layout.chunks, kinds, policy.recompute)
    last_chunk = len(layout.chunks) - 1
    v_shape = SCHEDULES[parallel.schedule].placement == StagePlacement.V_SHAPE
    for chunk_index, counts in enumerate(chunk_counts):
        # The chunk's F, B and W summed as floats in the order `OpTimes` addition takes.
        forward = backward_input = backward_weight = 0.0
        for kind, mode, count, first in counts:
            t = timer.terms.get((kind, mode))
            if t is None:
                t = timer.timed(kind, mode, first)
            forward += count * t.op.forward_s
            backward_input += count * t.op.backward_input_s
            backward_weight += count * t.op.backward_weight_s
            compute_total += count * t.compute_s
            recompute_total += count * t.recompute_s
            cast_total += count * t.cast_s
            copy_total += count * t.copy_s
            for axis, value in t.exposed_s.items():
                exposed[axis] = exposed.get(axis, 0.0) + count * value
        if layout.num_heads and (chunk_index == last_chunk or v_shape):
            extra = _head_times(spec, ctx, layout, chunk_index, parallel)
            forward += extra.forward_s
            backward_input += extra.backward_input_s
            backward_weight += extra.backward_weight_s
            compute_total += extra.total_s
        chunk_times.append(OpTimes(forward_s=forward, backward_input_s=backward_input,
                                   backward_weight_s=backward_weight))
    stall = (_offload_stall(spec, training, parallel, layout, cluster, num_micro_batches,
                            chunk_times) if policy.offload_frac > 0 else 0.0)
    if stall:
        chunk_times = [t + OpTimes(backward_input_s=stall / len(chunk_times))
                       for t in chunk_times]
    return StageTime(stage=layout.rank, chunk_times=tuple(chunk_times), compute_s=compute_total,
                     recompute_s=recompute_total, exposed_comm_s=exposed,
                     offload_stall_s=stall, fp8_cast_s=cast_total,
                     zero3_copy_s=copy_total)


def fp8_cast_s(spec: ModelSpec, index: int, training: TrainingSpec, parallel: ParallelConfig,
               cluster: ClusterSpec, mode: RecomputeMode,
               modules: tuple[RecomputeModule, ...]) -> float:
    """Per-micro-batch time of storing one layer's activations in FP8: a memory-bound
    quantise (read 2 bytes, write 1 per element) in forward and dequantise (read 1, write
    2) in backward, over the elements the FP8 storage narrows.

    Source: Kimi K2 (arXiv:2507.20534) Sec. 2.4.2 stores MoE up-projection and SwiGLU
    inputs in FP8 tiles; the casts are elementwise kernels bound by HBM bandwidth
    (`models.catalog.kernels.memory_bound_time_s`). The narrowed elements are the bytes
    `models.core.activations` saves (one byte per element from 16 to 8 bits).
    Assumes: under FP8 compute the GEMM inputs are cast for the GEMMs anyway, so storage
    adds no cast.
    """
    if training.compute_dtype == DType.FP8:
        return 0.0
    base = _cast_context(training, parallel)
    wide = layer_activation_bytes(spec, index, base)
    narrow = layer_activation_bytes(spec, index, dataclasses.replace(base, fp8_storage=True))
    elements = max(0, wide.stored_bytes(mode, modules) - narrow.stored_bytes(mode, modules))
    return memory_bound_time_s(2 * 3 * elements, gpu=cluster.gpu)


def _cast_context(training: TrainingSpec, parallel: ParallelConfig) -> LayerActivationContext:
    """The 16-bit activation context `fp8_cast_s` narrows."""
    return LayerActivationContext(
        seq_len=training.sequence_length, micro_batch_size=parallel.micro_batch_size,
        tp=parallel.tp, cp=parallel.cp, etp=parallel.etp,
        sequence_parallel=parallel.sequence_parallel, dropout=training.dropout,
        flash_attention=training.flash_attention,
        moe_load_imbalance=training.moe_load_imbalance,
        moe_keep_expert_outputs=training.moe_keep_expert_outputs)


def _fp8_cast_cap_s(spec: ModelSpec, index: int, training: TrainingSpec,
                    parallel: ParallelConfig, cluster: ClusterSpec) -> float:
    """An upper bound of `fp8_cast_s` of layer `index` under any mode and module set: the
    narrowed elements are at most the bytes the 16-bit layer could store (every tensor, or
    its input alone)."""
    if training.compute_dtype == DType.FP8:
        return 0.0
    wide = layer_activation_bytes(spec, index, _cast_context(training, parallel))
    elements = max(sum(t.bytes for t in wide.tensors), wide.input_bytes)
    return memory_bound_time_s(2 * 3 * elements, gpu=cluster.gpu)


def window_caps_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  cluster: ClusterSpec, layout: StageLayout, plain: StageTime, *,
                  fabric: Fabric, groups: AxisGroups,
                  max_offload: float = 1.0,
                  layer_caps: dict[TimingKind, tuple[float, float, int]] | None = None
                  ) -> tuple[float, float, float]:
    """Upper bounds of one rank's per-micro-batch forward time, backward (input and weight)
    time without the offload stall, and offload stall, summed over its chunks, under any
    activation policy on this mesh and ZeRO stage that offloads at most `max_offload`, from
    its times without one (`plain`: no recomputation, FP8 storage or offload).

    Only three terms of `stage_time` depend on the policy, each bounded per layer: the
    recomputation (full: the forward and its collectives again; selective: a subset of the
    modules, at most all of them), the FP8 casts (`_fp8_cast_cap_s`, half in forward, half
    in backward) and the offload stall, at most the whole host transfer of a micro-batch
    (`_offload_stall`: stored bytes over the peak in-flight units are at most the largest
    chunk's bytes, `models.core.rank_activations.layer_stored_bytes_cap` per layer).
    `layer_caps` keeps the per-layer-kind caps for other ranks of the same configuration."""
    if plain.recompute_s or plain.offload_stall_s or plain.fp8_cast_s:
        raise ValueError("window caps start from a rank's times without a policy")
    forward = sum(t.forward_s for t in plain.chunk_times)
    backward = sum(t.backward_input_s + t.backward_weight_s for t in plain.chunk_times)
    extra = {} if layer_caps is None else layer_caps
    largest_chunk = 0
    for chunk in layout.chunks:
        chunk_bytes = 0
        for index in chunk:
            kind = timing_kind(spec, index)
            if kind not in extra:
                lc, comm, _, _ = layer_parts(spec, training, parallel, cluster, index,
                                             fabric=fabric, groups=groups,
                                             memo=layer_parts_memo(spec, training, cluster))
                recompute = max(lc.recompute_full_s + sum(comm.recompute_s.values()),
                                sum(lc.recompute_module_s.values()))
                extra[kind] = (recompute,
                               _fp8_cast_cap_s(spec, index, training, parallel, cluster),
                               layer_stored_bytes_cap(spec, index, training, parallel))
            recompute, cast, stored = extra[kind]
            forward += cast / 2
            backward += recompute + cast / 2
            chunk_bytes += stored
        largest_chunk = max(largest_chunk, chunk_bytes)
    if max_offload <= 0:
        return forward, backward, 0.0
    offloaded = largest_chunk * min(1.0, max_offload) + 1  # the ledger rounds bytes up
    return forward, backward, 2 * offloaded * len(layout.chunks) / host_link_bandwidth(cluster)


def _head_times(spec: ModelSpec, ctx: ComputeContext, layout: StageLayout, chunk_index: int,
                parallel: ParallelConfig) -> OpTimes:
    """Output head (and MTP modules) on the chunk that ends the model on this rank."""
    if layout.num_heads == 0:
        return OpTimes()
    v_shaped = SCHEDULES[parallel.schedule].placement == StagePlacement.V_SHAPE
    ends_here = chunk_index == (1 if v_shaped else len(layout.chunks) - 1)
    if not ends_here:
        return OpTimes()
    times = head_compute(spec, ctx)
    for _ in range(layout.num_mtp_modules // max(1, layout.num_heads)):
        mtp = layer_compute(spec, spec.num_layers - 1, ctx).times
        times = times + mtp + head_compute(spec, ctx)
    return times


def _offload_stall(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                   layout: StageLayout, cluster: ClusterSpec, num_micro_batches: int,
                   chunk_times: list[OpTimes]) -> float:
    """Per-micro-batch PCIe time of offloaded activations not hidden behind compute."""
    policy = parallel.policy_of(layout.rank)
    if policy.offload_frac <= 0:
        return 0.0
    _, host, peak = stage_activation_components(spec, training, parallel, layout,
                                                num_micro_batches=num_micro_batches)
    per_micro_batch = sum(c.bytes for c in host) / max(1, peak) * len(layout.chunks)
    transfer = 2 * per_micro_batch / host_link_bandwidth(cluster)
    hidden = sum(t.forward_s + t.backward_input_s for t in chunk_times)
    return max(0.0, transfer - hidden)


class StageInputs(NamedTuple):
    """What tells one rank's stage times from another's under one model, recipe, cluster,
    configuration and micro-batch count (`stage_times`' bucket): its layers' timing kinds
    per chunk, its embeddings, heads and MTP modules and its policy; and its rank where the
    policy offloads (the offload stall reads the rank's in-flight count), else -1. Ranks
    with equal records take the same times."""

    kinds: tuple[tuple[TimingKind, ...], ...]
    num_embeddings: int
    num_heads: int
    num_mtp_modules: int
    policy: StagePolicy
    rank: int

    @classmethod
    def of(cls, kinds: tuple[tuple[TimingKind, ...], ...], parallel: ParallelConfig,
           layout: StageLayout) -> "StageInputs":
        """The record of rank `layout.rank` of `parallel`, whose chunks hold layers of
        `kinds` (`chunk_timing_kinds`)."""
        policy = parallel.policy_of(layout.rank)
        rank = layout.rank if policy.offload_frac > 0 else -1
        # Built as a tuple: the generated `__new__` costs a Python call per record.
        return tuple.__new__(cls, (kinds, layout.num_embeddings, layout.num_heads,
                                   layout.num_mtp_modules, policy, rank))


@dataclass(slots=True)
class StageBucket:
    """The kept stages of one (model, recipe, cluster, configuration, micro-batches)."""

    stages: dict[StageInputs, dict[int | None, StageTime]]
    """By `StageInputs`, then by the rank's own stage number (None: the first rank computed
    for the record, whose times the others copy)."""


def clear_step_time_cache() -> None:
    """Forget every kept stage time, layer part and layer time, the current search's and the
    shared memo's, for scripts that change a kernel profile or a calibrated constant between
    estimates (a memo's key holds the inputs of an estimate, not the module constants it
    reads)."""
    clear_compute_cache()


def stage_times(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                cluster: ClusterSpec, layouts: tuple[StageLayout, ...], m: int, fabric: Fabric,
                groups: AxisGroups) -> list[StageTime]:
    """Every rank's per-micro-batch times, computed once per distinct stage (`StageInputs`)
    and kept across calls on the search's tables of the model by the other inputs they are
    a function of (recipe, cluster, configuration, micro-batches; fabric and groups follow
    from the cluster and the configuration): the search asks for the same configuration's
    stages in its bounds and again in its estimate. The cluster is keyed without its node
    count, which no stage time reads (`node_free_cluster`)."""
    tables = model_tables(spec)
    base = (training, node_free_cluster(cluster), parallel, m)
    bucket = tables.stage_times.get(base)
    # A new bucket holds no rank's entry yet: its ranks go straight to the shared record.
    fresh = bucket is None
    if bucket is None:
        bucket = tables.stage_times[base] = StageBucket(stages={})
    layer_memo: dict[LayerPartsInputs, LayerParts] | None = None
    stages = []
    for layout in layouts:
        # The kinds `chunk_timing_kinds` keeps on the model's tables, read there first.
        kinds = tables.timing_kinds.get(layout.chunks)
        if kinds is None:
            kinds = chunk_timing_kinds(spec, layout.chunks)
        key = StageInputs.of(kinds, parallel, layout)
        # The record (its policy a model, hashed in Python) is hashed once per rank.
        ranks = bucket.stages.get(key)
        if ranks is None:
            ranks = bucket.stages[key] = {}
        found = None if fresh else ranks.get(layout.rank)
        if found is None:
            shared = ranks.get(None)
            if shared is None:
                if layer_memo is None:
                    layer_memo = layer_parts_memo(spec, training, cluster)
                shared = ranks[None] = stage_time(
                    spec, training, parallel, cluster, layout, num_micro_batches=m,
                    fabric=fabric, groups=groups, layer_memo=layer_memo, kinds=kinds)
            found = shared if shared.stage == layout.rank else shared.at_rank(layout.rank)
            ranks[layout.rank] = found
        stages.append(found)
    stages = framework_traits(stages, spec, training, parallel, cluster, fabric, groups)
    return offload_round_trips(stages, layouts, spec, training, parallel, cluster, m)


__all__ = ["LayerParts", "StageBucket", "StageTime", "checkpoint_stops_early",
           "clear_step_time_cache", "compute_context", "fp8_cast_s", "layer_mode",
           "layer_parts", "layer_parts_memo", "StageInputs", "stage_time", "stage_times",
           "TimingKind", "chunk_timing_kinds", "kind_layers", "timing_kind", "window_caps_s",
           "with_boundary_transfers", "with_grad_update", "with_offload_round_trip"]
