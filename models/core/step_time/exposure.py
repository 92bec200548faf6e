"""Communication exposure: how much of each layer's and each step's traffic stays on the
critical path.

Owns: the overlap rules, applied to the traffic that `models.core.traffic` defines once:
- TP collectives are exposed unless `training.overlap_tp_comm` with sequence parallelism
  runs on Transformer Engine's userbuffers (`userbuffers_tp_overlap`; PyTorch's async TP is
  not credited), which leaves each reduce-scatter's last ring step, the
  SMs a bulk-overlapped reduce-scatter holds, and whatever outlasts the phase's compute
  (`tp_overlap_exposed_s`); calls the traffic marks as overlapped, such as SP's
  weight-gradient input gather, are hidden.
- Ring context-parallel P2P overlaps the attention core of the same layer; Ulysses
  all-to-alls are exposed.
- Expert all-to-alls are hidden behind the paired micro-batch's compute under DualPipe /
  DualPipeV (DeepSeek-V3 Sec. 3.2.1), and under interleaved 1F1B with extra warm-up
  micro-batches (and without a pipeline, Megatron's combined 1F1B) when
  `training.overlap_ep_comm` (Kimi K2 Sec. 2.4.2), each up to that
  compute, which loses the SMs the communication holds meanwhile
  (`OVERLAP_COMM_SM_SHARE`); exposed otherwise.
- ZeRO-3 gathers and reduce-scatters overlap the layer's compute; under DeepSpeed's 2021
  runtime the host issue of each gather is exposed and a recomputed forward gathers again
  (`models.core.step_time.deepspeed_zero3_2021`).
- Data-parallel gradient reduction overlaps the last micro-batch's backward when
  `training.overlap_grad_reduce`, and the ZeRO-1/2 parameter all-gather the first forward;
  the last bucket is always exposed.
Must not: define what moves (`models.core.traffic`) or compute kernel times (`models.core.compute`).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter

from api_schemas import ContextParallelKind
from api_schemas.architecture import ModelSpec
from api_schemas.hardware import GpuSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.catalog.kernels import memory_bound_time_s
from models.core.collectives import Collective, Fabric
from models.core.compute import LayerCompute, OpTimes
from models.core.mesh import GroupKind
from models.core.params import layer_params
from models.core.pipeline import SCHEDULES
from models.core.runtime_features import ep_overlap_active, userbuffers_tp_overlap
from models.core.search_memo import ModelTables, model_tables
from models.core.sharded_states import DEEPSPEED_PREFETCH_BUCKET_PARAMS
from models.core.step_time.deepspeed_zero3_2021 import layer_exposed_s, runtime_2021
from models.core.step_time.groups import AxisGroups
from models.core.traffic.context import group_placement, split_group_placement
from models.core.traffic.data import CHUNK_REDUCE
from models.core.traffic.items import Frequency, Phase, TrafficAxis, TrafficItem
from models.core.traffic.layer import (
    DEEPSPEED_MODULES_PER_LAYER,
    WGRAD_OVERLAP_SUFFIX,
    LayerCall,
    cp_calls,
    expert_calls,
    has_tp_mlp,
    tp_block_calls,
    zero3_unit_calls,
)

OVERLAP_COMM_SM_SHARE = 20 / 132
"""Share of the GPU's SMs the expert all-to-all kernels hold while they overlap another
micro-batch's compute, which runs that much slower meanwhile. Source: DeepSeek-V3
arXiv:2412.19437 Sec. 3.2.2: 20 of the H800's 132 SMs suffice for the IB and NVLink
dispatch and combine under DualPipe's overlap (applied as the same share on every GPU)."""


H100_SMS = 132
"""Streaming multiprocessors of an H100 SXM5, the GPU the userbuffers SM counts below were
tuned for (NVIDIA H100 Tensor Core GPU architecture whitepaper, Table 3)."""

TP_OVERLAP_BULK_RS_SMS = {"attention": 24, "mlp": 4}
"""SMs the bulk-overlapped backward reduce-scatter of each TP block holds while the weight-
gradient GEMM runs beside it, which runs that much slower meanwhile. Source: Megatron-Bridge
`src/megatron/bridge/training/comm_overlap.py`, `userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192`
(the Llama 3 70B H100 FP8 recipe): `qkv_wgrad=BulkOverlapCfg(num_sm=24)`,
`fc1_wgrad=BulkOverlapCfg(num_sm=4)` (the 405B TP 8 configuration holds 24 and 2). Applied
as the same share of the SMs on every GPU."""


def tp_overlap_exposed_s(calls: list[LayerCall], *, tp: int, window_s: float) -> float:
    """Exposed time of one phase's TP collectives under Transformer Engine's userbuffers
    overlap (Megatron `--tp-comm-overlap`, which requires sequence parallelism).

    Source: Transformer Engine `CommOverlap` / `CommOverlapP2P` as configured by
    Megatron-Bridge `comm_overlap.py` (`TransformerLayerTPOverlapCfg`): forward all-gathers
    and reduce-scatters and the backward all-gather of the row-parallel input gradient run as
    ring exchanges (`RingExchangeOverlapCfg`, copy-engine peer transfers, one SM) in `tp`
    chunks interleaved with the GEMM; the backward reduce-scatter of the column-parallel input
    gradient runs in bulk beside the weight-gradient GEMM (`BulkOverlapCfg`).
    Assumes: an all-gather's first hop hides behind the local chunk's GEMM, so it exposes
    nothing; a ring-exchange reduce-scatter exposes its last step (1/tp of the call) after
    the last GEMM chunk; a bulk reduce-scatter costs the GEMM its SMs
    (`TP_OVERLAP_BULK_RS_SMS`) for as long as it runs; the phase's collectives together hide
    only up to the phase's compute (`window_s`), the rest is exposed; never more than the
    collectives take unoverlapped (the overlap is a runtime choice the planner takes where
    available, `models.core.runtime_features`, so it must not make a step slower).
    """
    if not calls:
        return 0.0
    times = [c.time_s for c in calls]
    total = sum(times)
    exposed = max(0.0, total - window_s)
    for call, time_s in zip(calls, times, strict=True):
        hidden = min(time_s, window_s)
        if call.collective != Collective.REDUCE_SCATTER:
            continue
        if call.phase == Phase.BACKWARD:
            block = call.name.split(".")[1]
            exposed += TP_OVERLAP_BULK_RS_SMS.get(block, 0) / H100_SMS * hidden
        else:
            exposed += hidden / tp
    return min(exposed, total)


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerComm:
    """Exposed communication of one layer for one micro-batch, by axis and direction."""

    forward_s: dict[str, float] = field(default_factory=dict)
    backward_s: dict[str, float] = field(default_factory=dict)
    recompute_s: dict[str, float] = field(default_factory=dict)
    """Forward collectives repeated when the layer is fully recomputed, by axis."""

    @property
    def recompute_forward_s(self) -> float:
        """All forward collectives repeated by full recomputation."""
        return sum(self.recompute_s.values())


def ep_overlapped(parallel: ParallelConfig, training: TrainingSpec) -> bool:
    """Whether the schedule hides expert all-to-alls behind another micro-batch's compute:
    DualPipe-style pairs always, else `overlap_ep_comm` where the mesh admits it
    (`models.core.runtime_features.ep_overlap_active`: interleaved 1F1B, or no pipeline with
    Megatron-LM's combined 1F1B)."""
    if SCHEDULES[parallel.schedule].overlapped_pairs:
        return True
    m = training.global_batch_size // max(1, parallel.micro_batch_size * parallel.dp)
    return ep_overlap_active(training, parallel.schedule, pp=parallel.pp, ep=parallel.ep,
                             num_micro_batches=m)


def _families(tables: ModelTables, training: TrainingSpec, fabric: Fabric
              ) -> dict[tuple[object, ...], tuple[LayerCall, ...]]:
    """The family calls kept for one (model, recipe, fabric) on the model's tables: the
    specs are hashed once per layer, not once per family."""
    kept = tables.call_families.get((training, fabric))
    if kept is None:
        kept = tables.call_families[training, fabric] = {}
    return kept


def _family(kept: dict[tuple[object, ...], tuple[LayerCall, ...]], key: tuple[object, ...],
            make: Callable[[], list[LayerCall]]) -> tuple[LayerCall, ...]:
    """The calls of one family (TP block, CP exchange, expert all-to-alls) under `key`, which
    holds every input the family's rule reads besides the specs, computed once."""
    cached = kept.get(key)
    if cached is None:
        cached = kept[key] = tuple(make())
    return cached


LAYER_CALL_FIELDS = ("tp", "cp", "cp_kind", "ulysses_degree", "sequence_parallel",
                     "micro_batch_size", "ep", "etp")
"""The configuration fields a layer's TP, CP and expert calls read besides the mesh (a test
records what building them reads and checks it against these): with the recipe, mesh, fabric
and the layer's kinds, the key of a layer's calls on the model's tables."""

_layer_call_fields = attrgetter(*LAYER_CALL_FIELDS)


def layer_calls(spec: ModelSpec, layer_index: int, *, training: TrainingSpec,
                parallel: ParallelConfig, groups: AxisGroups, fabric: Fabric
                ) -> tuple[LayerCall, ...]:
    """Every TP, CP and expert call of one layer pass (`models.core.traffic.layer`), computed once
    per layer kind and the parallel fields they read (kept on the search's tables of the
    model).

    Each family is also kept apart under the inputs its rule reads (degrees, tokens per rank
    and the placement of its own groups), so configurations that differ only in another
    axis (the expert degree for the TP and CP calls, the CP kind for the expert calls) share
    it: the search's bound tables build thousands of such configurations."""
    moe_layer = spec.is_moe_layer(layer_index)
    linear = spec.is_linear_attention_layer(layer_index)
    p = parallel
    key = (training, _layer_call_fields(p), groups.mesh, fabric, moe_layer, linear)
    tables = model_tables(spec)
    cached = tables.layer_calls.get(key)
    if cached is not None:
        return cached
    lctx = groups.layer_context(spec, training, parallel, fabric)
    mesh, tokens = groups.mesh, lctx.tokens_per_rank
    kept = _families(tables, training, fabric)
    tp_key = (p.tp, tokens, p.sequence_parallel, group_placement(mesh, GroupKind.TP))
    calls = list(_family(kept, ("tp", "attention", *tp_key),
                         lambda: tp_block_calls(lctx, "attention")))
    if has_tp_mlp(lctx, moe_layer):
        calls += _family(kept, ("tp", "mlp", *tp_key), lambda: tp_block_calls(lctx, "mlp"))
    if p.cp > 1:
        # USP's two sub-axes sit on the nodes as the mesh's CP groups split, not as a whole.
        split = (split_group_placement(mesh, GroupKind.CP, p.ulysses_degree or 1)
                 if p.cp_kind == ContextParallelKind.USP else None)
        calls += _family(kept, ("cp", linear, p.tp, tokens, p.cp, p.cp_kind, p.ulysses_degree,
                                p.micro_batch_size, group_placement(mesh, GroupKind.CP), split),
                         lambda: cp_calls(lctx, linear))
    if moe_layer:
        calls += _family(kept, ("ep", p.tp, tokens, p.ep, p.etp,
                                group_placement(mesh, GroupKind.EP)),
                         lambda: expert_calls(lctx))
    found = tables.layer_calls[key] = tuple(calls)
    return found


_AXIS_NAMES = {axis: axis.value for axis in TrafficAxis}
"""Each axis's name, the key of `LayerComm`'s tables (read once here, not per call)."""
_TP_NAME = TrafficAxis.TP.value


def layer_comm(spec: ModelSpec, layer_index: int, *, training: TrainingSpec,
               parallel: ParallelConfig, groups: AxisGroups, fabric: Fabric,
               compute: LayerCompute, attention_forward_s: float) -> LayerComm:
    """Exposed collective time of one layer for one micro-batch, by axis and phase.

    Source: the traffic of `models.core.traffic.layer` (Megatron-LM 2021 arXiv:2104.04473
    Sec. 3.2; Korthikanti et al. arXiv:2205.05198 Sec. 4.2.2; Ring Attention
    arXiv:2310.01889; DeepSpeed-Ulysses arXiv:2309.14509; DeepSeek-V3 arXiv:2412.19437
    Sec. 3.2) with the overlap rules of this module.
    """
    totals: dict[tuple[Phase, TrafficAxis, bool], float] = {}
    tp_overlapped: dict[Phase, list[LayerCall]] = {}
    under_wgrad = 0.0
    for call in layer_calls(spec, layer_index, training=training, parallel=parallel,
                            groups=groups, fabric=fabric):
        if call.name.endswith(WGRAD_OVERLAP_SUFFIX):
            under_wgrad += call.time_s
            continue
        ring = call.axis == TrafficAxis.CP and call.collective == Collective.P2P
        hidden_by_design = call.axis == TrafficAxis.TP and call.overlap_frac >= 1.0
        if hidden_by_design:
            continue
        if (call.axis == TrafficAxis.TP
                and userbuffers_tp_overlap(training, parallel.sequence_parallel)):
            tp_overlapped.setdefault(call.phase, []).append(call)
            continue
        # Keyed by the member (a str enum: it hashes as its value), named by its value below.
        key = (call.phase, call.axis, ring)
        totals[key] = totals.get(key, 0.0) + call.time_s
    overlapped_ep = ep_overlapped(parallel, training)
    out: dict[Phase, dict[str, float]] = {Phase.FORWARD: {}, Phase.BACKWARD: {},
                                         Phase.RECOMPUTE: {}}
    for (phase, member, ring), t in totals.items():
        axis = _AXIS_NAMES[member]
        if ring:
            window = attention_forward_s * (2.0 if phase == Phase.BACKWARD else 1.0)
            t = max(0.0, t - window)
        elif member == TrafficAxis.EP and overlapped_ep:
            window = (compute.times.forward_s if phase == Phase.BACKWARD
                      else compute.times.backward_input_s)
            t = max(0.0, t - window) + OVERLAP_COMM_SM_SHARE * min(t, window)
        out[phase][axis] = out[phase].get(axis, 0.0) + t
    windows = {Phase.FORWARD: compute.times.forward_s,
               Phase.BACKWARD: compute.times.backward_input_s + compute.times.backward_weight_s,
               Phase.RECOMPUTE: compute.recompute_full_s}
    for phase, calls in tp_overlapped.items():
        t = tp_overlap_exposed_s(calls, tp=parallel.tp, window_s=windows[phase])
        if t > 0.0:
            out[phase][_TP_NAME] = out[phase].get(_TP_NAME, 0.0) + t
    # The column-parallel input-gradient collectives run under the weight-gradient GEMMs
    # (`models.core.traffic.layer.tp_dgrad_overlapped`); what outlasts them stays exposed.
    # Assumes: the window is all of the layer's weight-gradient GEMMs (an upper bound: each
    # block's collective waits on its own column-parallel GEMM only).
    late = max(0.0, under_wgrad - compute.times.backward_weight_s)
    if late > 0.0:
        out[Phase.BACKWARD][_TP_NAME] = out[Phase.BACKWARD].get(_TP_NAME, 0.0) + late
    return LayerComm(forward_s=out[Phase.FORWARD], backward_s=out[Phase.BACKWARD],
                     recompute_s=out[Phase.RECOMPUTE])


def expert_all_to_all_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                        groups: AxisGroups, fabric: Fabric) -> float:
    """Dispatch plus combine time of one MoE layer for one micro-batch (forward only,
    before any overlap), from `models.core.traffic.layer.expert_calls`."""
    lctx = groups.layer_context(spec, training, parallel, fabric)
    return sum(c.time_s for c in expert_calls(lctx) if c.phase == Phase.FORWARD)


def zero3_exposed_s(spec: ModelSpec, index: int, training: TrainingSpec,
                    parallel: ParallelConfig, groups: AxisGroups, fabric: Fabric,
                    lc: LayerCompute) -> tuple[float, float]:
    """(forward, backward) exposed ZeRO-3 time of one layer: the parameter all-gather
    before forward, and the all-gather plus the gradient reduce-scatter in backward, each
    hidden up to the layer's compute (prefetching); the copy kernels around them are
    `zero3_copy_s`. Source: ZeRO
    arXiv:1910.02054 Sec. 7 (3 Psi volume); the calls are
    `models.core.traffic.layer.zero3_unit_calls`. The routed experts are sharded over the
    expert-DP group, which spans TP ranks too (edp = tp x cp x dp / (ep x etp)), so a mesh
    without data parallelism still gathers them when edp > 1."""
    if parallel.zero_stage != 3 or not _zero3_sharded(spec, index, parallel):
        return 0.0, 0.0
    params = layer_params(spec, index)
    dense = -(-params.dense_part // parallel.tp)
    expert = -(-params.routed_experts // (parallel.ep * parallel.etp))
    lctx = groups.layer_context(spec, training, parallel, fabric)
    calls = zero3_unit_calls(lctx, dense_params=dense, expert_params=expert)
    forward = sum(c.time_s for c in calls if c.phase == Phase.FORWARD)
    backward = sum(c.time_s for c in calls if c.phase == Phase.BACKWARD)
    window_f = lc.times.forward_s
    window_b = lc.times.backward_input_s + lc.times.backward_weight_s
    if parallel.fsdp:
        return max(0.0, forward - window_f), max(0.0, backward - window_b)
    if runtime_2021(training, parallel):
        exposed_f, exposed_b, _ = layer_exposed_s(calls, lc)
        return exposed_f, exposed_b
    # DeepSpeed ZeRO-3: a gather hides only as far as the prefetch reaches.
    share = deepspeed_prefetch_share(dense + expert)
    gather_b = sum(c.time_s for c in calls
                   if c.phase == Phase.BACKWARD and c.collective == Collective.ALL_GATHER)
    hidden_f = min(window_f, forward * share)
    hidden_gather_b = min(window_b, gather_b * share)
    hidden_rest_b = min(window_b - hidden_gather_b, backward - gather_b)
    return forward - hidden_f, backward - hidden_gather_b - hidden_rest_b


def zero3_recompute_exposed_s(spec: ModelSpec, index: int, training: TrainingSpec,
                              parallel: ParallelConfig, groups: AxisGroups, fabric: Fabric,
                              lc: LayerCompute) -> float:
    """Exposed ZeRO-3 time of one layer's recomputed forward (charged where the layer is
    fully recomputed): DeepSpeed's 2021 runtime gathers the parameters again
    (`models.core.step_time.deepspeed_zero3_2021.layer_exposed_s`); none elsewhere."""
    if not runtime_2021(training, parallel) or not _zero3_sharded(spec, index, parallel):
        return 0.0
    params = layer_params(spec, index)
    dense = -(-params.dense_part // parallel.tp)
    expert = -(-params.routed_experts // (parallel.ep * parallel.etp))
    lctx = groups.layer_context(spec, training, parallel, fabric)
    return layer_exposed_s(zero3_unit_calls(lctx, dense_params=dense, expert_params=expert),
                           lc)[2]


def deepspeed_prefetch_share(unit_params: int) -> float:
    """Share of a layer's ZeRO-3 all-gathers DeepSpeed can issue ahead of use (and so hide
    behind compute): each of the layer's `DEEPSPEED_MODULES_PER_LAYER` modules is prefetched
    by at most `stage3_prefetch_bucket_size` elements while the module before it computes.

    Source: DeepSpeed v0.3.13 (the March 2021 ZeRO-3 release)
    `deepspeed/runtime/zero/stage3.py`: `prefetch_next_sub_modules` gathers, only when no
    prefetch is in flight, the parameters of the next sub-modules in trace order until
    `get_params_to_prefetch` reaches `numel` = the prefetch bucket; the rest of a module is
    gathered when the module runs (`fetch_sub_module`, synchronous).
    `deepspeed/runtime/zero/constants.py`: `ZERO_OPTIMIZATION_PREFETCH_BUCKET_SIZE_DEFAULT` =
    50,000,000 (`models.core.sharded_states.DEEPSPEED_PREFETCH_BUCKET_PARAMS`), the same at v0.4.0
    and v0.5.0; `ZERO3_OPTIMIZATION_OVERLAP_COMM_DEFAULT` = True, so the gradient
    reduce-scatter overlaps backward as FSDP's does.
    Legend: unit_params = the layer's parameters on the rank before ZeRO sharding.
    Assumes: the layer's parameters split evenly over its modules; a module at most the
    bucket is prefetched whole. Applied to the coalesced runtime only; the 2021 runtime
    (`zero3_collectives` per_parameter), whose prefetch takes the next weight whole, is
    `models.core.step_time.deepspeed_zero3_2021`.
    """
    if unit_params <= 0:
        return 1.0
    module = unit_params / DEEPSPEED_MODULES_PER_LAYER
    return min(1.0, DEEPSPEED_PREFETCH_BUCKET_PARAMS / module)


def zero3_layer_copy_s(spec: ModelSpec, index: int, training: TrainingSpec,
                       parallel: ParallelConfig, gpu: GpuSpec) -> tuple[float, float]:
    """`zero3_copy_s` of layer `index` as a ZeRO-3 unit (its weights after TP and EP x
    ETP); none without ZeRO-3 sharding."""
    if parallel.zero_stage != 3 or not _zero3_sharded(spec, index, parallel):
        return 0.0, 0.0
    params = layer_params(spec, index)
    dense = -(-params.dense_part // parallel.tp) if parallel.dp * parallel.cp > 1 else 0
    experts = (-(-params.routed_experts // (parallel.ep * parallel.etp))
               if _expert_replicas(parallel) > 1 else 0)
    return zero3_copy_s(dense + experts, training, parallel, gpu)


def _expert_replicas(parallel: ParallelConfig) -> int:
    """edp = tp x cp x dp / (ep x etp) (`models.core.mesh.layout.expert_data_parallel_size`), 1
    where ep x etp does not divide it (the mesh rules refuse such meshes)."""
    folded = parallel.tp * parallel.cp * parallel.dp
    return max(1, folded // (parallel.ep * parallel.etp))


def _zero3_sharded(spec: ModelSpec, index: int, parallel: ParallelConfig) -> bool:
    """Whether ZeRO-3 shards any of a layer's weights: the dense ones over DP x CP, the
    routed experts of an MoE layer over expert-DP."""
    if parallel.dp * parallel.cp > 1:
        return True
    return spec.is_moe_layer(index) and _expert_replicas(parallel) > 1


def zero3_copy_s(unit_params: int, training: TrainingSpec, parallel: ParallelConfig,
                 gpu: GpuSpec) -> tuple[float, float]:
    """(forward, backward) time of the memory-bound copies FSDP2 runs on the compute stream
    around one unit's collectives, per micro-batch pass (booked as their own step term, not
    as communication).

    Source: PyTorch FSDP2 `torch/distributed/_composable/fsdp/_fsdp_collectives.py` (torch
    of December 2024, the build torchtitan's benchmark note names):
    `foreach_all_gather_copy_out` waits for the all-gather on the current (compute) stream
    and copies the gathered flat buffer into the per-parameter unsharded tensors
    (`split_with_sizes_copy`); `foreach_reduce` copies the unsharded gradients into the
    reduce-scatter input in the reduce dtype (`foreach_reduce_scatter_copy_in`) and makes the
    compute stream wait for that copy before it frees the gradients. The all-gather's copy-in
    (the rank's shard, on its own stream) is left out.
    Legend: P = the unit's parameters on the rank before sharding; copy-out moves 2 x P x
    param bytes (read the gathered buffer, write the parameters), once per all-gather;
    copy-in reads P gradients in the param dtype and writes P in the reduce dtype
    (`grad_dtype`).
    Assumes: every ZeRO-3 plan is sharded per parameter as FSDP2 does (the planner's ZeRO-3
    exports to torchtitan's FSDP2); the per-pass all-gathers (and their copy-outs) happen
    only when the unit is resharded after forward (`fsdp_reshard_after_forward`); a unit
    kept gathered is gathered once per step (`models.core.traffic.layer.zero3_unit_calls`),
    and that one copy-out per unit and step is left out (8 units of the Llama 3 405B
    preset's stage: 5 ms of a 14 s step).
    """
    param_bytes = training.param_dtype.num_bytes
    copy_out = memory_bound_time_s(2 * unit_params * param_bytes, gpu=gpu)
    copy_in = memory_bound_time_s(
        unit_params * (param_bytes + training.grad_dtype.num_bytes), gpu=gpu)
    gather = copy_out if parallel.fsdp_reshard_after_forward else 0.0
    return gather, gather + copy_in


ZERO3_EXPOSED_CALLS = ("forward.param_all_gather", "backward.grad_reduce_scatter",
                       "backward.grad_all_reduce")
"""The ZeRO-3 calls of a step with no compute to hide behind: the first unit's gather before
the step's first forward, and the last unit's gradient reduce-scatter after its last
backward."""


DEFERRED_REDUCE = "zero3.deferred_grad_reduce_scatter"
"""ZeRO-3's once-per-step gradient reduce-scatter when the sync is deferred to the last
micro-batch (`fsdp_defer_grad_sync`, `models.core.traffic.data`): a per-step gradient
reduction like ZeRO-1's, exposed by `sync_exposed_s`'s rule for those, not a prefetch fill."""


def zero3_fill_drain_s(item: TrafficItem) -> float:
    """Exposed fill or drain of ZeRO-3's per-unit prefetch pipeline for one step: one call.

    Source: PyTorch FSDP (Zhao et al. 2023, arXiv:2304.11277) Sec. 3.3: the next unit's
    all-gather is issued while the current unit computes, so a step of n units costs one
    gather plus n overlapped units (`zero3_exposed_s`); the first gather of a step waits on
    nothing, and the optimizer step waits for the last reduce-scatter. ZeRO
    arXiv:1910.02054 Sec. 7.2.2 for the volumes.
    Assumes: the backward gather of the last unit follows its forward without a gap (the
    unit is still resident), so only the forward gather and the gradient reduce-scatter
    fill and drain; one call of each per step, not per micro-batch, since later
    micro-batches' gathers overlap earlier compute.
    """
    if not item.name.endswith(ZERO3_EXPOSED_CALLS) or item.calls_per_step == 0:
        return 0.0
    return item.time_per_call_s


def sync_exposed_s(items: tuple[TrafficItem, ...], *, overlap: bool, num_micro_batches: int,
                   chunk_times: tuple[OpTimes, ...]) -> float:
    """Exposed time of the per-step data-parallel items (ZeRO-0/1/2 gradient reduction and
    parameter gather, ZeRO-3's prefetch fill and drain) of one rank, after its last backward.

    Source: Megatron-LM distributed optimizer (`--overlap-grad-reduce`,
    `--overlap-param-gather`): buckets reduce while the last micro-batch's backward runs and
    gather while the next forward runs; ZeRO arXiv:1910.02054 Sec. 7 for the volumes.
    Assumes: hiding is bounded by both the item's overlappable share (the last bucket stays
    exposed) and the compute it can run behind (one micro-batch's backward for a reduction,
    one forward for a gather); of a per-micro-batch reduction (ZeRO-2) only the last is
    bounded so, the earlier ones hide behind the next micro-batch's forward and backward.
    ZeRO-3 with the gradient sync deferred (`DEFERRED_REDUCE`) reduce-scatters every unit
    during the last micro-batch's backward, one unit behind it (PyTorch FSDP, Zhao et al.
    2023, arXiv:2304.11277 Sec. 3.3 and 4.3 `no_sync`): a per-step reduction under the
    same rule, so at least the last unit's call stays exposed, and all of what the last
    backward cannot cover.
    """
    backward = sum(t.backward_input_s + t.backward_weight_s for t in chunk_times)
    forward = sum(t.forward_s for t in chunk_times)
    total = 0.0
    for item in items:
        if item.axis not in (TrafficAxis.DP, TrafficAxis.EDP):
            continue
        if item.name.endswith(CHUNK_REDUCE):
            continue  # Pipeline ZeRO-2: `models.core.step_time.host_gradients`
        if "zero3" in item.name and not item.name.endswith(DEFERRED_REDUCE):
            total += zero3_fill_drain_s(item)
            continue
        repeats = num_micro_batches if item.frequency == Frequency.PER_MICRO_BATCH else 1
        per = item.time_per_step_s / repeats
        if not overlap:
            total += repeats * per
            continue
        window = forward if item.phase == Phase.OPTIMIZER else backward
        last = max(per * (1.0 - item.overlap_frac), per - window)
        # Earlier per-micro-batch reductions run while the next micro-batches compute.
        total += last + (repeats - 1) * max(0.0, per - forward - backward)
    return total


__all__ = [
    "LAYER_CALL_FIELDS",
    "OVERLAP_COMM_SM_SHARE",
    "LayerComm",
    "DEFERRED_REDUCE",
    "H100_SMS",
    "TP_OVERLAP_BULK_RS_SMS",
    "ep_overlapped",
    "expert_all_to_all_s",
    "layer_calls",
    "layer_comm",
    "sync_exposed_s",
    "tp_overlap_exposed_s",
    "zero3_copy_s",
    "zero3_layer_copy_s",
    "zero3_exposed_s",
    "zero3_fill_drain_s",
    "zero3_recompute_exposed_s",
]
