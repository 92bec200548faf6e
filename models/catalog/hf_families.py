"""The decoder families a Hugging Face `config.json` can name, and how each one differs.

Owns: which `model_type` values are known, how they group (shared vocabularies, gated-GELU
MLPs, post-norms, tied embeddings, where the expert width sits, multimodal wrappers), and the
defaults each family's configuration class applies to keys a checkpoint leaves out. Must
not: read configs or count parameters (`models/catalog/hf_config.py`, `models/core/params.py` do).

Source: the configuration and modelling classes of Hugging Face transformers for each
family (`GemmaConfig`, `Gemma2Config`, `Gemma3TextConfig`, `Llama4TextConfig`,
`CohereConfig`, `GptOssConfig`, ...): defaults are their constructor defaults; layer shapes
are their modules (e.g. `Gemma2DecoderLayer` holds four RMSNorms, `CohereDecoderLayer` one
shared LayerNorm with a parallel residual, `Llama4TextMoe` a shared expert of the routed
experts' width).
"""

from typing import Any

LLAMA_LIKE = frozenset({"llama", "mistral", "qwen2", "qwen3", "olmo", "olmo2", "phi3",
                        "granite"})
"""Llama vocabulary: SwiGLU, RMSNorm, RoPE, two pre-norms per layer."""
GEMMA_LIKE = frozenset({"gemma", "gemma2", "gemma3_text"})
LLAMA4_LIKE = frozenset({"llama4_text"})
MIXTRAL_LIKE = frozenset({"mixtral"})
OLMOE_LIKE = frozenset({"olmoe"})
GPT_OSS_LIKE = frozenset({"gpt_oss"})
QWEN_MOE = frozenset({"qwen2_moe", "qwen3_moe"})
DEEPSEEK_LIKE = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_linear"})
"""MLA with DeepSeek-V3-style MoE. Kimi Linear (`KimiLinearConfig`) shares the MLA and MoE
fields under its own names (num_experts_per_token, num_shared_experts, num_expert_group)
and adds `linear_attn_config` (its KDA layers, `LINEAR_ATTENTION_FAMILIES`)."""
LINEAR_ATTENTION_FAMILIES = frozenset({"kimi_linear"})
"""Families with linear-attention (KDA) layers listed in `linear_attn_config`: 'kda_layers'
and 'full_attn_layers' are 1-based (Kimi Linear 48B: full attention at 4, 8, ..., 24, 27)."""
COHERE_LIKE = frozenset({"cohere"})
GPT2_LIKE = frozenset({"gpt2"})
NEOX_LIKE = frozenset({"gpt_neox"})
NONPARAMETRIC_NORM = frozenset({"olmo"})
"""OLMo 1: LayerNorm without scale or bias (`OlmoLayerNorm`), so its norms hold no weights."""

NESTED_TEXT_TYPES: dict[str, str] = {"llama4": "llama4_text", "gemma3": "gemma3_text"}
"""Multimodal wrappers and the model type of the language model in their `text_config`
(used when the nested config omits its own `model_type`)."""

KNOWN_MODEL_TYPES = (
    LLAMA_LIKE | GEMMA_LIKE | LLAMA4_LIKE | MIXTRAL_LIKE | OLMOE_LIKE | GPT_OSS_LIKE
    | QWEN_MOE | DEEPSEEK_LIKE | COHERE_LIKE | GPT2_LIKE | NEOX_LIKE
)

GATED_GELU = GEMMA_LIKE
"""Gemma's MLP is gated (gate_proj, up_proj, down_proj) although its activation is a GELU."""
POST_NORM_LAYERS = frozenset({"gemma2", "gemma3_text"})
"""Layers with pre- and post-norms around both attention and MLP (four norms)."""
QK_NORM_FAMILIES = frozenset({"qwen3", "qwen3_moe", "olmoe", "olmo2", "gemma3_text"})
"""Families with learned q/k norms (Llama 4's use_qk_norm is weight-free, not here)."""
TIED_BY_DEFAULT = GEMMA_LIKE | COHERE_LIKE
"""Families whose configuration class defaults `tie_word_embeddings` to true."""
EXPERT_WIDTH_IS_INTERMEDIATE = MIXTRAL_LIKE | OLMOE_LIKE | GPT_OSS_LIKE
"""MoE families whose `intermediate_size` is the per-expert width, with no dense MLP."""

FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    # Gemma3TextConfig: released multimodal checkpoints omit these from text_config.
    "gemma3_text": {"vocab_size": 262_208, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "head_dim": 256, "max_position_embeddings": 131_072},
    # Llama4TextConfig defaults (Scout/Maverick shapes).
    "llama4_text": {"intermediate_size_mlp": 16_384, "head_dim": 128,
                    "interleave_moe_layer_step": 1},
}
"""Constructor defaults of each family's configuration class for keys checkpoints omit."""


__all__ = [
    "COHERE_LIKE",
    "DEEPSEEK_LIKE",
    "EXPERT_WIDTH_IS_INTERMEDIATE",
    "FAMILY_DEFAULTS",
    "GATED_GELU",
    "GEMMA_LIKE",
    "GPT2_LIKE",
    "GPT_OSS_LIKE",
    "KNOWN_MODEL_TYPES",
    "LLAMA4_LIKE",
    "LINEAR_ATTENTION_FAMILIES",
    "LLAMA_LIKE",
    "MIXTRAL_LIKE",
    "NEOX_LIKE",
    "NESTED_TEXT_TYPES",
    "NONPARAMETRIC_NORM",
    "OLMOE_LIKE",
    "POST_NORM_LAYERS",
    "QK_NORM_FAMILIES",
    "QWEN_MOE",
    "TIED_BY_DEFAULT",
]
