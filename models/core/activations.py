"""Activation bytes one transformer layer keeps for backward, per micro-batch.

Owns: the named tensors a layer stores between its forward and its backward, sized from the
matrix shapes, the module each belongs to (so selective recomputation can drop exactly what
it rebuilds), and how tensor parallelism, Megatron sequence parallelism, context parallelism
and FP8 storage change them. Must not: know how many micro-batches are in flight (the
pipeline schedule) or where the bytes live (see `models/core/memory.py`).

Reference: [KOR22] Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4 and Table 2. A GPT layer
keeps s b h (34 + 5 a s / h) bytes: attention 11 s b h + 5 a s^2 b, MLP 19 s b h, two
LayerNorms 4 s b h (16-bit tensors, 1-byte dropout masks). Adaptations (each a `Deviation`
from the GPT layer, stated where it is applied): GQA stores K/V with kv heads; MLA stores its
latents and per-head Q/K/V; SwiGLU stores the gate and up outputs; MoE stores top-k copies
of each token; a fused (flash) attention kernel stores the log-sum-exp instead of the
s x s scores; context parallelism divides every term by cp.
"""

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import DEFAULT_RECOMPUTE_MODULES, RecomputeMode, RecomputeModule
from models.core.layer_kinds import attention_kind, mlp_kind
from models.core.linear_attention import linear_attention_stored_terms
from models.core.search_memo import current_memo, kept

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

M = RecomputeModule


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
    moe_keep_expert_outputs: bool = False
    """Keep each routed copy's expert output for the gradient of a probability-weighted
    combine (see `moe_tensors`)."""
    norm_saves_output: bool = False
    """Each norm keeps its output and inverse RMS for backward instead of its input (the
    memory-efficient norm, see `_norm_tensors`)."""
    gathered_inputs_saved: bool = False
    """Sequence parallelism saves each column-parallel GEMM's all-gathered input (PyTorch
    DTensor, torchtitan) rather than its shard (Megatron-LM re-gathers it in backward)."""
    eager_elementwise: bool = False
    """The memory-bound ops run as separate eager PyTorch ops (`ElementwiseFusion.EAGER`),
    each saving what its own backward needs: SwiGLU's product saves the SiLU output beside
    the up output (see `_eager_silu_output`)."""

    @property
    def tokens(self) -> float:
        """Tokens of one micro-batch on this rank's sequence shard (s b / cp)."""
        return self.seq_len * self.micro_batch_size / self.cp

    @property
    def replicated_divisor(self) -> float:
        """Divisor of tensors TP replicates unless sequence parallelism shards them."""
        return float(self.tp if self.sequence_parallel else 1)

    @property
    def gemm_input_divisor(self) -> float:
        """Divisor of the input a column-parallel GEMM saves: the sequence shard under
        Megatron-LM's sequence parallelism ([KOR22] Sec. 4.2.2: the input is all-gathered
        again in backward), the whole gathered input under PyTorch DTensor's
        (`PrepareModuleInput` to `Replicate` before `ColwiseParallel`: autograd saves the
        linear's gathered input for the weight gradient)."""
        return 1.0 if self.gathered_inputs_saved else self.replicated_divisor


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredTensor:
    """One tensor (or group) a layer keeps for backward."""

    name: str
    block: str
    """'attention', 'mlp', 'norm' or 'input'."""
    bytes: int
    dropped_by: frozenset[RecomputeModule]
    """Selective recompute modules that rebuild it instead of storing it."""
    kept_only_by: frozenset[RecomputeModule] | None = None
    """Stored only when one of these selective modules is chosen, absent from the other
    modes: a per-op policy that saves it although backward does not need it (torchtitan's
    per-op policy saves matmul outputs by position), or a memory-efficient norm's input,
    which only the recomputation of the norm output needs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerActivationBytes:
    """Stored tensors of one layer for one micro-batch."""

    tensors: tuple[StoredTensor, ...]
    input_bytes: int
    """The layer input alone: what full recomputation keeps ([KOR22] Table 2: 2 s b h)."""
    total_bytes: int = field(init=False, repr=False, compare=False)
    """All stored bytes without recomputation (summed once: the ledger reads it per rank)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_bytes",
                           sum(t.bytes for t in self.tensors if t.kept_only_by is None))

    def block_bytes(self, block: str) -> int:
        """Bytes of one block without recomputation."""
        return sum(t.bytes for t in self.tensors
                   if t.block == block and t.kept_only_by is None)

    @property
    def attention_bytes(self) -> int:
        """Attention tensors excluding the s x s scores."""
        return self.block_bytes("attention")

    @property
    def scores_bytes(self) -> int:
        """The s x s softmax, mask and dropout output ([KOR22] 5 a s^2 b / t)."""
        return self.block_bytes("scores")

    @property
    def mlp_bytes(self) -> int:
        """MLP or MoE tensors."""
        return self.block_bytes("mlp")

    @property
    def norm_bytes(self) -> int:
        """The two norm inputs."""
        return self.block_bytes("norm")

    def stored_bytes(self, recompute: RecomputeMode,
                     modules: Iterable[RecomputeModule] = DEFAULT_RECOMPUTE_MODULES) -> int:
        """Bytes kept under a recompute mode: none keeps all; selective drops what the listed
        `modules` rebuild ([KOR22] Sec. 5 for the attention core); full keeps the layer input
        only ([KOR22] Table 2)."""
        if recompute == RecomputeMode.FULL:
            return self.input_bytes
        if recompute == RecomputeMode.NONE:
            return self.total_bytes
        chosen = frozenset(modules)
        return sum([t.bytes for t in self.tensors if not (t.dropped_by & chosen)
                    and (t.kept_only_by is None or t.kept_only_by & chosen)])


def _tensor(name: str, block: str, per_token: float, ctx: LayerActivationContext,
            *dropped_by: RecomputeModule) -> StoredTensor:
    return StoredTensor(name=name, block=block, bytes=math.ceil(ctx.tokens * per_token),
                        dropped_by=frozenset(dropped_by))


def attention_tensors(spec: ModelSpec, ctx: LayerActivationContext) -> list[StoredTensor]:
    """Tensors of the attention block.

    GPT layer ([KOR22] Sec. 4.1): QKV input 2h, Q and K 4h, V 2h, output-projection input 2h,
    output dropout mask h; scores 5 a s (softmax 2, mask 1, dropout output 2).
    Deviation (GQA): K and V are 2 kv d each; when tp exceeds the KV heads each rank keeps one.
    Deviation (MLA): the q/kv latents and their norm outputs (2 d'_c + 2 d_c each), then
    per-head Q/K (d_nope + d_rope) and V (d_v), rebuilt by `mla_up_proj` recomputation.
    Deviation (flash): no scores; the fp32 log-sum-exp (4 bytes per head) instead.
    The projection tensors are the attention kind's record's (`models.core.layer_kinds`).
    """
    t, rep = float(ctx.tp), ctx.replicated_divisor
    act = ACTIVATION_BYTES
    gemm_in = FP8_TILE_BYTES_PER_ELEMENT if ctx.fp8_compute else act
    h, heads = spec.hidden_size, spec.num_attention_heads / t
    out = [_tensor("qkv input (norm output)", "attention", gemm_in * h / ctx.gemm_input_divisor,
                   ctx, M.LAYERNORM, M.OP_SAC)]
    record = attention_kind(spec)
    for term in record.stored_terms(spec, tp=t, replicated_divisor=rep, activation_bytes=act):
        out.append(_tensor(term.name, "attention", term.bytes_per_token, ctx, *term.dropped_by))
    d_v = record.head_dims(spec)[1]
    out.append(_tensor("output-projection input", "attention", gemm_in * heads * d_v, ctx))
    if ctx.dropout:
        out.append(_tensor("attention dropout mask", "attention", MASK_BYTES * h / rep, ctx))
    if ctx.flash_attention:
        out.append(_tensor("softmax statistics", "attention", SOFTMAX_STAT_BYTES * heads, ctx,
                           M.CORE_ATTN))
    else:
        row = heads * ctx.seq_len / ctx.cp
        per_score = act + (MASK_BYTES + act if ctx.dropout else 0)
        out.append(_tensor("attention scores", "scores", per_score * row, ctx, M.CORE_ATTN))
    return out


def linear_attention_tensors(spec: ModelSpec, ctx: LayerActivationContext
                             ) -> list[StoredTensor]:
    """Tensors of a linear-attention (KDA / gated delta rule) block: the projections' input
    and what `models.core.linear_attention.linear_attention_stored_terms` lists (q/k/v before and
    after the short convolutions, gates, the intra-chunk matrices, the fp32 recurrent state
    at every chunk boundary, the output path). Recomputing the attention core
    (`core_attn`) rebuilds the kernel inputs, the intra-chunk matrices and the states.
    Source: Kimi Linear arXiv:2510.26692 (the released `KimiDeltaAttention` forward);
    flash-linear-attention `chunk_kda` (states rebuilt in backward under recomputation).
    Assumes: every per-token term divides by cp (each rank keeps its own chunk's states)."""
    gemm_in = FP8_TILE_BYTES_PER_ELEMENT if ctx.fp8_compute else ACTIVATION_BYTES
    out = [_tensor("linear-attention projections input (norm output)", "attention",
                   gemm_in * spec.hidden_size / ctx.gemm_input_divisor, ctx, M.LAYERNORM,
                   M.OP_SAC)]
    for term in linear_attention_stored_terms(spec, tp=ctx.tp, activation_bytes=ACTIVATION_BYTES):
        dropped = (M.CORE_ATTN,) if term.core_recomputable else ()
        out.append(_tensor(term.name, "attention", term.bytes_per_token, ctx, *dropped))
    return out


def _mlp_inner(spec: ModelSpec, ctx: LayerActivationContext, width: int, *, prefix: str,
               copies: float, split: float, whole: RecomputeModule,
               act_module: RecomputeModule) -> list[StoredTensor]:
    """Up-projection output(s) and activation output of an MLP of intermediate `width`.

    GPT layer ([KOR22] Sec. 4.1): GeLU input 2f and output 2f. Deviation (SwiGLU): the gate
    and up outputs 4f and their product 2f.
    """
    up_bytes = FP8_TILE_BYTES_PER_ELEMENT if ctx.fp8_storage else ACTIVATION_BYTES
    down_in = FP8_TILE_BYTES_PER_ELEMENT if ctx.fp8_compute else ACTIVATION_BYTES
    up_width = mlp_kind(spec).up_matrices * width
    return [
        _tensor(f"{prefix} up-projection output", "mlp", copies * up_bytes * up_width / split,
                ctx, whole),
        _tensor(f"{prefix} activation output", "mlp", copies * down_in * width / split, ctx,
                whole, act_module),
    ] + _eager_silu_output(spec, ctx, width, prefix=prefix, copies=copies, split=split,
                           whole=whole, act_module=act_module)


def _eager_silu_output(spec: ModelSpec, ctx: LayerActivationContext, width: int, *,
                       prefix: str, copies: float, split: float, whole: RecomputeModule,
                       act_module: RecomputeModule) -> list[StoredTensor]:
    """The SiLU output an eager SwiGLU keeps for its product's backward (2f bytes per token).

    A fused SwiGLU kernel (Megatron-LM `bias_swiglu_impl`, Transformer Engine) saves the gate
    and up outputs and recomputes SiLU in backward; eager PyTorch (`silu(w1 x) * (w3 x)`, as
    torchtitan's Llama writes it) runs SiLU and the product as two autograd ops: SiLU saves
    its input (the gate output) and the product saves both its inputs, the SiLU output and
    the up output. Source: measured on one H200 (research/data/measured/h200.json, PyTorch
    2.11): an eager Llama 3.1 8B layer keeps 41.03 s h bytes per token, the fused layer's
    34.03 s h plus this tensor's 2 x 3.5 h (validation data, nothing fitted).
    """
    if not ctx.eager_elementwise or not mlp_kind(spec).eager_product:
        return []
    return [_tensor(f"{prefix} SiLU output (eager product input)", "mlp",
                    copies * ACTIVATION_BYTES * width / split, ctx, whole, act_module,
                    M.OP_SAC)]


def _with_module(tensor: StoredTensor, module: RecomputeModule) -> StoredTensor:
    return dataclasses.replace(tensor, dropped_by=tensor.dropped_by | {module})


def _op_sac_split(spec: ModelSpec, up: StoredTensor) -> list[StoredTensor]:
    """A dense MLP's up-projection output under torchtitan's per-op policy: of SwiGLU's gate
    (w1, the 5th matmul of the layer) and up (w3, the 6th) outputs the policy saves the odd
    one and rebuilds the other; a GELU MLP's single up output (5th) is saved.
    Source: torchtitan parallelize_llama.py at 9dec370 (`_save_list`: save aten.mm outputs
    except every second one; wq, wk, wv, wo, w1, w3, w2 in order)."""
    if mlp_kind(spec).up_matrices == 1:
        return [up]
    half = up.bytes // 2
    return [dataclasses.replace(up, name=f"{up.name} (gate)", bytes=half),
            dataclasses.replace(up, name=f"{up.name} (up)", bytes=up.bytes - half,
                                dropped_by=up.dropped_by | {M.OP_SAC})]


def mlp_tensors(spec: ModelSpec, ctx: LayerActivationContext) -> list[StoredTensor]:
    """Tensors of a dense MLP: input (norm output) 2h, the intermediates, dropout mask h.
    Source: [KOR22] Sec. 4.1 (19 s b h for f = 4h)."""
    rep = ctx.replicated_divisor
    fp8_inputs = ctx.fp8_storage or ctx.fp8_compute
    in_bytes = FP8_TILE_BYTES_PER_ELEMENT if fp8_inputs else ACTIVATION_BYTES
    out = [_tensor("MLP input (norm output)", "mlp",
                   in_bytes * spec.hidden_size / ctx.gemm_input_divisor, ctx, M.LAYERNORM,
                   M.OP_SAC)]
    up, act, *eager = _mlp_inner(spec, ctx, spec.ffn_hidden_size, prefix="MLP", copies=1.0,
                                 split=float(ctx.tp), whole=M.MLP, act_module=M.MLP)
    out += _op_sac_split(spec, up) + [_with_module(act, M.OP_SAC)] + eager
    # The down projection (w2, the 7th matmul) is an odd one: the per-op policy saves its
    # output, which backward does not otherwise need (torchtitan `_save_list`).
    out.append(dataclasses.replace(
        _tensor("MLP output (down projection)", "mlp",
                ACTIVATION_BYTES * spec.hidden_size / ctx.replicated_divisor, ctx),
        kept_only_by=frozenset({M.OP_SAC})))
    if ctx.dropout:
        out.append(_tensor("MLP dropout mask", "mlp", MASK_BYTES * spec.hidden_size / rep, ctx))
    return out


def moe_tensors(spec: ModelSpec, ctx: LayerActivationContext) -> list[StoredTensor]:
    """Tensors of an MoE block.

    Deviation (MoE): the block input (norm output, 2h) and the fp32 router probabilities (E
    per token) are stored once; each token is copied to top-k experts, each copy storing the
    expert input (2h) and the expert intermediates. The expert output (2h per copy) is kept
    only with `moe_keep_expert_outputs` (a combine that weights the outputs by the router
    probabilities needs them for the probabilities' gradient; rebuilt by `moe_down_proj`
    recomputation as Kimi K2 Sec. 2.4.3 does). Megatron-Core keeps none since 0.13 (MR !2668
    "Memory efficient token permutation", commit 2659630721): `TEGroupedMLP.forward` applies
    the permuted probabilities inside the activation (`weighted_bias_swiglu_impl`, which saves
    the fc1 output already counted here) and the dispatchers' `combine_postprocess` calls
    `unpermute` without probabilities, whose backward needs only the index map
    (`moe/experts.py`, `moe/token_dispatcher.py` at commit 0d8e0714cd, the Megatron-Core of
    Megatron-Bridge 25.11). Routed copies per rank scale with top-k x s x b x etp / tp
    (Megatron-LM PR #6782: not /EP) and with the assumed load imbalance (max/mean rank load).
    """
    moe = spec.moe
    assert moe is not None
    rep, h = ctx.replicated_divisor, spec.hidden_size
    fp8_inputs = ctx.fp8_storage or ctx.fp8_compute
    in_bytes = FP8_TILE_BYTES_PER_ELEMENT if fp8_inputs else ACTIVATION_BYTES
    copies = moe.top_k * ctx.moe_load_imbalance * ctx.etp / ctx.tp
    out = [
        _tensor("MoE input (norm output)", "mlp", in_bytes * h / ctx.gemm_input_divisor, ctx,
                M.LAYERNORM),
        _tensor("router probabilities", "mlp", 4.0 * moe.num_experts / rep, ctx, M.MOE),
        _tensor("routed expert inputs", "mlp", copies * in_bytes * h, ctx, M.MOE),
    ]
    if ctx.moe_keep_expert_outputs:
        out.append(_tensor("routed expert outputs", "mlp", copies * ACTIVATION_BYTES * h, ctx,
                           M.MOE, M.MOE_DOWN_PROJ))
    out += _mlp_inner(spec, ctx, moe.expert_ffn_hidden_size, prefix="expert", copies=copies,
                      split=float(ctx.etp), whole=M.MOE, act_module=M.MOE_ACT)
    if moe.num_shared_experts:
        out += _mlp_inner(spec, ctx, moe.shared_expert_ffn_hidden_size, prefix="shared expert",
                          copies=1.0, split=float(ctx.tp), whole=M.SHARED_EXPERTS,
                          act_module=M.SHARED_EXPERTS)
    if ctx.dropout:
        out.append(_tensor("MoE dropout mask", "mlp", MASK_BYTES * h / rep, ctx))
    return out


def layer_activation_bytes(spec: ModelSpec, layer_index: int,
                           ctx: LayerActivationContext) -> LayerActivationBytes:
    """Stored activation tensors of one layer for one micro-batch, with its own MLP (MoE or
    dense) and token mixer (linear or softmax attention); layers of one such weight kind are
    alike, so the result is kept per kind. See `kind_activation_bytes`."""
    return kind_activation_bytes(spec, spec.is_moe_layer(layer_index), ctx,
                                 linear=spec.is_linear_attention_layer(layer_index))


def kind_activation_bytes(spec: ModelSpec, moe_layer: bool,
                          ctx: LayerActivationContext,
                          linear: bool = False) -> LayerActivationBytes:
    """`_kind_activation_bytes`, kept on the search's tables of the model."""
    memo = current_memo()
    table = memo.tables(spec).activation_bytes
    key = (moe_layer, ctx, linear)
    return kept(table, key, lambda: _kind_activation_bytes(spec, moe_layer, ctx, linear))


def _kind_activation_bytes(spec: ModelSpec, moe_layer: bool,
                           ctx: LayerActivationContext,
                           linear: bool = False) -> LayerActivationBytes:
    """Stored activation tensors of one layer for one micro-batch, for any layer of the model
    with this MLP (MoE or dense) and token mixer (linear attention or not).

    Source: [KOR22] arXiv:2205.05198 Eq. 1, 2, 4 (s b h (34 + 5 a s / h), with TP
    s b h (10 + 24/t + 5 a s/(h t)), with TP + SP s b h (34 + 5 a s / h) / t).
    Legend: s=seq_len, b=micro_batch_size, h=hidden_size, a=num_attention_heads, t=tp.
    Assumes: every per-token term and the score rows divide by cp (each rank holds s/cp
    queries and their score rows).
    """
    h = spec.hidden_size
    block = moe_tensors(spec, ctx) if moe_layer else mlp_tensors(spec, ctx)
    mixer = linear_attention_tensors(spec, ctx) if linear else attention_tensors(spec, ctx)
    tensors = tuple(_norm_tensors(spec, ctx, mixer[0], block[0]) + mixer + block)
    return LayerActivationBytes(tensors=tensors, input_bytes=math.ceil(
        ctx.tokens * ACTIVATION_BYTES * h / ctx.replicated_divisor))


def _norm_tensors(spec: ModelSpec, ctx: LayerActivationContext, mixer_input: StoredTensor,
                  block_input: StoredTensor) -> list[StoredTensor]:
    """The inputs of the layer's two norms (2h each, [KOR22] Sec. 4.1).

    Deviation (memory-efficient norm, `ctx.norm_saves_output`): an RMSNorm or LayerNorm
    backward can be computed from its output and the saved inverse RMS instead of its input
    (x_hat = y / gamma; Apex `FusedRMSNorm(memory_efficient=True)`, which Megatron-LM exposes
    as `--memory-efficient-layer-norm`). Where the following GEMM already keeps that output
    in 16 bits at the input's shard (`mixer_input`, `block_input`: not FP8, not a gathered
    sequence), the norm input is kept only when the norm output is itself recomputed (the
    modules that drop the GEMM input), so a stage's input can be freed once its first layer
    has run, as Llama 3 states it does (arXiv:2407.21783 Sec. 3.3.2).
    """
    per_token = ACTIVATION_BYTES * spec.hidden_size / ctx.replicated_divisor
    out = []
    for name, consumer, dropped in (("attention norm input", mixer_input, ()),
                                    ("MLP norm input", block_input, (M.OP_SAC,))):
        tensor = _tensor(name, "norm", per_token, ctx, *dropped)
        output_kept = ("norm output" in consumer.name and consumer.bytes == tensor.bytes
                       and bool(consumer.dropped_by))
        if ctx.norm_saves_output and output_kept:
            tensor = dataclasses.replace(tensor, kept_only_by=consumer.dropped_by)
        out.append(tensor)
    return out


def head_activation_bytes(spec: ModelSpec, ctx: LayerActivationContext) -> int:
    """Bytes the last stage keeps for the final norm, output projection and loss per
    micro-batch: norm input 2h, projection input 2h, fp32 logits 4V (all / tp).

    Source: [KOR22] Sec. 4.2: 4 s b h / t (1 + V / h) for the final LayerNorm, the output
    projection and the fp32 logits. Assumes: the logits are vocabulary-parallel (/tp).
    Deviation (`gathered_inputs_saved`, PyTorch DTensor sequence parallelism): the output
    projection keeps its all-gathered input, 2h per token instead of 2h / t.
    """
    h, vocab = spec.hidden_size, spec.vocab_size
    norm_and_logits = ctx.tokens * (ACTIVATION_BYTES * h + 4.0 * vocab) / ctx.tp
    projection_input = ctx.tokens * ACTIVATION_BYTES * h / (
        1.0 if ctx.gathered_inputs_saved else ctx.tp)
    return math.ceil(norm_and_logits + projection_input)


LOSS_BACKWARD_EXTRA_BYTES_PER_LOGIT = 8
"""Extra bytes per logit while an unfused cross entropy runs its backward: PyTorch's
`log_softmax` backward (`_log_softmax_backward_data(grad_output, output)`) holds the saved fp32
log-probabilities (already counted by `head_activation_bytes`), the fp32 gradient that
`nll_loss` backward writes for them and the fp32 input gradient it returns: two fp32
logit-sized tensors beyond the saved one. Megatron-LM's fused vocab-parallel cross entropy
computes the gradient in place on its saved softmax (`_VocabParallelCrossEntropy.backward`),
so it adds none."""

LOSS_PARALLEL_BACKWARD_EXTRA_BYTES_PER_LOGIT = 12
"""The same under tensor parallelism with PyTorch's loss parallel (vocabulary-sharded logits,
torchtitan's default): `torch.distributed.tensor.parallel.loss`
`_nll_loss_and_log_softmax_backward` fuses both backwards as
`(grad_input + torch.exp(x)) * grad_output` with `grad_input = torch.zeros_like(x)`, so the
saved fp32 log-probabilities x, the zeros, exp(x) and their sum (then the product) are live
at once: three fp32 logit-sized tensors beyond the saved one."""


def loss_backward_working_bytes(spec: ModelSpec, ctx: LayerActivationContext) -> int:
    """Transient bytes of an unfused (PyTorch) cross entropy's backward per micro-batch, beyond
    the saved fp32 logits: 8 V bytes per token, or 12 V with tensor-parallel loss parallel,
    vocabulary-parallel (/tp).

    Source: PyTorch `torch.nn.functional.cross_entropy` = `log_softmax` + `nll_loss`; the
    backward of `log_softmax` reads its fp32 output and the fp32 gradient `nll_loss` backward
    materialises and writes an fp32 input gradient, all three live at once; torchtitan
    (`components/loss.py: cross_entropy_loss`) applies it to `pred.float()`. Checked against
    torchtitan's Llama 3.1 8B full-checkpointing peaks (benchmarks/llama3_h100_202412, Table
    2; `research/validate_memory.py`).
    Legend: V=vocab_size, t=tp.
    """
    per_logit = (LOSS_PARALLEL_BACKWARD_EXTRA_BYTES_PER_LOGIT if ctx.tp > 1
                 else LOSS_BACKWARD_EXTRA_BYTES_PER_LOGIT)
    return math.ceil(ctx.tokens * per_logit * spec.vocab_size / ctx.tp)


def embedding_activation_bytes(spec: ModelSpec, ctx: LayerActivationContext) -> int:
    """Bytes the first stage keeps per micro-batch for the embedding dropout mask.

    Source: [KOR22] Sec. 4.2: s b h p / t for embedding dropout with p micro-batches in
    flight (this returns the per-micro-batch s b h / t; 0 without dropout).
    """
    if not ctx.dropout:
        return 0
    return math.ceil(ctx.tokens * MASK_BYTES * spec.hidden_size / ctx.tp)


__all__ = [
    "ACTIVATION_BYTES",
    "FP8_TILE_BYTES_PER_ELEMENT",
    "MASK_BYTES",
    "SOFTMAX_STAT_BYTES",
    "LayerActivationBytes",
    "LayerActivationContext",
    "StoredTensor",
    "attention_tensors",
    "linear_attention_tensors",
    "embedding_activation_bytes",
    "head_activation_bytes",
    "loss_backward_working_bytes",
    "kind_activation_bytes",
    "layer_activation_bytes",
    "mlp_tensors",
    "moe_tensors",
]
