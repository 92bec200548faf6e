"""Activation bytes one transformer layer keeps for backward, per micro-batch.

Owns: the list of tensors a layer stores between its forward and its backward, sized from the
matrix shapes, and how tensor parallelism, Megatron sequence parallelism, context
parallelism, recomputation and FP8 storage change it. Must not: know how many micro-batches
are in flight (that is the pipeline schedule) or where the bytes live (see `models/memory.py`).

Reference: [KOR22] Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4 and Table 2. A GPT layer
keeps s b h (34 + 5 a s / h) bytes: attention 11 s b h + 5 a s^2 b, MLP 19 s b h, two
LayerNorms 4 s b h (16-bit tensors, 1-byte dropout masks). Adaptations (each a `Deviation`
from the GPT layer, stated where it is applied): GQA stores K/V with kv heads; MLA stores its
latents and per-head Q/K/V; SwiGLU stores the gate and up outputs; MoE stores top-k copies
of each token; a fused (flash) attention kernel stores the log-sum-exp instead of the
s x s scores; context parallelism divides every term by cp.
"""

import math
from dataclasses import dataclass

from api_schemas.architecture import AttentionKind, MlpKind, ModelSpec
from api_schemas.parallel import RecomputeMode

ACTIVATION_BYTES = 2
"""Bytes of a stored 16-bit activation element. Source: [KOR22] Sec. 4 (2 bytes)."""

MASK_BYTES = 1
"""Bytes of a dropout-mask element. Source: [KOR22] Sec. 4 (1 byte)."""

SOFTMAX_STAT_BYTES = 4
"""Bytes per head and token of the fp32 log-sum-exp a fused attention kernel keeps.
Source: FlashAttention-2, arXiv:2307.08691 Sec. 3.1 (backward needs L = m + log l)."""

FP8_TILE_BYTES_PER_ELEMENT = 1.0 + 4.0 / 128.0
"""FP8-E4M3 storage with one fp32 scale per 1 x 128 tile: 1 + 4/128 bytes per element.
Source: Kimi K2, arXiv:2507.20534 Sec. 2.4 (FP8 storage of insensitive activations, 1x128
tiles, fp32 scales); DeepSeek-V3 arXiv:2412.19437 Sec. 3.3 (same tiling)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerActivationContext:
    """Everything besides the layer itself that sizes its stored activations."""

    seq_len: int
    micro_batch_size: int
    tp: int = 1
    cp: int = 1
    etp: int = 1
    sequence_parallel: bool = False
    dropout: bool = False
    flash_attention: bool = True
    fp8_storage: bool = False
    """Store MLP/expert up-projection inputs and SwiGLU inputs in FP8 (Kimi K2)."""
    fp8_compute: bool = False
    """FP8 GEMMs (DeepSeek-V3): every GEMM input is cached in FP8."""
    moe_load_imbalance: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerActivationBytes:
    """Stored bytes of one layer for one micro-batch, by block."""

    attention_bytes: int
    scores_bytes: int
    """The s x s softmax, dropout mask and dropout output ([KOR22] 5 a s^2 b / t)."""
    mlp_bytes: int
    norm_bytes: int
    input_bytes: int
    """The layer input alone: what full recomputation keeps."""

    @property
    def total_bytes(self) -> int:
        """All stored bytes without recomputation."""
        return self.attention_bytes + self.scores_bytes + self.mlp_bytes + self.norm_bytes

    def stored_bytes(self, recompute: RecomputeMode) -> int:
        """Bytes kept under a recompute mode: none keeps all; selective drops the s x s
        tensors ([KOR22] Sec. 5); full keeps the layer input only ([KOR22] Table 2)."""
        if recompute == RecomputeMode.FULL:
            return self.input_bytes
        if recompute == RecomputeMode.SELECTIVE:
            return self.total_bytes - self.scores_bytes
        return self.total_bytes


def _shard(ctx: LayerActivationContext) -> tuple[float, float]:
    """(divisor of tensors split by TP, divisor of tensors replicated across TP unless SP)."""
    split = ctx.tp
    replicated = ctx.tp if ctx.sequence_parallel else 1
    return float(split), float(replicated)


def attention_bytes_per_token(spec: ModelSpec, ctx: LayerActivationContext) -> tuple[float, float]:
    """(bytes per token of the attention block excluding scores, bytes per token of scores).

    GPT layer ([KOR22] Sec. 4.1): QKV input 2h, Q and K 4h, V 2h, output-projection input 2h,
    output dropout mask h; scores 5 a s (softmax 2, mask 1, dropout output 2).
    Deviation (GQA): K and V are 2 kv d each; when tp exceeds the KV heads each rank keeps one.
    Deviation (MLA): the q/kv latents (2 d'_c, 2 d_c, their norm outputs) plus per-head
    Q/K (d_nope + d_rope) and V, O (d_v).
    Deviation (flash): no scores; the fp32 log-sum-exp (4 bytes per head) instead.
    """
    split, replicated = _shard(ctx)
    act = ACTIVATION_BYTES
    gemm_in = FP8_TILE_BYTES_PER_ELEMENT if ctx.fp8_compute else act
    h, a = spec.hidden_size, spec.num_attention_heads
    heads_per_rank = a / split
    per_token = gemm_in * h / replicated  # QKV (or q_a/kv_a) input: the norm output
    if spec.attention == AttentionKind.MLA and spec.mla is not None:
        mla = spec.mla
        latents = 2 * (mla.q_lora_rank or 0) + 2 * mla.kv_lora_rank
        per_token += act * latents / replicated
        d_qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        d_v = mla.v_head_dim
        per_token += act * heads_per_rank * (2 * d_qk + d_v)
    else:
        d = spec.dim_per_head
        kv_per_rank = max(spec.kv_heads / split, 1.0)
        d_v = d
        per_token += act * heads_per_rank * d + act * 2 * kv_per_rank * d
    per_token += gemm_in * heads_per_rank * d_v  # output projection input
    if ctx.dropout:
        per_token += MASK_BYTES * h / replicated
    scores = 0.0
    if ctx.flash_attention:
        per_token += SOFTMAX_STAT_BYTES * heads_per_rank
    else:
        score_elements = heads_per_rank * ctx.seq_len / ctx.cp
        scores = (act + (MASK_BYTES + act if ctx.dropout else 0)) * score_elements
    return per_token, scores


def mlp_bytes_per_token(spec: ModelSpec, ctx: LayerActivationContext, width: int,
                        *, copies: float = 1.0, intermediate_split: float | None = None,
                        include_input: bool = True, include_dropout: bool = True) -> float:
    """Bytes per token of one MLP of intermediate `width`.

    GPT layer ([KOR22] Sec. 4.1): input 2h, GeLU input 2f, GeLU output 2f, dropout mask h
    (19 s b h with f = 4h). Deviation (SwiGLU): gate and up outputs 4f and the product 2f.
    `copies` scales the per-token tensors (top-k routed copies); the intermediate tensors are
    divided by `intermediate_split` (tp for dense, etp for experts).
    """
    split, replicated = _shard(ctx)
    inter_split = float(intermediate_split or split)
    act = ACTIVATION_BYTES
    fp8 = FP8_TILE_BYTES_PER_ELEMENT
    in_bytes = fp8 if (ctx.fp8_storage or ctx.fp8_compute) else act
    up_bytes = fp8 if ctx.fp8_storage else act
    down_in_bytes = fp8 if ctx.fp8_compute else act
    h = spec.hidden_size
    per_token = in_bytes * h / replicated if include_input else 0.0
    if spec.mlp == MlpKind.SWIGLU:
        per_token += copies * (up_bytes * 2 * width + down_in_bytes * width) / inter_split
    else:
        per_token += copies * (up_bytes * width + down_in_bytes * width) / inter_split
    if ctx.dropout and include_dropout:
        per_token += MASK_BYTES * h / replicated
    return per_token


def moe_bytes_per_token(spec: ModelSpec, ctx: LayerActivationContext) -> float:
    """Bytes per token (of this rank's sequence shard) of an MoE block.

    Deviation (MoE): the shared input (2h) and router probabilities (fp32, E per token) are
    stored once; each token is copied to top-k experts, each copy storing the expert input
    (2h), the expert intermediates and the expert output kept for the weighted combine (2h).
    Routed copies per rank scale with top-k x s x b x etp / tp (Megatron-LM PR #6782: not /EP)
    and with the assumed load imbalance (max/mean rank load).
    """
    moe = spec.moe
    assert moe is not None
    _, replicated = _shard(ctx)
    h = spec.hidden_size
    in_bytes = FP8_TILE_BYTES_PER_ELEMENT if (ctx.fp8_storage or ctx.fp8_compute) else ACTIVATION_BYTES
    per_token = in_bytes * h / replicated + 4.0 * moe.num_experts / replicated
    copies = moe.top_k * ctx.moe_load_imbalance * ctx.etp / ctx.tp
    per_token += copies * (in_bytes + ACTIVATION_BYTES) * h
    per_token += mlp_bytes_per_token(spec, ctx, moe.expert_ffn_hidden_size, copies=copies,
                                     intermediate_split=ctx.etp, include_input=False,
                                     include_dropout=False)
    if moe.num_shared_experts:
        per_token += mlp_bytes_per_token(spec, ctx, moe.shared_expert_ffn_hidden_size,
                                         include_input=False, include_dropout=False)
    if ctx.dropout:
        per_token += MASK_BYTES * h / replicated
    return per_token


def layer_activation_bytes(spec: ModelSpec, layer_index: int,
                           ctx: LayerActivationContext) -> LayerActivationBytes:
    """Stored activation bytes of one layer for one micro-batch (no recomputation applied).

    Source: [KOR22] arXiv:2205.05198 Eq. 1, 2, 4 (s b h (34 + 5 a s / h), with TP
    s b h (10 + 24/t + 5 a s/(h t)), with TP + SP s b h (34 + 5 a s / h) / t).
    Legend: s=seq_len, b=micro_batch_size, h=hidden_size, a=num_attention_heads, t=tp.
    Assumes: every per-token term and the score rows divide by cp (each rank holds s/cp
    queries and their score rows).
    """
    _, replicated = _shard(ctx)
    tokens = ctx.seq_len * ctx.micro_batch_size / ctx.cp
    attention, scores = attention_bytes_per_token(spec, ctx)
    if spec.is_moe_layer(layer_index):
        mlp = moe_bytes_per_token(spec, ctx)
    else:
        mlp = mlp_bytes_per_token(spec, ctx, spec.ffn_hidden_size)
    norms = 2 * ACTIVATION_BYTES * spec.hidden_size / replicated
    layer_input = ACTIVATION_BYTES * spec.hidden_size / replicated
    return LayerActivationBytes(
        attention_bytes=math.ceil(tokens * attention),
        scores_bytes=math.ceil(tokens * scores),
        mlp_bytes=math.ceil(tokens * mlp),
        norm_bytes=math.ceil(tokens * norms),
        input_bytes=math.ceil(tokens * layer_input),
    )


def head_activation_bytes(spec: ModelSpec, ctx: LayerActivationContext) -> int:
    """Bytes the last stage keeps for the final norm, output projection and loss per
    micro-batch: norm input 2h, projection input 2h, fp32 logits 4V (all / tp).

    Source: [KOR22] Sec. 4.2: 4 s b h / t (1 + V / h) for the final LayerNorm, the output
    projection and the fp32 logits. Assumes: the logits are vocabulary-parallel (/tp).
    """
    tokens = ctx.seq_len * ctx.micro_batch_size / ctx.cp
    h, vocab = spec.hidden_size, spec.vocab_size
    return math.ceil(tokens * (2 * ACTIVATION_BYTES * h + 4.0 * vocab) / ctx.tp)


def embedding_activation_bytes(spec: ModelSpec, ctx: LayerActivationContext) -> int:
    """Bytes the first stage keeps per micro-batch for the embedding dropout mask.

    Source: [KOR22] Sec. 4.2: s b h p / t for embedding dropout with p micro-batches in
    flight (this returns the per-micro-batch s b h / t; 0 without dropout).
    """
    if not ctx.dropout:
        return 0
    tokens = ctx.seq_len * ctx.micro_batch_size / ctx.cp
    return math.ceil(tokens * MASK_BYTES * spec.hidden_size / ctx.tp)


__all__ = [
    "ACTIVATION_BYTES",
    "FP8_TILE_BYTES_PER_ELEMENT",
    "MASK_BYTES",
    "SOFTMAX_STAT_BYTES",
    "LayerActivationBytes",
    "LayerActivationContext",
    "attention_bytes_per_token",
    "embedding_activation_bytes",
    "head_activation_bytes",
    "layer_activation_bytes",
    "mlp_bytes_per_token",
    "moe_bytes_per_token",
]
