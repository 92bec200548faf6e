"""The record of dense softmax attention, MHA and GQA: one record serves both (MHA is GQA
with as many KV heads as query heads).

Owns: the projections' weights, GEMM shapes, stored projection tensors, KV-cache size and
Megatron-LM arguments of q/k/v/o attention with `num_kv_heads` KV heads. Must not: know
about any other attention kind, or about the sliding-window and chunked masks (those are
per-layer attention spans, `ModelSpec.attention_window` / `attention_chunk`, which change
the core's FLOPs only: `models.core.flops`).
"""

from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import RecomputeModule
from models.core.layer_kinds.base import GemmShape, StoredTerm


@dataclass(frozen=True, slots=True)
class DenseAttention:
    """q (h x a d), k and v (h x kv d each), o (a d x h)."""

    recompute_modules: tuple[RecomputeModule, ...] = ()
    framework_features: frozenset[str] = frozenset()
    shards_kv_heads: bool = True

    def params(self, spec: ModelSpec, *, matrices_only: bool) -> int:
        """MHA/GQA: q (h x a*d), k and v (h x kv*d each), o (a*d x h); q/k/v biases when
        `attention_bias`, all four when `linear_bias`; per-head q and k norms when
        `qk_norm`."""
        h, a = spec.hidden_size, spec.num_attention_heads
        d, kv_heads = spec.dim_per_head, spec.kv_heads
        q_out, kv_out = a * d, kv_heads * d
        weights = h * q_out + 2 * h * kv_out + q_out * h
        if matrices_only:
            return weights
        biases = 0
        if spec.attention_bias or spec.linear_bias:
            biases += q_out + 2 * kv_out
        if spec.linear_bias:
            biases += h
        qk_norms = 2 * d if spec.qk_norm else 0
        return weights + biases + qk_norms

    def extra_matrix_sizes(self, spec: ModelSpec) -> list[int]:
        """None beyond the h x a d projections."""
        return []

    def head_dims(self, spec: ModelSpec) -> tuple[int, int]:
        """d for both q/k and v."""
        return spec.dim_per_head, spec.dim_per_head

    def local_kv_heads(self, spec: ModelSpec, tp: int) -> int:
        """kv / tp, at least one (each rank keeps a replicated KV head when tp > kv)."""
        return max(1, spec.kv_heads // tp)

    def gemm_shapes(self, spec: ModelSpec, *, tokens: int, tp: int) -> list[GemmShape]:
        """The fused QKV projection and the output projection."""
        t, h, a = tp, spec.hidden_size, spec.num_attention_heads
        d, kv = spec.dim_per_head, max(spec.kv_heads // t, 1)
        return [GemmShape(m=tokens, n=(a // t + 2 * kv) * d, k=h),
                GemmShape(m=tokens, n=h, k=a * d // t)]

    def op_sac_gemm_shapes(self, spec: ModelSpec, *, tokens: int, tp: int) -> list[GemmShape]:
        """wq, wk, wv, wo in torchtitan's order."""
        t, h = tp, spec.hidden_size
        d, kv, a = spec.dim_per_head, max(spec.kv_heads // t, 1), spec.num_attention_heads
        return [GemmShape(m=tokens, n=a * d // t, k=h), GemmShape(m=tokens, n=kv * d, k=h),
                GemmShape(m=tokens, n=kv * d, k=h), GemmShape(m=tokens, n=h, k=a * d // t)]

    def stored_terms(self, spec: ModelSpec, *, tp: float, replicated_divisor: float,
                     activation_bytes: float) -> list[StoredTerm]:
        """Q and V, then K (GPT layer [KOR22] Sec. 4.1: Q and K 4h, V 2h). Deviation (GQA):
        K and V are 2 kv d each; when tp exceeds the KV heads each rank keeps one."""
        act, heads = activation_bytes, spec.num_attention_heads / tp
        d = spec.dim_per_head
        kv_heads = max(spec.kv_heads / tp, 1.0)
        # torchtitan's per-op policy keeps the Q and V projections (1st and 3rd matmul) and
        # rebuilds K (2nd) and the rotary / repeat copies from them.
        return [StoredTerm("Q, V", act * (heads + kv_heads) * d),
                StoredTerm("K", act * kv_heads * d, (RecomputeModule.OP_SAC,))]

    def kv_cache_elements(self, spec: ModelSpec) -> int:
        """A key and a value per KV head ([DSV2] Table 1)."""
        return 2 * spec.kv_heads * spec.dim_per_head

    def kv_cache_split_by_tp(self) -> bool:
        """vLLM splits the KV heads over the tensor-parallel ranks."""
        return True

    def megatron_args(self, spec: ModelSpec) -> list[str]:
        """Query groups when the model has fewer KV heads than query heads, and the head
        width."""
        args = []
        if spec.kv_heads < spec.num_attention_heads:
            args += ["--group-query-attention", "--num-query-groups", str(spec.kv_heads)]
        return [*args, "--kv-channels", str(spec.dim_per_head)]


DENSE_ATTENTION = DenseAttention()

__all__ = ["DENSE_ATTENTION", "DenseAttention"]
