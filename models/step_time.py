"""Step time of one configuration: per-stage F/B/W with exposed communication, the pipeline
makespan, data-parallel synchronisation and the optimizer step.

Owns: composing layer compute (`compute`), collective times (`collectives`) and the
pipeline schedule (`pipeline`) into a `StepEstimate` with its breakdown, tokens/s, TFLOP/s
per GPU, MFU and HFU. Must not: search or size memory.

Overlap rules (stated once):
- TP collectives are exposed unless `training.overlap_tp_comm`.
- Ring context-parallel P2P overlaps the attention core of the same layer; Ulysses
  all-to-alls are exposed.
- Expert all-to-alls are hidden behind the paired micro-batch's compute under DualPipe /
  DualPipeV (DeepSeek-V3 Sec. 3.2.1), and under interleaved 1F1B with extra warm-up
  micro-batches when `training.overlap_ep_comm` (Kimi K2 Sec. 2.4.2), each up to that
  compute; exposed otherwise.
- Pipeline P2P is a latency between dependent ops of neighbouring ranks (the simulator).
- Data-parallel gradient reduction overlaps the last micro-batch's backward when
  `training.overlap_grad_reduce`, and the ZeRO-1/2 parameter all-gather the first forward;
  ZeRO-3 gathers overlap each layer's compute.
- Activation offload overlaps the same op's compute over PCIe.
"""

import dataclasses
import math
from dataclasses import dataclass, field
from functools import lru_cache

from api_schemas.architecture import AttentionKind, ModelSpec
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import (
    ContextParallelKind,
    FullLayers,
    ParallelConfig,
    PipelineSchedule,
    RecomputeMode,
    RecomputeModule,
)
from api_schemas.training import TrainingSpec
from models.collectives import (
    Collective,
    Fabric,
    all_to_all_split_cost,
    collective_cost,
    fabric_of,
)
from models.compute import ComputeContext, LayerCompute, OpTimes, head_compute, layer_compute
from models.errors import InvalidSpecError
from models.flops import attention_head_dims, step_flops
from models.kernels import memory_bound_time_s
from models.layout import StageLayout, num_virtual_stages, pipeline_layout
from models.memory import micro_batch_count, rank_parameters, stage_activation_components
from models.moe import ep_dispatch_split
from models.params import layer_params
from models.pipeline import (
    OpDurations,
    StagePlacement,
    closed_form_makespan,
    compile_program,
    generate_program,
    schedule_traits,
    simulate_makespan,
    validate_schedule,
)
from models.pipeline.simulator import CompiledProgram

OPTIMIZER_BYTES_PER_PARAM_FACTOR = 2.0
"""The optimizer step reads and writes every state it touches once: HBM traffic = 2 x the
bytes of master weights, moments and gradients of the rank's shard, plus writing the
working weights."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AxisGroup:
    """A parallel group as the timing model sees it: size and members per node."""

    size: int
    ranks_per_node: int


def axis_groups(parallel: ParallelConfig, *, gpus_per_node: int) -> dict[str, AxisGroup]:
    """Group sizes and ranks per node of every axis under Megatron's order tp-cp-ep-dp-pp
    (dense mesh tp, cp, dp, pp; expert mesh etp, ep, edp, pp over the same ranks).

    Source: Megatron-LM `megatron/core/parallel_state.py` (rank generator, default order
    'tp-cp-ep-dp-pp'): an axis's members are `stride` ranks apart, the stride being the
    product of the axes before it; ranks fill nodes in order.
    """
    tp, cp, dp, pp = parallel.tp, parallel.cp, parallel.dp, parallel.pp
    edp = max(1, tp * cp * dp // (parallel.ep * parallel.etp))

    def group(size: int, stride: int) -> AxisGroup:
        if size <= 1:
            return AxisGroup(size=1, ranks_per_node=1)
        per_node = 1 if stride >= gpus_per_node else max(1, min(size, gpus_per_node // stride))
        return AxisGroup(size=size, ranks_per_node=per_node)

    return {
        "tp": group(tp, 1), "cp": group(cp, tp), "dp": group(dp, tp * cp),
        "dp_cp": group(dp * cp, tp), "pp": group(pp, tp * cp * dp),
        "etp": group(parallel.etp, 1), "ep": group(parallel.ep, parallel.etp),
        "edp": group(edp, parallel.etp * parallel.ep),
    }


@lru_cache(maxsize=65536)
def _collective_s(collective: Collective, size: int, message_bytes: int, ranks_per_node: int,
                  fabric: Fabric) -> float:
    if size <= 1 or message_bytes <= 0:
        return 0.0
    return collective_cost(collective, num_ranks=size, message_bytes=message_bytes,
                           fabric=fabric, ranks_per_node=ranks_per_node).time_s


def collective_s(collective: Collective, group: AxisGroup, message_bytes: float,
                 fabric: Fabric) -> float:
    """Time of one collective call over `group` (0 for a group of one)."""
    return _collective_s(collective, group.size, int(math.ceil(message_bytes)),
                         group.ranks_per_node, fabric)


@lru_cache(maxsize=256)
def compiled_schedule(schedule: PipelineSchedule, num_stages: int, num_micro_batches: int,
                      num_chunks: int, group_size: int | None = None) -> CompiledProgram:
    """The schedule's op lists compiled once per shape (reused across durations)."""
    program = generate_program(schedule, num_stages=num_stages,
                               num_micro_batches=num_micro_batches, num_chunks=num_chunks,
                               group_size=group_size)
    return compile_program(program)


EXTRAPOLATION_MIN_ROUNDS = 12
"""Above this many micro-batches per pipeline rank, the makespan is extrapolated."""


def pipeline_makespan(schedule: PipelineSchedule, *, num_stages: int, num_micro_batches: int,
                      num_chunks: int, durations: OpDurations, p2p_latency_s: float,
                      group_size: int | None = None) -> float:
    """Simulated makespan, extrapolated exactly for long steady states.

    A fixed-order schedule with identical micro-batches settles into a periodic steady
    state, after which each further micro-batch adds the same time. For m > 12 p (12 N with
    an interleaving group N) the makespan is simulated at three shorter lengths (4, 6 and 8
    periods, with m's remainder so interleaved groups match); when the three are affine to
    1e-9 the line is extended to m, otherwise the full length is simulated. Either way the value is the simulator's.
    """
    p, m = num_stages, num_micro_batches
    period = group_size or p  # interleaved groups repeat every N micro-batches
    if m <= EXTRAPOLATION_MIN_ROUNDS * period:
        compiled = compiled_schedule(schedule, p, m, num_chunks, group_size)
        return simulate_makespan(compiled, durations, p2p_latency_s=p2p_latency_s)
    rest = m % period
    lengths = [k * period + rest for k in (4, 6, 8)]
    try:
        for length in lengths:
            validate_schedule(schedule, num_stages=p, num_micro_batches=length,
                              num_chunks=num_chunks, group_size=group_size)
    except InvalidSpecError:
        lengths = []
    if lengths:
        spans = [simulate_makespan(compiled_schedule(schedule, p, length, num_chunks,
                                                     group_size),
                                   durations, p2p_latency_s=p2p_latency_s)
                 for length in lengths]
        first, second = spans[1] - spans[0], spans[2] - spans[1]
        if abs(first - second) <= 1e-9 * max(1.0, spans[2]):
            return spans[2] + (m - lengths[2]) * second / (lengths[2] - lengths[1])
    compiled = compiled_schedule(schedule, p, m, num_chunks, group_size)
    return simulate_makespan(compiled, durations, p2p_latency_s=p2p_latency_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerComm:
    """Exposed communication of one layer for one micro-batch, by axis and direction."""

    forward_s: dict[str, float] = field(default_factory=dict)
    backward_s: dict[str, float] = field(default_factory=dict)
    recompute_forward_s: float = 0.0
    """Forward collectives repeated when the layer is fully recomputed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StageTime:
    """One pipeline rank's per-micro-batch work."""

    stage: int
    chunk_times: tuple[OpTimes, ...]
    """F, B (with recomputation and exposed collectives), W per chunk, per micro-batch."""
    compute_s: float
    recompute_s: float
    exposed_comm_s: dict[str, float]
    offload_stall_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEstimate:
    """Predicted time of one optimizer step and its breakdown (a model, not a measurement)."""

    step_time_s: float
    pipeline_makespan_s: float
    compute_s: float
    recompute_s: float
    bubble_s: float
    exposed_comm_s: dict[str, float]
    offload_stall_s: float
    optimizer_s: float
    critical_stage: int
    num_micro_batches: int
    model_flop: float
    hardware_flop: float
    world_size: int
    tokens_per_step: int
    peak_flop_per_s: float
    stages: tuple[StageTime, ...]

    @property
    def tokens_per_s(self) -> float:
        """Training tokens per second over the cluster."""
        return self.tokens_per_step / self.step_time_s

    @property
    def tflops_per_gpu(self) -> float:
        """Model TFLOP/s per GPU (no recomputation)."""
        return self.model_flop / self.step_time_s / self.world_size / 1e12

    @property
    def hardware_tflops_per_gpu(self) -> float:
        """Hardware TFLOP/s per GPU (recomputation counted)."""
        return self.hardware_flop / self.step_time_s / self.world_size / 1e12

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation against the dense peak of the compute format."""
        return self.tflops_per_gpu * 1e12 / self.peak_flop_per_s

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation."""
        return self.hardware_tflops_per_gpu * 1e12 / self.peak_flop_per_s

    @property
    def bottleneck(self) -> str:
        """The largest term of the breakdown, named for people."""
        terms = {"compute": self.compute_s, "recompute": self.recompute_s,
                 "pipeline bubble": self.bubble_s, "optimizer": self.optimizer_s,
                 "offload": self.offload_stall_s}
        terms.update({f"{axis} communication": t for axis, t in self.exposed_comm_s.items()})
        return max(terms, key=lambda k: terms[k])


def _kv_bytes_per_token(spec: ModelSpec, tp: int) -> float:
    """K and V bytes per token a context-parallel ring sends (16-bit, per TP rank)."""
    if spec.attention == AttentionKind.MLA and spec.mla is not None:
        mla = spec.mla
        heads = spec.num_attention_heads / tp
        return 2.0 * heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim)
    kv = max(spec.kv_heads / tp, 1.0)
    return 2.0 * 2 * kv * spec.dim_per_head


def layer_comm(spec: ModelSpec, layer_index: int, *, training: TrainingSpec,
               parallel: ParallelConfig, groups: dict[str, AxisGroup], fabric: Fabric,
               compute: LayerCompute, attention_forward_s: float) -> LayerComm:
    """Exposed collective time of one layer for one micro-batch.

    Source: Megatron-LM 2021 arXiv:2104.04473 Sec. 3.2 (TP: two all-reduces of b s h in
    forward and two in backward per layer, 8 b s h (t-1)/t bytes per rank); Korthikanti
    et al. arXiv:2205.05198 Sec. 4.2.2 (sequence parallel: all-gather + reduce-scatter of
    the same volume); Ring Attention arXiv:2310.01889 (cp-1 K/V block passes per layer);
    DeepSpeed-Ulysses arXiv:2309.14509 (four all-to-alls per layer); GShard arXiv:2006.16668
    / DeepSeek-V3 Sec. 3.2 (dispatch and combine all-to-alls per MoE layer).
    """
    tokens = training.sequence_length * parallel.micro_batch_size / parallel.cp
    h = spec.hidden_size
    act = 2.0
    fwd: dict[str, float] = {}
    bwd: dict[str, float] = {}
    moe_layer = spec.is_moe_layer(layer_index)
    tp = groups["tp"]
    if tp.size > 1 and not training.overlap_tp_comm:
        message = tokens * h * act
        if parallel.sequence_parallel:
            per_block = (collective_s(Collective.ALL_GATHER, tp, message, fabric)
                         + collective_s(Collective.REDUCE_SCATTER, tp, message, fabric))
        else:
            per_block = collective_s(Collective.ALL_REDUCE, tp, message, fabric)
        # Attention, plus the dense MLP or the shared experts; routed experts talk over EP.
        has_mlp_block = not moe_layer or (spec.moe is not None and spec.moe.num_shared_experts > 0)
        blocks = 1 + (1 if has_mlp_block else 0)
        fwd["tp"] = blocks * per_block
        bwd["tp"] = blocks * per_block
    cp = groups["cp"]
    if cp.size > 1:
        cp_fwd, cp_bwd = _cp_comm(spec, parallel, groups, fabric, tokens)
        if parallel.cp_kind == ContextParallelKind.RING:
            fwd["cp"] = max(0.0, cp_fwd - attention_forward_s)
            bwd["cp"] = max(0.0, cp_bwd - 2.0 * attention_forward_s)
        else:
            fwd["cp"], bwd["cp"] = cp_fwd, cp_bwd
    if moe_layer and spec.moe is not None and groups["ep"].size > 1:
        per_layer = expert_all_to_all_s(spec, training, parallel, groups["ep"], fabric, tokens)
        traits = schedule_traits(parallel.schedule)
        overlapped = traits.overlapped_pairs or (
            training.overlap_ep_comm and traits.placement == StagePlacement.LOOPED)
        if overlapped:
            fwd["ep"] = max(0.0, per_layer - compute.times.backward_input_s)
            bwd["ep"] = max(0.0, per_layer - compute.times.forward_s)
        else:
            fwd["ep"], bwd["ep"] = per_layer, per_layer
    return LayerComm(forward_s=fwd, backward_s=bwd, recompute_forward_s=sum(fwd.values()))


def expert_all_to_all_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                        group: AxisGroup, fabric: Fabric, tokens: float) -> float:
    """Dispatch plus combine time of one MoE layer for one micro-batch (one direction).

    The bytes each rank sends are split between NVLink and the NICs by
    `models.moe.ep_dispatch_split` (one IB copy per destination node, then NVLink forwards;
    node-limited routing caps the nodes per token at the router's group limit), scaled by
    the assumed load imbalance, and timed by `all_to_all_split_cost`.
    Source: DeepSeek-V3 arXiv:2412.19437 Sec. 3.2.2; GShard arXiv:2006.16668 (dispatch and
    combine all-to-alls).
    """
    moe = spec.moe
    assert moe is not None
    per_rank = max(1, int(tokens * parallel.etp / parallel.tp))
    k = group.ranks_per_node
    nodes = max(1, group.size // k)
    limit = min(nodes, moe.topk_groups) if moe.num_expert_groups > 1 else None
    total = 0.0
    for element_bytes in ((1 if training.compute_dtype == DType.FP8 else 2), 2):
        try:
            split = ep_dispatch_split(tokens_per_rank=per_rank, top_k=moe.top_k,
                                      hidden_size=spec.hidden_size,
                                      bytes_per_elem=element_bytes,
                                      num_experts=moe.num_experts, ep_size=group.size,
                                      ranks_per_node=k, max_nodes_per_token=limit)
        except InvalidSpecError:
            payload = per_rank * moe.top_k * spec.hidden_size * element_bytes
            total += collective_s(Collective.ALL_TO_ALL, group,
                                  payload * training.moe_load_imbalance, fabric)
            continue
        scale = training.moe_load_imbalance
        total += all_to_all_split_cost(
            num_ranks=group.size, ranks_per_node=k,
            intra_bytes_per_rank=int(split.intra_node_bytes * scale),
            inter_bytes_per_rank=int(split.inter_node_bytes * scale), fabric=fabric).time_s
    return total


def _cp_comm(spec: ModelSpec, parallel: ParallelConfig,
             groups: dict[str, AxisGroup], fabric: Fabric, tokens: float) -> tuple[float, float]:
    """(forward, backward) context-parallel collective time of one layer."""
    cp = parallel.cp
    ulysses = cp if parallel.cp_kind == ContextParallelKind.ULYSSES else (
        parallel.ulysses_degree or 1 if parallel.cp_kind == ContextParallelKind.USP else 1)
    ring = cp // ulysses
    fwd = bwd = 0.0
    if ulysses > 1:
        group = AxisGroup(size=ulysses, ranks_per_node=min(ulysses, groups["cp"].ranks_per_node))
        d_qk, d_v = attention_head_dims(spec)
        q_out = tokens * spec.num_attention_heads * (d_qk + d_v) / 2 * 2.0 / parallel.tp
        kv = tokens * _kv_bytes_per_token(spec, parallel.tp)
        per_pass = (2 * collective_s(Collective.ALL_TO_ALL, group, q_out, fabric)
                    + collective_s(Collective.ALL_TO_ALL, group, kv, fabric))
        fwd += per_pass
        bwd += per_pass
    if ring > 1:
        pair = AxisGroup(size=2, ranks_per_node=2 if groups["cp"].ranks_per_node >= 2 else 1)
        # After the Ulysses all-to-all a rank holds u x the tokens for 1/u of the heads.
        block = tokens * _kv_bytes_per_token(spec, parallel.tp)
        fwd += (ring - 1) * collective_s(Collective.P2P, pair, block, fabric)
        bwd += (ring - 1) * collective_s(Collective.P2P, pair, 2 * block, fabric)
    return fwd, bwd


def _layer_mode(parallel: ParallelConfig, stage: int, position: int) -> RecomputeMode:
    policy = parallel.policy_of(stage).recompute
    if isinstance(policy, FullLayers):
        if position < policy.full_layers:
            return RecomputeMode.FULL
        return RecomputeMode(policy.others)
    return policy


def _compute_context(training: TrainingSpec, parallel: ParallelConfig,
                     cluster: ClusterSpec) -> ComputeContext:
    return ComputeContext(
        gpu=cluster.gpu, seq_len=training.sequence_length,
        micro_batch_size=parallel.micro_batch_size, tp=parallel.tp, cp=parallel.cp,
        ep=parallel.ep, etp=parallel.etp, sequence_parallel=parallel.sequence_parallel,
        compute_dtype=training.compute_dtype, flash_attention=training.flash_attention,
        dropout=training.dropout, moe_load_imbalance=training.moe_load_imbalance)


def stage_time(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
               cluster: ClusterSpec, layout: StageLayout, *, num_micro_batches: int,
               fabric: Fabric, groups: dict[str, AxisGroup]) -> StageTime:
    """Per-micro-batch F/B/W of every chunk of one pipeline rank, with recomputation,
    exposed collectives, ZeRO-3 gathers and offload stalls folded in."""
    ctx = _compute_context(training, parallel, cluster)
    policy = parallel.policy_of(layout.rank)
    cache: dict[bool, tuple[LayerCompute, LayerComm]] = {}
    chunk_times: list[OpTimes] = []
    compute_total = recompute_total = 0.0
    exposed: dict[str, float] = {}
    position = 0
    for chunk_index, chunk in enumerate(layout.chunks):
        chunk_op = OpTimes()
        for index in chunk:
            key = spec.is_moe_layer(index)
            if key not in cache:
                lc = layer_compute(spec, index, ctx)
                attn_f = lc.recompute_module_s.get(RecomputeModule.CORE_ATTN, 0.0)
                cache[key] = (lc, layer_comm(spec, index, training=training, parallel=parallel,
                                             groups=groups, fabric=fabric, compute=lc,
                                             attention_forward_s=attn_f))
            lc, comm = cache[key]
            mode = _layer_mode(parallel, layout.rank, position)
            position += 1
            recompute = 0.0
            if mode == RecomputeMode.FULL:
                recompute = lc.recompute_full_s + comm.recompute_forward_s
            elif mode == RecomputeMode.SELECTIVE:
                recompute = lc.recompute_s(policy.recompute_modules)
            zero3_f, zero3_b = zero3_exposed_s(spec, index, training, parallel, groups, fabric,
                                              lc)
            chunk_op = chunk_op + lc.times + OpTimes(
                forward_s=sum(comm.forward_s.values()) + zero3_f,
                backward_input_s=sum(comm.backward_s.values()) + recompute + zero3_b)
            compute_total += lc.times.total_s
            recompute_total += recompute
            for axis, t in list(comm.forward_s.items()) + list(comm.backward_s.items()):
                exposed[axis] = exposed.get(axis, 0.0) + t
            if mode == RecomputeMode.FULL:
                for axis, t in comm.forward_s.items():
                    exposed[axis] = exposed.get(axis, 0.0) + t
            if zero3_f or zero3_b:
                exposed["dp"] = exposed.get("dp", 0.0) + zero3_f + zero3_b
        if chunk_index == len(layout.chunks) - 1 or schedule_traits(
                parallel.schedule).placement != StagePlacement.LOOPED:
            extra = _head_times(spec, ctx, layout, chunk_index, parallel)
            chunk_op = chunk_op + extra
            compute_total += extra.total_s
        chunk_times.append(chunk_op)
    stall = _offload_stall(spec, training, parallel, layout, cluster, num_micro_batches,
                           chunk_times)
    if stall:
        chunk_times = [t + OpTimes(backward_input_s=stall / len(chunk_times))
                       for t in chunk_times]
    return StageTime(stage=layout.rank, chunk_times=tuple(chunk_times), compute_s=compute_total,
                     recompute_s=recompute_total, exposed_comm_s=exposed,
                     offload_stall_s=stall)


def _head_times(spec: ModelSpec, ctx: ComputeContext, layout: StageLayout, chunk_index: int,
                parallel: ParallelConfig) -> OpTimes:
    """Output head (and MTP modules) on the chunk that ends the model on this rank."""
    if layout.num_heads == 0:
        return OpTimes()
    v_shaped = schedule_traits(parallel.schedule).placement == StagePlacement.V_SHAPE
    ends_here = chunk_index == (1 if v_shaped else len(layout.chunks) - 1)
    if not ends_here:
        return OpTimes()
    times = head_compute(spec, ctx)
    for _ in range(layout.num_mtp_modules // max(1, layout.num_heads)):
        mtp = layer_compute(spec, spec.num_layers - 1, ctx).times
        times = times + mtp + head_compute(spec, ctx)
    return times


def zero3_exposed_s(spec: ModelSpec, index: int, training: TrainingSpec,
                   parallel: ParallelConfig, groups: dict[str, AxisGroup], fabric: Fabric,
                   lc: LayerCompute) -> tuple[float, float]:
    """(forward, backward) exposed ZeRO-3 traffic of one layer: the parameter all-gather
    before forward, and the all-gather plus the gradient reduce-scatter in backward, each
    hidden up to the layer's compute (prefetching). Source: ZeRO arXiv:1910.02054 Sec. 7
    (3 Psi volume)."""
    if parallel.zero_stage != 3 or parallel.dp * parallel.cp <= 1:
        return 0.0, 0.0
    params = layer_params(spec, index)
    gather = scatter = 0.0
    # Dense weights are sharded over dp x cp, routed experts over the expert-DP group.
    for count, group in ((params.dense_part / parallel.tp, groups["dp_cp"]),
                         (params.routed_experts / (parallel.ep * parallel.etp), groups["edp"])):
        gather += collective_s(Collective.ALL_GATHER, group,
                               count * training.param_dtype.num_bytes, fabric)
        scatter += collective_s(Collective.REDUCE_SCATTER, group,
                                count * training.grad_dtype.num_bytes, fabric)
    backward = lc.times.backward_input_s + lc.times.backward_weight_s
    return max(0.0, gather - lc.times.forward_s), max(0.0, gather + scatter - backward)


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
    transfer = 2 * per_micro_batch / cluster.pcie_bandwidth_bytes_per_s
    hidden = sum(t.forward_s + t.backward_input_s for t in chunk_times)
    return max(0.0, transfer - hidden)


def _virtual_stage_durations(parallel: ParallelConfig, stages: list[StageTime]) -> OpDurations:
    """Per-virtual-stage F/B/W in layer order for the simulator."""
    count = num_virtual_stages(parallel)
    forward = [0.0] * count
    backward = [0.0] * count
    weight = [0.0] * count
    p = parallel.pp
    placement = schedule_traits(parallel.schedule).placement
    for st in stages:
        for chunk_index, times in enumerate(st.chunk_times):
            if placement == StagePlacement.BIDIRECTIONAL:
                targets = [st.stage if chunk_index == 0 else p - 1 - st.stage]
            elif placement == StagePlacement.V_SHAPE:
                targets = [st.stage if chunk_index == 0 else 2 * p - 1 - st.stage]
            else:
                targets = [chunk_index * p + st.stage]
            for v in targets:
                forward[v] = max(forward[v], times.forward_s)
                backward[v] = max(backward[v], times.backward_input_s)
                weight[v] = max(weight[v], times.backward_weight_s)
    return OpDurations(forward_s=tuple(forward), backward_input_s=tuple(backward),
                       backward_weight_s=tuple(weight))


def _dp_exposed_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  groups: dict[str, AxisGroup], fabric: Fabric, layout: StageLayout,
                  stage: StageTime) -> float:
    """Gradient reduction (and ZeRO-1/2 parameter all-gather) left after the pipeline.

    Source: ZeRO arXiv:1910.02054 Sec. 7: all-reduce (2 Psi) without sharding, reduce-scatter
    plus all-gather (Psi + Psi) with ZeRO-1/2; dense gradients over dp x cp, expert gradients
    over the expert-data-parallel group.
    """
    if parallel.zero_stage == 3:
        return 0.0
    params = rank_parameters(spec, parallel, layout)
    dense = params.gemm + params.vectors + params.embedding + params.head
    experts = params.experts
    grad_bytes = training.grad_dtype.num_bytes
    param_bytes = training.param_dtype.num_bytes
    total = 0.0
    for count, group in ((dense, groups["dp_cp"]), (experts, groups["edp"])):
        if count <= 0 or group.size <= 1:
            continue
        if parallel.zero_stage == 0:
            reduce = collective_s(Collective.ALL_REDUCE, group, count * grad_bytes, fabric)
            gather = 0.0
        else:
            reduce = collective_s(Collective.REDUCE_SCATTER, group, count * grad_bytes, fabric)
            gather = collective_s(Collective.ALL_GATHER, group, count * param_bytes, fabric)
        if training.overlap_grad_reduce:
            last_backward = sum(t.backward_input_s + t.backward_weight_s for t in stage.chunk_times)
            first_forward = sum(t.forward_s for t in stage.chunk_times)
            reduce = max(0.0, reduce - last_backward)
            gather = max(0.0, gather - first_forward)
        total += reduce + gather
    return total


def _optimizer_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                 cluster: ClusterSpec, layout: StageLayout) -> float:
    """Memory-bound optimizer step over the rank's shard of the states."""
    held = rank_parameters(spec, parallel, layout)
    edp = max(1, parallel.tp * parallel.cp * parallel.dp // (parallel.ep * parallel.etp))
    sharded = parallel.zero_stage >= 1
    params = (held.gemm + held.vectors + held.embedding + held.head) / (
        parallel.dp * parallel.cp if sharded else 1) + held.experts / (edp if sharded else 1)
    state = (training.master_dtype.num_bytes if training.master_dtype else 0.0)
    state += 2 * training.optimizer_state_dtype.num_bytes + training.grad_dtype.num_bytes
    traffic = params * (OPTIMIZER_BYTES_PER_PARAM_FACTOR * state + training.param_dtype.num_bytes)
    return memory_bound_time_s(traffic, gpu=cluster.gpu)


def estimate_step(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  cluster: ClusterSpec, *, layouts: tuple[StageLayout, ...] | None = None
                  ) -> StepEstimate:
    """The predicted step time of a configuration and its breakdown.

    The pipeline makespan comes from the discrete-event simulator run on the schedule's op
    lists with each virtual stage's own F, B and W (exposed collectives, recomputation and
    offload stalls folded in) and the P2P time between neighbouring ranks as the latency.

    Raises:
        InvalidSpecError: the batch does not divide, the schedule refuses the shape, or
            layers do not fill the stages.
    """
    m = micro_batch_count(training, parallel)
    layouts = layouts or pipeline_layout(spec, parallel)
    fabric = fabric_of(cluster)
    groups = axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    stages, makespan = _pipeline(spec, training, parallel, cluster, layouts, m, fabric, groups)
    dp = [_dp_exposed_s(spec, training, parallel, groups, fabric, layout, st)
          for layout, st in zip(layouts, stages, strict=True)]
    optimizer = [_optimizer_s(spec, training, parallel, cluster, layout) for layout in layouts]
    tail = [d + o for d, o in zip(dp, optimizer, strict=True)]
    critical = max(range(len(stages)), key=lambda i: (tail[i], stages[i].compute_s))
    busiest = max(stages, key=lambda st: rank_work_s(parallel, st, m))
    busy = rank_work_s(parallel, busiest, m)
    crossings = m / schedule_traits(parallel.schedule).num_pipes  # micro-batches per chunk
    exposed = {axis: crossings * t for axis, t in busiest.exposed_comm_s.items() if t > 0}
    if dp[critical] > 0:
        exposed["dp"] = exposed.get("dp", 0.0) + dp[critical]
    if parallel.pp > 1:
        exposed["pp"] = max(0.0, makespan - busy - _ideal_bubble(parallel, busiest, m))
    flops = _flops(spec, training, parallel, layouts)
    world = parallel.world_size
    return StepEstimate(
        step_time_s=makespan + tail[critical], pipeline_makespan_s=makespan,
        compute_s=crossings * busiest.compute_s, recompute_s=crossings * busiest.recompute_s,
        bubble_s=max(0.0, makespan - busy - exposed.get("pp", 0.0)),
        exposed_comm_s=exposed, offload_stall_s=crossings * busiest.offload_stall_s,
        optimizer_s=optimizer[critical], critical_stage=busiest.stage, num_micro_batches=m,
        model_flop=flops[0], hardware_flop=flops[1], world_size=world,
        tokens_per_step=training.tokens_per_step,
        peak_flop_per_s=cluster.gpu.peak_flop_per_s(training.compute_dtype),
        stages=tuple(stages))


def rank_work_s(parallel: ParallelConfig, stage: StageTime, m: int) -> float:
    """Busy time of one rank over a step: every micro-batch crosses every chunk of the rank,
    except under bidirectional schedules, where each micro-batch crosses one of the rank's
    two stages (one per direction)."""
    per_micro_batch = sum(t.total_s for t in stage.chunk_times)
    return m * per_micro_batch / schedule_traits(parallel.schedule).num_pipes


def _stage_key(spec: ModelSpec, parallel: ParallelConfig, layout: StageLayout) -> tuple:
    """Stages with the same layer kinds per chunk, extras and policy take the same time
    (offload stalls depend on the rank's in-flight count, so they keep the rank)."""
    policy = parallel.policy_of(layout.rank)
    kinds = tuple(tuple(spec.is_moe_layer(i) for i in chunk) for chunk in layout.chunks)
    rank = layout.rank if policy.offload_frac > 0 else -1
    return (kinds, layout.num_embeddings, layout.num_heads, layout.num_mtp_modules, policy, rank)


def _stage_times(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                 cluster: ClusterSpec, layouts: tuple[StageLayout, ...], m: int, fabric: Fabric,
                 groups: dict[str, AxisGroup]) -> list[StageTime]:
    """Every rank's per-micro-batch times, computed once per distinct stage (`_stage_key`)."""
    cache: dict[tuple, StageTime] = {}
    stages = []
    for layout in layouts:
        key = _stage_key(spec, parallel, layout)
        if key not in cache:
            cache[key] = stage_time(spec, training, parallel, cluster, layout,
                                    num_micro_batches=m, fabric=fabric, groups=groups)
        stages.append(dataclasses.replace(cache[key], stage=layout.rank))
    return stages


def _pipeline(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
              cluster: ClusterSpec, layouts: tuple[StageLayout, ...], m: int, fabric: Fabric,
              groups: dict[str, AxisGroup]) -> tuple[list[StageTime], float]:
    """Per-stage times and the simulated makespan."""
    stages = _stage_times(spec, training, parallel, cluster, layouts, m, fabric, groups)
    tokens = training.sequence_length * parallel.micro_batch_size / parallel.cp
    shard = parallel.tp if parallel.sequence_parallel else 1
    p2p = collective_s(Collective.P2P, AxisGroup(size=2, ranks_per_node=min(
        2, groups["pp"].ranks_per_node)), tokens * spec.hidden_size * 2.0 / shard, fabric)
    if parallel.pp == 1 and len(stages[0].chunk_times) == 1:
        return stages, m * stages[0].chunk_times[0].total_s
    chunks = schedule_traits(parallel.schedule).num_chunks(parallel.vpp)
    makespan = pipeline_makespan(parallel.schedule, num_stages=parallel.pp,
                                 num_micro_batches=m, num_chunks=chunks,
                                 durations=_virtual_stage_durations(parallel, stages),
                                 p2p_latency_s=p2p,
                                 group_size=parallel.microbatch_group_size)
    return stages, makespan


def pipeline_makespan_bound(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                            cluster: ClusterSpec) -> float:
    """A lower bound of the pipeline makespan, exact for uniform stages without latency.

    Fixed-order schedules executed as soon as possible are monotone in op durations, so the
    closed form at the lightest virtual stage's F, B and W (no P2P latency) is a lower bound;
    so is m times the busiest rank's work, and so is one micro-batch's dependency chain
    (its forward on every virtual stage, then its input-gradient backward on every one),
    which dominates when there are fewer micro-batches than stages. Where the schedule has no exact closed form, the
    busiest rank's work bounds it, and for the linear ZB-H2 also the fill (the lightest
    forwards of all but one stage) plus the lightest rank's work.
    Source: the closed forms of `models.pipeline.closed_forms`.
    """
    m = micro_batch_count(training, parallel)
    layouts = pipeline_layout(spec, parallel)
    fabric, groups = fabric_of(cluster), axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    if parallel.pp == 1:
        _, makespan = _pipeline(spec, training, parallel, cluster, layouts, m, fabric, groups)
        return makespan
    stages = _stage_times(spec, training, parallel, cluster, layouts, m, fabric, groups)
    durations = _virtual_stage_durations(parallel, stages)
    traits = schedule_traits(parallel.schedule)
    chunks = traits.num_chunks(parallel.vpp)
    busiest = max(rank_work_s(parallel, st, m) for st in stages)
    if not traits.overlapped_pairs:
        # One micro-batch's forwards through every virtual stage, then its input-gradient
        # backwards back: a path of the dependency graph (DualPipe's paired ops excepted).
        busiest = max(busiest, sum(durations.forward_s) + sum(durations.backward_input_s))
    closed = closed_form_makespan(parallel.schedule, num_stages=parallel.pp,
                                  num_micro_batches=m, num_chunks=chunks,
                                  forward_s=min(durations.forward_s),
                                  backward_input_s=min(durations.backward_input_s),
                                  backward_weight_s=min(durations.backward_weight_s),
                                  group_size=parallel.microbatch_group_size)
    if closed is not None:
        return max(busiest, closed)
    if traits.placement != StagePlacement.LINEAR:
        return busiest  # V and bidirectional placements start work on every rank at once
    # ZB-H2 (linear): the last rank cannot start before one forward has crossed every
    # earlier stage, then it does all its own work.
    fill = sum(sorted(durations.forward_s)[: len(durations.forward_s) - 1])
    return max(busiest, fill + min(rank_work_s(parallel, st, m) for st in stages))


def _ideal_bubble(parallel: ParallelConfig, busiest: StageTime, m: int) -> float:
    """Bubble of the same schedule without P2P latency, from its closed form when exact,
    else 0 (the whole gap is then booked as bubble)."""
    from models.pipeline import closed_form_bubble

    times = busiest.chunk_times[0]
    chunks = schedule_traits(parallel.schedule).num_chunks(parallel.vpp)
    value = closed_form_bubble(parallel.schedule, num_stages=parallel.pp, num_micro_batches=m,
                               num_chunks=chunks, forward_s=times.forward_s,
                               backward_input_s=times.backward_input_s,
                               backward_weight_s=times.backward_weight_s,
                               group_size=parallel.microbatch_group_size)
    return value if value is not None else 0.0


def _flops(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
           layouts: tuple[StageLayout, ...]) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one step, recomputation per stage policy."""
    full: set[int] = set()
    selective: set[int] = set()
    for layout in layouts:
        for position, index in enumerate(layout.layers):
            mode = _layer_mode(parallel, layout.rank, position)
            if mode == RecomputeMode.FULL:
                full.add(index)
            elif mode == RecomputeMode.SELECTIVE and RecomputeModule.CORE_ATTN in \
                    parallel.policy_of(layout.rank).recompute_modules:
                selective.add(index)
    # DualPipe's second copy holds the same layers: each layer is counted once.
    flops = step_flops(spec, num_sequences=training.global_batch_size,
                       seq_len=training.sequence_length, full_recompute_layers=full,
                       selective_recompute_layers=selective)
    return flops.model_flop, flops.hardware_flop


__all__ = [
    "AxisGroup",
    "LayerComm",
    "StageTime",
    "StepEstimate",
    "axis_groups",
    "collective_s",
    "compiled_schedule",
    "estimate_step",
    "expert_all_to_all_s",
    "layer_comm",
    "pipeline_makespan",
    "pipeline_makespan_bound",
    "stage_time",
    "zero3_exposed_s",
]
