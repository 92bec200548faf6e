"""Memory a training process holds besides model states and stored activations.

Owns: the named runtime items of a rank's ledger: the CUDA context with its kernel images
and library workspaces, the NCCL communicator buffers (one set per process group the mesh
uses), the workspace of the fused attention kernel in backward, the communication staging
buffers (TP gather, PP send/receive, EP dispatch/combine) and the caching allocator's
fragmentation. Must not: count model states or stored activations (see `models/memory.py`),
or estimate time.

Calibration: the constants below are named, sourced values; `research/validate_memory.py`
checks the whole ledger against measured peaks (research/MEMORY_PEAKS.md).
"""

import math

from api_schemas.parallel import ParallelConfig

CUDA_CONTEXT_BYTES = 512 * 2**20
"""CUDA context, loaded kernel images (PyTorch, cuBLAS, cuDNN, NCCL) and the cuBLAS
workspaces of the default streams, outside the caching allocator. Source: PyTorch "CUDA
semantics" notes (memory outside the caching allocator is not reported by
memory_allocated); measured as nvidia-smi minus torch.cuda.memory_reserved, about 0.3-0.6
GiB on A100/H100 with recent CUDA (lazy module loading); the upper end is taken."""

NCCL_BUFFER_BYTES = 4 * 2**20
"""NCCL_BUFFSIZE default: 4 MiB per channel, peer and direction for the Simple protocol.
Source: NCCL environment variable reference (NCCL_BUFFSIZE)."""

NCCL_CHANNELS = 16
"""Channels a communicator opens on NVSwitch/InfiniBand systems (NCCL picks 16-32 on
Hopper/Ampere nodes; 16 taken). Source: NCCL environment reference (NCCL_MIN_NCHANNELS,
NCCL_MAX_NCHANNELS)."""

ALLOCATOR_FRAGMENTATION_FRAC = 0.05
"""Share of the dynamic bytes (activations and transient buffers) lost to the caching
allocator's block rounding and fragmentation (2 MiB segments, blocks split but never
merged across segments). Source: PyTorch CUDA caching allocator notes; a named reserve."""

FLASH_DQ_ACCUMULATOR_BYTES = 4
"""FlashAttention-2 backward accumulates dQ in fp32 (one element per query element).
Source: FlashAttention-2, arXiv:2307.08691 Sec. 3.1.2 (dQ accumulated across K/V blocks);
flash-attn `dq_accum` buffer."""


def communicator_count(parallel: ParallelConfig) -> int:
    """Process groups whose NCCL buffers a rank holds: the default (world) group plus one
    per mesh axis of size > 1 (tp, cp, dp, ep; the pipeline's two neighbours count as two
    point-to-point peers)."""
    axes = [parallel.tp, parallel.cp, parallel.dp, parallel.ep * parallel.etp]
    count = 1 + sum(1 for size in axes if size > 1)
    return count + (2 if parallel.pp > 1 else 0)


def nccl_buffer_bytes(parallel: ParallelConfig) -> int:
    """NCCL buffers of one rank: channels x 2 directions x buffer size per communicator.

    Source: NCCL environment reference (NCCL_BUFFSIZE 4 MiB, 16+ channels per
    communicator on NVSwitch/InfiniBand nodes).
    """
    per_communicator = NCCL_CHANNELS * 2 * NCCL_BUFFER_BYTES
    return communicator_count(parallel) * per_communicator


def attention_workspace_bytes(*, tokens: float, heads_per_rank: float, head_dim: int,
                              seq_len_per_rank: float, flash_attention: bool) -> int:
    """Transient bytes of one layer's attention backward.

    Flash: the fp32 dQ accumulator (tokens x heads x d x 4 bytes, arXiv:2307.08691 Sec.
    3.1.2). Materialised: the gradient of the s x s scores (2 bytes per score, Korthikanti
    et al. 2022 arXiv:2205.05198 Sec. 4.1 sizes the scores at 2 a s^2 b).
    Legend: tokens = s b / cp on the rank, heads_per_rank = a / t, d = head_dim.
    """
    if flash_attention:
        return math.ceil(tokens * heads_per_rank * head_dim * FLASH_DQ_ACCUMULATOR_BYTES)
    return math.ceil(2 * heads_per_rank * tokens * seq_len_per_rank)


__all__ = [
    "ALLOCATOR_FRAGMENTATION_FRAC",
    "CUDA_CONTEXT_BYTES",
    "FLASH_DQ_ACCUMULATOR_BYTES",
    "NCCL_BUFFER_BYTES",
    "NCCL_CHANNELS",
    "attention_workspace_bytes",
    "communicator_count",
    "nccl_buffer_bytes",
]
