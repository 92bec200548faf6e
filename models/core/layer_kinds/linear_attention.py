"""The records of the linear-attention kinds: Kimi Delta Attention (KDA) and Gated DeltaNet.

Owns: what differs between the two: their gates' weights and GEMM shapes, the tensors only
KDA keeps, and each chunkwise kernel's fitted speed. Must not: hold what the kinds share
(q/k/v/o, short convolutions, chunkwise FLOPs, recurrent states, context-parallel state
passing: `models.core.linear_attention`, which asks these records for the rest).

Sources: [KL25] Kimi Linear arXiv:2510.26692 (the released `modeling_kimi.py`,
`KimiDeltaAttention`); [GDN] Gated DeltaNet arXiv:2412.06464 Sec. 3 (Qwen3-Next's layer).
"""

from dataclasses import dataclass

from api_schemas.architecture import LinearAttentionSpec, ModelSpec
from models.core.layer_kinds.base import StoredTerm

KDA_KERNEL_EFFICIENCY = 0.044
GATED_DELTA_KERNEL_EFFICIENCY = 0.071
"""Fraction of the GPU's dense BF16 peak the chunkwise kernels reach (KDA, gated delta),
counted with `models.core.linear_attention.chunkwise_forward_flops_per_token_head` (C = 64).
Fitted on one published forward row each (fewer than three; no published step row of a
hybrid model checks them): flash-linear-attention `chunk_kda` and `chunk_gdn` on an H800,
B = 1, T = 8192, H = 96, d = 128: 3.268 ms and 2.033 ms (PaddlePaddle/flash-attention PR
#133, the `FLA_BENCHMARK` table); held out: B = 2, T = 16384, H = 16: 2.299 ms and 1.342 ms
(predicted 2.187 and 1.355, -4.9% and +1.0%; research/CALIBRATION.md, where they are listed
as `LINEAR_ATTENTION_KERNEL_EFFICIENCY`). Far below the softmax kernels' fraction: the
chunkwise kernels are bound by memory traffic and launches (the gate, WY and state passes
are separate kernels). Assumes: the same fraction on other GPU generations and shapes."""


@dataclass(frozen=True, slots=True)
class KimiDeltaAttention:
    """KDA: a per-channel decay through a low-rank gate, a low-rank output gate."""

    kernel_efficiency: float = KDA_KERNEL_EFFICIENCY

    def gate_weights(self, spec: ModelSpec, la: LinearAttentionSpec) -> tuple[int, int]:
        """The decay gate f_a (h x d_k), f_b (d_k x H d_k); b_proj (h x H) for beta; the
        output gate g_a (h x d_k), g_b (d_k x H d_v); vectors: A_log (H), dt_bias (H d_k),
        the gated norm (d_v)."""
        h, heads, dk, dv = spec.hidden_size, la.num_heads, la.head_dim, la.dim_v
        gates = h * dk + dk * heads * dk + h * heads + h * dk + dk * heads * dv
        return gates, heads + heads * dk + dv

    def gate_gemm_shapes(self, spec: ModelSpec, la: LinearAttentionSpec, *, tokens: int,
                         heads: int) -> list[tuple[int, int, int]]:
        """f_a and g_a together (replicated, as MLA's latent projections are), f_b, g_b,
        b_proj."""
        h, dk, dv = spec.hidden_size, la.head_dim, la.dim_v
        return [(tokens, 2 * dk, h), (tokens, heads * dk, dk), (tokens, heads * dv, dk),
                (tokens, heads, h)]

    def extra_stored_terms(self, la: LinearAttentionSpec, *, activation_bytes: float
                           ) -> list[StoredTerm]:
        """The low-rank gate activations (f_a, g_a outputs)."""
        return [StoredTerm("low-rank gate latents (f_a, g_a outputs)",
                           activation_bytes * 2 * la.head_dim)]


@dataclass(frozen=True, slots=True)
class GatedDeltaNet:
    """Gated DeltaNet: one scalar decay per head, a full output gate."""

    kernel_efficiency: float = GATED_DELTA_KERNEL_EFFICIENCY

    def gate_weights(self, spec: ModelSpec, la: LinearAttentionSpec) -> tuple[int, int]:
        """A full output gate (h x H d_v), a_proj and b_proj (h x H each); vectors: A_log
        and dt_bias (H each), the norm (d_v)."""
        h, heads, dv = spec.hidden_size, la.num_heads, la.dim_v
        return h * heads * dv + 2 * h * heads, 2 * heads + dv

    def gate_gemm_shapes(self, spec: ModelSpec, la: LinearAttentionSpec, *, tokens: int,
                         heads: int) -> list[tuple[int, int, int]]:
        """The output gate, a_proj and b_proj as one GEMM."""
        return [(tokens, heads * la.dim_v + 2 * heads, spec.hidden_size)]

    def extra_stored_terms(self, la: LinearAttentionSpec, *, activation_bytes: float
                           ) -> list[StoredTerm]:
        """None."""
        return []


KDA = KimiDeltaAttention()
GATED_DELTA = GatedDeltaNet()

__all__ = ["GATED_DELTA", "GATED_DELTA_KERNEL_EFFICIENCY", "KDA", "KDA_KERNEL_EFFICIENCY",
           "GatedDeltaNet", "KimiDeltaAttention"]
