"""One record per layer kind: each kind of attention (dense MHA/GQA, MLA), linear attention
(KDA, gated delta rule), MLP (GELU, SwiGLU), MLP block (dense, MoE) and norm declares in its
own module the weights, GEMM shapes, stored activations, KV cache and framework arguments
that set it apart from the others; `registry.py` maps a kind's name to its record.

Owns: those records and the registry. Must not: import the cost model (`models.core.params`,
`core.flops`, `core.compute`, `core.activations` and the exports ask the records;
the records never ask them), or let a caller branch on a kind name instead of asking.
"""

from models.core.layer_kinds.moe import has_routed_experts
from models.core.layer_kinds.registry import (
    attention_kind,
    kind_recompute_modules,
    linear_attention_kind,
    mlp_block,
    mlp_blocks,
    mlp_kind,
    norm_kind,
)

__all__ = ["attention_kind", "has_routed_experts", "kind_recompute_modules",
           "linear_attention_kind", "mlp_block", "mlp_blocks", "mlp_kind", "norm_kind"]
