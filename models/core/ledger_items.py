"""The value types of the memory ledger shared by its builders.

Owns: one named ledger line (`MemoryComponent` and its kind) and the parameters a rank holds
by sharding group (`RankParameters`). Must not: compute anything (see `models/core/memory.py`,
`models/core/sharded_states.py`, `models/core/runtime_memory.py`).
"""

from dataclasses import dataclass
from typing import Literal

ComponentKind = Literal["parameters", "gradients", "optimizer", "activations", "other"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryComponent:
    """One named line of a rank's ledger."""

    name: str
    kind: ComponentKind
    bytes: int
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankParameters:
    """Parameters one rank holds, grouped by how they are sharded and stored (the single
    definition used by the ledger, the step time and the traffic ledger)."""

    gemm: int  # TP-sharded GEMM weights (attention, dense MLP, shared experts)
    vectors: int  # norms, router, biases, position table: replicated across tp
    embedding: int
    head: int
    experts: int  # routed experts, sharded by ep x etp
    largest_layer: int  # params of the largest layer shard (ZeRO-3 / FSDP unit)
    largest_matrix: int  # largest single weight matrix, unsharded (Muon)


__all__ = ["ComponentKind", "MemoryComponent", "RankParameters"]
