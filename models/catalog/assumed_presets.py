"""Model presets whose shapes are not published, built from a published neighbour and stated
assumptions.

Owns: the `kimi-k3-scale-2.8t` preset (and `kimi-k3-scale-2.8t-kda`, the same shape with
KDA linear-attention layers in Kimi Linear's 3:1 pattern), a Hugging Face-style config
derived from Kimi K2's published `config.json` (`models/data/hf_configs/kimi-k2-instruct.json`)
with the fields the Kimi K3 report's total does not fix set by assumption, each named in
`K3_SCALE_ASSUMPTIONS`.
Must not: claim to be K3's published architecture; plan or time anything.

What the source gives: Kimi K3 arXiv:2607.24653, as the research ledger summarises it
(Sec. 11, "K3: 2.8T"; Sec. 9.5, 9.7): 2.8T total parameters, a MoE trained with expert
parallelism (MoonEP), MLA KV blocks beside KDA (Kimi Delta Attention, a linear-attention
branch) states, pipeline parallelism with virtual stages, ZeRO-1 data parallelism and
Pipeline ZeRO-2. Everything else below is an assumption.
"""

from typing import Any

K3_SCALE_ID = "kimi-k3-scale-2.8t"

K3_SCALE_OVERRIDES: dict[str, Any] = {
    "num_hidden_layers": 63,
    "n_routed_experts": 1024,
}
"""Fields changed from Kimi K2's config; every other field is K2's."""

K3_SCALE_ASSUMPTIONS: tuple[str, ...] = (
    "total parameters 2.8T (the report's figure); the shape below is an assumption that "
    "reaches it (2.81T counted by models/core/params.py)",
    "hidden size 7168, 64 attention heads, MLA with q_lora_rank 1536 and kv_lora_rank 512, "
    "vocabulary 163,840: Kimi K2's",
    "63 layers (K2: 61), the first dense as in K2",
    "1024 routed experts of width 2048 (K2: 384), one shared expert, top-8 routing: the "
    "extra parameters go to more experts at K2's expert shape and sparsity",
    "every layer is MLA attention: K3's KDA linear-attention layers are left out of this "
    "preset (kimi-k3-scale-2.8t-kda has them), so attention memory and FLOPs are MLA's on "
    "every layer",
    "no multi-token-prediction module, no vision encoder in the preset (add one per request)",
)
"""What the preset assumes where the ledger gives no figure."""


def k3_scale_config(k2_config: dict[str, Any]) -> dict[str, Any]:
    """The K3-scale config: Kimi K2's published config with `K3_SCALE_OVERRIDES`."""
    return {**k2_config, **K3_SCALE_OVERRIDES, "model_type": "kimi_k2"}


K3_SCALE_KDA_ID = "kimi-k3-scale-2.8t-kda"

K3_SCALE_KDA_LINEAR: dict[str, Any] = {
    "num_heads": 64,
    "head_dim": 128,
    "short_conv_kernel_size": 4,
    "full_attn_layers": [*range(4, 63, 4), 63],
}
"""The `linear_attn_config` the hybrid K3-scale preset adds (1-based layer numbers): KDA in
every layer but every fourth and the last, Kimi Linear's pattern (arXiv:2510.26692 Sec. 4:
3 KDA to 1 MLA; its 48B config ends on a full-attention layer)."""

K3_SCALE_KDA_ASSUMPTIONS: tuple[str, ...] = (
    *(a for a in K3_SCALE_ASSUMPTIONS if not a.startswith("every layer is MLA")),
    "KDA (Kimi Delta Attention) in 47 of the 63 layers, MLA in every fourth and the last: "
    "Kimi Linear's 3:1 pattern (arXiv:2510.26692); K3's own ratio and KDA shapes are not in "
    "the ledger",
    "64 KDA heads of 128 (the MLA head count, Kimi Linear's KDA head width), 4 convolution "
    "taps, chunk 64",
)
"""What the hybrid K3-scale preset assumes: the K3-scale shape with KDA layers."""


def k3_scale_kda_config(k2_config: dict[str, Any]) -> dict[str, Any]:
    """The K3-scale config with KDA layers (`K3_SCALE_KDA_LINEAR`)."""
    return {**k3_scale_config(k2_config), "linear_attn_config": dict(K3_SCALE_KDA_LINEAR)}


ASSUMED_PRESETS = {K3_SCALE_ID: ("kimi-k2-instruct", k3_scale_config),
                   K3_SCALE_KDA_ID: ("kimi-k2-instruct", k3_scale_kda_config)}
"""Assumed preset id -> (the published preset it derives from, the derivation)."""

PRESET_ASSUMPTIONS = {K3_SCALE_ID: K3_SCALE_ASSUMPTIONS,
                      K3_SCALE_KDA_ID: K3_SCALE_KDA_ASSUMPTIONS}
"""Assumed preset id -> what it assumes."""


__all__ = ["ASSUMED_PRESETS", "K3_SCALE_ASSUMPTIONS", "K3_SCALE_ID", "K3_SCALE_KDA_ASSUMPTIONS",
           "K3_SCALE_KDA_ID", "K3_SCALE_KDA_LINEAR", "K3_SCALE_OVERRIDES", "PRESET_ASSUMPTIONS",
           "k3_scale_config", "k3_scale_kda_config"]
