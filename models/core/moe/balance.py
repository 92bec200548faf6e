"""Expert-parallel load balance: imbalance, receive buffers, capacity, redundant experts.

Owns: the imbalance factor (max rank load / mean) of a placement or of a routing, the
receive-buffer rows of a DeepEP-style worst case against MoonEP's fixed S*K, the expert
capacity of GShard/Switch with padding or dropping, and the bytes redundant experts add
(weights prefetched before the forward, gradients reduced back to their home ranks after the
backward, and the shared prefetch pool). Must not: plan placements (solver/placement does)
or turn bytes into time.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from models.errors import InvalidSpecError

IntArray = npt.NDArray[np.int64]


def imbalance_factor(loads: Sequence[int] | IntArray) -> float:
    """Max rank load over mean rank load (1.0 is perfect balance).

    Source: seed ledger Sec. 6.1 (the most loaded rank sets the MoE layer's makespan);
    MoonEP README (maxvio = max_e T_e / mean - 1 is the per-expert form of the same ratio).
    Legend: loads = assignments each rank computes.

    Raises:
        InvalidSpecError: on an empty, negative or all-zero load vector.
    """
    arr = np.asarray(loads, dtype=np.int64)
    if arr.size == 0 or int(arr.min()) < 0 or int(arr.sum()) == 0:
        raise InvalidSpecError(
            "loads must be a non-empty vector of non-negative counts with a positive sum",
            field="loads",
        )
    return float(arr.max()) * arr.size / float(arr.sum())


def home_rank_loads(expert_loads: Sequence[int] | IntArray, *, num_ranks: int) -> IntArray:
    """Assignments each rank computes without redundancy (E/R contiguous home experts).

    Raises:
        InvalidSpecError: when num_ranks does not divide the number of experts.
    """
    arr = np.asarray(expert_loads, dtype=np.int64)
    if num_ranks < 1 or arr.size % num_ranks:
        raise InvalidSpecError(
            f"num_ranks={num_ranks} must divide the {arr.size} experts", field="num_ranks"
        )
    return np.asarray(arr.reshape(num_ranks, -1).sum(axis=1), dtype=np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiveBuffer:
    """Rows (and bytes) a rank must reserve to receive one layer's dispatch."""

    deepep_worst_case_rows: int
    """S*K*R: every assignment of every source lands on one rank (copy-free layout)."""
    moonep_rows: int
    """S*K: MoonEP's exact balance fixes the receive size."""
    moonep_padded_rows: int
    """S*K plus per-expert-group padding, aligned (MoonEP's NvS)."""
    deepep_worst_case_bytes: int
    moonep_padded_bytes: int


def receive_buffer_rows(
    *, tokens_per_rank: int, top_k: int, ep_size: int, experts_per_rank: int,
    hidden_size: int, bytes_per_elem: int = 2, token_padding: int = 1,
) -> ReceiveBuffer:
    """DeepEP-style worst-case receive buffer S*K*R against MoonEP's fixed S*K.

    MoonEP's padded size: align_up(S*K + 2*epn*(pad-1), pad), since each of the 2*epn
    expert groups on a rank (local plus prefetched) may need up to pad-1 padding rows.

    Source: Kimi K3, arXiv:2607.24653, Sec. 5.2.1 (buffer S*K*R for DeepEP under the
    worst-case imbalance of a copy-free path, S*K for MoonEP), as recorded in seed ledger
    Sec. 6.6; MoonEP README (NvS = S*K real tokens plus per-group padding, 2*epn groups).
    Legend: S=tokens_per_rank, K=top_k, R=ep_size, epn=experts_per_rank, pad=token_padding.
    Assumes: the K3 comparison's copy-free worst case; DeepEP configured otherwise (e.g.
    with per-rank deduplication or a smaller max-tokens setting) reserves less.

    Raises:
        InvalidSpecError: on a non-positive size.
    """
    for name, value in (("tokens_per_rank", tokens_per_rank), ("top_k", top_k),
                        ("ep_size", ep_size), ("experts_per_rank", experts_per_rank),
                        ("hidden_size", hidden_size), ("bytes_per_elem", bytes_per_elem),
                        ("token_padding", token_padding)):
        if value < 1:
            raise InvalidSpecError(f"{name}={value} must be at least 1", field=name)
    rows = tokens_per_rank * top_k
    pad = token_padding
    padded = -(-(rows + 2 * experts_per_rank * (pad - 1)) // pad) * pad
    row_bytes = hidden_size * bytes_per_elem
    return ReceiveBuffer(
        deepep_worst_case_rows=rows * ep_size, moonep_rows=rows, moonep_padded_rows=padded,
        deepep_worst_case_bytes=rows * ep_size * row_bytes, moonep_padded_bytes=padded * row_bytes,
    )


class CapacityPolicy(StrEnum):
    """What happens to an expert's tokens beyond or below its capacity."""

    DROP = "drop"
    """Fixed capacity C per expert: overflow tokens are dropped, underfull experts padded."""
    PAD_TO_MAX = "pad_to_max"
    """Dropless with a static shape: every expert padded to the largest expert count."""


def expert_capacity(
    *, num_tokens: int, num_experts: int, top_k: int, capacity_factor: float
) -> int:
    """Token slots per expert: ceil(capacity_factor * K * N / E).

    Source: GShard arXiv:2006.16668 Sec. 2.2 (each of G groups gets a capacity of
    2N/(G*E) per expert for top-2, i.e. factor 1); Switch Transformer arXiv:2101.03961
    Sec. 2.2 Eq. 3 (capacity = tokens per batch / experts x capacity factor; its Fig. 3 shows
    6 tokens on 3 experts giving 2 slots at factor 1.0 and 3 at 1.5).
    Legend: N=num_tokens (of one group), E=num_experts, K=top_k.
    Deviation: rounds up; implementations that truncate differ only for fractional values.

    Raises:
        InvalidSpecError: on a non-positive input.
    """
    if num_tokens < 0 or num_experts < 1 or top_k < 1 or capacity_factor <= 0:
        raise InvalidSpecError(
            f"need num_tokens >= 0, num_experts >= 1, top_k >= 1, capacity_factor > 0; got "
            f"{num_tokens}, {num_experts}, {top_k}, {capacity_factor}", field="capacity_factor",
        )
    exact = capacity_factor * top_k * num_tokens / num_experts
    nearest = round(exact)
    return nearest if math.isclose(exact, nearest, abs_tol=1e-9) else math.ceil(exact)


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityOutcome:
    """Rows computed, dropped and padded when experts run at a fixed capacity."""

    capacity_tokens: int
    processed_tokens: int
    dropped_tokens: int
    computed_rows: int
    """num_experts x capacity: the static shape the GEMMs run on."""
    padding_rows: int
    drop_frac: float
    padding_frac: float
    """padding_rows / computed_rows."""


def capacity_outcome(
    expert_tokens: Sequence[int] | IntArray, *, capacity_tokens: int | None = None,
    policy: CapacityPolicy = CapacityPolicy.DROP,
) -> CapacityOutcome:
    """Apply a capacity policy to per-expert token counts.

    Source: GShard arXiv:2006.16668 Sec. 2.2 (tokens beyond capacity overflow and are
    dropped from the expert); seed ledger Sec. 6.2 (fixed capacity pads or drops; dropless
    kernels avoid both).
    Legend: n_e = expert_tokens, C = capacity_tokens (PAD_TO_MAX uses C = max n_e).

    Raises:
        InvalidSpecError: when DROP has no capacity or counts are negative.
    """
    n = np.asarray(expert_tokens, dtype=np.int64)
    if n.size == 0 or int(n.min()) < 0:
        raise InvalidSpecError("expert_tokens must be non-negative counts", field="expert_tokens")
    if policy == CapacityPolicy.PAD_TO_MAX:
        cap = int(n.max())
    elif capacity_tokens is None or capacity_tokens < 0:
        raise InvalidSpecError(
            f"capacity_tokens={capacity_tokens}: the DROP policy needs a capacity >= 0 "
            "(see expert_capacity)", field="capacity_tokens",
        )
    else:
        cap = capacity_tokens
    processed = int(np.minimum(n, cap).sum())
    total = int(n.sum())
    rows = cap * int(n.size)
    return CapacityOutcome(
        capacity_tokens=cap, processed_tokens=processed, dropped_tokens=total - processed,
        computed_rows=rows, padding_rows=rows - processed,
        drop_frac=(total - processed) / total if total else 0.0,
        padding_frac=(rows - processed) / rows if rows else 0.0,
    )


def expert_weight_bytes(
    *, hidden_size: int, expert_ffn_hidden_size: int, bytes_per_param: int,
    num_matrices: int = 3,
) -> int:
    """Bytes of one routed expert's weights (SwiGLU: gate, up, down = 3 matrices of H x H').

    Source: MoonEP README (expert projections gate/up/down, each [H, H']).
    Legend: H=hidden_size, H'=expert_ffn_hidden_size.
    """
    if min(hidden_size, expert_ffn_hidden_size, bytes_per_param, num_matrices) < 1:
        raise InvalidSpecError("expert sizes must be positive", field="expert_ffn_hidden_size")
    return num_matrices * hidden_size * expert_ffn_hidden_size * bytes_per_param


@dataclass(frozen=True, slots=True, kw_only=True)
class RedundantExpertTraffic:
    """Bytes that redundant experts add per layer and micro-batch, and their memory pool."""

    num_redundant: int
    prefetch_bytes: int
    """Weights copied from home ranks to the ranks hosting the replicas (forward)."""
    grad_reduce_bytes: int
    """Replica gradients sent back and accumulated on the home ranks (backward)."""
    prefetch_pool_bytes_per_rank: int
    """Slots for E/R experts per rank, shared by all layers (weights plus gradient buffer)."""


def redundant_expert_traffic(
    *, num_redundant: int, experts_per_rank: int, weight_bytes_per_expert: int,
    grad_bytes_per_expert: int,
) -> RedundantExpertTraffic:
    """Prefetch and gradient-reduce bytes of `num_redundant` replicas in one layer.

    Source: Kimi K3, arXiv:2607.24653, Sec. 5.2.1 (prefetch before the forward, reduce the
    replicas' gradients to the home ranks after the backward; at most E/R slots per rank);
    MoonEP README (the prefetch pool is process-global, so its cost is epn experts per
    projection in total, not per layer; gradients in fp32).
    Legend: epn=experts_per_rank.

    Raises:
        InvalidSpecError: on a negative count or size.
    """
    if min(num_redundant, experts_per_rank, weight_bytes_per_expert, grad_bytes_per_expert) < 0:
        raise InvalidSpecError("counts and byte sizes must be non-negative", field="num_redundant")
    return RedundantExpertTraffic(
        num_redundant=num_redundant,
        prefetch_bytes=num_redundant * weight_bytes_per_expert,
        grad_reduce_bytes=num_redundant * grad_bytes_per_expert,
        prefetch_pool_bytes_per_rank=experts_per_rank
        * (weight_bytes_per_expert + grad_bytes_per_expert),
    )


__all__ = [
    "CapacityOutcome",
    "CapacityPolicy",
    "ReceiveBuffer",
    "RedundantExpertTraffic",
    "capacity_outcome",
    "expert_capacity",
    "expert_weight_bytes",
    "home_rank_loads",
    "imbalance_factor",
    "receive_buffer_rows",
    "redundant_expert_traffic",
]
