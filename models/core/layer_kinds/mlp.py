"""The records of the dense MLP kinds: GELU (two matrices) and SwiGLU (three: any gated MLP,
whatever its gate's activation).

Owns: the matrices of each kind, its activation's name, whether its eager form keeps an
extra tensor, and the Megatron-LM flag that selects it. Must not: count the MLP's weights,
FLOPs or bytes itself (`core.params`, `core.compute` and `core.activations` do, from
these fields), or know about MoE (the expert MLPs reuse the model's MLP kind).
"""

from models.core.layer_kinds.base import MlpRecord

GELU = MlpRecord(name="gelu", up_matrices=1, eager_product=False, megatron_args=())
"""Up (h x f) and down (f x h), elementwise GELU between ([KOR22] Sec. 4.1: GeLU input 2f
and output 2f per token)."""

SWIGLU = MlpRecord(name="swiglu", up_matrices=2, eager_product=True,
                   megatron_args=("--swiglu",))
"""Gate and up (h x f each) and down (f x h). Eager PyTorch (`silu(w1 x) * (w3 x)`, as
torchtitan's Llama writes it) keeps the SiLU output for the product's backward; a fused
SwiGLU kernel (Megatron-LM `bias_swiglu_impl`) does not."""

__all__ = ["GELU", "SWIGLU"]
