"""LLM architecture descriptions (the "arch" meaning of model).

Owns: the shape of a decoder-only transformer as the cost model needs it: attention kind and
dimensions (MHA, GQA, MLA), MLP kind (2-matrix GELU, 3-matrix SwiGLU), norms, biases,
embeddings, and the mixture-of-experts block (routed and shared experts, leading dense
layers, layer frequency, multi-token prediction). Must not: count parameters or FLOPs (that
is `models/core/params.py`, `models/core/flops.py`).
"""

from enum import StrEnum
from typing import Any, Self

from pydantic import Field, model_validator

from api_schemas._base import MAX_NAME_LENGTH, SpecModel
from api_schemas.units import NonNegativeInt, PositiveInt


class AttentionKind(StrEnum):
    """Attention variants with different projection shapes."""

    MHA = "mha"
    GQA = "gqa"
    MLA = "mla"


class MlpKind(StrEnum):
    """Feed-forward variants."""

    GELU = "gelu"
    """Two matrices: up (h x f) and down (f x h), elementwise GELU between."""
    SWIGLU = "swiglu"
    """Three matrices: gate and up (h x f each) and down (f x h). Any gated MLP has this
    shape, whatever the gate's activation (SiLU in Llama, tanh-GELU in Gemma's GeGLU)."""


class NormKind(StrEnum):
    """Normalisation layers."""

    LAYERNORM = "layernorm"
    """Scale and bias: 2h parameters."""
    RMSNORM = "rmsnorm"
    """Scale only: h parameters."""
    LAYERNORM_NO_AFFINE = "layernorm_no_affine"
    """LayerNorm without scale or bias (OLMo 1): no parameters."""


class RouterScoreFunction(StrEnum):
    """How a mixture-of-experts router turns its logits into expert scores."""

    SOFTMAX = "softmax"
    """Softmax over the experts (Mixtral, Qwen-MoE, OLMoE, GPT-OSS, DeepSeek-V2)."""
    SIGMOID = "sigmoid"
    """An independent sigmoid per expert (DeepSeek-V3 and Kimi K2 'scoring_func', Kimi
    Linear 'moe_router_activation_func', Llama 4's router)."""


class MLASpec(SpecModel):
    """Multi-head latent attention dimensions (DeepSeek-V2/V3, Kimi K2)."""

    q_lora_rank: PositiveInt | None = Field(
        default=None,
        description="Query compression rank d'_c; null means a full-rank query projection.",
        examples=[1536],
    )
    kv_lora_rank: PositiveInt = Field(description="KV compression rank d_c.", examples=[512])
    qk_nope_head_dim: PositiveInt = Field(
        description="Per-head query/key dimension without RoPE.", examples=[128]
    )
    qk_rope_head_dim: PositiveInt = Field(
        description="Decoupled RoPE dimension d_h^R (shared key part).", examples=[64]
    )
    v_head_dim: PositiveInt = Field(description="Per-head value dimension.", examples=[128])


class LinearAttentionKind(StrEnum):
    """Linear-attention (recurrent-state) token mixers."""

    KDA = "kda"
    """Kimi Delta Attention (Kimi Linear, arXiv:2510.26692 Sec. 3): the gated delta rule with
    a per-channel decay, short convolutions on q/k/v, a low-rank decay gate and a low-rank
    output gate."""
    GATED_DELTA = "gated_delta"
    """Gated DeltaNet (arXiv:2412.06464): the delta rule with one scalar decay per head."""


class LinearAttentionSpec(SpecModel):
    """The linear-attention layers of a hybrid model (Kimi Linear: 3 KDA to 1 MLA) and their
    dimensions. The other layers keep the model's full attention (`attention`)."""

    kind: LinearAttentionKind = Field(default=LinearAttentionKind.KDA,
                                      description="'kda' or 'gated_delta'.")
    num_heads: PositiveInt = Field(description="Recurrent heads H.", examples=[32])
    head_dim: PositiveInt = Field(description="Key (and query) width per head d_k.",
                                  examples=[128])
    value_head_dim: PositiveInt | None = Field(
        default=None, description="Value width per head d_v; null = head_dim.")
    short_conv_kernel_size: NonNegativeInt = Field(
        default=4, description="Taps of the depthwise causal convolutions on q, k and v "
        "(0 = none).", examples=[4])
    chunk_size: PositiveInt = Field(
        default=64, description="Tokens per chunk of the chunkwise-parallel kernel (the "
        "flash-linear-attention KDA kernel: 64).", examples=[64])
    layers: tuple[NonNegativeInt, ...] = Field(
        description="0-based layers that use linear attention (Hugging Face Kimi Linear "
        "'linear_attn_config.kda_layers' are 1-based).", examples=[[0, 1, 2, 4]])

    @property
    def dim_v(self) -> int:
        """Value width per head."""
        return self.value_head_dim or self.head_dim


class MoESpec(SpecModel):
    """The mixture-of-experts block and which layers carry it."""

    num_experts: PositiveInt = Field(description="Routed experts per MoE layer (E).",
                                     examples=[256])
    top_k: PositiveInt = Field(description="Routed experts chosen per token (K).", examples=[8])
    expert_ffn_hidden_size: PositiveInt = Field(
        description="Intermediate width of one routed expert.", examples=[2048]
    )
    num_shared_experts: NonNegativeInt = Field(
        default=0, description="Always-active shared experts.", examples=[1]
    )
    shared_expert_ffn_hidden_size: NonNegativeInt = Field(
        default=0,
        description="Total intermediate width of all shared experts together (DeepSeek: "
        "n_shared x moe_intermediate_size; Qwen2-MoE: shared_expert_intermediate_size).",
        examples=[2048],
    )
    shared_expert_gate: bool = Field(
        default=False, description="A 1-unit sigmoid gate on the shared expert (Qwen2-MoE)."
    )
    router_bias: bool = Field(
        default=False,
        description="A per-expert routing bias (DeepSeek-V3 'noaux_tc' correction bias).",
    )
    router_score_function: RouterScoreFunction = Field(
        default=RouterScoreFunction.SOFTMAX,
        description="How the router scores experts: 'softmax' or 'sigmoid'. Left out, it is "
        "'sigmoid' when router_bias is true (every bias-routed model: DeepSeek-V3, Kimi K2, "
        "Kimi Linear), else 'softmax'.",
        examples=["sigmoid"],
    )
    router_topk_renormalized: bool = Field(
        default=True,
        description="Whether the chosen experts' softmax weights are renormalised to sum to "
        "one (Hugging Face 'norm_topk_prob'; true for Mixtral, Qwen3-MoE, GPT-OSS, false for "
        "Qwen2-MoE, OLMoE and DeepSeek-V2, whose weights are the softmax over every expert). "
        "Affects the exports only.",
    )
    first_dense_layers: NonNegativeInt = Field(
        default=0, description="Leading layers with a dense MLP instead of MoE.", examples=[3]
    )
    layer_freq: PositiveInt = Field(
        default=1, description="Every layer_freq-th layer after the dense ones is MoE."
    )
    dense_layer_indices: tuple[NonNegativeInt, ...] = Field(
        default=(), description="Further layers forced dense (Qwen3 'mlp_only_layers')."
    )
    num_expert_groups: PositiveInt = Field(
        default=1, description="Expert groups for group-limited routing (DeepSeek n_group)."
    )
    topk_groups: PositiveInt = Field(
        default=1, description="Groups a token may route to (DeepSeek topk_group)."
    )
    capacity_factor: float | None = Field(
        default=None,
        gt=0.0,
        description="Expert capacity factor; null = dropless (tokens are neither padded nor "
        "dropped).",
    )

    @model_validator(mode="before")
    @classmethod
    def _bias_routes_by_sigmoid(cls, data: Any) -> Any:
        """A router bias without a stated score function means sigmoid scores."""
        if isinstance(data, dict) and data.get("router_bias") is True \
                and "router_score_function" not in data:
            return {**data, "router_score_function": RouterScoreFunction.SIGMOID}
        return data

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.top_k > self.num_experts:
            raise ValueError(
                f"moe.top_k={self.top_k} exceeds moe.num_experts={self.num_experts}; "
                "a token cannot pick more experts than exist: lower top_k"
            )
        if self.num_shared_experts > 0 and self.shared_expert_ffn_hidden_size == 0:
            raise ValueError(
                f"moe.num_shared_experts={self.num_shared_experts} but "
                "moe.shared_expert_ffn_hidden_size=0: give the shared experts' total width"
            )
        if self.num_experts % self.num_expert_groups:
            raise ValueError(
                f"moe.num_experts={self.num_experts} is not divisible by "
                f"moe.num_expert_groups={self.num_expert_groups}: pick a divisor"
            )
        return self


class ModelSpec(SpecModel):
    """A decoder-only transformer LLM."""

    name: str = Field(default="custom", max_length=MAX_NAME_LENGTH,
                      description="Display name (at most 200 characters).",
                      examples=["llama-3.1-70b"])
    num_layers: PositiveInt = Field(
        description="Transformer layers, excluding multi-token-prediction layers.", examples=[80]
    )
    hidden_size: PositiveInt = Field(description="Model width h.", examples=[8192])
    num_attention_heads: PositiveInt = Field(description="Query heads a.", examples=[64])
    num_kv_heads: PositiveInt | None = Field(
        default=None, description="Key/value heads (GQA); null = num_attention_heads.", examples=[8]
    )
    head_dim: PositiveInt | None = Field(
        default=None, description="Per-head dim; null = hidden_size / num_attention_heads."
    )
    attention: AttentionKind = Field(
        default=AttentionKind.MHA, description="'mha', 'gqa' or 'mla'."
    )
    mla: MLASpec | None = Field(default=None, description="MLA dimensions when attention='mla'.")
    ffn_hidden_size: PositiveInt = Field(
        description="Intermediate width of the dense MLP.", examples=[28672]
    )
    mlp: MlpKind = Field(
        default=MlpKind.SWIGLU,
        description="'gelu' (2 matrices) or 'swiglu' (3: any gated MLP, SiLU- or GELU-gated).",
    )
    norm: NormKind = Field(default=NormKind.RMSNORM, description="'rmsnorm', 'layernorm' or "
                           "'layernorm_no_affine' (no parameters, OLMo 1).")
    num_layer_norms: PositiveInt = Field(
        default=2,
        description="Hidden-width norms per transformer layer: 2 for pre-attention and pre-MLP "
        "(Llama), 4 when post-norms are added (Gemma 2/3), 1 for a shared norm with a parallel "
        "residual (Command-R).",
        examples=[2],
    )
    qk_norm: bool = Field(default=False, description="Per-head RMSNorm on q and k (Qwen3, OLMoE).")
    attention_bias: bool = Field(default=False, description="Bias on the q, k, v projections.")
    linear_bias: bool = Field(
        default=False, description="Bias on every linear layer (GPT-2, GPT-NeoX)."
    )
    vocab_size: PositiveInt = Field(description="Vocabulary size V.", examples=[128256])
    tie_word_embeddings: bool = Field(
        default=False, description="Output head shares the input embedding matrix."
    )
    learned_position_embeddings: NonNegativeInt = Field(
        default=0, description="Rows of a learned position table (GPT-2: n_positions); 0 = RoPE."
    )
    max_position_embeddings: PositiveInt | None = Field(
        default=None, description="Longest context the checkpoint was trained for."
    )
    parallel_residual: bool = Field(
        default=False, description="Attention and MLP read the same input (GPT-NeoX, GPT-J)."
    )
    sliding_window: PositiveInt | None = Field(
        default=None,
        description="Keys each query attends to in a sliding-window attention layer, itself "
        "included (GPT-OSS: 128; Hugging Face 'sliding_window'); null = full causal attention "
        "in every layer.", examples=[128])
    sliding_window_layers: tuple[NonNegativeInt, ...] | None = Field(
        default=None,
        description="0-based layers that attend through the sliding window (Hugging Face "
        "'layer_types' entries 'sliding_attention'; GPT-OSS: the even layers); null with "
        "sliding_window set = every layer.", examples=[[0, 2, 4]])
    attention_chunk_size: PositiveInt | None = Field(
        default=None,
        description="Chunked attention: a query attends only to the keys of its own block of "
        "this many tokens (causally), as if the sequence were cut into independent sequences "
        "of this length (Llama 4: 8192 on its RoPE layers; Hugging Face "
        "'attention_chunk_size'); null = no chunking.", examples=[8192])
    chunked_attention_layers: tuple[NonNegativeInt, ...] | None = Field(
        default=None,
        description="0-based layers that attend in chunks (Llama 4: every layer but each "
        "fourth, the NoPE layers, which attend globally; Hugging Face 'no_rope_layers' "
        "entries 1); null with attention_chunk_size set = every layer.",
        examples=[[0, 1, 2, 4]])
    attention_sinks: bool = Field(
        default=False,
        description="A learnable per-head offset in the attention softmax denominator "
        "(GPT-OSS 'sinks'): no FlashAttention kernel takes it in Transformer Engine 2.8-2.14 "
        "(cuDNN's fused kernel from 9.13.1 does), and under context parallelism only the "
        "all-to-all (Ulysses) split runs it there.")
    moe: MoESpec | None = Field(default=None, description="Mixture-of-experts block, if any.")
    linear_attention: LinearAttentionSpec | None = Field(
        default=None, description="Linear-attention (KDA / gated delta rule) layers of a hybrid "
        "model; null = every layer uses `attention`.")
    num_mtp_layers: NonNegativeInt = Field(
        default=0, description="Multi-token-prediction modules (DeepSeek-V3: 1)."
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        heads, kv = self.num_attention_heads, self.kv_heads
        if heads % kv:
            raise ValueError(
                f"num_attention_heads={heads} is not a multiple of num_kv_heads={kv}: "
                "each KV head must serve a whole group of query heads"
            )
        if self.attention == AttentionKind.MLA and self.mla is None:
            raise ValueError("attention='mla' needs the 'mla' dimensions (kv_lora_rank, ...)")
        if self.attention != AttentionKind.MLA and self.mla is not None:
            raise ValueError(f"'mla' dimensions given but attention='{self.attention}': set "
                             "attention='mla' or drop 'mla'")
        self._check_layer_list("sliding_window_layers", self.sliding_window_layers,
                               needs=("sliding_window", self.sliding_window))
        self._check_layer_list("chunked_attention_layers", self.chunked_attention_layers,
                               needs=("attention_chunk_size", self.attention_chunk_size))
        if self.linear_attention is not None:
            self._check_layer_list("linear_attention.layers", self.linear_attention.layers)
        if self.head_dim is None and self.hidden_size % heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={heads}"
                "; give head_dim explicitly"
            )
        return self

    def _check_layer_list(self, field: str, layers: tuple[int, ...] | None, *,
                          needs: tuple[str, int | None] | None = None) -> None:
        """Refuse a list of 0-based layers (`field`) given without the setting it applies
        (`needs`: that field's name and value) or naming a layer beyond `num_layers`."""
        if layers is None:
            return
        if needs is not None and needs[1] is None:
            raise ValueError(f"{field} given without {needs[0]}")
        if any(i >= self.num_layers for i in layers):
            raise ValueError(f"{field} name a layer beyond num_layers={self.num_layers} "
                             "(0-based)")

    @property
    def kv_heads(self) -> int:
        """Number of key/value heads."""
        return self.num_kv_heads or self.num_attention_heads

    @property
    def dim_per_head(self) -> int:
        """Per-head dimension of q/k/v for MHA/GQA."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def attention_window(self, layer_index: int) -> int | None:
        """Keys a query of layer `layer_index` (0-based) may see; None = the whole causal
        prefix."""
        if self.sliding_window is None:
            return None
        if self.sliding_window_layers is None or layer_index in self.sliding_window_layers:
            return self.sliding_window
        return None

    def attention_chunk(self, layer_index: int) -> int | None:
        """Tokens of the block a query of layer `layer_index` (0-based) attends within;
        None = no chunking."""
        if self.attention_chunk_size is None:
            return None
        if (self.chunked_attention_layers is None
                or layer_index in self.chunked_attention_layers):
            return self.attention_chunk_size
        return None

    def is_linear_attention_layer(self, layer_index: int) -> bool:
        """True when the layer mixes tokens with linear attention (0-based layer index)."""
        linear = self.linear_attention
        return linear is not None and layer_index in linear.layers

    def is_moe_layer(self, layer_index: int) -> bool:
        """True when the layer's MLP is the MoE block (0-based layer index)."""
        moe = self.moe
        if moe is None or layer_index < moe.first_dense_layers:
            return False
        if layer_index in moe.dense_layer_indices:
            return False
        return (layer_index - moe.first_dense_layers) % moe.layer_freq == 0

    @property
    def num_moe_layers(self) -> int:
        """Number of transformer layers carrying the MoE block (MTP layers excluded)."""
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))


__all__ = ["AttentionKind", "LinearAttentionKind", "LinearAttentionSpec", "MLASpec", "MlpKind",
           "MoESpec", "ModelSpec", "NormKind", "RouterScoreFunction"]
