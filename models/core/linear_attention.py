"""Linear-attention (KDA, gated delta rule) layers: weights, chunkwise FLOPs, the tensors the
backward keeps, kernel speed, and what context parallelism moves for them.

Owns: the shape arithmetic of one linear-attention token mixer (Kimi Delta Attention of Kimi
Linear, Gated DeltaNet), its chunkwise-parallel work, its recurrent-state sizes, the state
exchange of its context parallelism (the per-rank fixed-size fragments all-gathered once per
pass, K3's "KCP"), and which context-parallel kinds each layer type takes. Must not: decide
how a hybrid model's layers are grouped (`core.params`, `core.flops`, `core.compute`
and `models.core.activations` call in here per layer), or time collectives (`models.core.traffic`).

Sources:
- [KL25] Kimi Linear, arXiv:2510.26692: Sec. 3 (KDA: the gated delta rule with a per-channel
  decay Diag(alpha_t), S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T;
  chunkwise form with the WY / UT representation), Sec. 4 (the 3:1 KDA-to-MLA hybrid, NoPE
  MLA), and the released modelling code `modeling_kimi.py` of moonshotai/Kimi-Linear-48B-A3B
  (q/k/v projections, depthwise short convolutions, f_a/f_b low-rank decay gate, b_proj,
  A_log and dt_bias, g_a/g_b low-rank output gate, gated RMSNorm, o_proj).
- [YAN24] Yang et al., "Parallelizing Linear Transformers with the Delta Rule over Sequence
  Length", arXiv:2406.06484, Sec. 3: the chunkwise algorithm costs O(L C d + L d^2), linear
  in the sequence length L for a fixed chunk size C.
- [GDN] Gated DeltaNet, arXiv:2412.06464 (the scalar-decay variant).
- [KCP] flash-linear-attention `fla/ops/cp` (context parallelism of delta-rule models, named
  KCP at Moonshot): each rank computes its chunk's final state h (d_k x d_v) and transition
  M (d_k x d_k) per head into one fp32 buffer [H, d_k, d_k + d_v], all-gathers it, and merges
  the affine maps S' = M S + h of the ranks before it; the seed ledger's Sec. 7.5 (K3: fixed-
  size fragments exchanged by one all-gather, prefix-combined, local compute divided by cp).
"""

from dataclasses import dataclass

from api_schemas import ContextParallelKind
from api_schemas.architecture import LinearAttentionSpec, ModelSpec
from models.core.layer_kinds import linear_attention_kind
from models.core.layer_kinds.registry import LINEAR_ATTENTION_KINDS

STATE_BYTES = 4
"""Bytes of one recurrent-state element: the state and the KCP fragments are fp32 ([KCP]
`chunk_delta_h.py`: fp32 state buffers; [KL25] kernel accumulates in fp32)."""

GATE_BYTES = 4
"""Bytes of one stored decay-gate element (the per-channel log decay is kept in fp32: the
released Kimi Linear code keeps A_log, dt_bias and the gate in fp32)."""

LINEAR_ATTENTION_KERNEL_EFFICIENCY: dict[str, float] = {
    kind: record.kernel_efficiency for kind, record in LINEAR_ATTENTION_KINDS.items()}
"""Fraction of the GPU's dense BF16 peak the chunkwise kernels reach, counted with
`chunkwise_forward_flops_per_token_head` (C = 64), as each kind's record
(`models.core.layer_kinds.linear_attention`) declares it: KDA 0.044, gated delta 0.071. Fitted on
one published forward row each (fewer than three; no published step row of a hybrid model
checks them): flash-linear-attention `chunk_kda` and `chunk_gdn` on an H800, B = 1,
T = 8192, H = 96, d = 128 (PaddlePaddle/flash-attention PR #133; research/CALIBRATION.md)."""

LINEAR_ATTENTION_BACKWARD_FLOP_RATIO = 3.0
"""Backward / forward FLOPs of the chunkwise kernel. Assumption: the gradient matmuls cost
two forwards (as any matmul chain) and the backward first rebuilds the chunk-boundary states
and WY factors the forward did not keep (flash-linear-attention `chunk_kda` backward
recomputes them unless `disable_recompute`): one more forward."""

FULL_ATTENTION_CP_KINDS = frozenset(ContextParallelKind)
"""Context-parallel kinds a full (softmax) attention layer takes: ring K/V hops, Ulysses
all-to-alls, USP, K/V all-gather (`models.core.traffic.layer.cp_calls`)."""

STATE_PASSING = "state_passing"
"""The one context-parallel kind of a linear-attention layer: each rank runs its local
chunk and only fixed-size state fragments cross ranks ([KCP]; seed ledger Sec. 7.5)."""


def cp_kinds_for_layer(spec: ModelSpec, layer_index: int) -> frozenset[str]:
    """The context-parallel kinds layer `layer_index` supports: a linear-attention layer only
    passes recurrent state (whatever `cp_kind` says, which applies to full-attention
    layers); a full-attention layer keeps ring, Ulysses, USP and all-gather.
    Source: seed ledger Sec. 7.5 (K3 keeps other CP mechanisms for MLA; KCP is not the
    whole model's CP)."""
    if spec.is_linear_attention_layer(layer_index):
        return frozenset({STATE_PASSING})
    return frozenset(kind.value for kind in FULL_ATTENTION_CP_KINDS)


def cp_layer_note(spec: ModelSpec, *, cp: int, cp_kind: ContextParallelKind) -> str | None:
    """For a hybrid model under context parallelism, which layers use which CP kind
    (`cp_kinds_for_layer`); None when the model has no linear-attention layers or cp = 1."""
    linear = spec.linear_attention
    if linear is None or cp <= 1:
        return None
    count = sum(spec.is_linear_attention_layer(i) for i in range(spec.num_layers))
    full = spec.num_layers - count
    rest = (f"; the {full} full-attention layers use {cp_kind.value} context parallelism"
            if full else "")
    return (f"context parallelism x{cp}: the {count} linear-attention layers pass recurrent "
            f"state (per layer pass one all-gather of {kcp_fragment_bytes(spec) * cp} bytes "
            f"of fp32 fragments over all heads, whatever the sequence length){rest}")


def _linear(spec: ModelSpec) -> LinearAttentionSpec:
    linear = spec.linear_attention
    if linear is None:
        raise ValueError("the model has no linear-attention layers")
    return linear


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearAttentionWeights:
    """Weights of one linear-attention block: GEMM matrices and the rest (vectors)."""

    matrices: int
    vectors: int

    @property
    def total(self) -> int:
        """All weights of the block."""
        return self.matrices + self.vectors


def linear_attention_weights(spec: ModelSpec) -> LinearAttentionWeights:
    """Weights of one linear-attention block.

    KDA ([KL25] released `modeling_kimi.py`, `KimiDeltaAttention`): q_proj, k_proj (h x H d_k),
    v_proj (h x H d_v), o_proj (H d_v x h); the decay gate f_a (h x d_k), f_b (d_k x H d_k);
    b_proj (h x H) for beta; the output gate g_a (h x d_k), g_b (d_k x H d_v); vectors: the
    depthwise convolutions on q, k, v ((2 H d_k + H d_v) x W), A_log (H), dt_bias (H d_k), the
    gated norm (d_v). Gated DeltaNet ([GDN] Sec. 3; Qwen3-Next's layer): q, k, v, o, a full
    output gate (h x H d_v), a_proj and b_proj (h x H each); vectors: convolutions, A_log and
    dt_bias (H each), the norm (d_v).
    Legend: h = hidden_size, H = num_heads, d_k = head_dim, d_v = value width, W = taps.
    The gates (and the vectors beyond the convolutions) are counted by the kind's record
    (`models.core.layer_kinds.linear_attention`).
    """
    la = _linear(spec)
    h, heads, dk, dv = spec.hidden_size, la.num_heads, la.head_dim, la.dim_v
    qkvo = 2 * h * heads * dk + 2 * h * heads * dv
    conv = (2 * heads * dk + heads * dv) * la.short_conv_kernel_size
    gates, vectors = linear_attention_kind(la).gate_weights(spec, la)
    return LinearAttentionWeights(matrices=qkvo + gates, vectors=conv + vectors)


def linear_attention_gemm_shapes(spec: ModelSpec, *, tokens: int, tp: int
                                 ) -> list[tuple[int, int, int]]:
    """(m, n, k) of the block's GEMMs on one TP rank (heads split by tp; the low-rank gate
    down-projections f_a, g_a are replicated, as MLA's latent projections are)."""
    la = _linear(spec)
    h, dk, dv = spec.hidden_size, la.head_dim, la.dim_v
    heads = max(1, la.num_heads // tp)
    shapes = [(tokens, heads * (2 * dk + dv), h), (tokens, h, heads * dv)]
    return shapes + linear_attention_kind(la).gate_gemm_shapes(spec, la, tokens=tokens,
                                                              heads=heads)


def chunkwise_forward_flops_per_token_head(la: LinearAttentionSpec) -> float:
    """Forward FLOPs of the chunkwise kernel per token and head.

    Per chunk of C tokens and per head, the chunkwise delta rule ([YAN24] Sec. 3.2-3.3; KDA's
    WY form [KL25] Sec. 3) computes: intra-chunk A_kk = (K . decay) K^T and A_qk (2 C^2 d_k
    each), the inverse of the unit-lower-triangular (I + A_kk) (C^3 / 3), the WY factors
    W = T K (2 C^2 d_k) and U = T V (2 C^2 d_v), the masked intra-chunk output A_qk V_new
    (2 C^2 d_v); and against the state S (d_k x d_v): V_new = U - W S, O = Q S, and the
    update S += K^T V_new (2 C d_k d_v each). Per token: C (6 d_k + 4 d_v) + C^2 / 3
    + 6 d_k d_v, O(C d + d^2) as [YAN24] states: no term grows with the sequence length.
    """
    c, dk, dv = la.chunk_size, la.head_dim, la.dim_v
    return c * (6 * dk + 4 * dv) + c * c / 3.0 + 6.0 * dk * dv


def linear_attention_core_forward_flops(spec: ModelSpec, *, seq_len: int) -> float:
    """Forward FLOPs of the linear-attention core for one sequence: s H times
    `chunkwise_forward_flops_per_token_head` (the chunk size capped at s). Linear in s, where
    the softmax core is quadratic (`models.core.flops.attention_core_forward_flops`)."""
    la = _linear(spec)
    if la.chunk_size > seq_len:
        la = la.model_copy(update={"chunk_size": max(1, seq_len)})
    return seq_len * la.num_heads * chunkwise_forward_flops_per_token_head(la)


def kcp_extra_forward_flops(spec: ModelSpec, *, tokens: int, cp: int, tp: int = 1) -> float:
    """Extra forward FLOPs of state-passing context parallelism on one rank: building the
    rank's transition M (a d_k x d_k product per chunk of C tokens, 2 C d_k^2, so 2 d_k^2
    per token) and composing the affine maps of the ranks before it (at most cp - 1
    products of d_k x d_k by d_k x (d_k + d_v), redundantly on every rank).
    Source: [KCP] (pre-processing stage 2 builds M; the merge applies the gathered maps)."""
    if cp <= 1:
        return 0.0
    la = _linear(spec)
    heads = max(1, la.num_heads // tp)
    dk, dv = la.head_dim, la.dim_v
    build = 2.0 * tokens * dk * dk
    merge = (cp - 1) * 2.0 * dk * dk * (dk + dv)
    return heads * (build + merge)


def linear_attention_core_time_s(spec: ModelSpec, flop: float, *, peak_flop_per_s: float,
                                 efficiency_scale: float = 1.0) -> float:
    """Time of `flop` chunkwise-kernel FLOPs at the kind's
    `LINEAR_ATTENTION_KERNEL_EFFICIENCY` of the BF16 peak (scaled as a calibration profile
    scales the attention kernels)."""
    if flop <= 0:
        return 0.0
    efficiency = linear_attention_kind(_linear(spec)).kernel_efficiency
    return flop / (peak_flop_per_s * efficiency * efficiency_scale)


def state_bytes_per_head(la: LinearAttentionSpec) -> int:
    """Bytes of one head's recurrent state S (d_k x d_v, fp32)."""
    return la.head_dim * la.dim_v * STATE_BYTES


def kcp_fragment_bytes(spec: ModelSpec, *, tp: int = 1) -> int:
    """Bytes one rank contributes to the state all-gather of one linear layer pass: per
    local head the final state h (d_k x d_v) and the transition M (d_k x d_k), fp32
    ([KCP]: the [H, K, K + V] fp32 buffer). Independent of the sequence length."""
    la = _linear(spec)
    heads = max(1, la.num_heads // tp)
    return heads * la.head_dim * (la.head_dim + la.dim_v) * STATE_BYTES


def conv_halo_bytes(spec: ModelSpec, *, micro_batch_size: int, tp: int = 1,
                    activation_bytes: int = 2) -> int:
    """Bytes the short causal convolutions need from the previous rank: its last W - 1
    tokens of the q, k, v inputs ([KCP] `causal_conv1d` with `conv1d_kernel_size`)."""
    la = _linear(spec)
    heads = max(1, la.num_heads // tp)
    taps = max(0, la.short_conv_kernel_size - 1)
    return micro_batch_size * taps * heads * (2 * la.head_dim + la.dim_v) * activation_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearStoredTerm:
    """One tensor (group) a linear-attention block keeps for backward, bytes per token on
    one rank, and whether recomputing the attention core rebuilds it."""

    name: str
    bytes_per_token: float
    core_recomputable: bool


def linear_attention_stored_terms(spec: ModelSpec, *, tp: int, activation_bytes: int
                                  ) -> list[LinearStoredTerm]:
    """What the backward of one linear-attention block keeps, per token on one TP rank.

    [KL25] `KimiDeltaAttention.forward` with the flash-linear-attention `chunk_kda` kernel:
    the q/k/v projection outputs (the convolutions' inputs) and the convolution outputs (the
    kernel's inputs, L2-normalised q/k), the fp32 per-channel decay gate and beta, the
    low-rank gate activations (f_a, g_a outputs), the intra-chunk A_qk and A_kk (C per
    token and head each), the output gate, the kernel output (the gated norm's input) and
    the output projection's input; and the recurrent state at every chunk boundary
    (d_k x d_v fp32 per head, one per C tokens), which `chunk_kda` rebuilds in backward when
    recomputation is on (so `core_recomputable`).
    Legend: H_t = heads per TP rank, d_k, d_v, C = chunk_size.
    """
    la = _linear(spec)
    heads = max(1, la.num_heads // tp)
    dk, dv, c, act = la.head_dim, la.dim_v, la.chunk_size, activation_bytes
    qkv = heads * (2 * dk + dv)
    terms = [
        LinearStoredTerm(name="q, k, v before the short convolutions",
                         bytes_per_token=act * qkv, core_recomputable=False),
        LinearStoredTerm(name="q, k, v after the convolutions (kernel inputs)",
                         bytes_per_token=act * qkv, core_recomputable=True),
        LinearStoredTerm(name="decay gate and beta (fp32)",
                         bytes_per_token=GATE_BYTES * heads * (dk + 1), core_recomputable=False),
        LinearStoredTerm(name="intra-chunk A_qk and A_kk",
                         bytes_per_token=act * 2 * heads * c, core_recomputable=True),
        LinearStoredTerm(name="chunk-boundary recurrent states (fp32)",
                         bytes_per_token=STATE_BYTES * heads * dk * dv / c,
                         core_recomputable=True),
        LinearStoredTerm(name="output gate, kernel output, o_proj input",
                         bytes_per_token=act * 3 * heads * dv, core_recomputable=False),
    ]
    terms += [LinearStoredTerm(name=term.name, bytes_per_token=term.bytes_per_token,
                               core_recomputable=False)
              for term in linear_attention_kind(la).extra_stored_terms(
                  la, activation_bytes=act)]
    return terms


__all__ = [
    "FULL_ATTENTION_CP_KINDS",
    "GATE_BYTES",
    "LINEAR_ATTENTION_BACKWARD_FLOP_RATIO",
    "LINEAR_ATTENTION_KERNEL_EFFICIENCY",
    "STATE_BYTES",
    "STATE_PASSING",
    "LinearAttentionWeights",
    "LinearStoredTerm",
    "chunkwise_forward_flops_per_token_head",
    "conv_halo_bytes",
    "cp_kinds_for_layer",
    "cp_layer_note",
    "kcp_extra_forward_flops",
    "kcp_fragment_bytes",
    "linear_attention_core_forward_flops",
    "linear_attention_core_time_s",
    "linear_attention_gemm_shapes",
    "linear_attention_stored_terms",
    "linear_attention_weights",
    "state_bytes_per_head",
]
