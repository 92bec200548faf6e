"""Assembly of one optimizer step: the pipeline makespan, the per-step terms after it, and a
breakdown whose terms add up to the step time.

Owns: `StepEstimate` (step time, breakdown, tokens/s, TFLOP/s per GPU, MFU and HFU with
their FLOP conventions), `estimate_step`, the lower bound `pipeline_makespan_bound`, and the
split of the makespan into busy time, bubble and exposed pipeline P2P. Breakdown identity:
step_time = compute + recompute + sum(exposed_comm) + offload_stall + bubble + optimizer
+ sum(overheads), the wait for the slowest GPU among the overheads. Must not: search, size
memory, or define traffic.
"""

import dataclasses
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import (
    FullLayers,
    ParallelConfig,
    PipelineSchedule,
    RecomputeMode,
    RecomputeModule,
    StagePolicy,
)
from api_schemas.training import (
    MuonDistribution,
    OptimizerKind,
    TrainingSpec,
    VisionPlacement,
)
from models.catalog.kernels import memory_bound_time_s
from models.core.collectives import Collective, Fabric, fabric_of
from models.core.collectives.fabric import host_link_bandwidth
from models.core.compute import LayerCompute, OpTimes, layer_compute
from models.core.flops import StepFlops, step_flops
from models.core.layout import StageLayout, pipeline_layout
from models.core.memory import memory_ledger
from models.core.mesh import AxisPlacement, GroupKind
from models.core.mesh.layout import expert_data_parallel_size
from models.core.muon import newton_schulz_time_s, rank_matrices
from models.core.pipeline import OpDurations, StagePlacement, closed_form_makespan, schedule_traits
from models.core.precision import state_bytes_per_param
from models.core.rank_states import micro_batch_count, rank_parameters
from models.core.runtime_features import grad_reduce_overlapped
from models.core.step_time.exposure import sync_exposed_s, zero3_exposed_s
from models.core.step_time.groups import AxisGroups, axis_groups
from models.core.step_time.host_gradients import host_gradient_cost
from models.core.step_time.makespan import (
    crossings_per_micro_batch,
    first_run_units,
    pipeline_makespan,
    schedule_chunks,
    virtual_stage_durations,
)
from models.core.step_time.remote_offload import REMOTE_ACTIVATIONS, remote_offload_cost
from models.core.step_time.stage import (
    StageTime,
    TimingKind,
    chunk_timing_kinds,
    compute_context,
    kind_layers,
    layer_mode,
    layer_parts,
    layer_parts_memo,
    stage_times,
    timing_kind,
    window_caps_s,
)
from models.core.step_time.variability import slowest_gpu_share
from models.core.traffic.context import StepContext, group_placement
from models.core.traffic.data import dp_items
from models.core.traffic.items import Frequency, Phase, TrafficAxis, TrafficItem, call_cost
from models.core.traffic.pipeline import pp_items, pp_message_bytes
from models.core.traffic.weights import StageWeights, stage_weights
from models.core.vision_pipeline import stage0_vision_times, vision_encoder, vision_step_cost

OPTIMIZER_BYTES_PER_PARAM_FACTOR = 2.0
"""The optimizer step reads and writes every state it touches once: HBM traffic = 2 x the
bytes of master weights, moments and gradients of the rank's shard, plus writing the
working weights."""

FLOP_CONVENTION = ("causal attention counted as the kernels compute it (half the score and "
                   "value matrices); the Megatron-LM / PaLM full-attention figure is "
                   "tflops_per_gpu_full_attention / mfu_full_attention")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEstimate:
    """Predicted time of one optimizer step and its breakdown (a model, not a measurement).

    The terms add up: step_time_s = compute_s + recompute_s + sum(exposed_comm_s) +
    offload_stall_s + bubble_s + optimizer_s + sum(overheads_s)."""

    step_time_s: float
    pipeline_makespan_s: float
    compute_s: float
    recompute_s: float
    bubble_s: float
    exposed_comm_s: dict[str, float]
    offload_stall_s: float
    optimizer_s: float
    overheads_s: dict[str, float]
    """Per-step terms outside the pipeline and the optimizer, by name."""
    critical_stage: int
    num_micro_batches: int
    model_flop: float
    """Model FLOPs of the step, causal attention as the kernels compute it."""
    model_flop_full_attention: float
    """Model FLOPs with the full attention matrix (Megatron-LM / PaLM convention)."""
    hardware_flop: float
    """Model FLOPs plus recomputation, causal attention."""
    hardware_flop_full_attention: float
    """Hardware FLOPs with the full attention matrix (Megatron-LM 2021 Eq. 3 convention)."""
    world_size: int
    tokens_per_step: int
    peak_flop_per_s: float
    stages: tuple[StageTime, ...]

    @property
    def breakdown_s(self) -> dict[str, float]:
        """Every term of the step, by name; the values add up to `step_time_s`."""
        terms = {"compute": self.compute_s, "recompute": self.recompute_s,
                 "pipeline bubble": self.bubble_s, "offload": self.offload_stall_s,
                 "optimizer": self.optimizer_s}
        terms.update({f"{axis} communication": t for axis, t in self.exposed_comm_s.items()})
        terms.update(self.overheads_s)
        return terms

    @property
    def tokens_per_s(self) -> float:
        """Training tokens per second over the cluster."""
        return self.tokens_per_step / self.step_time_s

    @property
    def tflops_per_gpu(self) -> float:
        """Model TFLOP/s per GPU (no recomputation; causal attention, `FLOP_CONVENTION`)."""
        return self.model_flop / self.step_time_s / self.world_size / 1e12

    @property
    def tflops_per_gpu_full_attention(self) -> float:
        """Model TFLOP/s per GPU in the Megatron-LM / PaLM convention (full attention)."""
        return self.model_flop_full_attention / self.step_time_s / self.world_size / 1e12

    @property
    def hardware_tflops_per_gpu(self) -> float:
        """Hardware TFLOP/s per GPU (recomputation counted)."""
        return self.hardware_flop / self.step_time_s / self.world_size / 1e12

    @property
    def hardware_tflops_per_gpu_full_attention(self) -> float:
        """Hardware TFLOP/s per GPU with the full attention matrix counted."""
        return self.hardware_flop_full_attention / self.step_time_s / self.world_size / 1e12

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation against the dense peak of the compute format
        (`FLOP_CONVENTION`)."""
        return self.tflops_per_gpu * 1e12 / self.peak_flop_per_s

    @property
    def mfu_full_attention(self) -> float:
        """MFU in the Megatron-LM / PaLM convention (full attention matrix counted)."""
        return self.tflops_per_gpu_full_attention * 1e12 / self.peak_flop_per_s

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation."""
        return self.hardware_tflops_per_gpu * 1e12 / self.peak_flop_per_s

    @property
    def bottleneck(self) -> str:
        """The largest term of the breakdown, named for people."""
        terms = self.breakdown_s
        return max(terms, key=lambda k: terms[k])


def rank_work_s(parallel: ParallelConfig, stage: StageTime, m: int) -> float:
    """Busy time of one rank over a step: every micro-batch crosses every chunk of the rank,
    except under DualPipe, where each micro-batch crosses one of the rank's two stages."""
    per_micro_batch = sum(t.total_s for t in stage.chunk_times)
    return m * crossings_per_micro_batch(parallel) * per_micro_batch


def _step_context(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  groups: AxisGroups, fabric: Fabric, weights: StageWeights, m: int
                  ) -> StepContext:
    return StepContext(model=spec, training=training, parallel=parallel, fabric=fabric,
                       mesh=groups.mesh, stage=weights, num_micro_batches=m,
                       pp_scatter_gather=False)


def p2p_latency_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  groups: AxisGroups, fabric: Fabric, m: int,
                  weights: StageWeights | None = None) -> float:
    """Time of one stage-boundary send (`models.core.traffic.pipeline.pp_message_bytes`), the
    latency between dependent ops of neighbouring ranks in the simulator."""
    if parallel.pp == 1:
        return 0.0
    ctx = _step_context(spec, training, parallel, groups, fabric,
                        weights or stage_weights(spec, parallel)[0], m)
    return call_cost(Collective.P2P, group_placement(groups.mesh, GroupKind.PP),
                     pp_message_bytes(ctx), fabric).time_s


_WEIGHT_FIELDS = tuple(f.name for f in dataclasses.fields(StageWeights) if f.name != "stage")


def _weights_key(held: StageWeights) -> tuple[object, ...]:
    """What a rank holds, its stage number aside (ranks holding the same end alike)."""
    return tuple(getattr(held, name) for name in _WEIGHT_FIELDS)


def _tail(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
          cluster: ClusterSpec, groups: AxisGroups, fabric: Fabric, layout: StageLayout,
          weights: StageWeights, chunk_times: tuple[OpTimes, ...], m: int
          ) -> dict[str, float]:
    """Per-step terms of one rank after its last backward: the exposed DP sync (hidden
    behind the rank's `chunk_times`), the tied embedding all-reduce, the optimizer step and,
    with Pipeline ZeRO-2, its exposed gradient offload (`HOST_GRADIENTS`)."""
    ctx = _step_context(spec, training, parallel, groups, fabric, weights, m)
    items = tuple(dp_items(ctx))
    sync = sync_exposed_s(items, overlap=grad_reduce_overlapped(training), num_micro_batches=m,
                          chunk_times=chunk_times)
    embedding = sum(i.time_per_step_s for i in pp_items(ctx)
                    if i.axis == TrafficAxis.PP and i.phase == Phase.OPTIMIZER)
    terms = {"dp": sync, "pp": embedding,
             "optimizer": _optimizer_s(spec, training, parallel, cluster, layout)}
    host = host_gradient_cost(training, parallel, cluster, weights, items, chunk_times, m)
    if host is not None:
        terms[HOST_GRADIENTS] = host.exposed_s
    return terms


ZERO3_COPIES = "ZeRO-3 copy kernels"
"""Name, in `overheads_s`, of FSDP2's all-gather copy-out and reduce-scatter copy-in on the
compute stream (`models.core.step_time.exposure.zero3_copy_s`), part of the pipeline makespan."""


SLOWEST_GPU = "wait for the slowest GPU"
"""Name, in `overheads_s`, of the time every rank waits for the slowest of the job's GPUs at
the step's synchronous collectives (`_slowest_gpu_wait_s`, `models.core.step_time.variability`)."""


def _slowest_gpu_wait_s(parallel: ParallelConfig, stages: list[StageTime], m: int, *,
                        recompute: bool = True) -> float:
    """The wait for the slowest GPU: `slowest_gpu_share(world_size)` x a rank's mean compute
    (and recomputation) over the step, its kernels being that much slower on the slowest GPU
    while its communication moves at the links' pace. The mean over pipeline ranks, not the
    busiest rank's, makes it the same for every split of the layers over the stages (the
    layers' total is fixed), so the search's bounds hold it exactly; without `recompute` it
    bounds the wait of every activation policy on the mesh, which only adds recomputation."""
    busy = sum(st.compute_s + (st.recompute_s if recompute else 0.0) for st in stages)
    return slowest_gpu_share(parallel.world_size) * m * crossings_per_micro_batch(parallel) \
        * busy / len(stages)


HOST_GRADIENTS = "Pipeline ZeRO-2 gradient offload"
"""Name, in `overheads_s`, of Pipeline ZeRO-2's exposed chunk reduce-scatters, host copies,
host accumulation and shard upload (`models.core.step_time.host_gradients`)."""


GRAD_NORM_PASSES = 3
"""HBM passes over the rank's main-gradient shard for the gradient norm and clipping: read
for the norm, then read and write to scale."""


CALIBRATED_OVERHEAD = "per-step overhead (calibration profile)"
"""Name of the fitted fixed per-step time of a calibration profile in `overheads_s`: what a
cluster's measured steps spend beyond the modelled terms (data loading, logging, host
synchronisation), fitted by least squares on log step time (`models.evidence.calibration`)."""


def _step_overheads(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                    cluster: ClusterSpec, groups: AxisGroups, fabric: Fabric,
                    layout: StageLayout) -> dict[str, float]:
    """Per-step terms besides the pipeline, the DP sync and the optimizer update: the
    gradient-norm all-reduce (over every rank: the model-parallel group, and the data-
    parallel group holding the optimizer shards), its HBM passes over the gradient shard,
    and the loss all-reduce over the data-parallel group; each one scalar, latency-bound.

    Source: Megatron-LM `megatron/core/optimizer/clip_grads.py` (`get_grad_norm_fp32`:
    local squared norm, all-reduce over the model-parallel group, with the distributed
    optimizer over the data-parallel group too; `clip_grad_by_total_norm_fp32` scales every
    gradient) and `megatron/training/training.py` (`average_losses_across_data_parallel_
    group`, one all-reduce per step). With a calibration profile, its fitted per-step
    overhead (`CALIBRATED_OVERHEAD`, `models.evidence.calibration`) is one more term.
    """
    mesh = groups.mesh
    world = call_cost(Collective.ALL_REDUCE, _world_placement(groups), 4, fabric).time_s
    loss = call_cost(Collective.ALL_REDUCE, group_placement(mesh, GroupKind.DP_CP), 4,
                     fabric).time_s
    held = rank_parameters(spec, parallel, layout)
    count = held.gemm + held.vectors + held.embedding + held.head + held.experts
    shard = count / (parallel.dp * parallel.cp if parallel.zero_stage >= 1 else 1)
    grad_bytes = (training.master_dtype or training.grad_dtype).num_bytes
    passes = memory_bound_time_s(GRAD_NORM_PASSES * shard * grad_bytes, gpu=cluster.gpu)
    host = host_optimizer_s(_optimizer_shard_params(spec, parallel, layout)
                            * parallel.optimizer_offload_frac, training, cluster)
    terms = {"grad-norm all-reduce": world, "grad-norm and clipping": passes,
             "loss all-reduce": loss, "CPU optimizer (offloaded states)": host,
             **_muon_terms(spec, training, parallel, cluster, groups, fabric, layout)}
    if cluster.calibration is not None:
        terms[CALIBRATED_OVERHEAD] = cluster.calibration.step_overhead_s
    return {name: t for name, t in terms.items() if t > 0}


def _muon_terms(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                cluster: ClusterSpec, groups: AxisGroups, fabric: Fabric,
                layout: StageLayout) -> dict[str, float]:
    """Muon's Newton-Schulz time and the gathers of whole matrices it needs when the
    optimizer states are sharded (`models/core/muon.py`).

    Source: Moonlight arXiv:2502.16982 Sec. 2.3 (Distributed Muon: each data-parallel rank
    all-gathers every full matrix of its partition, one gather per matrix, orthogonalises all
    of them and keeps its shard); Kimi K3 arXiv:2607.24653 (one owner rank per matrix fetches
    the other shards point to point and returns the updated shards: the Newton-Schulz work
    divides over the sharding group and each rank moves 2 x its owned bytes, in one exchange
    per model chunk).
    Assumes: momenta travel in `optimizer_state_dtype`; the owners' work is balanced; no
    overlap with the next forward.
    """
    if training.optimizer != OptimizerKind.MUON:
        return {}
    sharded = parallel.zero_stage >= 1
    shards = {False: parallel.dp * parallel.cp if sharded else 1,
              True: expert_data_parallel_size(parallel) if sharded else 1}
    kinds = {False: GroupKind.DP_CP, True: GroupKind.EDP}
    owners = training.muon_distribution == MuonDistribution.OWNER_P2P
    state_bytes = training.optimizer_state_dtype.num_bytes
    compute = gathers = 0.0
    owned_bytes = {False: 0.0, True: 0.0}
    for matrix in rank_matrices(spec, parallel, layout.layers, cluster.gpu):
        shard = shards[matrix.expert]
        work = newton_schulz_time_s(matrix, gpu=cluster.gpu)
        compute += work / shard if owners else work
        if shard <= 1:
            continue
        if owners:
            owned_bytes[matrix.expert] += matrix.params * state_bytes / shard
            continue
        place = group_placement(groups.mesh, kinds[matrix.expert])
        gathers += matrix.count * call_cost(
            Collective.ALL_GATHER, place, int(matrix.rows * matrix.cols * state_bytes),
            fabric).time_s
    for expert, moved in owned_bytes.items():
        if moved > 0:
            gathers += call_cost(Collective.ALL_TO_ALL,
                                 group_placement(groups.mesh, kinds[expert]),
                                 int(2 * moved), fabric).time_s
    return {"Muon Newton-Schulz": compute, "Muon matrix gathers": gathers}


def _world_placement(groups: AxisGroups) -> AxisPlacement:
    """All ranks as one group, node-contiguous."""
    mesh = groups.mesh
    return AxisPlacement(kind=GroupKind.DP_CP, group_size=mesh.world_size, num_groups=1,
                         all_intra_node=mesh.num_nodes == 1,
                         max_nodes_spanned=mesh.num_nodes,
                         ranks_per_node=mesh.gpus_per_node)


def _optimizer_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                 cluster: ClusterSpec, layout: StageLayout) -> float:
    """Memory-bound optimizer step over the rank's shard of the states kept on the GPU."""
    params = _optimizer_shard_params(spec, parallel, layout) * (
        1.0 - parallel.optimizer_offload_frac)
    state = (training.master_dtype.num_bytes if training.master_dtype else 0.0)
    state += 2 * training.optimizer_state_dtype.num_bytes + training.grad_dtype.num_bytes
    traffic = params * (OPTIMIZER_BYTES_PER_PARAM_FACTOR * state + training.param_dtype.num_bytes)
    return memory_bound_time_s(traffic, gpu=cluster.gpu)


def _optimizer_shard_params(spec: ModelSpec, parallel: ParallelConfig,
                            layout: StageLayout) -> float:
    """Parameters whose optimizer states one rank updates: its ZeRO shard (dense over
    DP x CP, experts over expert-DP), or all it holds without ZeRO."""
    held = rank_parameters(spec, parallel, layout)
    edp = expert_data_parallel_size(parallel)
    sharded = parallel.zero_stage >= 1
    return (held.gemm + held.vectors + held.embedding + held.head) / (
        parallel.dp * parallel.cp if sharded else 1) + held.experts / (edp if sharded else 1)


def host_optimizer_s(moved_params: float, training: TrainingSpec,
                     cluster: ClusterSpec) -> float:
    """Exposed time of the CPU optimizer step over the share of a rank's optimizer states
    kept in host memory (`optimizer_offload_frac`).

    Source: Ren et al. 2021, ZeRO-Offload, arXiv:2101.06840 Sec. 4.1-4.2: gradients move to
    the host during backward, the CPU runs the Adam update after backward, and the updated
    parameters move back to the GPU before the next forward; CPU-Adam is a streaming kernel,
    so host DRAM bandwidth bounds it.
    Legend: M = moved_params; per parameter the update reads and writes the master weights
    and moments, reads the gradient and writes the working weight: 2 (master + moments) +
    grad + param bytes of host traffic; the node's DRAM bandwidth is shared by its GPUs.
    Time = M x that / (host bandwidth / GPUs per node) + M x param bytes / host link.
    Assumes: the gradient copies hide behind backward (ZeRO-Offload's overlap); no one-step
    delayed update (DPU), which would hide the CPU step at the cost of staleness; the update
    streams at the DRAM bandwidth, a lower bound of its time where the cores bind first.
    """
    if moved_params <= 0:
        return 0.0
    per_param = state_bytes_per_param(training)
    host_bytes = moved_params * (2.0 * per_param.optimizer + per_param.gradients
                                 + per_param.weights)
    host_share = cluster.host_memory_bandwidth_bytes_per_s / cluster.gpus_per_node
    upload = moved_params * per_param.weights / host_link_bandwidth(cluster)
    return host_bytes / host_share + upload


def _makespans(parallel: ParallelConfig, stages: list[StageTime], m: int,
               p2p_s: float, *, split: bool = True) -> tuple[float, float]:
    """(makespan, makespan without P2P latency) of the pipeline; without `split` the second
    is not simulated and equals the first."""
    if parallel.pp == 1 and len(stages[0].chunk_times) == 1:
        span = m * stages[0].chunk_times[0].total_s
        return span, span
    durations = virtual_stage_durations(parallel, [(st.stage, st.chunk_times) for st in stages])
    chunks = schedule_chunks(parallel)
    group = parallel.microbatch_group_size
    span = pipeline_makespan(parallel.schedule, num_stages=parallel.pp, num_micro_batches=m,
                             num_chunks=chunks, durations=durations, p2p_latency_s=p2p_s,
                             group_size=group)
    if p2p_s <= 0 or not split:
        return span, span
    ideal = pipeline_makespan(parallel.schedule, num_stages=parallel.pp, num_micro_batches=m,
                              num_chunks=chunks, durations=durations, p2p_latency_s=0.0,
                              group_size=group)
    return span, ideal


def estimate_step(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  cluster: ClusterSpec, *, layouts: tuple[StageLayout, ...] | None = None,
                  split_pipeline_idle: bool = True) -> StepEstimate:
    """The predicted step time of a configuration and its breakdown.

    The pipeline makespan comes from the discrete-event simulator run on the schedule's op
    lists with each virtual stage's own F, B and W (exposed collectives, recomputation and
    offload stalls folded in) and the P2P time between neighbouring ranks as the latency.
    The busiest rank's work is split into its terms; the makespan without P2P latency minus
    that work is the bubble (DualPipe's and ZB-V's idle time included), and the latency's
    share is the exposed PP communication. The rank with the longest per-step tail (DP sync,
    tied-embedding all-reduce, optimizer) ends the step. With `split_pipeline_idle=False`
    (the search, which needs only the step time) the second simulation is skipped and the
    P2P latency's share stays in the bubble; the step time is the same.

    Raises:
        InvalidSpecError: the batch does not divide, the schedule refuses the shape, or
            layers do not fill the stages.
    """
    m = micro_batch_count(training, parallel)
    layouts = layouts or pipeline_layout(spec, parallel)
    fabric = fabric_of(cluster)
    groups = axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    stages = stage_times(spec, training, parallel, cluster, layouts, m, fabric, groups)
    weights = stage_weights(spec, parallel)
    p2p = p2p_latency_s(spec, training, parallel, groups, fabric, m, weights[0])
    makespan, ideal = _makespans(parallel, stages, m, p2p, split=split_pipeline_idle)
    memo: dict[tuple[object, ...], dict[str, float]] = {}
    tails = []
    for layout, st, held in zip(layouts, stages, weights, strict=True):
        # Ranks holding the same weights and work end alike (the tied embedding aside).
        key = (_weights_key(held), st.chunk_times, layout.num_embeddings,
               layout.num_heads)
        if key not in memo:
            memo[key] = _tail(spec, training, parallel, cluster, groups, fabric, layout, held,
                              st.chunk_times, m)
        tails.append(memo[key])
    critical = max(range(len(stages)), key=lambda i: (sum(tails[i].values()),
                                                      stages[i].compute_s))
    tail = tails[critical]
    overheads = _step_overheads(spec, training, parallel, cluster, groups, fabric,
                                layouts[critical])
    busiest = max(stages, key=lambda st: rank_work_s(parallel, st, m))
    busy = rank_work_s(parallel, busiest, m)
    crossings = m * crossings_per_micro_batch(parallel)
    exposed = {axis: crossings * t for axis, t in busiest.exposed_comm_s.items() if t > 0}
    for axis in ("dp", "pp"):
        extra = tail[axis] + (makespan - ideal if axis == "pp" else 0.0)
        if extra > 0:
            exposed[axis] = exposed.get(axis, 0.0) + extra
    if training.vision is not None:
        overheads = {**overheads, **_vision_terms(spec, training, parallel, cluster, stages, m,
                                                  p2p, makespan, ideal)}
    if parallel.remote_activation_offload and parallel.pp > 1:
        ledger = memory_ledger(spec, training, parallel, cluster, stages=layouts)
        remote = remote_offload_cost(spec, training, parallel, cluster, ledger, stages, groups,
                                     m)
        if remote is not None and remote.exposed_s > 0:
            overheads = {**overheads, REMOTE_ACTIVATIONS: remote.exposed_s}
    flops = _flops(spec, training, parallel, layouts)
    wait = _slowest_gpu_wait_s(parallel, stages, m)
    if wait > 0:
        overheads = {**overheads, SLOWEST_GPU: wait}
    return StepEstimate(
        step_time_s=makespan + sum(tail.values()) + sum(overheads.values()),
        pipeline_makespan_s=makespan,
        compute_s=crossings * busiest.compute_s, recompute_s=crossings * busiest.recompute_s,
        bubble_s=ideal - busy, exposed_comm_s=exposed,
        offload_stall_s=crossings * busiest.offload_stall_s, optimizer_s=tail["optimizer"],
        overheads_s={**overheads,
                     **{k: t for k, t in tail.items()
                        if k not in ("dp", "pp", "optimizer") and t > 0},
                     **({"fp8 activation casts": crossings * busiest.fp8_cast_s}
                                     if busiest.fp8_cast_s else {}),
                     **({ZERO3_COPIES: crossings * busiest.zero3_copy_s}
                        if busiest.zero3_copy_s else {})},
        critical_stage=busiest.stage, num_micro_batches=m,
        model_flop=flops[0].model_flop, model_flop_full_attention=flops[1].model_flop,
        hardware_flop=flops[0].hardware_flop,
        hardware_flop_full_attention=flops[1].hardware_flop, world_size=parallel.world_size,
        tokens_per_step=training.tokens_per_step,
        peak_flop_per_s=cluster.gpu.peak_flop_per_s(training.compute_dtype),
        stages=tuple(stages))


VISION_ENCODER = "vision encoder"
"""Name, in `overheads_s`, of the step time a vision encoder adds under its placement
(`models.core.vision_pipeline`)."""


def _vision_terms(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  cluster: ClusterSpec, stages: list[StageTime], m: int, p2p: float,
                  makespan: float, ideal: float) -> dict[str, float]:
    """The encoder's exposed time (`models.core.vision_pipeline.vision_step_cost`): under
    'stage0' the pipeline is simulated again with stage 0's first chunk lengthened by the
    encoder's forward and backward of each micro-batch; under 'bubbles' each rank's idle
    time is the makespan without P2P latency less its own work."""
    assert training.vision is not None
    encoder = vision_encoder(training.vision, spec)
    with_stage0 = makespan
    if training.vision.placement == VisionPlacement.STAGE0:
        forward, backward = stage0_vision_times(encoder, training, parallel, cluster.gpu)
        first = stages[0]
        times = list(first.chunk_times)
        times[0] = times[0] + OpTimes(forward_s=forward, backward_input_s=backward)
        longer = [dataclasses.replace(first, chunk_times=tuple(times)), *stages[1:]]
        with_stage0 = _makespans(parallel, longer, m, p2p, split=False)[0]
    idle = tuple(ideal - rank_work_s(parallel, st, m) for st in stages)
    cost = vision_step_cost(encoder, training, parallel, cluster.gpu, num_micro_batches=m,
                            makespan_s=makespan, makespan_with_stage0_s=with_stage0,
                            rank_idle_s=idle)
    return {VISION_ENCODER: cost.exposed_s}


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineInputs:
    """The simulation behind a configuration's pipeline makespan, as the simulator's input."""

    schedule: PipelineSchedule
    num_stages: int
    num_micro_batches: int
    num_chunks: int
    durations: OpDurations
    """Per virtual stage in layer order (exposed collectives and recompute folded in)."""
    p2p_latency_s: float
    group_size: int | None
    """Micro-batches per interleaving group (None: the number of stages)."""


def pipeline_inputs(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                    cluster: ClusterSpec) -> PipelineInputs:
    """The schedule, shape, per-virtual-stage F / B / W and P2P latency that
    `estimate_step` simulates for this configuration (simulating them in full gives the
    timeline whose makespan is `StepEstimate.pipeline_makespan_s`).

    Raises:
        InvalidSpecError: the batch does not divide or the layers do not fill the stages.
    """
    m = micro_batch_count(training, parallel)
    layouts = pipeline_layout(spec, parallel)
    fabric = fabric_of(cluster)
    groups = axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    stages = stage_times(spec, training, parallel, cluster, layouts, m, fabric, groups)
    return PipelineInputs(
        schedule=parallel.schedule, num_stages=parallel.pp, num_micro_batches=m,
        num_chunks=schedule_chunks(parallel),
        durations=virtual_stage_durations(parallel, [(st.stage, st.chunk_times)
                                                     for st in stages]),
        p2p_latency_s=p2p_latency_s(spec, training, parallel, groups, fabric, m),
        group_size=parallel.microbatch_group_size)


def _staged(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
            cluster: ClusterSpec
            ) -> tuple[int, tuple[StageLayout, ...], Fabric, AxisGroups, list[StageTime]]:
    """(micro-batches, layouts, fabric, groups, every rank's stage times) of a
    configuration: what the bounds below read."""
    m = micro_batch_count(training, parallel)
    layouts = pipeline_layout(spec, parallel)
    fabric, groups = fabric_of(cluster), axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    return m, layouts, fabric, groups, stage_times(spec, training, parallel, cluster, layouts,
                                                   m, fabric, groups)


def pipeline_makespan_bound(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                            cluster: ClusterSpec) -> float:
    """A lower bound of the pipeline makespan, exact for uniform stages without latency.

    Fixed-order schedules executed as soon as possible are monotone in op durations, so the
    closed form at the lightest virtual stage's F, B and W (no P2P latency) is a lower bound;
    so is m times the busiest rank's work, and so is one micro-batch's dependency chain
    (its forward on every virtual stage, then its input-gradient backward on every one),
    which dominates when there are fewer micro-batches than stages. Where the schedule has
    no exact closed form, the busiest rank's work bounds it, and for the linear ZB-H2 also
    the fill (the lightest forwards of all but one stage) plus the lightest rank's work.
    Source: the closed forms of `models.core.pipeline.closed_forms`.
    """
    m, _, fabric, groups, stages = _staged(spec, training, parallel, cluster)
    return _makespan_bound(spec, training, parallel, m, stages, groups, fabric)


def simulation_units(training: TrainingSpec, parallel: ParallelConfig) -> int:
    """`models.core.step_time.makespan.first_run_units` of this configuration's pipeline: the size
    of the first simulation of its shape (micro-batch x chunk x rank units)."""
    return first_run_units(parallel.schedule, num_stages=parallel.pp,
                           num_micro_batches=micro_batch_count(training, parallel),
                           num_chunks=schedule_chunks(parallel),
                           group_size=parallel.microbatch_group_size)


def simulated_makespan_bound(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                             cluster: ClusterSpec) -> float:
    """A lower bound of the pipeline makespan of every plan that differs from `parallel` only
    in its activation policy, FP8 storage, offload or where it keeps gradient shards: the
    simulated makespan of `parallel`'s own op durations without P2P latency. Pass the mesh
    without a policy; tighter than `pipeline_makespan_bound` wherever the stages are uneven
    or the schedule has no exact closed form, at the price of one simulation.

    Why it holds: a fixed-order schedule run as soon as possible starts every op at a
    maximum of sums of op durations and latencies along dependency paths (a max-plus
    system), so its makespan never decreases when any duration or latency grows; and every
    policy choice only adds to op durations (recomputation, FP8 casts, offload stalls,
    ZeRO-3 gathers under the same ZeRO timing) or to the tail after the flush (remote
    offload, Pipeline ZeRO-2). The long-pipeline extrapolation of `pipeline_makespan` is
    used as it is for the plans themselves (exact where the steady state is affine).
    Source: the simulator of `models.core.pipeline` (reference Sec. 1.3, as-soon-as-possible
    execution of fixed op lists).

    Raises:
        InvalidSpecError: as `pipeline_makespan_bound`.
    """
    m, _, _, _, stages = _staged(spec, training, parallel, cluster)
    return _makespans(parallel, stages, m, 0.0, split=False)[0]


def step_time_bound(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                    cluster: ClusterSpec) -> float:
    """A lower bound of `estimate_step(...).step_time_s` for this exact configuration:
    `pipeline_makespan_bound` plus the largest per-step tail over ranks (exposed DP sync
    behind the rank's own chunk times, tied-embedding all-reduce, optimizer step).

    The step is the makespan plus the critical rank's tail, the largest of all ranks'
    (`estimate_step` picks it so), plus non-negative overheads; the tails here are the
    ones `estimate_step` computes, so only the makespan is bounded rather than simulated.

    Raises:
        InvalidSpecError: as `pipeline_makespan_bound`.
    """
    m, layouts, fabric, groups, stages = _staged(spec, training, parallel, cluster)
    span = _makespan_bound(spec, training, parallel, m, stages, groups, fabric)
    memo: dict[tuple[object, ...], float] = {}
    for layout, st, held in zip(layouts, stages, stage_weights(spec, parallel), strict=True):
        key = (_weights_key(held), st.chunk_times, layout.num_embeddings,
               layout.num_heads)
        if key not in memo:
            memo[key] = sum(_tail(spec, training, parallel, cluster, groups, fabric, layout,
                                  held, st.chunk_times, m).values())
    # The plan's own stages: its wait exactly, as `estimate_step` books it.
    return span + max(memo.values(), default=0.0) + _slowest_gpu_wait_s(parallel, stages, m)


STALL_SEARCH_STEPS = 80
"""Ternary-search steps of `step_time_floor_s` over a rank's offload stall."""


def step_time_floors_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                       cluster: ClusterSpec, *, makespan_bounds_s: Mapping[int, float],
                       max_offload: float = 1.0) -> dict[int, float]:
    """Per ZeRO stage z of `makespan_bounds_s`, a lower bound of `estimate_step(...).
    step_time_s` for every activation policy on `parallel`'s mesh at stage z that offloads
    at most `max_offload` of the stored activations (`parallel` itself carries none; its
    own ZeRO stage is not read), given `makespan_bounds_s[z]`, a lower bound of the
    pipeline makespan of every such plan (`pipeline_makespan_bound` without a policy).

    The step is the makespan plus the critical rank's tail, the largest of all ranks'
    (`_tail`: exposed DP sync, tied-embedding all-reduce, optimizer step; `estimate_step`
    picks it so), plus non-negative overheads; so it is at least the makespan plus the tail
    of the busiest rank without a policy (one rank, to keep the bound cheap). A policy
    changes that rank's DP exposure only through the windows it hides behind, and only
    shrinks it as they grow: the windows are at most the rank's plain ones plus the largest
    recomputation and FP8 casts (`models.core.step_time.stage.window_caps_s`) plus its offload
    stall s. The stall also lengthens the rank's busy time, which the makespan is at least,
    by s per micro-batch crossing. So makespan + tail >= the minimum over s in [0, the
    largest transfer] of max(makespan bound, busy time + crossings x s) + tail at windows
    (caps + s); the function is convex in s (a maximum of linear terms plus the exposure, a
    sum of convex non-increasing pieces), minimised by ternary search and lowered by the
    width of the last interval times the steepest descent the exposure can have (one window
    length per hidden repetition). Under ZeRO-3, whose gathers lengthen the ops
    (`zero3_exposed_s` per layer, as `stage_time` adds them), the windows are unbounded.
    Pipeline ZeRO-2's offload only adds a non-negative term and is left out.

    Raises:
        InvalidSpecError: as `pipeline_makespan_bound`.
        ValueError: `parallel` carries an activation policy.
    """
    if (parallel.stage_policies is not None or parallel.recompute != RecomputeMode.NONE
            or parallel.fp8_activations or parallel.activation_offload_frac > 0):
        raise ValueError("the step floor is taken over policies; pass the mesh without one")
    m = micro_batch_count(training, parallel)
    layouts = pipeline_layout(spec, parallel)
    fabric, groups = fabric_of(cluster), axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    # ZeRO-0, 1 and 2 give the same op durations: their stage times and windows are shared;
    # ZeRO-3's ops add each layer's exposed gathers and reduce-scatters to them.
    timed = parallel.model_copy(update={"zero_stage": 0})
    stages = stage_times(spec, training, timed, cluster, layouts, m, fabric, groups)
    weights = stage_weights(spec, parallel)
    crossings = m * crossings_per_micro_batch(parallel)
    busy = [rank_work_s(parallel, st, m) for st in stages]
    busy3 = busy
    if 3 in makespan_bounds_s:
        exposure = _zero3_kind_exposure_s(spec, training,
                                          parallel.model_copy(update={"zero_stage": 3}),
                                          cluster, fabric, groups)
        busy3 = [work + crossings * sum(exposure[kind]
                                        for kinds in chunk_timing_kinds(spec, layout.chunks)
                                        for kind in kinds)
                 for work, layout in zip(busy, layouts, strict=True)]
    windows: dict[int, tuple[float, float, float]] = {}
    floors: dict[int, float] = {}
    wait = _slowest_gpu_wait_s(parallel, stages, m, recompute=False)
    for zero, makespan in makespan_bounds_s.items():
        at_zero = parallel.model_copy(update={"zero_stage": zero})
        work = busy3 if zero == 3 else busy
        # The busiest rank's tail stands for all (the critical rank's is no smaller).
        rank = max(range(len(layouts)), key=work.__getitem__)
        layout, held, st = layouts[rank], weights[rank], stages[rank]
        ctx = _step_context(spec, training, at_zero, groups, fabric, held, m)
        fixed = sum(i.time_per_step_s for i in pp_items(ctx)
                    if i.axis == TrafficAxis.PP and i.phase == Phase.OPTIMIZER)
        fixed += _optimizer_s(spec, training, at_zero, cluster, layout)
        if zero == 3:
            forward = backward = math.inf
            transfer = 0.0
        else:
            if rank not in windows:
                windows[rank] = window_caps_s(spec, training, timed, cluster, layout, st,
                                              fabric=fabric, groups=groups,
                                              max_offload=max_offload)
            forward, backward, transfer = windows[rank]
        floors[zero] = fixed + _least_span(
            tuple(dp_items(ctx)), grad_reduce_overlapped(training), m, makespan, work[rank],
            crossings, forward, backward, transfer) + wait
    return floors


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkTable:
    """What `policy_work_bound_s` needs of one mesh and ZeRO stage without a policy, kept to
    bound many policies of it: each rank's work, the micro-batch crossings, each rank's
    running count of each layer timing kind by position, and each kind's recomputation
    times. Kinds are `models.core.step_time.stage.timing_kind` (MoE or not, linear or full
    attention, attention window and chunk), as `stage_time` times them: a sliding-window layer
    recomputes less than a full-attention one of the same MoE kind, so counting a rank's
    layers as copies of one of them would not bound the rank whose first layer is the
    costlier."""

    busy_s: tuple[float, ...]
    crossings: float
    kind_prefix: tuple[tuple[tuple[int, ...], ...], ...]
    """Per rank and kind (in the order of `layers`): entry j is the number of the rank's
    first j layers of that kind."""
    full_s: tuple[float, ...]
    """Per kind: full recomputation of one layer, the forward and its collectives."""
    layers: tuple[LayerCompute, ...]
    """Per kind: one layer's compute (its selective recomputation by module)."""
    wait_s: float
    """The wait for the slowest GPU without a policy (`_slowest_gpu_wait_s` without
    recomputation): every policy's step carries at least this beside its makespan."""

    def bound_s(self, parallel: ParallelConfig, *, more_full_layers: bool = False) -> float:
        """`policy_work_bound_s` of `parallel` (this table's mesh with a policy)."""
        best = 0.0
        uniform = parallel.stage_policies is None
        policy = parallel.policy_of(0)
        # A rank's added recomputation reads only its policy, its size and its kind counts
        # overall and among its first k layers.
        added_of: dict[tuple[object, ...], float] = {}
        for rank, (busy, prefixes) in enumerate(zip(self.busy_s, self.kind_prefix,
                                                    strict=True)):
            if not uniform:
                policy = parallel.policy_of(rank)
            recompute = policy.recompute
            size = len(prefixes[0]) - 1
            k = min(size, recompute.full_layers) if isinstance(recompute, FullLayers) else 0
            counts = tuple(prefix[-1] for prefix in prefixes)
            head = tuple(prefix[k] for prefix in prefixes)
            key = (policy if not uniform else None, counts, head)
            added = added_of.get(key)
            if added is None:
                added = added_of[key] = self._added_s(policy, counts, head, more_full_layers)
            best = max(best, busy + self.crossings * added)
        return best

    def _added_s(self, policy: StagePolicy, counts: tuple[int, ...], head: tuple[int, ...],
                 more_full_layers: bool) -> float:
        """The recomputation `policy` adds to one micro-batch of a rank holding `counts`
        layers of each kind, `head` of them among its first k (k: the policy's fully
        recomputed first layers)."""
        recompute = policy.recompute
        if isinstance(recompute, FullLayers):
            added = 0.0
            for count, first, full, layer in zip(counts, head, self.full_s, self.layers,
                                                 strict=True):
                rest = (layer.recompute_s(policy.recompute_modules)
                        if recompute.others == RecomputeMode.SELECTIVE.value else 0.0)
                if more_full_layers:
                    rest = min(rest, full)
                added += first * full + (count - first) * rest
            return added
        if recompute == RecomputeMode.FULL:
            return sum(count * full for count, full in zip(counts, self.full_s, strict=True))
        if recompute == RecomputeMode.SELECTIVE:
            return sum(count * layer.recompute_s(policy.recompute_modules)
                       for count, layer in zip(counts, self.layers, strict=True))
        return 0.0


def work_table(spec: ModelSpec, training: TrainingSpec, plain: ParallelConfig,
               cluster: ClusterSpec) -> WorkTable:
    """The `WorkTable` of a configuration without a policy (`plain`). Not memoised here: a
    search keeps each candidate's tables on its `solver.candidate.PlanCandidate` (a table
    is never modified).

    Raises:
        InvalidSpecError: as `pipeline_makespan_bound`.
    """
    m = micro_batch_count(training, plain)
    layouts = pipeline_layout(spec, plain)
    fabric, groups = fabric_of(cluster), axis_groups(plain, gpus_per_node=cluster.gpus_per_node)
    stages = stage_times(spec, training, plain, cluster, layouts, m, fabric, groups)
    memo = layer_parts_memo(spec, training, cluster)
    position: dict[TimingKind, int] = {}
    layers: list[LayerCompute] = []
    full: list[float] = []
    sequences = []
    for layout in layouts:
        sequence = []
        for index in layout.layers:
            kind = timing_kind(spec, index)
            if kind not in position:
                position[kind] = len(layers)
                lc, comm, _, _ = layer_parts(spec, training, plain, cluster, index,
                                             fabric=fabric, groups=groups, memo=memo)
                layers.append(lc)
                full.append(lc.recompute_full_s + sum(comm.recompute_s.values()))
            sequence.append(position[kind])
        sequences.append(sequence)
    prefixes = tuple(
        tuple(tuple(itertools.accumulate((int(x == kind) for x in sequence), initial=0))
              for kind in range(len(layers)))
        for sequence in sequences)
    return WorkTable(busy_s=tuple(rank_work_s(plain, st, m) for st in stages),
                     crossings=m * crossings_per_micro_batch(plain),
                     kind_prefix=prefixes, full_s=tuple(full), layers=tuple(layers),
                     wait_s=_slowest_gpu_wait_s(plain, stages, m, recompute=False))


def policy_work_bound_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                        cluster: ClusterSpec, plain: ParallelConfig, *,
                        more_full_layers: bool = False) -> float:
    """A lower bound of the pipeline makespan (so of the step) of `parallel`, whose
    activation policy `plain` lacks (`plain`: the same mesh and ZeRO stage without one, or
    with ZeRO-0 for ZeRO-1 and 2, whose ops time alike): the busiest rank's work without the
    policy plus the recomputation the policy adds to it, every micro-batch crossing.

    A policy adds to a rank's ops its recomputation (full: the layer's forward and its
    forward collectives again; selective: the listed modules), FP8 casts and offload
    stalls, all non-negative (`models.core.step_time.stage.stage_time`); every rank does all its
    work within the makespan (`rank_work_s`). With `more_full_layers` the bound holds for
    the same policy with full recomputation of more first layers too: each layer past the
    first k counts the smaller of its full and its other recomputation.

    Raises:
        InvalidSpecError: as `pipeline_makespan_bound`.
    """
    return work_table(spec, training, plain, cluster).bound_s(
        parallel, more_full_layers=more_full_layers)


def _zero3_kind_exposure_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                           cluster: ClusterSpec, fabric: Fabric, groups: AxisGroups
                           ) -> dict[TimingKind, float]:
    """Per layer timing kind (`timing_kind`), the exposed ZeRO-3 gathers and reduce-scatters
    one layer of it adds to its forward and backward per micro-batch (`zero3_exposed_s`, as
    `stage_time` adds them). The exposure is what a layer's compute does not hide, so it is
    larger for a cheaper layer (a sliding-window one) than for a costlier one of the same
    MoE kind: one layer per MoE kind would overstate it on the others."""
    ctx = compute_context(training, parallel, cluster)
    exposed = {}
    for kind, index, _ in kind_layers(spec):
        lc = layer_compute(spec, index, ctx)
        exposed[kind] = sum(zero3_exposed_s(spec, index, training, parallel, groups, fabric,
                                            lc))
    return exposed


def _least_span(items: tuple[TrafficItem, ...], overlap: bool, m: int, makespan: float,
                busy: float, crossings: float, forward: float, backward: float,
                transfer: float) -> float:
    """min over the stall s in [0, transfer] of max(makespan, busy + crossings x s) + the
    DP exposure behind windows (forward, backward + s), from below (`step_time_floors_s`)."""

    def span(stall: float) -> float:
        windows = (OpTimes(forward_s=forward, backward_input_s=backward + stall),)
        return (max(makespan, busy + crossings * stall)
                + sync_exposed_s(items, overlap=overlap, num_micro_batches=m,
                                 chunk_times=windows))

    low, high = 0.0, transfer
    for _ in range(STALL_SEARCH_STEPS if high > 0 else 0):
        left, right = low + (high - low) / 3, high - (high - low) / 3
        if span(left) <= span(right):
            high = right
        else:
            low = left
    steepest = sum(m if i.frequency == Frequency.PER_MICRO_BATCH else 1 for i in items)
    return min(span(low), span(high)) - (high - low) * steepest


def _makespan_bound(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig, m: int,
                    stages: list[StageTime], groups: AxisGroups, fabric: Fabric) -> float:
    """`pipeline_makespan_bound` from the ranks' stage times."""
    if parallel.pp == 1:
        p2p = p2p_latency_s(spec, training, parallel, groups, fabric, m)
        return _makespans(parallel, stages, m, p2p)[0]
    durations = virtual_stage_durations(parallel, [(st.stage, st.chunk_times) for st in stages])
    busiest = max(rank_work_s(parallel, st, m) for st in stages)
    traits = schedule_traits(parallel.schedule)
    if not traits.overlapped_pairs:
        # One micro-batch's forwards through every virtual stage, then its input-gradient
        # backwards back: a path of the dependency graph (DualPipe's paired ops excepted).
        busiest = max(busiest, sum(durations.forward_s) + sum(durations.backward_input_s))
    closed = _closed_form(parallel, m, durations)
    if closed is not None:
        return max(busiest, closed)
    if traits.placement != StagePlacement.LINEAR:
        return busiest  # V and bidirectional placements start work on every rank at once
    # ZB-H2 (linear): the last rank cannot start before one forward has crossed every
    # earlier stage, then it does all its own work.
    fill = sum(sorted(durations.forward_s)[: len(durations.forward_s) - 1])
    return max(busiest, fill + min(rank_work_s(parallel, st, m) for st in stages))


def _closed_form(parallel: ParallelConfig, m: int, durations: OpDurations) -> float | None:
    return closed_form_makespan(parallel.schedule, num_stages=parallel.pp,
                                num_micro_batches=m, num_chunks=schedule_chunks(parallel),
                                forward_s=min(durations.forward_s),
                                backward_input_s=min(durations.backward_input_s),
                                backward_weight_s=min(durations.backward_weight_s),
                                group_size=parallel.microbatch_group_size)


def _flops(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
           layouts: tuple[StageLayout, ...]) -> tuple[StepFlops, StepFlops]:
    """FLOPs of one step with causal attention and with the full attention matrix,
    recomputation per stage policy."""
    full: set[int] = set()
    selective: set[int] = set()
    for layout in layouts:
        for position, index in enumerate(layout.layers):
            mode = layer_mode(parallel, layout.rank, position)
            if mode == RecomputeMode.FULL:
                full.add(index)
            elif mode == RecomputeMode.SELECTIVE and RecomputeModule.CORE_ATTN in \
                    parallel.policy_of(layout.rank).recompute_modules:
                selective.add(index)
    # DualPipe's second copy holds the same layers: each layer is counted once.
    causal, dense = (step_flops(spec, num_sequences=training.global_batch_size,
                                seq_len=training.sequence_length, full_recompute_layers=full,
                                selective_recompute_layers=selective, causal=c)
                     for c in (True, False))
    return causal, dense


__all__ = [
    "FLOP_CONVENTION",
    "HOST_GRADIENTS",
    "VISION_ENCODER",
    "OPTIMIZER_BYTES_PER_PARAM_FACTOR",
    "PipelineInputs",
    "WorkTable",
    "StepEstimate",
    "estimate_step",
    "host_optimizer_s",
    "p2p_latency_s",
    "pipeline_inputs",
    "pipeline_makespan_bound",
    "policy_work_bound_s",
    "rank_work_s",
    "step_time_floors_s",
    "work_table",
]
