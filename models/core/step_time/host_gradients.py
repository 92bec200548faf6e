"""Step-time cost of Pipeline ZeRO-2: gradient shards accumulated in host memory.

Owns: the time of each eviction of a chunk from the two on-GPU gradient buffers (its
data-parallel reduce-scatter, defined with the eviction count in `models.core.traffic.data`; the
copy of the rank's shard to the host; its accumulation into the host shard), the upload of
the accumulated shard for the optimizer step, and the exposed time of all of it
(`host_gradient_cost`). The memory side (two chunk buffers on the GPU, shards in
host memory) is `models.core.sharded_states`. Must not: size memory, search, or define the
ZeRO-1/2 traffic of ordinary data parallelism (`models.core.traffic.data`).
"""

import math
from dataclasses import dataclass

from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.core.compute import OpTimes
from models.core.mesh.layout import expert_data_parallel_size
from models.core.pipeline import schedule_traits
from models.core.traffic.data import CHUNK_REDUCE, GRADIENT_BUFFER_SLOTS, chunk_evictions
from models.core.traffic.items import TrafficItem
from models.core.traffic.weights import StageWeights

HOST_ACCUMULATE_PASSES = 3
"""Host DRAM passes of one accumulation: read the arriving shard, read the host shard, write
the sum (a streaming add, as ZeRO-Offload's CPU-side gradient handling)."""


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
                       weights: StageWeights, dp_traffic: tuple[TrafficItem, ...],
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
    Per eviction: reduce-scatter of P_c g over d (alpha-beta, `models.core.collectives`, in
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
    shard_bytes = (weights.dense_params * g / (parallel.dp * parallel.cp)
                   + weights.expert_params * g / expert_data_parallel_size(parallel))
    reduce_s = sum(i.time_per_step_s for i in dp_traffic if i.name.endswith(CHUNK_REDUCE))
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
    rank (the ordinary overlapped gradient reduction of `models.core.step_time.exposure`)."""
    if chunks > GRADIENT_BUFFER_SLOTS:
        return m * sum(t.total_s for t in chunk_times) / evictions
    return sum(t.backward_input_s + t.backward_weight_s for t in chunk_times)


__all__ = ["HOST_ACCUMULATE_PASSES", "HostGradientCost", "host_gradient_cost"]
