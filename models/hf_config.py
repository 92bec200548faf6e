"""Hugging Face `config.json` ingestion: a raw config dict to a `ModelSpec`.

Owns: the field vocabularies of the Llama, Mistral, Qwen2/3 (dense and MoE), Mixtral, OLMoE,
DeepSeek-V2/V3, Kimi K2, GPT-2 and GPT-NeoX families, their aliases, and the defaults each
family's modelling code applies when a key is absent. An unknown `model_type` is read with
the generic Llama vocabulary and every assumption made is reported in `notes`; a missing
required field is an error naming it. Must not: count parameters or guess silently.
"""

from dataclasses import dataclass
from typing import Any

from api_schemas.architecture import (
    AttentionKind,
    MLASpec,
    MlpKind,
    ModelSpec,
    MoESpec,
    NormKind,
)
from models.errors import InvalidSpecError

LLAMA_LIKE = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma", "olmo", "olmo2"})
MIXTRAL_LIKE = frozenset({"mixtral"})
OLMOE_LIKE = frozenset({"olmoe"})
QWEN_MOE = frozenset({"qwen2_moe", "qwen3_moe"})
DEEPSEEK_LIKE = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2"})
GPT2_LIKE = frozenset({"gpt2"})
NEOX_LIKE = frozenset({"gpt_neox"})
KNOWN_MODEL_TYPES = (
    LLAMA_LIKE | MIXTRAL_LIKE | OLMOE_LIKE | QWEN_MOE | DEEPSEEK_LIKE | GPT2_LIKE | NEOX_LIKE
)

_GELU_ACTIVATIONS = frozenset({"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "relu"})


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestedModel:
    """The spec read from a config and the assumptions made while reading it."""

    spec: ModelSpec
    model_type: str
    notes: tuple[str, ...]


class _Reader:
    """Reads fields by alias and records which required ones are missing."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.missing: list[str] = []

    def get(self, *names: str, default: Any = None) -> Any:
        for name in names:
            if name in self.config and self.config[name] is not None:
                return self.config[name]
        return default

    def need(self, *names: str) -> Any:
        value = self.get(*names)
        if value is None:
            self.missing.append(" or ".join(f"'{n}'" for n in names))
        return value


def spec_from_hf_config(config: dict[str, Any], *, name: str | None = None) -> IngestedModel:
    """Read a Hugging Face `config.json` dict into a `ModelSpec`.

    Args:
        config: the parsed `config.json`.
        name: display name; defaults to `_name_or_path` or the model type.

    Returns:
        The spec, the model type, and notes naming every default or assumption applied.

    Raises:
        InvalidSpecError: when required fields are missing (all are named) or inconsistent.
    """
    if not isinstance(config, dict):
        raise InvalidSpecError("the Hugging Face config must be a JSON object", field="config")
    reader = _Reader(config)
    model_type = str(reader.get("model_type", default="")).lower()
    notes: list[str] = []
    if model_type not in KNOWN_MODEL_TYPES:
        notes.append(
            f"model_type '{model_type or '(absent)'}' is not a known family; read with the "
            "generic Llama vocabulary (SwiGLU MLP, RMSNorm, RoPE, untied unless "
            "tie_word_embeddings says otherwise)"
        )
    fields = _common_fields(reader, model_type, notes)
    try:
        moe = _moe_fields(reader, model_type, notes)
        mla = _mla_fields(reader, model_type)
    except (ValueError, TypeError) as exc:
        raise InvalidSpecError(f"inconsistent MoE or MLA fields in config: {exc}",
                               field="config") from exc
    if reader.missing:
        raise InvalidSpecError(
            f"cannot read a {model_type or 'transformer'} architecture from this config: missing "
            f"{', '.join(reader.missing)}; add these fields (see the family's config.json)",
            field="config",
        )
    if mla is not None:
        fields["attention"] = AttentionKind.MLA
        fields["mla"] = mla
    fields["moe"] = moe
    display = name or str(config.get("_name_or_path") or model_type or "custom")
    try:
        spec = ModelSpec(name=display, **fields)
    except ValueError as exc:
        raise InvalidSpecError(f"inconsistent config: {exc}", field="config") from exc
    return IngestedModel(spec=spec, model_type=model_type, notes=tuple(notes))


def _common_fields(reader: _Reader, model_type: str, notes: list[str]) -> dict[str, Any]:
    if model_type in GPT2_LIKE:
        hidden = reader.need("n_embd", "hidden_size")
        act = str(reader.get("activation_function", default="gelu_new"))
        return {
            "num_layers": reader.need("n_layer", "num_hidden_layers"),
            "hidden_size": hidden,
            "num_attention_heads": reader.need("n_head", "num_attention_heads"),
            "ffn_hidden_size": reader.get("n_inner") or (4 * hidden if hidden else None),
            "mlp": MlpKind.GELU if act in _GELU_ACTIVATIONS else MlpKind.SWIGLU,
            "norm": NormKind.LAYERNORM, "linear_bias": True,
            "vocab_size": reader.need("vocab_size"),
            "tie_word_embeddings": bool(reader.get("tie_word_embeddings", default=True)),
            "learned_position_embeddings": reader.need("n_positions", "max_position_embeddings"),
            "max_position_embeddings": reader.get("n_positions", "n_ctx"),
        }
    act = str(reader.get("hidden_act", "activation_function", default="silu"))
    heads = reader.need("num_attention_heads", "n_head", "num_heads")
    common: dict[str, Any] = {
        "num_layers": reader.need("num_hidden_layers", "n_layer", "num_layers"),
        "hidden_size": reader.need("hidden_size", "n_embd", "d_model"),
        "num_attention_heads": heads,
        "num_kv_heads": reader.get("num_key_value_heads", "num_kv_heads", default=heads),
        "head_dim": reader.get("head_dim"),
        "vocab_size": reader.need("vocab_size"),
        "tie_word_embeddings": bool(reader.get("tie_word_embeddings", default=False)),
        "max_position_embeddings": reader.get("max_position_embeddings"),
        "mlp": MlpKind.GELU if act in _GELU_ACTIVATIONS else MlpKind.SWIGLU,
    }
    if model_type in NEOX_LIKE:
        common.update(norm=NormKind.LAYERNORM, linear_bias=True,
                      parallel_residual=bool(reader.get("use_parallel_residual", default=True)))
    else:
        common["norm"] = NormKind.RMSNORM
        bias_default = model_type in ("qwen2", "qwen2_moe")
        common["attention_bias"] = bool(reader.get("attention_bias", "qkv_bias",
                                                   default=bias_default))
        if model_type in ("qwen2", "qwen2_moe") and "attention_bias" not in reader.config:
            notes.append("Qwen2 family: q/k/v projections carry a bias (modelling code default)")
    if model_type in ("qwen3", "qwen3_moe", "olmoe", "olmo2"):
        common["qk_norm"] = True
    if model_type in DEEPSEEK_LIKE:
        # MLA: num_key_value_heads equals the head count and does not size a KV cache.
        common["num_kv_heads"] = common["num_attention_heads"]
        common["num_mtp_layers"] = int(reader.get("num_nextn_predict_layers", default=0) or 0)
    kv, heads_n = common["num_kv_heads"], common["num_attention_heads"]
    if kv is not None and heads_n is not None and kv < heads_n:
        common["attention"] = AttentionKind.GQA
    # MoE families whose 'intermediate_size' is the per-expert width have no dense MLP.
    if model_type in MIXTRAL_LIKE | OLMOE_LIKE:
        common["ffn_hidden_size"] = reader.need("intermediate_size")
    else:
        common["ffn_hidden_size"] = reader.need("intermediate_size", "ffn_hidden_size", "n_inner")
    return common


def _moe_fields(reader: _Reader, model_type: str, notes: list[str]) -> MoESpec | None:
    num_experts = reader.get("n_routed_experts", "num_experts", "num_local_experts")
    if not num_experts:
        return None
    top_k = reader.need("num_experts_per_tok", "moe_top_k", "top_k")
    if model_type in MIXTRAL_LIKE | OLMOE_LIKE:
        expert_width = reader.need("intermediate_size")
    else:
        expert_width = reader.need("moe_intermediate_size")
    shared_count = int(reader.get("n_shared_experts", default=0) or 0)
    shared_width = 0
    shared_gate = False
    if model_type in QWEN_MOE:
        shared_width = int(reader.get("shared_expert_intermediate_size", default=0) or 0)
        shared_count = 1 if shared_width else 0
        shared_gate = shared_width > 0
    elif shared_count and expert_width:
        shared_width = shared_count * int(expert_width)
    first_dense = int(reader.get("first_k_dense_replace", default=0) or 0)
    freq = int(reader.get("moe_layer_freq", "decoder_sparse_step", default=1) or 1)
    dense_indices = tuple(int(i) for i in reader.get("mlp_only_layers", default=[]) or [])
    if model_type in QWEN_MOE and freq > 1:
        # Qwen: layer i is sparse when (i + 1) % step == 0; express it as explicit dense layers.
        layers = int(reader.get("num_hidden_layers", default=0) or 0)
        dense_indices += tuple(i for i in range(layers) if (i + 1) % freq)
        freq = 1
        notes.append("decoder_sparse_step > 1 converted to explicit dense layer indices")
    if top_k is None or expert_width is None:
        return None  # named in reader.missing, reported by the caller
    return MoESpec(
        num_experts=int(num_experts), top_k=int(top_k), expert_ffn_hidden_size=int(expert_width),
        num_shared_experts=shared_count, shared_expert_ffn_hidden_size=shared_width,
        shared_expert_gate=shared_gate,
        router_bias=str(reader.get("topk_method", default="")) == "noaux_tc",
        first_dense_layers=first_dense, layer_freq=freq,
        dense_layer_indices=tuple(sorted(set(dense_indices))),
        num_expert_groups=int(_or_default(reader.get("n_group"), 1)),
        topk_groups=int(_or_default(reader.get("topk_group"), 1)),
    )


def _or_default(value: object, default: int) -> Any:
    """`value` unless the config leaves it out (absent or null); zero is kept, to be
    rejected by the schema rather than silently replaced (the caller converts it, and a
    value of the wrong kind fails there)."""
    return default if value is None else value


def _mla_fields(reader: _Reader, model_type: str) -> MLASpec | None:
    if model_type not in DEEPSEEK_LIKE and reader.get("kv_lora_rank") is None:
        return None
    if reader.need("kv_lora_rank") is None:
        return None
    return MLASpec(
        q_lora_rank=reader.get("q_lora_rank"),
        kv_lora_rank=reader.need("kv_lora_rank"),
        qk_nope_head_dim=reader.need("qk_nope_head_dim"),
        qk_rope_head_dim=reader.need("qk_rope_head_dim"),
        v_head_dim=reader.need("v_head_dim"),
    )


__all__ = ["KNOWN_MODEL_TYPES", "IngestedModel", "spec_from_hf_config"]
