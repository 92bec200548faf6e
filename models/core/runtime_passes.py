"""HBM passes of the memory-bound ops between GEMMs when a runtime does not fuse them.

Owns: the bytes per element of each op's forward and backward kernels under eager PyTorch
and under torch.compile (`RUNTIME_PASSES`). Must not: count elements or time kernels (see
`models/core/compute.py: _runtime_elementwise_bytes`).
"""

from dataclasses import dataclass

from api_schemas.training import ElementwiseFusion


@dataclass(frozen=True, slots=True, kw_only=True)
class OpPasses:
    """HBM bytes per element of one memory-bound op's tensor, forward and backward, when
    the runtime launches it as separate kernels (each kernel reads its inputs and writes its
    output once, at their formats: 2 bytes bf16, 4 bytes fp32)."""

    forward: float
    backward: float


_EAGER_PASSES: dict[str, OpPasses] = {
    # RMSNorm as torchtitan writes it: x.float() (r2 w4), pow(2) (r4 w4), mean (r4),
    # x * rsqrt (r4 w4), type_as (r4 w2), * weight (r2 w2) = 36. Backward by the autograd
    # formulas: mul by weight and its weight-gradient product and reduction (4 + 6 + 2),
    # the two casts (6 + 6), x * r (8) with the row sum of grad * x (12 + 4), mean's
    # expanded gradient (4), pow's self.pow(1) copy, scale and product (8 + 8 + 12), and
    # the accumulation of x's two gradient paths (12) = 92.
    "norm": OpPasses(forward=36.0, backward=92.0),
    # x + f(x): r2 + r2 + w2; backward adds the two gradient paths into x (r2 r2 w2).
    "residual": OpPasses(forward=6.0, backward=6.0),
    # apply_rotary_emb on q and k: float() (r2 w4), complex multiply (r4 w4), type_as
    # (r4 w2) = 20; backward the same three in reverse = 20.
    "rope": OpPasses(forward=20.0, backward=20.0),
    # w2(silu(w1 x) * w3 x) per element of the intermediate width: silu (r2 w2) and the
    # product (r2 r2 w2) = 10; backward: both product gradients (6 + 6) and silu's (6).
    "swiglu": OpPasses(forward=10.0, backward=18.0),
    # GELU MLP: one activation kernel (r2 w2); backward r2 r2 w2.
    "gelu": OpPasses(forward=4.0, backward=6.0),
    # repeat_kv: expand + reshape copies K and V to the query head count (per element
    # of the copy: w2, plus the read of the smaller source); backward sums them back.
    "repeat_kv": OpPasses(forward=2.0, backward=2.0),
    # Loss on the logits: .float() (r2 w4), log_softmax (r4 w4) = 14; backward: the NLL
    # gradient (w4), log_softmax's (r4 r4 w4) and the cast back (r4 w2) = 22.
    "loss": OpPasses(forward=14.0, backward=22.0),
}
"""Each op as its own aten kernels (eager PyTorch)."""

_COMPILED_PASSES: dict[str, OpPasses] = {
    # Inductor fuses each pointwise/reduction chain into one kernel; the ops it leaves
    # alone keep their eager passes: the residual add is one kernel already; complex
    # numbers are an Inductor fallback (lowering.py: view_as_complex falls back and needs a
    # contiguous fp32 input), so the rotary embedding keeps its eager passes; the GELU is
    # one activation kernel either way; scaled_dot_product_attention is an extern kernel,
    # so its repeated K/V inputs are materialised as in eager; torchtitan compiles each
    # TransformerBlock only, so the loss stays eager (train.py at 9dec370: "compiling loss
    # function causes CUDA errors, turning off for now").
    **_EAGER_PASSES,
    # The norm reads x and writes its output (4); backward reads grad and x, writes grad_x
    # (6) and reduces the weight gradient (r2 r2).
    "norm": OpPasses(forward=4.0, backward=10.0),
    # silu * mul in one kernel (r2 r2 w2); backward one kernel (r2 r2 r2 w2 w2).
    "swiglu": OpPasses(forward=6.0, backward=10.0),
}
"""Each TransformerBlock under torch.compile (Inductor)."""

RUNTIME_PASSES: dict[ElementwiseFusion, dict[str, OpPasses]] = {
    ElementwiseFusion.EAGER: _EAGER_PASSES,
    ElementwiseFusion.COMPILED: _COMPILED_PASSES,
}
"""Bytes per element of each memory-bound op under an unfused runtime (`fused` keeps the
Megatron / Transformer Engine counts of `_elementwise_bytes`).

Sources: the op sequence of torchtitan's Llama model, norms and train.py at commit 9dec370
(the December 2024 benchmark's release: RMSNorm in fp32, rotary embedding through complex64,
repeat_kv by expand + reshape, cross-entropy on .float() logits, torch.compile per
TransformerBlock); each aten op is one kernel in eager mode, and its backward follows
PyTorch's autograd formulas (tools/autograd/derivatives.yaml); Inductor's fusion of
pointwise and reduction ops and its complex-number fallback (torch/_inductor/lowering.py).
"""


__all__ = ["OpPasses", "RUNTIME_PASSES"]
