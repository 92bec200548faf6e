"""Compute time of one layer (and of the output head) for one micro-batch on one rank.

Owns: the GEMMs of each block with their rank-local shapes (tensor, context and expert
parallelism applied), their forward (F), input-gradient (B) and weight-gradient (W) times,
the attention core, the memory-bound elementwise kernels, and the extra time each kind of
recomputation adds. Must not: include communication or pipeline effects (see
`models/core/step_time.py`).

Sources: the split of backward into an input-gradient GEMM and a weight-gradient GEMM of the
same FLOPs as forward (Zero Bubble arXiv:2401.10241 Sec. 2, Table 1); GEMM and attention
throughput from `models/catalog/kernels.py`; the backward of a fused attention kernel costs 2.5x its
forward FLOPs (FlashAttention-2 arXiv:2307.08691 Sec. 4.1) and of a materialised one 2x.
"""

import math
from dataclasses import dataclass, field, replace

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.hardware import GpuSpec
from api_schemas.parallel import RecomputeModule
from api_schemas.training import AttentionKernel, CudaGraphModule, ElementwiseFusion, MoeDispatcher
from models.catalog.kernels import (
    GEMM_TILE,
    PROFILES,
    GemmRates,
    KernelProfile,
    attention_time_s,
    calibrated_profile,
    gemm_rates,
    gemm_time_at,
    memory_bound_time_s,
    profile_for,
)
from models.core.attention_window import window_loop_keys, window_work_fraction
from models.core.flops import attention_core_forward_flops
from models.core.layer_kinds import attention_kind, mlp_kind
from models.core.linear_attention import (
    LINEAR_ATTENTION_BACKWARD_FLOP_RATIO,
    kcp_extra_forward_flops,
    linear_attention_core_forward_flops,
    linear_attention_core_time_s,
    linear_attention_gemm_shapes,
)
from models.core.moe.expert_gemm import local_experts_gemm_s
from models.core.moe.host_issue import moe_host_idle_s, moe_host_sync_s
from models.core.moe.passes import (
    ALLTOALL_LOCAL_SORT_PASSES,
    FP8_QUANTIZE_BYTES_PER_ELEMENT,
    MOE_PERMUTE_PASSES,
    ROUTER_BYTES_PER_SCORE,
)
from models.core.moe.permute import unfused_permute_extra_bytes
from models.core.runtime_passes import RUNTIME_PASSES, OpPasses
from models.core.search_memo import current_memo, forget_memos, kept

FLASH_BACKWARD_FLOP_RATIO = 2.5
"""Backward / forward FLOPs of a fused attention kernel (it recomputes the scores).
Source: FlashAttention-2 arXiv:2307.08691 Sec. 4.1."""

MATERIALIZED_BACKWARD_FLOP_RATIO = 2.0
"""Backward / forward FLOPs of attention with stored scores (dQ, dK, dV, dP)."""

ELEMENTWISE_BACKWARD_RATIO = 2.0
"""Backward elementwise kernels read the saved input and the incoming gradient and write the
outgoing gradient: about twice the forward bytes."""

M = RecomputeModule


def _scaled_family_profile(family: str, scale: float, attention_scale: float = 1.0
                           ) -> KernelProfile:
    """A family's published profile with its eta_max and attention efficiency scaled (kept
    on the search's memo: read once per GEMM; `clear_compute_cache` forgets it when a
    script swaps `PROFILES`)."""
    memo = current_memo()
    key = (family, scale, attention_scale)
    return kept(memo.profiles, key,
                lambda: calibrated_profile(PROFILES[family], scale,
                               attention_efficiency_scale=attention_scale))


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeContext:
    """Everything besides the layer that sets its kernel shapes and speeds."""

    gpu: GpuSpec
    seq_len: int
    micro_batch_size: int
    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    sequence_parallel: bool = False
    compute_dtype: DType = DType.BF16
    flash_attention: bool = True
    dropout: bool = False
    moe_load_imbalance: float = 1.0
    moe_dispatcher: MoeDispatcher = MoeDispatcher.ALLTOALL
    elementwise_fusion: ElementwiseFusion = ElementwiseFusion.FUSED
    attention_kernel: AttentionKernel | None = None
    """The fused attention kernel the runtime names (`TrainingSpec.attention_kernel`; None: the
    runtime's own, by `elementwise_fusion`)."""
    checkpoint_early_stop: bool = False
    """A whole-layer recomputation skips a dense layer's last GEMM
    (`models.core.step_time.stage.checkpoint_stops_early`)."""
    moe_grouped_gemm: bool = True
    """The local experts run as one grouped GEMM (False: one GEMM per expert in turn)."""
    moe_permute_fusion: bool = True
    """The MoE permutation runs fused (False: `models.core.moe.permute`'s extra bytes)."""
    profile: KernelProfile | None = None
    gemm_efficiency_scale: float = 1.0
    """A calibration profile's multiplier on the profile's eta_max (1: as published)."""
    attention_efficiency_scale: float = 1.0
    """A calibration profile's multiplier on the attention efficiencies (1: as published)."""
    moe_host_issue_s: float | None = None
    """A calibration profile's fitted eager host issue time of one MoE layer forward
    (seconds), in place of `models.core.moe.host_issue.MOE_HOST_ISSUE_S` (None: the published
    constant)."""
    cuda_graph_modules: tuple[CudaGraphModule, ...] = ()
    """The runtime's CUDA graph capture regions (`TrainingSpec.cuda_graph_modules`), which
    shorten the host issue of an MoE layer (`models.core.moe.host_issue`)."""

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch on this rank's sequence shard."""
        return max(1, self.seq_len * self.micro_batch_size // self.cp)

    @property
    def kernel_profile(self) -> KernelProfile:
        """The calibrated profile of the GPU (its eta_max scaled by a calibration profile's
        `gemm_efficiency_scale`, `models.catalog.kernels.calibrated_profile`)."""
        if self.gemm_efficiency_scale == 1.0 and self.attention_efficiency_scale == 1.0:
            return self.profile or profile_for(self.gpu)
        if self.profile is not None:
            return calibrated_profile(self.profile, self.gemm_efficiency_scale,
                                      attention_efficiency_scale=self.attention_efficiency_scale)
        return _scaled_family_profile(profile_for(self.gpu).family, self.gemm_efficiency_scale,
                                      self.attention_efficiency_scale)


@dataclass(frozen=True, slots=True, kw_only=True)
class OpTimes:
    """Forward, input-gradient and weight-gradient time of a block."""

    forward_s: float = 0.0
    backward_input_s: float = 0.0
    backward_weight_s: float = 0.0

    def __add__(self, other: "OpTimes") -> "OpTimes":
        return OpTimes(forward_s=self.forward_s + other.forward_s,
                       backward_input_s=self.backward_input_s + other.backward_input_s,
                       backward_weight_s=self.backward_weight_s + other.backward_weight_s)

    @property
    def total_s(self) -> float:
        """F + B + W."""
        return self.forward_s + self.backward_input_s + self.backward_weight_s


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerCompute:
    """Compute times of one layer for one micro-batch and the cost of each recomputation."""

    times: OpTimes
    recompute_full_s: float
    """Forward compute redone when the whole layer is recomputed."""
    recompute_module_s: dict[RecomputeModule, float] = field(default_factory=dict)
    """Forward compute redone by each selective recompute module."""

    def recompute_s(self, modules: tuple[RecomputeModule, ...]) -> float:
        """Extra time of selective recomputation of `modules`."""
        # dict.fromkeys: each module once, in the given order (a set would sum in an order
        # that depends on the hash seed, moving the last bit between processes).
        return sum(self.recompute_module_s.get(module, 0.0) for module in dict.fromkeys(modules))


@dataclass(frozen=True, slots=True, kw_only=True)
class _Gemm:
    m: int
    n: int
    k: int
    module: RecomputeModule | None = None
    groups: int = 1
    """Independent problems of this shape in one grouped launch (local experts)."""


def _shape_time(g: _Gemm, m: int, n: int, k: int, ctx: ComputeContext,
                profile: KernelProfile | None = None, rates: GemmRates | None = None) -> float:
    """One (m x k) @ (k x n) pass of `g`: over its groups (grouped, or one GEMM per group,
    `models.core.moe.expert_gemm.local_experts_gemm_s`), or a plain GEMM (`profile`: the
    context's `kernel_profile`, and `rates` its `gemm_rates`, read here when not given)."""
    if profile is None:
        profile = ctx.kernel_profile
    if g.groups > 1:
        return local_experts_gemm_s(g.groups, m, n, k, gpu=ctx.gpu, dtype=ctx.compute_dtype,
                                    profile=profile, grouped=ctx.moe_grouped_gemm)
    if rates is None:
        rates = gemm_rates(ctx.gpu, ctx.compute_dtype, profile)
    return gemm_time_at(m, n, k, rates)


def _gemm_times(gemms: list[_Gemm], ctx: ComputeContext) -> tuple[OpTimes, dict[M, float]]:
    """The F, B and W of `gemms` summed in list order, and each recompute module's forward
    share (the context's kernel profile read once for all)."""
    profile = ctx.kernel_profile
    rates = gemm_rates(ctx.gpu, ctx.compute_dtype, profile)
    forward = backward_input = backward_weight = 0.0
    modules: dict[M, float] = {}
    for g in gemms:
        f = _shape_time(g, g.m, g.n, g.k, ctx, profile, rates)
        forward += f
        backward_input += _shape_time(g, g.m, g.k, g.n, ctx, profile, rates)
        backward_weight += _shape_time(g, g.k, g.n, g.m, ctx, profile, rates)
        if g.module is not None:
            modules[g.module] = modules.get(g.module, 0.0) + f
    return OpTimes(forward_s=forward, backward_input_s=backward_input,
                   backward_weight_s=backward_weight), modules


def attention_gemms(spec: ModelSpec, ctx: ComputeContext) -> list[_Gemm]:
    """Rank-local GEMMs of the attention block (Megatron column/row parallel split)."""
    shapes = attention_kind(spec).gemm_shapes(spec, tokens=ctx.tokens, tp=ctx.tp)
    return [_Gemm(m=g.m, n=g.n, k=g.k, module=g.module) for g in shapes]


def mlp_gemms(spec: ModelSpec, width: int, *, tokens: int, split: int,
              module: RecomputeModule) -> list[_Gemm]:
    """Up (gate+up for SwiGLU) and down projections of an MLP of intermediate `width`."""
    up = mlp_kind(spec).up_matrices * width // split
    return [_Gemm(m=tokens, n=up, k=spec.hidden_size, module=module),
            _Gemm(m=tokens, n=spec.hidden_size, k=width // split, module=module)]


def routed_assignments(spec: ModelSpec, ctx: ComputeContext) -> float:
    """Token-expert assignments the busiest rank computes per micro-batch:
    tokens x top-k x etp / tp x imbalance (the all-to-all keeps the total per rank)."""
    moe = spec.moe
    assert moe is not None
    return ctx.tokens * moe.top_k * ctx.etp / ctx.tp * ctx.moe_load_imbalance


def moe_gemms(spec: ModelSpec, ctx: ComputeContext) -> list[_Gemm]:
    """Router, grouped expert GEMMs at the real per-expert shape (tokens per local expert,
    tile-padded; `models.core.moe.expert_gemm.local_experts_gemm_s`) and shared experts."""
    moe = spec.moe
    assert moe is not None
    local_experts = max(1, moe.num_experts // ctx.ep)
    per_expert = routed_assignments(spec, ctx) / local_experts
    padded = math.ceil(per_expert / GEMM_TILE) * GEMM_TILE
    out = [_Gemm(m=ctx.tokens, n=moe.num_experts, k=spec.hidden_size)]
    up, down = (replace(g, groups=local_experts)
                for g in mlp_gemms(spec, moe.expert_ffn_hidden_size, tokens=int(padded),
                                   split=ctx.etp, module=M.MOE))
    # The down projection re-runs alone under `moe_down_proj` recomputation (Kimi K2).
    out += [up, replace(down, module=M.MOE_DOWN_PROJ)]
    if moe.num_shared_experts:
        out += mlp_gemms(spec, moe.shared_expert_ffn_hidden_size, tokens=ctx.tokens,
                         split=ctx.tp, module=M.SHARED_EXPERTS)
    return out


MOE_ELEMENTWISE_KEYS = ("moe_act", "permute", "router", "moe_quantize", "shared_act")
"""The memory-bound kernels of `_elementwise_bytes` that belong to the MoE block."""


def moe_block_times(spec: ModelSpec, ctx: ComputeContext) -> OpTimes:
    """F, B, W compute time of the MoE block alone (router, grouped expert GEMMs, shared
    experts, activation, permutation, host sync) for one micro-batch: the part of an MoE
    layer that Megatron-LM's `moe_perf` benchmark times (`MoELayer` forward and backward,
    without the attention block and without communication)."""
    if spec.moe is None:
        return OpTimes()
    times, _ = _gemm_times(moe_gemms(spec, ctx), ctx)
    elementwise = _elementwise_bytes(spec, ctx, moe_layer=True)
    elem_f = sum(memory_bound_time_s(elementwise.get(key, 0.0), gpu=ctx.gpu)
                 for key in MOE_ELEMENTWISE_KEYS)
    return times + OpTimes(forward_s=elem_f + moe_host_sync_s(spec, ctx),
                           backward_input_s=ELEMENTWISE_BACKWARD_RATIO * elem_f)


def _elementwise_bytes(spec: ModelSpec, ctx: ComputeContext, *,
                       moe_layer: bool) -> dict[str, float]:
    """Forward HBM bytes of memory-bound kernels per micro-batch, by recompute module.

    Per token (2-byte elements): each norm reads and writes h; each residual add reads 2h
    and writes h; the activation reads the up-projection output (2f SwiGLU, f GELU) and
    writes f; RoPE reads and writes q and k; dropout adds a 1-byte mask at each residual site,
    where one fused kernel applies bias, dropout and the residual add (it reads x and the
    residual and writes the sum: the residual's passes). Tensors replicated across TP are
    processed by every TP rank unless sequence parallelism splits them.
    Source (fused bias-dropout-add): Megatron-LM `megatron/model/transformer.py`
    (`bias_dropout_add_fused_train`, `@torch.jit.script`) at 6985e58938 (2021, GPU fusion on
    in `megatron/model/fused_bias_gelu.py`) and 80389ef6e2 (2022, nvfuser and
    `_warmup_jit_function` in `megatron/initialize.py`); Megatron-Core `get_bias_dropout_add`.
    """
    rep = ctx.tp if ctx.sequence_parallel else 1
    tokens, h = ctx.tokens, spec.hidden_size
    act_in = mlp_kind(spec).up_matrices
    norms = tokens * 2 * (2 * h * 2) / rep
    residual = tokens * 2 * (3 * h * 2) / rep
    dropout = tokens * 2 * h / rep if ctx.dropout else 0.0
    heads = (spec.num_attention_heads + 2 * spec.kv_heads) / ctx.tp
    rope = tokens * 2 * 2 * heads * spec.dim_per_head
    out = {"norms": norms, "other": residual + dropout + rope}
    if moe_layer and spec.moe is not None:
        copies = routed_assignments(spec, ctx)
        width = spec.moe.expert_ffn_hidden_size / ctx.etp
        out["moe_act"] = copies * (act_in + 1) * width * 2
        local_experts = max(1, spec.moe.num_experts // ctx.ep)
        passes = MOE_PERMUTE_PASSES + (
            ALLTOALL_LOCAL_SORT_PASSES
            if ctx.moe_dispatcher == MoeDispatcher.ALLTOALL and local_experts > 1 else 0)
        out["permute"] = copies * h * 2 * 2 * passes + (
            0.0 if ctx.moe_permute_fusion else unfused_permute_extra_bytes(
                assignments=copies, top_k=spec.moe.top_k, hidden_size=h))
        out["router"] = tokens / rep * spec.moe.num_experts * ROUTER_BYTES_PER_SCORE
        if ctx.compute_dtype == DType.FP8:
            out["moe_quantize"] = copies * (h + width) * FP8_QUANTIZE_BYTES_PER_ELEMENT
        if spec.moe.num_shared_experts:
            shared = spec.moe.shared_expert_ffn_hidden_size / ctx.tp
            out["shared_act"] = tokens * (act_in + 1) * shared * 2
    else:
        out["mlp_act"] = tokens * (act_in + 1) * spec.ffn_hidden_size / ctx.tp * 2
    return out


def _runtime_elementwise_bytes(spec: ModelSpec, ctx: ComputeContext) -> dict[str, OpPasses]:
    """Per-micro-batch (forward, backward) HBM bytes of a dense layer's memory-bound ops
    under an unfused runtime, by the keys of `_elementwise_bytes`: the elements each op
    touches per token times its `RUNTIME_PASSES` bytes. Tensors replicated across TP are
    processed by every TP rank unless sequence parallelism splits them."""
    table = RUNTIME_PASSES[ctx.elementwise_fusion]
    rep = ctx.tp if ctx.sequence_parallel else 1
    tokens, h = ctx.tokens, spec.hidden_size
    d, kv = spec.dim_per_head, max(spec.kv_heads // ctx.tp, 1)
    q = max(spec.num_attention_heads // ctx.tp, 1)
    elements = {
        "norms": {"norm": 2 * h / rep},
        "other": {"residual": 2 * h / rep, "rope": (q + kv) * d,
                  "repeat_kv": 2 * q * d if q > kv else 0.0},
        "mlp_act": {mlp_kind(spec).name: spec.ffn_hidden_size / ctx.tp},
    }
    out = {key: OpPasses(forward=tokens * sum(n * table[op].forward for op, n in ops.items()),
                         backward=tokens * sum(n * table[op].backward for op, n in ops.items()))
           for key, ops in elements.items()}
    if ctx.dropout:  # a separate dropout kernel at each residual site: read, write, mask
        dropout = tokens * 2 * (2 * h * 2 + h) / rep
        other = out["other"]
        out["other"] = OpPasses(forward=other.forward + dropout,
                                backward=other.backward + ELEMENTWISE_BACKWARD_RATIO * dropout)
    return out


def op_sac_gemms(spec: ModelSpec, ctx: ComputeContext, *, moe_layer: bool) -> list[_Gemm]:
    """The matmuls torchtitan's per-op selective checkpointing recomputes: of a layer's
    matmuls in call order (wq, wk, wv, wo, then w1, w3, w2 for SwiGLU or up, down for GELU)
    the policy saves the odd ones and rebuilds every second one (K, the output projection,
    and w3 or the down projection), rank-local shapes as `attention_gemms`.
    Source: torchtitan parallelize_llama.py at 9dec370 (`_save_list` and the mm counter of
    `_custom_policy`: "Saves output of all compute ops, except every second mm").
    Assumes: MLA attention and MoE blocks are not torchtitan Llama layers; for them only the
    attention matmuls of a plain layer are counted (none for MLA).
    """
    t, h, tokens = ctx.tp, spec.hidden_size, ctx.tokens
    attention = [_Gemm(m=g.m, n=g.n, k=g.k, module=g.module)
                 for g in attention_kind(spec).op_sac_gemm_shapes(spec, tokens=tokens, tp=t)]
    mlp: list[_Gemm] = []
    if not moe_layer:
        f = spec.ffn_hidden_size // t
        up = [_Gemm(m=tokens, n=f, k=h)] * mlp_kind(spec).up_matrices
        mlp = up + [_Gemm(m=tokens, n=h, k=f)]
    return (attention + mlp)[1::2]


def _attention_core(spec: ModelSpec, ctx: ComputeContext, window: int | None = None,
                    chunk: int | None = None) -> tuple[float, float]:
    """(forward, backward) time of the attention core on this rank. A fused kernel skips the
    masked half of a causal score matrix, and in a sliding-window layer every key tile outside
    the window (`window_kernel_keys`, the causal ramp of the first query tiles included; the
    kernel's length saturation is that of a causal sequence of twice its longest key loop,
    `window_loop_keys`); in a chunked layer every
    tile outside the query's own chunk (its work that of s / C causal sequences of C tokens,
    `attention_core_forward_flops` with `chunk`, at the saturation of sequences of C: C is a
    multiple of the key tile, so no tile straddles two chunks); a materialised one computes
    all of the s x s matrix whatever the mask (Transformer Engine's unfused path turns a
    window into an arbitrary mask over it). A runtime
    that leaves the elementwise ops to PyTorch (eager or torch.compile, as torchtitan) calls
    attention through `scaled_dot_product_attention` (torchtitan `model.py` at 9dec370:
    `F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)`), whose default backend is
    FlashAttention-2 (`models.catalog.kernels.KernelProfile.sdpa_attention_frac`). A runtime
    that names its kernel (`TrainingSpec.attention_kernel`) runs at that kernel's level
    (`models.catalog.kernels.fused_attention_frac`)."""
    flop = (attention_core_forward_flops(spec, seq_len=ctx.seq_len, causal=ctx.flash_attention)
            * ctx.micro_batch_size / ctx.tp / ctx.cp)
    ratio = FLASH_BACKWARD_FLOP_RATIO if ctx.flash_attention else MATERIALIZED_BACKWARD_FLOP_RATIO
    kernel_seq = max(1, ctx.seq_len // ctx.cp)
    if ctx.flash_attention and chunk is not None and chunk < ctx.seq_len:
        # A window inside the chunks (no known model has both) trims each chunk's pairs.
        flop = (attention_core_forward_flops(spec, seq_len=ctx.seq_len, causal=True,
                                             window=window, chunk=chunk)
                * ctx.micro_batch_size / ctx.tp / ctx.cp)
        kernel_seq = max(1, min(kernel_seq, chunk))
    elif ctx.flash_attention and window is not None and window < ctx.seq_len:
        flop *= window_work_fraction(window, seq_len=ctx.seq_len)
        kernel_seq = max(1, min(kernel_seq, 2 * window_loop_keys(window, seq_len=ctx.seq_len)))
    forward = attention_time_s(flop, seq_len=kernel_seq, gpu=ctx.gpu, flash=ctx.flash_attention,
                               profile=ctx.kernel_profile,
                               sdpa=ctx.elementwise_fusion.pytorch_native,
                               kernel=ctx.attention_kernel)
    dropout = attention_dropout_time_s(spec, ctx)
    return forward + dropout, forward * ratio + dropout


ATTENTION_DROPOUT_BYTES_PER_SCORE = 2 + 2 + 1
"""HBM bytes per attention-probability element of a separate dropout kernel over the
materialised s x s matrix, forward and again backward: forward reads the 16-bit
probabilities, writes the dropped ones and a 1-byte mask; backward reads the 16-bit gradient
and the mask and writes the 16-bit gradient. Source: Megatron-LM `megatron/model/
transformer.py` (2021-2022: `attention_probs = self.attention_dropout(attention_probs)` after
`FusedScaleMaskSoftmax`, a separate `torch.nn.Dropout`); Korthikanti et al. arXiv:2205.05198
Sec. 4.1 (the 1-byte mask and 2-byte output among the 5 a s^2 b activation bytes)."""


def attention_dropout_time_s(spec: ModelSpec, ctx: ComputeContext) -> float:
    """Time of the attention-probability dropout over the materialised score matrix on this
    rank, forward or backward (`ATTENTION_DROPOUT_BYTES_PER_SCORE` per score element); 0 with
    a fused attention kernel (its dropout runs inside) or without dropout. The unfused
    attention level (`KernelProfile.materialized_attention_frac`, FlashAttention-2's PyTorch
    baseline) is measured without dropout (`benchmarks/benchmark_flash_attention.py`,
    `dropout_p = 0.0`), so this adds to it.
    Legend: scores = b (a / t) (s / cp) s."""
    if ctx.flash_attention or not ctx.dropout:
        return 0.0
    heads = spec.num_attention_heads / ctx.tp
    scores = ctx.micro_batch_size * heads * (ctx.seq_len / ctx.cp) * ctx.seq_len
    return memory_bound_time_s(scores * ATTENTION_DROPOUT_BYTES_PER_SCORE, gpu=ctx.gpu)


def layer_compute(spec: ModelSpec, layer_index: int, ctx: ComputeContext) -> LayerCompute:
    """F, B, W compute time of one layer for one micro-batch on one rank, and what each
    recomputation would add to its backward (layers of one timing kind, MoE or dense, with
    the same attention window, linear or softmax attention, are alike: kept per kind on the
    search's memo).

    In a hybrid model (linear-attention layers beside full-attention ones) each layer is
    timed with its own token mixer: the step-time machinery times each kind of layer a
    rank holds on its own (`models.core.step_time.timing_kinds.timing_kind`)."""
    key = (spec.is_moe_layer(layer_index), ctx, spec.attention_window(layer_index),
           spec.is_linear_attention_layer(layer_index), spec.attention_chunk(layer_index))
    memo = current_memo()
    table = memo.tables(spec).layer_compute
    return kept(table, key, lambda: _layer_compute(spec, *key))


def linear_attention_gemms(spec: ModelSpec, ctx: ComputeContext) -> list[_Gemm]:
    """Rank-local GEMMs of a linear-attention block
    (`models.core.linear_attention.linear_attention_gemm_shapes`)."""
    return [_Gemm(m=m, n=n, k=k)
            for m, n, k in linear_attention_gemm_shapes(spec, tokens=ctx.tokens, tp=ctx.tp)]


def _linear_attention_core(spec: ModelSpec, ctx: ComputeContext) -> tuple[float, float]:
    """(forward, backward) time of the chunkwise linear-attention kernel on this rank: the
    rank's s / cp tokens (state passing keeps the local work, seed ledger Sec. 7.5), plus
    the transition building and merge of state-passing CP
    (`models.core.linear_attention.kcp_extra_forward_flops`), at the kind's
    `LINEAR_ATTENTION_KERNEL_EFFICIENCY`."""
    local_seq = max(1, ctx.seq_len // ctx.cp)
    flop = (linear_attention_core_forward_flops(spec, seq_len=local_seq)
            * ctx.micro_batch_size / ctx.tp)
    flop += ctx.micro_batch_size * kcp_extra_forward_flops(spec, tokens=local_seq, cp=ctx.cp,
                                                           tp=ctx.tp)
    forward = linear_attention_core_time_s(spec, flop, peak_flop_per_s=ctx.gpu.peak_flop_per_s(
        DType.BF16), efficiency_scale=ctx.attention_efficiency_scale)
    return forward, forward * LINEAR_ATTENTION_BACKWARD_FLOP_RATIO


def _layer_compute(spec: ModelSpec, moe_layer: bool, ctx: ComputeContext,
                   window: int | None = None, linear: bool = False,
                   chunk: int | None = None) -> LayerCompute:
    gemms = linear_attention_gemms(spec, ctx) if linear else attention_gemms(spec, ctx)
    if moe_layer:
        gemms += moe_gemms(spec, ctx)
    else:
        gemms += mlp_gemms(spec, spec.ffn_hidden_size, tokens=ctx.tokens, split=ctx.tp,
                           module=M.MLP)
    times, module_s = _gemm_times(gemms, ctx)
    attn_f, attn_b = (_linear_attention_core(spec, ctx) if linear
                      else _attention_core(spec, ctx, window, chunk))
    elementwise = {key: memory_bound_time_s(value, gpu=ctx.gpu)
                   for key, value in _elementwise_bytes(spec, ctx, moe_layer=moe_layer).items()}
    elem_b = {key: ELEMENTWISE_BACKWARD_RATIO * value for key, value in elementwise.items()}
    if ctx.elementwise_fusion != ElementwiseFusion.FUSED:
        for key, passes in _runtime_elementwise_bytes(spec, ctx).items():
            if key in elementwise:
                elementwise[key] = memory_bound_time_s(passes.forward, gpu=ctx.gpu)
                elem_b[key] = memory_bound_time_s(passes.backward, gpu=ctx.gpu)
    elem_f = sum(elementwise.values())
    sync = moe_host_sync_s(spec, ctx) if moe_layer else 0.0
    if moe_layer:
        sync += moe_host_idle_s(spec, ctx, times.forward_s + attn_f + elem_f + sync)
    times = times + OpTimes(forward_s=attn_f + elem_f + sync,
                            backward_input_s=attn_b + sum(elem_b.values()))
    module_s[M.CORE_ATTN] = attn_f
    module_s[M.LAYERNORM] = elementwise["norms"]
    module_s[M.MOE_ACT] = elementwise.get("moe_act", 0.0)
    module_s[M.MLP] = module_s.get(M.MLP, 0.0) + elementwise.get("mlp_act", 0.0)
    module_s[M.MOE] = (module_s.get(M.MOE, 0.0) + module_s.get(M.MOE_DOWN_PROJ, 0.0)
                       + elementwise.get("moe_act", 0.0)
                       + elementwise.get("permute", 0.0)
                       + elementwise.get("router", 0.0)
                       + elementwise.get("moe_quantize", 0.0) + sync)
    module_s[M.SHARED_EXPERTS] = (module_s.get(M.SHARED_EXPERTS, 0.0)
                                  + elementwise.get("shared_act", 0.0))
    # torchtitan's per-op policy: every second matmul and every memory-bound op, forward.
    module_s[M.OP_SAC] = elem_f + sum(
        _shape_time(g, g.m, g.n, g.k, ctx) for g in op_sac_gemms(spec, ctx, moe_layer=moe_layer))
    # PyTorch's non-reentrant checkpoint stops once the last saved tensor is rebuilt: the
    # input of a dense layer's down projection, whose GEMM (the layer's last) is not run.
    skipped = (_shape_time(gemms[-1], gemms[-1].m, gemms[-1].n, gemms[-1].k, ctx)
               if ctx.checkpoint_early_stop and not moe_layer else 0.0)
    return LayerCompute(times=times, recompute_full_s=times.forward_s - skipped,
                        recompute_module_s=module_s)


def clear_compute_cache() -> None:
    """Forget the kept layer times and scaled profiles, the current search's and the shared
    memo's (for calibration scripts that swap kernel profiles), with every other kept piece
    (`models.core.search_memo.forget_memos`)."""
    forget_memos()


def head_compute(spec: ModelSpec, ctx: ComputeContext) -> OpTimes:
    """Output projection (vocabulary-parallel) and the fp32 cross-entropy on the last stage:
    one fused pass set (write, softmax read/write in fp32) or, unfused, the eager loss
    passes of `RUNTIME_PASSES` (a .float() copy, log_softmax, and their backward);
    kept per model and context on the search's memo, as `layer_compute`."""
    memo = current_memo()
    table = memo.tables(spec).head_compute
    return kept(table, ctx, lambda: _head_compute(spec, ctx))


def _head_compute(spec: ModelSpec, ctx: ComputeContext) -> OpTimes:
    gemm = [_Gemm(m=ctx.tokens, n=math.ceil(spec.vocab_size / ctx.tp), k=spec.hidden_size)]
    times, _ = _gemm_times(gemm, ctx)
    logits = ctx.tokens * spec.vocab_size / ctx.tp
    if ctx.elementwise_fusion == ElementwiseFusion.FUSED:
        loss = memory_bound_time_s(logits * 4 * 3, gpu=ctx.gpu)  # write, softmax read/write
        return times + OpTimes(forward_s=loss, backward_input_s=loss)
    passes = RUNTIME_PASSES[ctx.elementwise_fusion]["loss"]
    return times + OpTimes(forward_s=memory_bound_time_s(logits * passes.forward, gpu=ctx.gpu),
                           backward_input_s=memory_bound_time_s(logits * passes.backward,
                                                                gpu=ctx.gpu))


__all__ = [
    "ATTENTION_DROPOUT_BYTES_PER_SCORE",
    "ELEMENTWISE_BACKWARD_RATIO",
    "FLASH_BACKWARD_FLOP_RATIO",
    "MATERIALIZED_BACKWARD_FLOP_RATIO",
    "MOE_ELEMENTWISE_KEYS",
    "ComputeContext",
    "LayerCompute",
    "OpTimes",
    "attention_dropout_time_s",
    "attention_gemms",
    "clear_compute_cache",
    "head_compute",
    "layer_compute",
    "linear_attention_gemms",
    "mlp_gemms",
    "moe_block_times",
    "moe_gemms",
    "op_sac_gemms",
    "routed_assignments",
]
