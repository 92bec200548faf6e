"""The per-step terms of a step besides its pipeline makespan: each rank's tail after its
last backward (exposed DP sync, tied-embedding all-reduce, optimizer step, Pipeline ZeRO-2's
gradient offload), the step's overheads (gradient norm, loss all-reduce, CPU optimizer,
Muon, a calibration profile's fitted overhead) and the wait for the slowest GPU, with the
names they carry in `StepEstimate.overheads_s`.

Owns: `RankEnd` (what a rank's tail reads), `rank_tail_s`, `rank_tails`, `step_overheads`,
`slowest_gpu_wait_s`, `optimizer_step_s`, `host_optimizer_s` and the term names. Must not:
simulate the pipeline, assemble the step (`models.core.step_time.assembly`) or bound it for
a search (`models.core.step_time.bounds`).
"""

import dataclasses
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import MuonDistribution, OptimizerKind, TrainingSpec
from models.catalog.kernels import memory_bound_time_s
from models.core.collectives import Collective
from models.core.collectives.fabric import host_link_bandwidth
from models.core.compute import OpTimes
from models.core.layout import StageLayout
from models.core.mesh import AxisPlacement, GroupKind
from models.core.mesh.layout import expert_data_parallel_size
from models.core.muon import newton_schulz_time_s, rank_matrices
from models.core.precision import state_bytes_per_param
from models.core.rank_states import optimizer_shard_params, rank_parameters
from models.core.runtime_features import grad_reduce_overlapped
from models.core.step_time.deepspeed_zero3_2021 import persistent_regather_step_s
from models.core.step_time.exposure import sync_exposed_s
from models.core.step_time.groups import AxisGroups
from models.core.step_time.host_gradients import host_gradient_cost
from models.core.step_time.makespan import crossings_per_micro_batch
from models.core.step_time.setting import StepSetting, step_context
from models.core.step_time.stage import StageTime
from models.core.step_time.variability import slowest_gpu_share
from models.core.traffic.context import group_placement
from models.core.traffic.data import dp_items
from models.core.traffic.items import Phase, TrafficAxis, call_cost
from models.core.traffic.pipeline import pp_items
from models.core.traffic.weights import StageWeights

OPTIMIZER_BYTES_PER_PARAM_FACTOR = 2.0
"""The optimizer step reads and writes every state it touches once: HBM traffic = 2 x the
bytes of master weights, moments and gradients of the rank's shard, plus writing the
working weights."""

ZERO3_COPIES = "ZeRO-3 copy kernels"
"""Name, in `overheads_s`, of FSDP2's all-gather copy-out and reduce-scatter copy-in on the
compute stream (`models.core.step_time.exposure.zero3_copy_s`), part of the pipeline makespan."""

GRAD_UPDATE = "bf16 gradient update"
"""Name, in `StepEstimate.overheads_s`, of DeepSpeed BF16Optimizer's fp32 gradient update after
every micro-batch's backward (`models.core.step_time.deepspeed_pipe.hp_grad_update_s`), part of
the pipeline makespan."""

OFFLOAD_ROUND_TRIP = "ZeRO-Offload gradient round trip"
"""Name, in `StepEstimate.overheads_s`, of the gradient copies to and from host memory that
DeepSpeed's ZeRO-Offload at stage 2 runs around every micro-batch beyond the backward they
overlap (`models.core.step_time.runtime_traits.offload_round_trip_s`), part of the pipeline
makespan."""


SLOWEST_GPU = "wait for the slowest GPU"
"""Name, in `overheads_s`, of the time every rank waits for the slowest of the job's GPUs at
the step's synchronous collectives (`slowest_gpu_wait_s`, `models.core.step_time.variability`)."""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class RankEnd:
    """What one rank's tail (`rank_tail_s`) reads of the rank: the weights it holds, its
    per-micro-batch chunk times and the embeddings and heads of its layout. Records that
    compare equal end alike: the weights' stage number takes no part in the comparison
    (ranks holding the same weights end alike, the tied embedding aside, which the
    embeddings and heads keep apart)."""

    held: StageWeights
    """The rank's weights with stage number 0."""
    stage: int = dataclasses.field(compare=False)
    chunk_times: tuple[OpTimes, ...]
    num_embeddings: int
    num_heads: int

    @property
    def weights(self) -> StageWeights:
        """The rank's own weights, its stage number included."""
        if self.stage == 0:
            return self.held
        return dataclasses.replace(self.held, stage=self.stage)


def rank_end(layout: StageLayout, stage: StageTime, weights: StageWeights) -> RankEnd:
    """The `RankEnd` of the rank with this layout, stage times and weights."""
    held = weights if weights.stage == 0 else dataclasses.replace(weights, stage=0)
    return RankEnd(held=held, stage=weights.stage,
                   chunk_times=stage.chunk_times, num_embeddings=layout.num_embeddings,
                   num_heads=layout.num_heads)


def rank_tail_s(setting: StepSetting, layout: StageLayout, end: RankEnd) -> dict[str, float]:
    """Per-step terms of one rank after its last backward: the exposed DP sync (hidden
    behind the rank's chunk times), the tied embedding all-reduce, the optimizer step and,
    with Pipeline ZeRO-2, its exposed gradient offload (`HOST_GRADIENTS`)."""
    training, m = setting.training, setting.num_micro_batches
    weights = end.weights
    ctx = step_context(setting, weights)
    items = tuple(dp_items(ctx))
    sync = sync_exposed_s(items, overlap=grad_reduce_overlapped(training), num_micro_batches=m,
                          chunk_times=end.chunk_times)
    embedding = sum(i.time_per_step_s for i in pp_items(ctx)
                    if i.axis == TrafficAxis.PP and i.phase == Phase.OPTIMIZER)
    terms = {"dp": sync, "pp": embedding,
             "optimizer": optimizer_step_s(setting.spec, training, setting.parallel,
                                           setting.cluster, layout)}
    host = host_gradient_cost(training, setting.parallel, setting.cluster, weights, items,
                              end.chunk_times, m)
    if host is not None:
        terms[HOST_GRADIENTS] = host.exposed_s
    return terms


def rank_tails(setting: StepSetting, layouts: tuple[StageLayout, ...],
               stages: list[StageTime], weights: tuple[StageWeights, ...]
               ) -> list[dict[str, float]]:
    """`rank_tail_s` of every rank, computed once for the ranks that end alike."""
    memo: dict[RankEnd, dict[str, float]] = {}
    tails = []
    for layout, st, held in zip(layouts, stages, weights, strict=True):
        end = rank_end(layout, st, held)
        if end not in memo:
            memo[end] = rank_tail_s(setting, layout, end)
        tails.append(memo[end])
    return tails


def slowest_gpu_wait_s(parallel: ParallelConfig, stages: list[StageTime], m: int, *,
                       recompute: bool = True) -> float:
    """The wait for the slowest GPU: `slowest_gpu_share(world_size)` x a rank's mean compute
    (and recomputation) over the step, its kernels being that much slower on the slowest GPU
    while its communication moves at the links' pace. The mean over pipeline ranks, not the
    busiest rank's, makes it the same for every split of the layers over the stages (the
    layers' total is fixed), so the search's bounds hold it exactly; without `recompute` it
    bounds the wait of every activation policy on the mesh, which only adds recomputation."""
    busy = sum([st.compute_s + (st.recompute_s if recompute else 0.0) for st in stages])
    return slowest_gpu_share(parallel.world_size) * m * crossings_per_micro_batch(parallel) \
        * busy / len(stages)

CPU_OPTIMIZER_TERM = "CPU optimizer (offloaded states)"
"""The step overhead that books the CPU optimizer step (`host_optimizer_s`)."""


def step_overheads(setting: StepSetting, layout: StageLayout) -> dict[str, float]:
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
    spec, training, parallel = setting.spec, setting.training, setting.parallel
    cluster, groups, fabric = setting.cluster, setting.groups, setting.fabric
    mesh = groups.mesh
    world = call_cost(Collective.ALL_REDUCE, _world_placement(groups), 4, fabric).time_s
    loss = call_cost(Collective.ALL_REDUCE, group_placement(mesh, GroupKind.DP_CP), 4,
                     fabric).time_s
    held = rank_parameters(spec, parallel, layout)
    count = held.gemm + held.vectors + held.embedding + held.head + held.experts
    shard = count / (parallel.dp * parallel.cp if parallel.zero_stage >= 1 else 1)
    grad_bytes = (training.master_dtype or training.grad_dtype).num_bytes
    passes = memory_bound_time_s(GRAD_NORM_PASSES * shard * grad_bytes, gpu=cluster.gpu)
    host = host_optimizer_s(optimizer_shard_params(spec, parallel, layout)
                            * parallel.optimizer_offload_frac, training, cluster)
    terms = {"grad-norm all-reduce": world, "grad-norm and clipping": passes,
             "loss all-reduce": loss, CPU_OPTIMIZER_TERM: host,
             **_muon_terms(setting, layout),
             **persistent_regather_step_s(spec, training, parallel, mesh)}
    if cluster.calibration is not None:
        terms[CALIBRATED_OVERHEAD] = cluster.calibration.step_overhead_s
    return {name: t for name, t in terms.items() if t > 0}


def _muon_terms(setting: StepSetting, layout: StageLayout) -> dict[str, float]:
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
    spec, training, parallel = setting.spec, setting.training, setting.parallel
    cluster, groups, fabric = setting.cluster, setting.groups, setting.fabric
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


def optimizer_step_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                     cluster: ClusterSpec, layout: StageLayout) -> float:
    """Memory-bound optimizer step over the rank's shard of the states kept on the GPU."""
    params = optimizer_shard_params(spec, parallel, layout) * (
        1.0 - parallel.optimizer_offload_frac)
    return _gpu_optimizer_s(params, training, cluster)


def _gpu_optimizer_s(params: float, training: TrainingSpec, cluster: ClusterSpec) -> float:
    """The memory-bound GPU optimizer step over `params` parameters' states."""
    state = (training.master_dtype.num_bytes if training.master_dtype else 0.0)
    state += 2 * training.optimizer_state_dtype.num_bytes + training.grad_dtype.num_bytes
    traffic = params * (OPTIMIZER_BYTES_PER_PARAM_FACTOR * state + training.param_dtype.num_bytes)
    return memory_bound_time_s(traffic, gpu=cluster.gpu)


def least_optimizer_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                      cluster: ClusterSpec, layouts: tuple[StageLayout, ...], rank: int
                      ) -> float:
    """A lower bound of the optimizer time that rank `rank`'s tail and the step's overheads
    add together in every plan of `parallel`'s mesh at its ZeRO stage, whatever share f of
    the optimizer states the plan keeps in host memory: the tail holds (1 - f) of the rank's
    GPU step (`optimizer_step_s`), the overheads f of the critical rank's CPU step over its
    whole shard (`host_optimizer_s`, booked at the critical rank's layout, so the least over
    `layouts` stands for it); both are linear in f, so together at least the smaller of the
    two whole steps. Reads no `optimizer_offload_frac`.

    Source: as `optimizer_step_s` and `host_optimizer_s` (ZeRO-Offload, arXiv:2101.06840
    Sec. 4.1-4.2)."""
    gpu = _gpu_optimizer_s(optimizer_shard_params(spec, parallel, layouts[rank]), training,
                           cluster)
    if gpu <= 0:
        return 0.0
    return min(gpu, least_host_optimizer_s(spec, training, parallel, cluster, layouts))


def least_host_optimizer_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                           cluster: ClusterSpec, layouts: tuple[StageLayout, ...]) -> float:
    """The CPU optimizer step (`host_optimizer_s`) over the whole optimizer shard
    (`optimizer_shard_params`) of the rank of `layouts` that holds the fewest parameters,
    at `parallel`'s ZeRO stage; reads no `optimizer_offload_frac`. The step's overheads
    book the CPU step at the critical rank's layout, so every plan of the mesh at that
    stage with its optimizer states wholly in host memory pays at least this beside its
    makespan, tail and wait.

    Source: as `host_optimizer_s` (ZeRO-Offload, arXiv:2101.06840 Sec. 4.1-4.2)."""
    # `host_optimizer_s` never falls as its parameters grow (products and a sum of
    # non-negative terms, each correctly rounded), so the least step is the step of the least
    # shard: the same number, timed once.
    return host_optimizer_s(min([optimizer_shard_params(spec, parallel, layout)
                                 for layout in layouts]), training, cluster)


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

