"""The RL memory seesaw: training and rollout taking turns on the same GPUs.

Owns: the KV bytes of one token (MHA, GQA, MLA) and what an inference instance's GPU holds
of them; the KV-cache pool a rollout gets once the training states have left the GPU, and
what a write-back external pool in host DRAM adds; the time of the checkpoint engine's
weight update (host-to-device copy, broadcast, reload per bucket, serial or pipelined); the
reference model's weights materialised in the policy's gradient buffers; the time to move
training states to host memory or NVMe and back; and the per-GPU memory of each phase.
Must not: choose the training layout, build the training ledger (`models.core.memory` does), or
do I/O.

Sources:
- [DSV2] DeepSeek-V2, arXiv:2405.04434, Sec. 2.1.2-2.1.4 and Table 1: KV cache per token of
  MHA 2 n_h d_h l, GQA 2 n_g d_h l, MLA (d_c + d_h^R) l elements, about (9/2) d_h l with
  d_c = 4 d_h and d_h^R = d_h / 2.
- vLLM `ModelConfig.get_num_kv_heads`: a tensor-parallel rank holds max(1, n_g / tp) KV
  heads (heads are replicated when tp exceeds them); its MLA cache spec stores one latent of
  d_c + d_h^R per token and layer on every rank. `gpu_memory_utilization` (default 0.9)
  bounds weights plus KV cache.
- [K2] Kimi K2, arXiv:2507.20534, RL infrastructure: colocated training and inference
  engines, one offloading its GPU state while the other runs; a checkpoint engine where each
  worker takes its local training parameters, the full parameter set is broadcast to all
  workers and each inference worker keeps the shard it needs, pipelined parameter by
  parameter; a full update of the 1T model in under 30 s.
- MoonshotAI checkpoint-engine README (v0.1.3): three stages per bucket (H2D from host
  memory, broadcast into a CUDA-IPC buffer, reload of the needed subset), overlapped only
  when memory allows and not perfectly pipelined in the release; Kimi-K2-Instruct (FP8) on
  256 H20 (16 instances of TP16) updated in 21.50 s with 2.99 GiB buckets.
- [K3] Kimi K3, arXiv:2607.24653 (seed ledger Sec. 9.5, 9.7, 9.8): 1M-token RL with an
  external write-back KV pool in CPU DRAM (active decode blocks stay on the GPU; idle
  prefixes go to DRAM only on eviction and are prefetched before reuse); model and
  optimizer states offloaded to NVMe after the training iteration so DRAM holds the pool;
  reference (forward-only) models resident in CPU memory and materialised into the policy's
  FP32 gradient-buffer storage, which backward overwrites later; under Pipeline ZeRO-2 two
  VPP chunks of gradient buffers per GPU, one computing and one prefetching.
"""

import math
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from models.core.layer_kinds import attention_kind
from models.core.ledger_items import MemoryComponent


def kv_bytes_per_token_per_layer(spec: ModelSpec, kv_bytes: float) -> float:
    """KV-cache bytes of one token in one layer, unsharded ([DSV2] Table 1): MLA caches the
    compressed latent d_c and the decoupled RoPE key d_h^R; MHA and GQA cache a key and a
    value per KV head."""
    return attention_kind(spec).kv_cache_elements(spec) * kv_bytes


def kv_bytes_per_token_per_gpu(spec: ModelSpec, kv_bytes: float, *, tp: int, pp: int
                               ) -> float:
    """KV bytes of one token on one GPU of an inference instance of `tp` x `pp` GPUs: its
    ceil(L / pp) layers, and max(1, n_g / tp) of the KV heads (vLLM); an MLA latent is kept
    whole on every tensor-parallel rank."""
    if tp < 1 or pp < 1:
        raise ValueError("tp and pp must be positive")
    layers = math.ceil(spec.num_layers / pp)
    if not attention_kind(spec).kv_cache_split_by_tp():
        return layers * kv_bytes_per_token_per_layer(spec, kv_bytes)
    heads = max(1, spec.kv_heads // tp)
    return layers * 2 * heads * spec.dim_per_head * kv_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class KvPool:
    """The KV cache a rollout gets on one GPU, and the host pool behind it."""

    bytes_per_token_per_gpu: float
    gpu_pool_bytes: int
    gpu_pool_tokens: int
    active_contexts: int
    external_pool_bytes_per_gpu: int
    parked_contexts: int
    prefetch_s: float
    write_back_bytes_per_gpu: int
    """Host writes to fill the pool once, write-back: the parked contexts only."""
    write_through_bytes_per_gpu: int
    """The same load written through: every block of every context as it is produced."""


def kv_pool(*, capacity_bytes: int, gpu_memory_utilization: float, weight_bytes_per_gpu: int,
            resident_bytes: int, bytes_per_token_per_gpu: float, context_length: int,
            external_pool_bytes_per_gpu: int, host_link_bytes_per_s: float) -> KvPool:
    """GPU KV pool = utilisation x capacity - inference weights - whatever training left on
    the GPU (vLLM's budget); tokens = pool / KV bytes per token per GPU (every GPU of an
    instance holds its share of every token); active contexts = floor(tokens / context):
    a context being decoded keeps all its blocks on the GPU ([K3]). The write-back pool in
    host DRAM parks floor(external bytes / (context x KV bytes per token)) idle contexts, and
    bringing one back costs its bytes over the host link. Write-back ([K3]) writes a block to
    host memory only when it is evicted, so filling the GPU and the external pool once
    writes the parked contexts' bytes; a write-through pool would also write every block of
    the contexts that stay on the GPU: (active + parked) contexts' bytes."""
    if bytes_per_token_per_gpu <= 0 or host_link_bytes_per_s <= 0:
        raise ValueError("KV bytes per token and host-link bandwidth must be positive")
    pool = max(0, math.floor(capacity_bytes * gpu_memory_utilization)
               - weight_bytes_per_gpu - resident_bytes)
    tokens = math.floor(pool / bytes_per_token_per_gpu)
    context_bytes = context_length * bytes_per_token_per_gpu
    active = tokens // context_length
    parked = math.floor(external_pool_bytes_per_gpu / context_bytes)
    return KvPool(bytes_per_token_per_gpu=bytes_per_token_per_gpu, gpu_pool_bytes=pool,
                  gpu_pool_tokens=tokens, active_contexts=active,
                  external_pool_bytes_per_gpu=external_pool_bytes_per_gpu,
                  parked_contexts=parked, prefetch_s=context_bytes / host_link_bytes_per_s,
                  write_back_bytes_per_gpu=math.ceil(parked * context_bytes),
                  write_through_bytes_per_gpu=math.ceil((active + parked) * context_bytes))


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightUpdate:
    """One full weight update by the checkpoint engine."""

    weight_bytes: int
    num_buckets: int
    h2d_s: float
    broadcast_s: float
    reload_s: float
    serial_s: float
    pipelined_s: float
    received_bytes_per_gpu: int
    needed_bytes_per_gpu: int


def broadcast_bandwidth(*, num_nodes: int, intra_node_bytes_per_s: float,
                        inter_node_bytes_per_s: float, gpus_per_node: int) -> float:
    """Rate at which a broadcast delivers every byte to every GPU: the scale-up link inside
    one node; across nodes also the node's NICs together (each byte enters a node once, on
    one of its gpus_per_node rails, and is spread over the scale-up fabric)."""
    if num_nodes <= 1:
        return intra_node_bytes_per_s
    return min(intra_node_bytes_per_s, gpus_per_node * inter_node_bytes_per_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateLinks:
    """The bandwidths a checkpoint-engine weight update crosses, per GPU."""

    host_link_bytes_per_s: float
    intra_node_bytes_per_s: float
    inter_node_bytes_per_s: float
    hbm_bytes_per_s: float


def checkpoint_engine_update(*, weight_bytes: int, bucket_bytes: int, instance_gpus: int,
                             num_nodes: int, gpus_per_node: int,
                             links: UpdateLinks) -> WeightUpdate:
    """Time of a full weight update ([K2]; checkpoint-engine README). Per bucket of b bytes:
    its owner copies it host-to-device (b / host link), it is broadcast to every GPU
    (b / broadcast bandwidth) and each GPU copies its inference shard out of it
    (2 b / instance GPUs / HBM: read and write). Serial: the sum of the three over all
    buckets. Pipelined: the slowest stage over all buckets plus the other two for one bucket
    (pipeline fill). Every GPU receives all W bytes, where a resharding transfer would need
    only its shard W / instance GPUs: the broadcast moves instance GPUs times the least
    volume, the price [K2] states for decoupling the engines."""
    if min(weight_bytes, bucket_bytes, instance_gpus, num_nodes, gpus_per_node) < 1:
        raise ValueError("weights, bucket, instance, nodes and GPUs per node must be positive")
    bandwidth = broadcast_bandwidth(num_nodes=num_nodes,
                                    intra_node_bytes_per_s=links.intra_node_bytes_per_s,
                                    inter_node_bytes_per_s=links.inter_node_bytes_per_s,
                                    gpus_per_node=gpus_per_node)
    buckets = math.ceil(weight_bytes / bucket_bytes)
    bucket = weight_bytes / buckets
    per_bucket = (bucket / links.host_link_bytes_per_s, bucket / bandwidth,
                  2.0 * bucket / instance_gpus / links.hbm_bytes_per_s)
    totals = tuple(buckets * stage for stage in per_bucket)
    slowest = max(range(3), key=lambda i: per_bucket[i])
    pipelined = totals[slowest] + sum(t for i, t in enumerate(per_bucket) if i != slowest)
    return WeightUpdate(weight_bytes=weight_bytes, num_buckets=buckets, h2d_s=totals[0],
                        broadcast_s=totals[1], reload_s=totals[2], serial_s=sum(totals),
                        pipelined_s=pipelined, received_bytes_per_gpu=weight_bytes,
                        needed_bytes_per_gpu=math.ceil(weight_bytes / instance_gpus))


@dataclass(frozen=True, slots=True, kw_only=True)
class ReferenceWeights:
    """The reference model's weights on one GPU during the reference forward."""

    weight_bytes: int
    gradient_buffer_bytes: int
    slot: str
    fits_in_gradient_buffer: bool
    extra_gpu_bytes: int
    h2d_s: float


def reference_weights(*, weight_bytes: int, gradient_buffer_bytes: int, chunk_slots: bool,
                      param_bytes: float, grad_bytes: float, reuse: bool,
                      host_link_bytes_per_s: float) -> ReferenceWeights:
    """Where the reference model's weights live while it runs forward ([K3]): in the
    policy's gradient-buffer storage, which backward overwrites later. With one buffer for
    the stage the stage's weights must fit in it; under Pipeline ZeRO-2 (`chunk_slots`) each
    of the two slots holds one chunk's gradients (chunk params x grad bytes), so one chunk's
    reference weights fit when param bytes <= grad bytes, and the other slot prefetches the
    next chunk. Without reuse, or when they do not fit, the weights take extra GPU memory:
    the stage's, or two chunks' under Pipeline ZeRO-2. Either way the stage's weights cross
    the host link once per reference forward."""
    if chunk_slots:
        fits = param_bytes <= grad_bytes
        resident = math.ceil(gradient_buffer_bytes * param_bytes / grad_bytes)
    else:
        fits = weight_bytes <= gradient_buffer_bytes
        resident = weight_bytes
    return ReferenceWeights(weight_bytes=weight_bytes,
                            gradient_buffer_bytes=gradient_buffer_bytes,
                            slot="chunk" if chunk_slots else "stage",
                            fits_in_gradient_buffer=fits,
                            extra_gpu_bytes=0 if reuse and fits else resident,
                            h2d_s=weight_bytes / host_link_bytes_per_s)


def state_transfer_s(*, bytes_per_gpu: int, gpus_per_node: int, host_link_bytes_per_s: float,
                     nvme_bytes_per_s_per_node: float | None) -> float:
    """Time to move one GPU's training states off the GPU (or back): each GPU's bytes over
    its own host link; to NVMe also the node's drives, shared by its GPUs, streamed through
    host memory (the slower of the two bounds)."""
    to_host = bytes_per_gpu / host_link_bytes_per_s
    if nvme_bytes_per_s_per_node is None:
        return to_host
    return max(to_host, bytes_per_gpu * gpus_per_node / nvme_bytes_per_s_per_node)


@dataclass(frozen=True, slots=True, kw_only=True)
class SeesawPhase:
    """Memory of one GPU during one phase."""

    name: str
    components: tuple[MemoryComponent, ...]
    host_components: tuple[MemoryComponent, ...]

    @property
    def gpu_bytes(self) -> int:
        """All GPU bytes."""
        return sum(c.bytes for c in self.components)

    @property
    def host_bytes(self) -> int:
        """This GPU's share of host memory."""
        return sum(c.bytes for c in self.host_components)


@dataclass(frozen=True, slots=True, kw_only=True)
class SeesawTransition:
    """Bytes one GPU moves between phases and the time it takes."""

    name: str
    before: str
    after: str
    bytes_per_gpu: int
    seconds: float
    link: str


__all__ = [
    "KvPool",
    "ReferenceWeights",
    "SeesawPhase",
    "SeesawTransition",
    "WeightUpdate",
    "broadcast_bandwidth",
    "UpdateLinks",
    "checkpoint_engine_update",
    "kv_bytes_per_token_per_gpu",
    "kv_bytes_per_token_per_layer",
    "kv_pool",
    "reference_weights",
    "state_transfer_s",
]
