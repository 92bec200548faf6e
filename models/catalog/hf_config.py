"""Hugging Face `config.json` ingestion: a raw config dict to a `ModelSpec`.

Owns: the field vocabularies of the decoder families on the Hub (Llama, Llama 4, Mistral,
Mixtral, Phi-3, Qwen2/2.5/3 dense and MoE, Gemma 1/2/3, DeepSeek-V2/V3, Kimi K2, GPT-OSS,
OLMo/OLMo 2/OLMoE, Command-R, Granite, GPT-2, GPT-NeoX), their aliases, the defaults each
family's modelling code applies when a key is absent, and where multimodal checkpoints
nest their language model (`text_config`). An unknown `model_type` is read with the generic
Llama vocabulary when every field it needs is there, with the assumption in `notes`;
otherwise it is refused, naming each missing field and where it would sit. Every default
applied is reported in `notes`. Must not: count parameters or guess silently.
"""

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from api_schemas import architecture as arch
from models.catalog.hf_families import (
    COHERE_LIKE,
    DEEPSEEK_LIKE,
    EXPERT_WIDTH_IS_INTERMEDIATE,
    FAMILY_DEFAULTS,
    GATED_GELU,
    GPT2_LIKE,
    KNOWN_MODEL_TYPES,
    LINEAR_ATTENTION_FAMILIES,
    LLAMA4_LIKE,
    NEOX_LIKE,
    NESTED_TEXT_TYPES,
    NONPARAMETRIC_NORM,
    POST_NORM_LAYERS,
    QK_NORM_FAMILIES,
    QWEN_MOE,
    TIED_BY_DEFAULT,
)
from models.catalog.vision import COUNTED_TOWERS
from models.errors import InvalidSpecError

_GELU_ACTIVATIONS = frozenset({"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "relu"})


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestedModel:
    """The spec read from a config and the assumptions made while reading it."""

    spec: arch.ModelSpec
    model_type: str
    notes: tuple[str, ...]


class _Reader:
    """Reads fields by alias, applies family defaults, and records missing required ones.

    `location` is where the fields sit ('' for the top level, 'text_config.' for the
    language model of a multimodal checkpoint), so a missing field is named by its path.
    """

    def __init__(self, config: dict[str, Any], *, location: str,
                 defaults: dict[str, Any], notes: list[str]) -> None:
        self.config = config
        self.location = location
        self.defaults = defaults
        self.notes = notes
        self.missing: list[str] = []

    def get(self, *names: str, default: Any = None) -> Any:
        for name in names:
            if name in self.config and self.config[name] is not None:
                return self.config[name]
        for name in names:
            if name in self.defaults:
                self.notes.append(f"'{self.location}{name}' absent: the family's modelling "
                                  f"code default {self.defaults[name]!r} applied")
                return self.defaults[name]
        return default

    def need(self, *names: str) -> Any:
        value = self.get(*names)
        if value is None:
            self.missing.append(" or ".join(f"'{self.location}{n}'" for n in names))
        return value


def _language_model_part(config: dict[str, Any], notes: list[str]) -> tuple[
        dict[str, Any], str, str]:
    """The dict holding the language model's fields, its location prefix and model type.

    Multimodal checkpoints (Llama 4, Gemma 3, LLaVA-style) nest the decoder under
    `text_config`; the vision tower is not planned, and a note says whether
    `models.catalog.vision` counts its parameters apart.
    """
    outer_type = str(config.get("model_type") or "").lower()
    nested = config.get("text_config")
    if not isinstance(nested, dict):
        return config, "", NESTED_TEXT_TYPES.get(outer_type, outer_type)
    inner_type = str(nested.get("model_type") or NESTED_TEXT_TYPES.get(outer_type, "")).lower()
    merged = dict(nested)
    # The tie flag may sit on the outer config (Llama 4 keeps it there).
    if "tie_word_embeddings" not in merged and "tie_word_embeddings" in config:
        merged["tie_word_embeddings"] = config["tie_word_embeddings"]
    vision = config.get("vision_config")
    tower = str(vision.get("model_type") or "") if isinstance(vision, dict) else ""
    vision_note = (f"the vision tower ('{tower}') and projector are not part of the planned "
                   "model; their parameters are counted apart (num_vision_parameters)"
                   if tower in COUNTED_TOWERS else
                   "the vision tower and projector are not planned and not counted")
    notes.append(f"language model read from 'text_config' (model_type "
                 f"'{inner_type or '(absent)'}'); {vision_note}")
    return merged, "text_config.", inner_type or outer_type


def spec_from_hf_config(config: dict[str, Any], *, name: str | None = None) -> IngestedModel:
    """Read a Hugging Face `config.json` dict into a `ModelSpec`.

    Args:
        config: the parsed `config.json`.
        name: display name; defaults to `_name_or_path` or the model type.

    Returns:
        The spec, the model type, and notes naming every default or assumption applied.

    Raises:
        InvalidSpecError: when required fields are missing (each is named with where it
            sits) or inconsistent.
    """
    if not isinstance(config, dict):
        raise InvalidSpecError("the Hugging Face config must be a JSON object", field="config")
    notes: list[str] = []
    fields_src, location, model_type = _language_model_part(config, notes)
    known = model_type in KNOWN_MODEL_TYPES
    reader = _Reader(fields_src, location=location, notes=notes,
                     defaults=FAMILY_DEFAULTS.get(model_type, {}))
    if not known:
        notes.append(
            f"model_type '{model_type or '(absent)'}' is not a known family; read with the "
            "generic Llama vocabulary (SwiGLU MLP, RMSNorm, RoPE, untied unless "
            "tie_word_embeddings says otherwise)"
        )
    fields = _common_fields(reader, model_type)
    try:
        moe = _moe_fields(reader, model_type)
        mla = _mla_fields(reader, model_type)
        linear = _linear_attention_fields(reader, model_type)
    except (ValueError, TypeError) as exc:
        raise InvalidSpecError(f"inconsistent MoE or MLA fields in config: {exc}",
                               field="config") from exc
    if reader.missing:
        raise InvalidSpecError(_missing_message(reader, model_type, known), field="config")
    if mla is not None:
        fields["attention"] = arch.AttentionKind.MLA
        fields["mla"] = mla
    fields["moe"] = moe
    fields["linear_attention"] = linear
    display = name or str(config.get("_name_or_path") or model_type or "custom")
    try:
        spec = arch.ModelSpec(name=display, **fields)
    except ValidationError as exc:
        # The field errors only: the exception's own text ends in a documentation link that
        # names the installed pydantic version.
        reasons = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}"
                            for e in exc.errors())
        raise InvalidSpecError(f"inconsistent config: {reasons}", field="config") from exc
    except ValueError as exc:
        raise InvalidSpecError(f"inconsistent config: {exc}", field="config") from exc
    return IngestedModel(spec=spec, model_type=model_type, notes=tuple(notes))


def _missing_message(reader: _Reader, model_type: str, known: bool) -> str:
    where = ("under 'text_config' (where this multimodal config keeps its language model)"
             if reader.location else
             "at the top level of config.json (or under 'text_config' for a multimodal "
             "checkpoint)")
    family = (f"the {model_type} family" if known else
              f"unknown model_type '{model_type or '(absent)'}', read with the generic Llama "
              "vocabulary,")
    return (f"cannot read {family}: missing {', '.join(reader.missing)}; add these fields "
            f"{where}. Known families: {', '.join(sorted(KNOWN_MODEL_TYPES))}")


def _gpt2_fields(reader: _Reader) -> dict[str, Any]:
    hidden = reader.need("n_embd", "hidden_size")
    act = str(reader.get("activation_function", default="gelu_new"))
    return {
        "num_layers": reader.need("n_layer", "num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": reader.need("n_head", "num_attention_heads"),
        "ffn_hidden_size": reader.get("n_inner") or (4 * hidden if hidden else None),
        "mlp": arch.MlpKind.GELU if act in _GELU_ACTIVATIONS else arch.MlpKind.SWIGLU,
        "norm": arch.NormKind.LAYERNORM, "linear_bias": True,
        "vocab_size": reader.need("vocab_size"),
        "tie_word_embeddings": bool(reader.get("tie_word_embeddings", default=True)),
        "learned_position_embeddings": reader.need("n_positions", "max_position_embeddings"),
        "max_position_embeddings": reader.get("n_positions", "n_ctx"),
    }


def _mlp_kind(reader: _Reader, model_type: str) -> arch.MlpKind:
    act = str(reader.get("hidden_activation", "hidden_act", "activation_function",
                         default="silu"))
    if model_type in GATED_GELU:
        reader.notes.append(f"{model_type}: gated MLP (GeGLU, activation '{act}'): three "
                            "matrices gate/up/down, counted like SwiGLU")
        return arch.MlpKind.SWIGLU
    return arch.MlpKind.GELU if act in _GELU_ACTIVATIONS else arch.MlpKind.SWIGLU


def _common_fields(reader: _Reader, model_type: str) -> dict[str, Any]:
    if model_type in GPT2_LIKE:
        return _gpt2_fields(reader)
    heads = reader.need("num_attention_heads", "n_head", "num_heads")
    tie_default = model_type in TIED_BY_DEFAULT
    common: dict[str, Any] = {
        "num_layers": reader.need("num_hidden_layers", "n_layer", "num_layers"),
        "hidden_size": reader.need("hidden_size", "n_embd", "d_model"),
        "num_attention_heads": heads,
        "num_kv_heads": reader.get("num_key_value_heads", "num_kv_heads", default=heads),
        "head_dim": reader.get("head_dim"),
        "vocab_size": reader.need("vocab_size"),
        "tie_word_embeddings": bool(reader.get("tie_word_embeddings", default=tie_default)),
        "max_position_embeddings": reader.get("max_position_embeddings"),
        "mlp": _mlp_kind(reader, model_type),
    }
    if model_type in NEOX_LIKE:
        common.update(norm=arch.NormKind.LAYERNORM, linear_bias=True,
                      parallel_residual=bool(reader.get("use_parallel_residual", default=True)))
    else:
        common["norm"] = arch.NormKind.RMSNORM
        if model_type in NONPARAMETRIC_NORM:
            common["norm"] = arch.NormKind.LAYERNORM_NO_AFFINE
            reader.notes.append(f"{model_type}: LayerNorm without scale or bias (no "
                                "parameters)")
        bias_default = model_type in ("qwen2", "qwen2_moe")
        common["attention_bias"] = bool(reader.get("attention_bias", "qkv_bias",
                                                   default=bias_default))
        if model_type in ("qwen2", "qwen2_moe") and "attention_bias" not in reader.config:
            reader.notes.append("Qwen2 family: q/k/v projections carry a bias (modelling code "
                                "default)")
    _family_layout(reader, model_type, common)
    if model_type in DEEPSEEK_LIKE:
        # MLA: num_key_value_heads equals the head count and does not size a KV cache.
        common["num_kv_heads"] = common["num_attention_heads"]
        common["num_mtp_layers"] = int(reader.get("num_nextn_predict_layers", default=0) or 0)
    kv, heads_n = common["num_kv_heads"], common["num_attention_heads"]
    if kv is not None and heads_n is not None and kv < heads_n:
        common["attention"] = arch.AttentionKind.GQA
    common["ffn_hidden_size"] = _dense_ffn_width(reader, model_type)
    return common


def _family_layout(reader: _Reader, model_type: str, common: dict[str, Any]) -> None:
    """Norm count, q/k norms, parallel residual and the notes on what is left uncounted."""
    if model_type in QK_NORM_FAMILIES:
        common["qk_norm"] = True
        if model_type in ("olmoe", "olmo2"):
            reader.notes.append(f"{model_type}: q/k norms span all heads (not per head); "
                                "counted per head, under 0.01% of the total")
    if model_type in POST_NORM_LAYERS:
        common["num_layer_norms"] = 4
        reader.notes.append(f"{model_type}: four norms per layer (pre- and post-attention, "
                            "pre- and post-MLP)")
    if model_type in COHERE_LIKE:
        common.update(parallel_residual=True, num_layer_norms=1)
        if reader.get("use_qk_norm", default=False):
            common["qk_norm"] = True
        reader.notes.append("Command-R: one bias-free LayerNorm feeds attention and MLP in "
                            "parallel (h parameters per layer)")
    if model_type in LLAMA4_LIKE and reader.get("use_qk_norm", default=False):
        reader.notes.append("Llama 4: use_qk_norm is a weight-free L2 norm (no parameters)")
    if model_type == "gpt_oss":
        # transformers' GptOssAttention holds one learnable sink per head in every layer.
        common["attention_sinks"] = True
        reader.notes.append("GPT-OSS: o_proj bias, per-head attention sinks and expert biases "
                            "are not counted (under 0.05% of the total)")
    _sliding_window_layers(reader, model_type, common)
    if model_type in LLAMA4_LIKE:
        _chunked_attention_layers(reader, model_type, common)


LLAMA4_NOPE_EVERY = 4
"""Llama 4's default NoPE interval: absent `no_rope_layers`, layer i uses RoPE unless
(i + 1) % `no_rope_layer_interval` == 0 (transformers `Llama4TextConfig`, default 4)."""


def _chunked_attention_layers(reader: _Reader, model_type: str,
                              common: dict[str, Any]) -> None:
    """Llama 4's chunked attention: its RoPE layers attend within blocks of
    `attention_chunk_size` tokens, its NoPE layers globally (transformers
    `Llama4TextConfig`: `no_rope_layers` entry 1 = a RoPE layer, else every
    `no_rope_layer_interval`-th layer is NoPE; the chunked causal mask on the RoPE
    layers; Llama 4 model card: interleaved attention layers without positional
    embeddings, "iRoPE")."""
    chunk = reader.get("attention_chunk_size")
    num_layers = common.get("num_layers")
    if not chunk or not isinstance(num_layers, int):
        return
    listed = reader.get("no_rope_layers")
    if isinstance(listed, list) and len(listed) >= num_layers:
        chunked = tuple(i for i in range(num_layers) if listed[i])
        source = "'no_rope_layers'"
    else:
        every = int(reader.get("no_rope_layer_interval", default=LLAMA4_NOPE_EVERY)
                    or LLAMA4_NOPE_EVERY)
        chunked = _all_but_every(num_layers, every)
        source = f"one NoPE layer in {every}, global"
    if chunked:
        common["attention_chunk_size"] = int(chunk)
        common["chunked_attention_layers"] = chunked
        reader.notes.append(f"{model_type}: {len(chunked)} of {num_layers} layers attend "
                            f"within chunks of {int(chunk)} tokens ({source})")


def _all_but_every(num_layers: int, every: int) -> tuple[int, ...]:
    """0-based layers but each `every`-th (1-based): the local layers of a pattern that
    attends globally once in `every` layers, the last of each group (Gemma, Llama 4)."""
    return tuple(i for i in range(num_layers) if (i + 1) % every != 0)


GEMMA_WINDOW_EVERY = {"gemma2": 2, "gemma3_text": 6}
"""Gemma's default window pattern: every N-th layer (1-based) attends globally, the others
through the sliding window (transformers `modeling_gemma2.py` Gemma2Attention: layer i is
windowed when i is even; `configuration_gemma3.py` `sliding_window_pattern` default 6 and
`modeling_gemma3.py`: layer i is windowed when (i + 1) % 6 != 0). Gemma 2 tech report
arXiv:2408.00118 Sec. 2 (local and global attention in every other layer); Gemma 3 tech
report arXiv:2503.19786 Sec. 2 (5 local layers for every global one, a local layer first)."""


WINDOW_IN_EVERY_LAYER = frozenset({"mistral", "mixtral", "phi3"})
"""Model types whose modelling code windows every layer whenever the config sets
`sliding_window` (transformers `modeling_mistral.py`, `modeling_mixtral.py`,
`modeling_phi3.py`: the model builds `create_sliding_window_causal_mask` unless
`config.sliding_window` is None, and each attention call passes the window). Phi-3-mini-4k
sets 2047; Mistral 7B v0.1 set 4096 (Jiang et al. 2023, arXiv:2310.06825, Sec. 2); v0.3
and Mixtral 8x7B set null."""


def _sliding_window_layers(reader: _Reader, model_type: str, common: dict[str, Any]) -> None:
    """The window and its layers from `sliding_window` and the per-layer `layer_types`
    ('sliding_attention' / 'full_attention', transformers' `layer_types` config field, which
    GPT-OSS's config lists), or, for Gemma 2 and 3 configs without `layer_types`, from the
    pattern their modelling code derives (`GEMMA_WINDOW_EVERY`, Gemma 3's
    `sliding_window_pattern` where given), or every layer for the model types of
    `WINDOW_IN_EVERY_LAYER`. Otherwise the window is not read: Qwen2 configs carry a
    `sliding_window` that `use_sliding_window` leaves off."""
    window = reader.get("sliding_window")
    layer_types = reader.get("layer_types")
    num_layers = common.get("num_layers")
    sliding: tuple[int, ...] = ()
    source = "'layer_types'"
    if window and isinstance(layer_types, list):
        sliding = tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention")
        num_layers = len(layer_types)
    elif window and model_type in GEMMA_WINDOW_EVERY and isinstance(num_layers, int):
        every = int(reader.get("sliding_window_pattern", default=GEMMA_WINDOW_EVERY[model_type]))
        sliding = _all_but_every(num_layers, every)
        source = f"the {model_type} modelling code's pattern: one layer in {every} global"
    elif window and model_type in WINDOW_IN_EVERY_LAYER and isinstance(num_layers, int):
        sliding = tuple(range(num_layers))
        source = f"the {model_type} modelling code windows every layer"
    if sliding:
        common["sliding_window"] = int(window)
        common["sliding_window_layers"] = sliding
        reader.notes.append(f"{model_type}: {len(sliding)} of {num_layers} layers attend "
                            f"through a sliding window of {int(window)} keys ({source})")


def _dense_ffn_width(reader: _Reader, model_type: str) -> Any:
    if model_type in EXPERT_WIDTH_IS_INTERMEDIATE:
        # 'intermediate_size' is the per-expert width and there is no dense MLP.
        return reader.need("intermediate_size")
    if model_type in LLAMA4_LIKE:
        return reader.need("intermediate_size_mlp")
    return reader.need("intermediate_size", "ffn_hidden_size", "n_inner")


def _moe_fields(reader: _Reader, model_type: str) -> arch.MoESpec | None:
    num_experts = reader.get("n_routed_experts", "num_experts", "num_local_experts")
    if not num_experts:
        return None
    top_k = reader.need("num_experts_per_tok", "num_experts_per_token", "experts_per_token",
                        "moe_top_k", "top_k")
    if model_type in EXPERT_WIDTH_IS_INTERMEDIATE | LLAMA4_LIKE:
        expert_width = reader.need("intermediate_size")
    else:
        expert_width = reader.need("moe_intermediate_size")
    shared_count = int(reader.get("n_shared_experts", "num_shared_experts", default=0) or 0)
    shared_width = 0
    shared_gate = False
    if model_type in QWEN_MOE:
        shared_width = int(reader.get("shared_expert_intermediate_size", default=0) or 0)
        shared_count = 1 if shared_width else 0
        shared_gate = shared_width > 0
    elif model_type in LLAMA4_LIKE:
        # Llama4TextMoe: one always-on shared expert of the routed experts' width.
        shared_count = 1
        shared_width = int(expert_width or 0)
    elif shared_count and expert_width:
        shared_width = shared_count * int(expert_width)
    first_dense = int(reader.get("first_k_dense_replace", default=0) or 0)
    freq = int(reader.get("moe_layer_freq", "decoder_sparse_step", default=1) or 1)
    dense_indices = tuple(int(i) for i in reader.get("mlp_only_layers", default=[]) or [])
    layers = int(reader.get("num_hidden_layers", default=0) or 0)
    if model_type in QWEN_MOE and freq > 1:
        # Qwen: layer i is sparse when (i + 1) % step == 0; express it as explicit dense layers.
        dense_indices += tuple(i for i in range(layers) if (i + 1) % freq)
        freq = 1
        reader.notes.append("decoder_sparse_step > 1 converted to explicit dense layer indices")
    if model_type in LLAMA4_LIKE:
        dense_indices += _llama4_dense_layers(reader, layers)
    if top_k is None or expert_width is None:
        return None  # named in reader.missing, reported by the caller
    return arch.MoESpec(
        num_experts=int(num_experts), top_k=int(top_k), expert_ffn_hidden_size=int(expert_width),
        num_shared_experts=shared_count, shared_expert_ffn_hidden_size=shared_width,
        shared_expert_gate=shared_gate,
        # Kimi Linear's gate always holds the correction bias (`e_score_correction_bias`).
        router_bias=(str(reader.get("topk_method", default="")) == "noaux_tc"
                     or model_type in LINEAR_ATTENTION_FAMILIES),
        router_score_function=_router_score_function(reader, model_type),
        router_topk_renormalized=_router_topk_renormalized(reader, model_type),
        first_dense_layers=first_dense, layer_freq=freq,
        dense_layer_indices=tuple(sorted(set(dense_indices))),
        num_expert_groups=int(_or_default(reader.get("n_group", "num_expert_group"), 1)),
        topk_groups=int(_or_default(reader.get("topk_group"), 1)),
    )


def _router_score_function(reader: _Reader, model_type: str) -> arch.RouterScoreFunction:
    """DeepSeek-V2/V3 and Kimi K2 name it 'scoring_func', Kimi Linear
    'moe_router_activation_func'; Llama 4 has no key: `Llama4Router.forward` (Hugging Face
    transformers `modeling_llama4.py`) takes the top-k logits and applies `torch.sigmoid`.
    Every other family scores by softmax (Mixtral, Qwen-MoE, OLMoE, GPT-OSS)."""
    named = reader.get("scoring_func", "moe_router_activation_func")
    if named is not None:
        return arch.RouterScoreFunction(str(named))
    if model_type in LLAMA4_LIKE:
        return arch.RouterScoreFunction.SIGMOID
    return arch.RouterScoreFunction.SOFTMAX


UNNORMALISED_TOPK_FAMILIES = frozenset({"olmoe", "qwen2_moe", "qwen3_moe", "deepseek_v2"})
"""Model types whose Hugging Face config class defaults `norm_topk_prob` to false
(transformers `OlmoeConfig`, `Qwen2MoeConfig`, `Qwen3MoeConfig`, `DeepseekV2Config`)."""


def _router_topk_renormalized(reader: _Reader, model_type: str) -> bool:
    """`norm_topk_prob` where the config states it, else its config class's default: false
    for `UNNORMALISED_TOPK_FAMILIES`, true for the others (DeepSeek-V3 and Kimi K2 default
    true; Mixtral and GPT-OSS take the softmax over the top-k logits, which sums to one)."""
    stated = reader.get("norm_topk_prob")
    if stated is not None:
        return bool(stated)
    return model_type not in UNNORMALISED_TOPK_FAMILIES


def _llama4_dense_layers(reader: _Reader, layers: int) -> tuple[int, ...]:
    """Llama 4 interleaves dense and MoE layers: `moe_layers` lists the MoE ones; absent,
    layer i is MoE when (i + 1) % interleave_moe_layer_step == 0 (modelling code)."""
    listed = reader.config.get("moe_layers")
    if isinstance(listed, list):
        moe_layers = {int(i) for i in listed}
    else:
        step = int(reader.get("interleave_moe_layer_step", default=1) or 1)
        moe_layers = {i for i in range(step - 1, layers, step)}
    return tuple(i for i in range(layers) if i not in moe_layers)


def _or_default(value: object, default: int) -> Any:
    """`value` unless the config leaves it out (absent or null); zero is kept, to be
    rejected by the schema rather than silently replaced (the caller converts it, and a
    value of the wrong kind fails there)."""
    return default if value is None else value


def _linear_attention_fields(reader: _Reader, model_type: str) -> arch.LinearAttentionSpec | None:
    """The KDA layers of a Kimi Linear config: `linear_attn_config` gives the heads, head
    width, convolution taps and the 1-based 'kda_layers' (or, absent, every layer not in
    'full_attn_layers'); converted to 0-based layer indices (Kimi Linear arXiv:2510.26692,
    `configuration_kimi.py` of moonshotai/Kimi-Linear-48B-A3B-Instruct)."""
    block = reader.get("linear_attn_config")
    if not isinstance(block, dict):
        if model_type in LINEAR_ATTENTION_FAMILIES:
            reader.missing.append(f"'{reader.location}linear_attn_config'")
        return None
    layers = int(reader.get("num_hidden_layers", default=0) or 0)
    kda = block.get("kda_layers")
    full = block.get("full_attn_layers") or []
    if isinstance(kda, list):
        indices = tuple(sorted(int(i) - 1 for i in kda))
    else:
        indices = tuple(i for i in range(layers) if i + 1 not in {int(j) for j in full})
    heads, dim = block.get("num_heads"), block.get("head_dim")
    if heads is None or dim is None:
        reader.missing.append(f"'{reader.location}linear_attn_config.num_heads' and "
                              "'.head_dim'")
        return None
    reader.notes.append(f"{model_type}: {len(indices)} of {layers} layers use Kimi Delta "
                        f"Attention ({heads} heads of {dim}; 'linear_attn_config', 1-based "
                        "layer numbers read as 0-based indices); the others use the "
                        "model's full attention")
    if reader.get("mla_use_nope", default=False):
        reader.notes.append(f"{model_type}: MLA layers apply no rotary embedding "
                            "('mla_use_nope'); the rope-width projections are still counted")
    return arch.LinearAttentionSpec(kind=arch.LinearAttentionKind.KDA, num_heads=int(heads),
                               head_dim=int(dim),
                               short_conv_kernel_size=int(block.get("short_conv_kernel_size",
                                                                    4)),
                               layers=indices)


def _mla_fields(reader: _Reader, model_type: str) -> arch.MLASpec | None:
    if model_type not in DEEPSEEK_LIKE and reader.get("kv_lora_rank") is None:
        return None
    if reader.need("kv_lora_rank") is None:
        return None
    return arch.MLASpec(
        q_lora_rank=reader.get("q_lora_rank"),
        kv_lora_rank=reader.need("kv_lora_rank"),
        qk_nope_head_dim=reader.need("qk_nope_head_dim"),
        qk_rope_head_dim=reader.need("qk_rope_head_dim"),
        v_head_dim=reader.need("v_head_dim"),
    )


__all__ = ["KNOWN_MODEL_TYPES", "IngestedModel", "spec_from_hf_config"]
