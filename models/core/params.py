"""Parameter counts from matrix shapes: per layer, per component, total and activated.

Owns: how many weights each block of a decoder-only transformer holds (attention for MHA,
GQA and MLA; 2- and 3-matrix MLPs; routed and shared experts and the router; norms;
embedding, position table and output head; multi-token-prediction modules). Must not: know
about bytes, sharding or parallelism (see `models/core/memory.py`).

Source: [NAR21] Narayanan et al. 2021, arXiv:2104.04473, Eq. 2 for the GPT layer
(12h^2 + 13h per layer, (V + s)h for the embeddings); the per-family shapes follow each
architecture's Hugging Face modelling code (q/k/v/o, gate/up/down, router, MLA q_a/q_b/kv_a/
kv_b/o, norms).
"""

from dataclasses import dataclass, replace

from api_schemas.architecture import ModelSpec
from models.core.layer_kinds import attention_kind, mlp_block, mlp_blocks, mlp_kind, norm_kind
from models.core.layer_kinds.base import MlpBlockParams
from models.core.linear_attention import linear_attention_weights


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerParams(MlpBlockParams):
    """Weights of one transformer layer by component: its MLP block's, the token mixer's
    and the norms'."""

    attention: int
    """q/k/v/o projections (and MLA compressions), their biases and q/k norms."""
    norms: int
    """The hidden-width norms of the layer (`num_layer_norms` of them)."""

    @property
    def routed_experts(self) -> int:
        """All routed experts of the layer."""
        return self.routed_expert_each * self.num_routed_experts

    @property
    def dense_part(self) -> int:
        """Everything except routed experts (replicated like dense weights)."""
        return self.attention + self.norms + self.dense_mlp + self.router + self.shared_experts

    @property
    def total(self) -> int:
        """All weights of the layer."""
        return self.dense_part + self.routed_experts

    @property
    def activated(self) -> int:
        """Weights a token touches: the dense part plus top-k routed experts."""
        return self.dense_part + self.routed_expert_each * self.top_k


@dataclass(frozen=True, slots=True, kw_only=True)
class ParameterCount:
    """Whole-model parameter counts (MTP modules reported apart)."""

    total: int
    activated: int
    embedding: int
    head: int
    final_norm: int
    layers_total: int
    routed_experts_total: int
    mtp_total: int
    mtp_activated: int


def norm_params(spec: ModelSpec, width: int) -> int:
    """Weights of one norm over `width` features: h for RMSNorm, 2h (scale, bias) for
    LayerNorm, none for a LayerNorm without affine parameters (OLMo 1: transformers
    `OlmoLayerNorm`, OLMo arXiv:2402.00838 Sec. 2.1 'non-parametric layer norm'); the
    norm kind's record (`models.core.layer_kinds.norm`) holds the weights per feature."""
    return width * norm_kind(spec).params_per_feature


def attention_params(spec: ModelSpec, *, matrices_only: bool = False) -> int:
    """Weights of one attention block (`matrices_only`: GEMM weights, no biases or norms).

    MHA/GQA: q (h x a*d), k and v (h x kv*d each), o (a*d x h); q/k/v biases when
    `attention_bias`, all four when `linear_bias`; per-head q and k norms when `qk_norm`.
    MLA (DeepSeek-V2 arXiv:2405.04434 Sec. 2.1): q_a (h x d'_c) + norm + q_b
    (d'_c x a*(d_nope + d_rope)) or a full-rank q; kv_a (h x (d_c + d_rope)) + norm; kv_b
    (d_c x a*(d_nope + d_v)); o (a*d_v x h). Counted by the kind's record
    (`models.core.layer_kinds`).
    """
    return attention_kind(spec).params(spec, matrices_only=matrices_only)


def layer_attention_params(spec: ModelSpec, layer_index: int, *,
                           matrices_only: bool = False) -> int:
    """Weights of layer `layer_index`'s token mixer: its linear-attention block in a hybrid
    model's linear layers (`models.core.linear_attention.linear_attention_weights`; Kimi Linear
    arXiv:2510.26692), else the model's attention (`attention_params`)."""
    if spec.is_linear_attention_layer(layer_index):
        weights = linear_attention_weights(spec)
        return weights.matrices if matrices_only else weights.total
    return attention_params(spec, matrices_only=matrices_only)


def mlp_params(spec: ModelSpec, width: int, *, matrices_only: bool = False) -> int:
    """Weights of one MLP of intermediate `width`: 2hf for GELU, 3hf for SwiGLU; biases
    (f + h) when `linear_bias` and not `matrices_only`."""
    return mlp_kind(spec).params(spec, width, matrices_only=matrices_only)


def layer_params(spec: ModelSpec, layer_index: int) -> LayerParams:
    """Weights of transformer layer `layer_index` (0-based) by component: the MLP block's are
    its record's (`models.core.layer_kinds.moe`: dense MLP or MoE block)."""
    norms = spec.num_layer_norms * norm_params(spec, spec.hidden_size)
    attention = layer_attention_params(spec, layer_index)
    block = mlp_block(spec, layer_index).params(spec, mlp_kind(spec))
    return LayerParams(attention=attention, norms=norms, dense_mlp=block.dense_mlp,
                       router=block.router, shared_experts=block.shared_experts,
                       routed_expert_each=block.routed_expert_each,
                       num_routed_experts=block.num_routed_experts, top_k=block.top_k)


def embedding_params(spec: ModelSpec) -> int:
    """Token embedding (V x h) plus a learned position table (positions x h) if any."""
    return spec.vocab_size * spec.hidden_size + spec.learned_position_embeddings * spec.hidden_size


def head_params(spec: ModelSpec) -> int:
    """Output projection (V x h); 0 when tied to the embedding."""
    return 0 if spec.tie_word_embeddings else spec.vocab_size * spec.hidden_size


def mtp_module_params(spec: ModelSpec) -> LayerParams:
    """One multi-token-prediction module (DeepSeek-V3 arXiv:2412.19437 Sec. 2.2): a
    transformer layer shaped like the last layer, plus the projection M (2h x h) and three
    norms (enorm, hnorm, the shared head's norm); embedding and head are shared. The extras
    are booked under `norms` and `attention`-free fields so `total` stays exact."""
    last = layer_params(spec, spec.num_layers - 1)
    h = spec.hidden_size
    extra = 2 * h * h + 3 * norm_params(spec, h)
    return replace(last, norms=last.norms + extra)


def largest_weight_matrix(spec: ModelSpec) -> int:
    """Elements of the largest single 2-D hidden weight (embedding and head excluded): the
    buffer an optimizer that needs whole matrices (Muon) must gather."""
    h = spec.hidden_size
    sizes = [h * spec.num_attention_heads * spec.dim_per_head, h * spec.ffn_hidden_size]
    sizes += attention_kind(spec).extra_matrix_sizes(spec)
    sizes += [block.largest_matrix(spec) for block in mlp_blocks(spec)]
    return max(sizes)


def count_parameters(spec: ModelSpec) -> ParameterCount:
    """Total and activated parameters (embeddings and head included, MTP apart)."""
    layers = [layer_params(spec, i) for i in range(spec.num_layers)]
    embedding, head = embedding_params(spec), head_params(spec)
    final_norm = norm_params(spec, spec.hidden_size)
    layers_total = sum(layer.total for layer in layers)
    outer = embedding + head + final_norm
    mtp = mtp_module_params(spec) if spec.num_mtp_layers else None
    return ParameterCount(
        total=layers_total + outer,
        activated=sum(layer.activated for layer in layers) + outer,
        embedding=embedding, head=head, final_norm=final_norm, layers_total=layers_total,
        routed_experts_total=sum(layer.routed_experts for layer in layers),
        mtp_total=spec.num_mtp_layers * mtp.total if mtp else 0,
        mtp_activated=spec.num_mtp_layers * mtp.activated if mtp else 0,
    )


__all__ = [
    "LayerParams",
    "ParameterCount",
    "attention_params",
    "count_parameters",
    "embedding_params",
    "head_params",
    "largest_weight_matrix",
    "layer_attention_params",
    "layer_params",
    "mlp_params",
    "mtp_module_params",
    "norm_params",
]
