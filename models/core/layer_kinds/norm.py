"""The records of the normalisation kinds: LayerNorm, RMSNorm and a LayerNorm without
affine parameters (OLMo 1: transformers `OlmoLayerNorm`, OLMo arXiv:2402.00838 Sec. 2.1
'non-parametric layer norm').

Owns: the weights per feature and the Megatron-LM name of each. Must not: count a model's
norms (`models.core.params`).
"""

from models.core.layer_kinds.base import NormRecord

LAYERNORM = NormRecord(params_per_feature=2, megatron_name="LayerNorm")
"""Scale and bias."""

RMSNORM = NormRecord(params_per_feature=1, megatron_name="RMSNorm")
"""Scale only."""

LAYERNORM_NO_AFFINE = NormRecord(
    params_per_feature=0, megatron_name="LayerNorm",
    megatron_note="norm='layernorm_no_affine' (no scale or bias) has no Megatron-LM "
    "core_v0.14.0 flag: its LayerNorm learns a scale and bias (2h per norm)")
"""No weights."""

__all__ = ["LAYERNORM", "LAYERNORM_NO_AFFINE", "RMSNORM"]
