"""FLOPs of training from matrix shapes: per layer, per token, per step; model vs hardware.

Owns: forward FLOPs of a layer's GEMMs (activated experts only), of the attention core (the
S^2 term) and of the logits; the 3x forward rule for forward + backward; the extra forward
work of recomputation; and the two conventions for the attention S^2 term. Must not: turn
FLOPs into time (see `models/catalog/kernels.py` and `models/core/compute.py`).

Conventions. *Model FLOPs* exclude recomputation and feed MFU; *hardware FLOPs* include it
and feed HFU (PaLM arXiv:2204.02311 App. B; Korthikanti et al. arXiv:2205.05198 App. A).
The attention core is counted over the full s x s score matrix, as Megatron-LM, Korthikanti
and PaLM do, unless `causal=True`, which counts the half a causal kernel actually computes
(used for time, never for MFU).
"""

from collections.abc import Iterable
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from models.core.layer_kinds import attention_kind, mlp_block, mlp_kind
from models.core.linear_attention import linear_attention_core_forward_flops
from models.core.params import layer_attention_params
from models.core.search_memo import model_tables

BACKWARD_TO_FORWARD_RATIO = 2.0
"""Backward costs two forwards (input and weight gradients).
Source: [KOR22] arXiv:2205.05198 App. A; [NAR21] arXiv:2104.04473 Sec. 5.1 (Eq. 3)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerForwardFlops:
    """Forward FLOPs of one layer for one sequence."""

    gemm_flop: float
    """Dense and activated-expert matrix multiplies: 2 x tokens x matrix weights."""
    attention_flop: float
    """Q K^T and A V: 2 s^2 a (d_qk + d_v), or half of it when causal."""

    @property
    def total_flop(self) -> float:
        """GEMMs plus attention core."""
        return self.gemm_flop + self.attention_flop


def attention_head_dims(spec: ModelSpec) -> tuple[int, int]:
    """(d_qk, d_v) per head: MLA uses d_nope + d_rope for q/k and v_head_dim for v."""
    return attention_kind(spec).head_dims(spec)


def attention_core_forward_flops(spec: ModelSpec, *, seq_len: int, causal: bool = False,
                                 window: int | None = None, chunk: int | None = None) -> float:
    """Forward FLOPs of the attention core for one sequence.

    Source: [KOR22] arXiv:2205.05198 App. A: Q K^T and the attention-over-values each cost
    2 b s^2 h; generalised to 2 s^2 a d_qk + 2 s^2 a d_v (GQA shares K/V but not the work).
    A sliding window of w keys (Mistral 7B arXiv:2310.06825 Sec. 2; GPT-OSS model card
    arXiv:2508.10925, Architecture: banded windows of 128 tokens on alternating layers)
    leaves each query at most w keys, w s - w^2 / 2 query-key pairs of a causal sequence
    (s^2 / 2 at w = s). Chunked attention of C tokens (Llama 4's RoPE layers, C = 8192:
    transformers `Llama4TextConfig.attention_chunk_size`, its chunked causal mask) attends
    causally within each block of C tokens only, as floor(s / C) sequences of C tokens and
    one of the rest: floor(s/C) C^2 / 2 + (s mod C)^2 / 2 pairs. The window and the chunks
    enter the causal count only: the full-attention convention counts the whole s x s
    matrix whatever the mask, as Megatron-LM and PaLM do.
    Legend: s=seq_len, a=num_attention_heads, d_qk/d_v from `attention_head_dims`, w=window,
    C=chunk.
    """
    d_qk, d_v = attention_head_dims(spec)
    per_pair = 2.0 * spec.num_attention_heads * (d_qk + d_v)
    if not causal:
        return per_pair * seq_len * seq_len
    if chunk is None or chunk >= seq_len:
        return per_pair * _causal_pairs(seq_len, window)
    full, rest = divmod(seq_len, chunk)
    return per_pair * (full * _causal_pairs(chunk, window) + _causal_pairs(rest, window))


def _causal_pairs(length: int, window: int | None) -> float:
    """Query-key pairs of a causal sequence of `length` tokens, each query seeing at most
    `window` keys (all of its prefix without one)."""
    if window is None or window >= length:
        return length * length / 2.0
    return window * length - window * window / 2.0


def layer_forward_flops(spec: ModelSpec, layer_index: int, *, seq_len: int,
                        causal: bool = False) -> LayerForwardFlops:
    """Forward FLOPs of transformer layer `layer_index` for one sequence of `seq_len` tokens.

    Source: [KOR22] arXiv:2205.05198 App. A (24 b s h^2 for a GPT layer's GEMMs = 2 FLOPs per
    weight per token); MoE layers count the router, the shared experts and top-k routed
    experts per token.
    """
    weights = layer_attention_params(spec, layer_index, matrices_only=True)
    weights += mlp_block(spec, layer_index).forward_matrix_weights(spec, mlp_kind(spec))
    return LayerForwardFlops(gemm_flop=2.0 * seq_len * weights,
                             attention_flop=layer_core_forward_flops(spec, layer_index,
                                                                     seq_len=seq_len,
                                                                     causal=causal))


def layer_core_forward_flops(spec: ModelSpec, layer_index: int, *, seq_len: int,
                             causal: bool = False) -> float:
    """Forward FLOPs of layer `layer_index`'s token-mixing core for one sequence: the
    chunkwise linear-attention kernel in a hybrid model's linear layers (linear in s, the
    same under both conventions: it has no score matrix;
    `models.core.linear_attention.linear_attention_core_forward_flops`, Kimi Linear
    arXiv:2510.26692, Yang et al. arXiv:2406.06484 Sec. 3), else the softmax core
    (`attention_core_forward_flops`, quadratic in s)."""
    if spec.is_linear_attention_layer(layer_index):
        return linear_attention_core_forward_flops(spec, seq_len=seq_len)
    return attention_core_forward_flops(spec, seq_len=seq_len, causal=causal,
                                        window=spec.attention_window(layer_index),
                                        chunk=spec.attention_chunk(layer_index))


FlopKind = tuple[bool, int | None, int | None, bool]
"""What makes two layers alike in FLOPs (`_layer_kind`)."""


def _layer_kind(spec: ModelSpec, index: int) -> FlopKind:
    """Layers alike in FLOPs: MoE or not, attention window and chunk, linear attention or
    not."""
    return (spec.is_moe_layer(index), spec.attention_window(index), spec.attention_chunk(index),
            spec.is_linear_attention_layer(index))


def flop_kinds(spec: ModelSpec) -> tuple[FlopKind, ...]:
    """`_layer_kind` of every layer by index (kept on the search's tables of the model: the
    step's FLOPs ask it of every layer at every estimate)."""
    tables = model_tables(spec)
    if tables.flop_kinds is None:
        tables.flop_kinds = tuple([_layer_kind(spec, i) for i in range(spec.num_layers)])
    return tables.flop_kinds


def logits_forward_flops(spec: ModelSpec, *, seq_len: int) -> float:
    """Forward FLOPs of the output projection: 2 s h V per sequence.
    Source: [KOR22] arXiv:2205.05198 App. A (the 2 b s h V logit term)."""
    return 2.0 * seq_len * spec.hidden_size * spec.vocab_size


def mtp_forward_flops(spec: ModelSpec, *, seq_len: int, causal: bool = False) -> float:
    """Forward FLOPs of the multi-token-prediction modules for one sequence: per module a
    layer shaped like the last one, the 2h -> h projection and its own logits.
    Source: DeepSeek-V3 arXiv:2412.19437 Sec. 2.2."""
    if spec.num_mtp_layers == 0:
        return 0.0
    layer = layer_forward_flops(spec, spec.num_layers - 1, seq_len=seq_len, causal=causal)
    projection = 2.0 * seq_len * 2 * spec.hidden_size * spec.hidden_size
    per_module = layer.total_flop + projection + logits_forward_flops(spec, seq_len=seq_len)
    return spec.num_mtp_layers * per_module


def model_forward_flops(spec: ModelSpec, *, seq_len: int, causal: bool = False) -> float:
    """Forward FLOPs of the whole model (layers, logits, MTP) for one sequence."""
    layers = 0.0
    kinds: dict[FlopKind, list[int]] = {}
    for i, kind in enumerate(flop_kinds(spec)):
        kinds.setdefault(kind, []).append(i)
    for indices in kinds.values():
        per_layer = layer_forward_flops(spec, indices[0], seq_len=seq_len, causal=causal)
        layers += len(indices) * per_layer.total_flop
    return (layers + logits_forward_flops(spec, seq_len=seq_len)
            + mtp_forward_flops(spec, seq_len=seq_len, causal=causal))


@dataclass(frozen=True, slots=True, kw_only=True)
class StepFlops:
    """FLOPs of one optimizer step."""

    model_flop: float
    """Forward + backward, no recomputation (the MFU numerator)."""
    recompute_flop: float
    """Extra forward work of recomputation."""
    num_tokens: int

    @property
    def hardware_flop(self) -> float:
        """Model FLOPs plus recomputation (the HFU numerator)."""
        return self.model_flop + self.recompute_flop

    @property
    def model_flop_per_token(self) -> float:
        """Model FLOPs per training token."""
        return self.model_flop / self.num_tokens


def recompute_forward_flops(spec: ModelSpec, *, seq_len: int, full_layers: Iterable[int] = (),
                            selective_layers: Iterable[int] = (), causal: bool = False) -> float:
    """Extra forward FLOPs for one sequence when some layers are recomputed.

    Full recomputation re-runs the whole layer forward; selective recomputation re-runs the
    attention core only.

    Source: [NAR21] arXiv:2104.04473 Eq. 3 (full recompute = one extra forward pass of the
    layers: 96 = 4 x 24). Deviation: [KOR22] Eq. 8 books the selective recompute as
    3 x the forward attention-core term (s/(3h) vs s/(6h)); we count the one forward the
    recomputation performs, so our HFU with selective recompute is lower than their Table 5.
    """
    extra = 0.0
    kinds = flop_kinds(spec)
    per_kind: dict[FlopKind, float] = {}
    for index in full_layers:
        kind = kinds[index] if 0 <= index < len(kinds) else _layer_kind(spec, index)
        if kind not in per_kind:
            per_kind[kind] = layer_forward_flops(spec, index, seq_len=seq_len,
                                                 causal=causal).total_flop
        extra += per_kind[kind]
    # The core's FLOPs read the layer's kind only (linear attention, window, chunk).
    per_core: dict[FlopKind, float] = {}
    for index in selective_layers:
        kind = kinds[index] if 0 <= index < len(kinds) else _layer_kind(spec, index)
        if kind not in per_core:
            per_core[kind] = layer_core_forward_flops(spec, index, seq_len=seq_len,
                                                      causal=causal)
        extra += per_core[kind]
    return extra


def step_flops(spec: ModelSpec, *, num_sequences: int, seq_len: int,
               full_recompute_layers: Iterable[int] = (),
               selective_recompute_layers: Iterable[int] = (),
               causal: bool = False) -> StepFlops:
    """Model and hardware FLOPs of one step over `num_sequences` sequences.

    Source: [KOR22] arXiv:2205.05198 Eq. 7 for a GPT model:
    72 B L s h^2 (1 + s/(6h) + V/(12 h L)) = 3 x (forward layers + logits).
    Legend: B=num_sequences, s=seq_len, L, h, V from `spec`.
    """
    forward = model_forward_flops(spec, seq_len=seq_len, causal=causal)
    recompute = recompute_forward_flops(spec, seq_len=seq_len,
                                        full_layers=full_recompute_layers,
                                        selective_layers=selective_recompute_layers,
                                        causal=causal)
    return StepFlops(
        model_flop=num_sequences * (1.0 + BACKWARD_TO_FORWARD_RATIO) * forward,
        recompute_flop=num_sequences * recompute,
        num_tokens=num_sequences * seq_len,
    )


__all__ = [
    "BACKWARD_TO_FORWARD_RATIO",
    "LayerForwardFlops",
    "StepFlops",
    "attention_core_forward_flops",
    "attention_head_dims",
    "FlopKind",
    "flop_kinds",
    "layer_core_forward_flops",
    "layer_forward_flops",
    "logits_forward_flops",
    "model_forward_flops",
    "mtp_forward_flops",
    "recompute_forward_flops",
    "step_flops",
]
