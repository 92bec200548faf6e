"""The record of multi-head latent attention (DeepSeek-V2 arXiv:2405.04434 Sec. 2.1; V3,
Kimi K2).

Owns: the low-rank q and kv projections' weights and GEMM shapes, the latents and per-head
tensors kept for backward, the compressed KV cache and MLA's Megatron-LM arguments. Must
not: know about any other attention kind.
"""

from dataclasses import dataclass

from api_schemas.architecture import MLASpec, ModelSpec
from api_schemas.parallel import RecomputeModule
from models.core.layer_kinds.base import GemmShape, StoredTerm

M = RecomputeModule


def _mla(spec: ModelSpec) -> MLASpec:
    mla = spec.mla
    assert mla is not None, "ModelSpec validation guarantees mla with attention='mla'"
    return mla


@dataclass(frozen=True, slots=True)
class MultiLatentAttention:
    """q_a, q_b (or a full-rank q), kv_a, kv_b and o."""

    recompute_modules: tuple[RecomputeModule, ...] = (M.MLA_UP_PROJ,)
    framework_features: frozenset[str] = frozenset({"model:mla"})
    shards_kv_heads: bool = False
    """The KV heads are rebuilt per query head from the latent: no tp-divides-kv rule."""

    def params(self, spec: ModelSpec, *, matrices_only: bool) -> int:
        """q_a (h x d'_c) + norm + q_b (d'_c x a*(d_nope + d_rope)) or a full-rank q; kv_a
        (h x (d_c + d_rope)) + norm; kv_b (d_c x a*(d_nope + d_v)); o (a*d_v x h)."""
        h, a = spec.hidden_size, spec.num_attention_heads
        mla = _mla(spec)
        qk_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        norms = 0 if matrices_only else mla.kv_lora_rank + (mla.q_lora_rank or 0)
        if mla.q_lora_rank:
            q = h * mla.q_lora_rank + mla.q_lora_rank * a * qk_dim
        else:
            q = h * a * qk_dim
        kv = (h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
              + mla.kv_lora_rank * a * (mla.qk_nope_head_dim + mla.v_head_dim))
        return q + kv + a * mla.v_head_dim * h + norms

    def extra_matrix_sizes(self, spec: ModelSpec) -> list[int]:
        """kv_b: d_c x a (d_nope + d_v)."""
        mla = _mla(spec)
        return [mla.kv_lora_rank * spec.num_attention_heads
                * (mla.qk_nope_head_dim + mla.v_head_dim)]

    def head_dims(self, spec: ModelSpec) -> tuple[int, int]:
        """d_nope + d_rope for q/k and v_head_dim for v."""
        mla = _mla(spec)
        return mla.qk_nope_head_dim + mla.qk_rope_head_dim, mla.v_head_dim

    def local_kv_heads(self, spec: ModelSpec, tp: int) -> int:
        """As many as the local query heads: the core works on up-projected per-head keys
        and values for all a heads (what Megatron's CP exchanges for MLA)."""
        return max(1, spec.num_attention_heads // tp)

    def gemm_shapes(self, spec: ModelSpec, *, tokens: int, tp: int) -> list[GemmShape]:
        """The latent down-projections are replicated; the up-projections and o split."""
        t, h, a = tp, spec.hidden_size, spec.num_attention_heads
        mla = _mla(spec)
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        out = []
        if mla.q_lora_rank:
            out += [GemmShape(m=tokens, n=mla.q_lora_rank, k=h),
                    GemmShape(m=tokens, n=a * qk // t, k=mla.q_lora_rank, module=M.MLA_UP_PROJ)]
        else:
            out.append(GemmShape(m=tokens, n=a * qk // t, k=h))
        out += [GemmShape(m=tokens, n=mla.kv_lora_rank + mla.qk_rope_head_dim, k=h),
                GemmShape(m=tokens, n=a * (mla.qk_nope_head_dim + mla.v_head_dim) // t,
                          k=mla.kv_lora_rank, module=M.MLA_UP_PROJ),
                GemmShape(m=tokens, n=h, k=a * mla.v_head_dim // t)]
        return out

    def op_sac_gemm_shapes(self, spec: ModelSpec, *, tokens: int, tp: int) -> list[GemmShape]:
        """None: an MLA block is not a torchtitan Llama layer."""
        return []

    def stored_terms(self, spec: ModelSpec, *, tp: float, replicated_divisor: float,
                     activation_bytes: float) -> list[StoredTerm]:
        """The q/kv latents and their norm outputs (2 d'_c + 2 d_c each), then per-head Q/K
        (d_nope + d_rope) and V (d_v), rebuilt by `mla_up_proj` recomputation."""
        mla, act, heads = _mla(spec), activation_bytes, spec.num_attention_heads / tp
        latents = 2 * (mla.q_lora_rank or 0) + 2 * mla.kv_lora_rank
        d_qk, d_v = mla.qk_nope_head_dim + mla.qk_rope_head_dim, mla.v_head_dim
        return [StoredTerm("MLA latents", act * latents / replicated_divisor),
                StoredTerm("per-head Q, K, V", act * heads * (2 * d_qk + d_v),
                           (M.MLA_UP_PROJ,))]

    def kv_cache_elements(self, spec: ModelSpec) -> int:
        """The compressed latent d_c and the decoupled RoPE key d_h^R ([DSV2] Table 1)."""
        mla = _mla(spec)
        return mla.kv_lora_rank + mla.qk_rope_head_dim

    def kv_cache_split_by_tp(self) -> bool:
        """The latent is kept whole on every tensor-parallel rank."""
        return False

    def megatron_args(self, spec: ModelSpec) -> list[str]:
        """`--multi-latent-attention` and the ranks and head widths."""
        mla = _mla(spec)
        args = ["--multi-latent-attention"]
        if mla.q_lora_rank is not None:
            args += ["--q-lora-rank", str(mla.q_lora_rank)]
        return [*args, "--kv-lora-rank", str(mla.kv_lora_rank),
                "--qk-head-dim", str(mla.qk_nope_head_dim),
                "--qk-pos-emb-head-dim", str(mla.qk_rope_head_dim),
                "--v-head-dim", str(mla.v_head_dim)]


MLA = MultiLatentAttention()

__all__ = ["MLA", "MultiLatentAttention"]
