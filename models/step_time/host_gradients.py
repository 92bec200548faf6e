"""Step-time cost of Pipeline ZeRO-2: gradient shards accumulated in host memory.

Owns: how many times per step a rank's model chunk leaves its two on-GPU gradient buffers
(`chunk_evictions`), the bytes each eviction moves (a data-parallel reduce-scatter of the
chunk's gradients, the copy of the rank's shard to the host, its accumulation into the host
shard) and the upload of the accumulated shard for the optimizer step, and the exposed time
of all of it (`host_gradient_cost`). The memory side (two chunk buffers on the GPU, shards in
host memory) is `models.sharded_states`. Must not: size memory, search, or define the
ZeRO-1/2 traffic of ordinary data parallelism (`models.traffic.data`).
"""

import math
from dataclasses import dataclass

from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.collectives import Collective, Fabric
from models.compute import OpTimes
from models.mesh import DeviceMesh, GroupKind
from models.mesh.layout import expert_data_parallel_size
from models.pipeline import schedule_traits
from models.traffic.context import group_placement
from models.traffic.data import bucket_params
from models.traffic.items import call_cost
from models.traffic.weights import StageWeights

GRADIENT_BUFFER_SLOTS = 2
"""Chunk-sized gradient buffers a rank keeps on the GPU under Pipeline ZeRO-2: one slot
accumulates the chunk now in backward, the other drains (reduces and copies to the host) or
is filled ahead. Source: Kimi K3 arXiv:2607.24653, as the research ledger (Sec. 9.5, 9.8)
summarises it."""

HOST_ACCUMULATE_PASSES = 3
"""Host DRAM passes of one accumulation: read the arriving shard, read the host shard, write
the sum (a streaming add, as ZeRO-Offload's CPU-side gradient handling)."""


def chunk_evictions(parallel: ParallelConfig, num_micro_batches: int) -> int:
    """How many times per step a rank's chunks leave the GPU gradient buffers: each is one
    reduce-scatter and host accumulation of that chunk's gradients.

    Source: Megatron-LM interleaved 1F1B (Narayanan et al. 2021, arXiv:2104.04473 Sec. 2.2;
    `megatron/core/pipeline_parallel/schedules.py`, `get_model_chunk_id`): a rank runs a
    group of `microbatch_group_size` (default: the pipeline size) micro-batches on one chunk
    before moving to the next, so backward visits each of its v chunks ceil(m / group)
    times; Kimi K3 (ledger Sec. 9.5, 9.8) keeps `GRADIENT_BUFFER_SLOTS` chunk buffers, so
    with v <= 2 every chunk keeps its buffer for the whole step and is reduced once at the
    end, while with v > 2 every visit ends in an eviction.
    Legend: v = chunks per rank (`schedule_traits(...).num_chunks`), m = micro-batches.
    Assumes: chunk visits of a group are contiguous in backward (the interleaved order); a
    schedule with one or two chunks (1F1B, V shapes) never evicts before the step ends.
    """
    v = schedule_traits(parallel.schedule).num_chunks(parallel.vpp)
    if v <= GRADIENT_BUFFER_SLOTS:
        return v
    group = parallel.microbatch_group_size or parallel.pp
    return v * math.ceil(num_micro_batches / group)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostGradientCost:
    """Pipeline ZeRO-2's per-step traffic and time on one rank (a model, not a
    measurement)."""

    evictions: int
    """Chunk buffers drained per step (`chunk_evictions`)."""
    reduce_scatter_s: float
    """Data-parallel reduce-scatters of all evictions (dense over DP x CP, experts over
    expert-DP), unhidden."""
    device_to_host_bytes: int
    """The rank's reduced shards copied to the host over the step."""
    device_to_host_s: float
    host_accumulate_s: float
    """Host DRAM time of adding the arriving shards into the host shards."""
    upload_bytes: int
    """The accumulated gradient shard copied back to the GPU for the optimizer step."""
    upload_s: float
    exposed_s: float
    """Time on the step's critical path: every eviction's drain beyond the compute of the
    rank's next chunk visit, the last eviction in full, and the upload."""

    @property
    def drain_s(self) -> float:
        """Reduce, copy and accumulate time of all evictions, before any overlap."""
        return self.reduce_scatter_s + self.device_to_host_s + self.host_accumulate_s


def host_gradient_cost(training: TrainingSpec, parallel: ParallelConfig, cluster: ClusterSpec,
                       fabric: Fabric, mesh: DeviceMesh, weights: StageWeights,
                       chunk_times: tuple[OpTimes, ...], num_micro_batches: int
                       ) -> HostGradientCost | None:
    """Pipeline ZeRO-2's exposed step time on one rank (None when it is off).

    Source: Kimi K3 arXiv:2607.24653 as the research ledger summarises it (Sec. 9.5:
    gradients are sharded over the data-parallel ranks and kept in host memory, the GPU keeps
    a double gradient buffer, and each reduced chunk is accumulated into the CPU shard;
    Sec. 9.8: one slot computes while the other is being prepared); ZeRO (arXiv:1910.02054
    Sec. 7.2) for the reduce-scatter volume; ZeRO-Offload (arXiv:2101.06840 Sec. 4.1) for
    gradient shards copied to and accumulated on the host. Evictions: `chunk_evictions`.
    Legend: E = evictions, P_c = the rank's parameters in one chunk (P / v), g = gradient
    bytes, d = the sharding group (DP x CP dense, expert-DP experts), B_pcie = the GPU's host
    link, B_host = host DRAM bandwidth / GPUs per node.
    Per eviction: reduce-scatter of P_c g over d (alpha-beta, `models.collectives`, in
    Megatron-size buckets), then P_c g / d over B_pcie, then 3 P_c g / d over B_host.
    Exposed = (E - 1) max(0, drain - window) + drain + P g / d / B_pcie, the window per
    `_drain_window_s`.
    Assumes: the two slots let one chunk drain while the rank computes its next chunk visit
    (the double buffer the source describes), so an eviction hides behind an equal share of
    the rank's work; the last one has nothing after it; reduce, copy and accumulation of one
    chunk run back to back (no bucket pipelining); the optimizer's states stay on the GPU
    (ZeRO-1), so the accumulated shard is uploaded once before the update; the host link is
    not shared with activation offload at the same instant.
    """
    if not parallel.gradient_host_shards:
        return None
    m = num_micro_batches
    evictions = chunk_evictions(parallel, m)
    chunks = schedule_traits(parallel.schedule).num_chunks(parallel.vpp)
    visits = evictions / chunks
    g = training.grad_dtype.num_bytes
    reduce_s = 0.0
    shard_bytes = 0.0
    for kind, params, size in (
            (GroupKind.DP_CP, weights.dense_params, parallel.dp * parallel.cp),
            (GroupKind.EDP, weights.expert_params, expert_data_parallel_size(parallel))):
        if params == 0:
            continue
        shard_bytes += params * g / size
        if size <= 1:
            continue
        place = group_placement(mesh, kind)
        chunk_params = params / chunks
        buckets = max(1, math.ceil(chunk_params / bucket_params(size)))
        per_call = call_cost(Collective.REDUCE_SCATTER, place,
                             math.ceil(chunk_params * g / buckets), fabric).time_s
        reduce_s += evictions * buckets * per_call
    moved = shard_bytes * visits
    d2h_s = moved / cluster.pcie_bandwidth_bytes_per_s
    host_share = cluster.host_memory_bandwidth_bytes_per_s / cluster.gpus_per_node
    accumulate_s = HOST_ACCUMULATE_PASSES * moved / host_share
    upload_s = shard_bytes / cluster.pcie_bandwidth_bytes_per_s
    drain = (reduce_s + d2h_s + accumulate_s) / evictions
    exposed = ((evictions - 1) * max(0.0, drain - _drain_window_s(chunk_times, m, evictions,
                                                                   chunks))
               + drain + upload_s)
    return HostGradientCost(evictions=evictions, reduce_scatter_s=reduce_s,
                            device_to_host_bytes=math.ceil(moved), device_to_host_s=d2h_s,
                            host_accumulate_s=accumulate_s, upload_bytes=math.ceil(shard_bytes),
                            upload_s=upload_s, exposed_s=exposed)


def _drain_window_s(chunk_times: tuple[OpTimes, ...], m: int, evictions: int,
                    chunks: int) -> float:
    """Compute an earlier eviction's drain can hide behind: with mid-step evictions (more
    chunks than buffer slots) an equal share of the rank's step work, W / E; otherwise every
    chunk drains after its own last backward, behind one micro-batch's backward of the
    rank (the ordinary overlapped gradient reduction of `models.step_time.exposure`)."""
    if chunks > GRADIENT_BUFFER_SLOTS:
        return m * sum(t.total_s for t in chunk_times) / evictions
    return sum(t.backward_input_s + t.backward_weight_s for t in chunk_times)


__all__ = ["GRADIENT_BUFFER_SLOTS", "HOST_ACCUMULATE_PASSES", "HostGradientCost",
           "chunk_evictions", "host_gradient_cost"]
