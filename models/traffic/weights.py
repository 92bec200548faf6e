"""Parameter counts the traffic model needs: per layer, per pipeline stage, per rank.

Owns: a small count of weights from the matrix shapes of a ModelSpec (attention incl. GQA
and MLA, GELU / SwiGLU MLP, routed and shared experts, router, norms, embeddings, head)
and how TP, EP, ETP and PP split them over ranks. It exists so that gradient and ZeRO
traffic can be computed without depending on the full parameter module; `models.params`
is the reference count and should replace this one once both are merged. Must not: count
FLOPs or memory.
"""

import logging
from dataclasses import dataclass

from api_schemas import (
    AttentionKind,
    MlpKind,
    ModelSpec,
    NormKind,
    ParallelConfig,
    PipelineSchedule,
)

logger = logging.getLogger(__name__)

_V_SHAPED = (PipelineSchedule.ZBV, PipelineSchedule.DUALPIPEV)


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerWeights:
    """Parameters of one transformer layer, by part."""

    attention: int
    dense_mlp: int
    routed_experts: int
    """All routed experts of the layer together (0 for a dense layer)."""
    shared_experts: int
    router: int
    norms: int

    @property
    def dense_total(self) -> int:
        """Everything but the routed experts (sharded by TP, reduced over DP x CP)."""
        return self.attention + self.dense_mlp + self.shared_experts + self.router + self.norms


@dataclass(frozen=True, slots=True, kw_only=True)
class StageWeights:
    """Parameters held by one rank of a pipeline stage."""

    stage: int
    num_layers: int
    num_moe_layers: int
    dense_params: int
    """Non-expert parameters on the rank (after TP; norms replicated)."""
    expert_params: int
    """Routed-expert parameters on the rank (after EP and ETP)."""


def norm_params(model: ModelSpec, width: int) -> int:
    """RMSNorm has a scale (width), LayerNorm a scale and a bias (2 x width)."""
    return 2 * width if model.norm == NormKind.LAYERNORM else width


def attention_params(model: ModelSpec) -> int:
    """Weights (and biases) of one attention block.

    Source: MHA/GQA projections q (h x a d), k and v (h x g d), o (a d x h) (Ainslie et al.
    2023, arXiv:2305.13245, Sec. 2); MLA per DeepSeek-V2 (arXiv:2405.04434, Sec. 2.1.2-2.1.3):
    W_DQ (h x d'_c), W_UQ (d'_c x a (d_nope + d_rope)), W_DKV (h x d_c), W_KR (h x d_rope),
    W_UK and W_UV (d_c x a d_nope, d_c x a d_v), W_O (a d_v x h), plus the two latent norms.
    Legend: h = hidden_size, a = num_attention_heads, g = num_kv_heads, d = dim_per_head.
    """
    h, a = model.hidden_size, model.num_attention_heads
    if model.attention == AttentionKind.MLA:
        mla = model.mla
        assert mla is not None  # guaranteed by ModelSpec's validator
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank is None:
            q = h * a * qk
        else:
            q = h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * a * qk
        kv = (h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank
              + mla.kv_lora_rank * a * (mla.qk_nope_head_dim + mla.v_head_dim))
        out = a * mla.v_head_dim * h
        return q + kv + out + (h if model.linear_bias else 0)
    d, g = model.dim_per_head, model.kv_heads
    weights = h * a * d + 2 * h * g * d + a * d * h
    biases = (a * d + 2 * g * d) if (model.attention_bias or model.linear_bias) else 0
    biases += h if model.linear_bias else 0
    return weights + biases + (2 * d if model.qk_norm else 0)


def mlp_params(model: ModelSpec, ffn_hidden_size: int) -> int:
    """Weights (and biases) of one MLP of intermediate width f.

    Source: GELU MLP 2 h f (Vaswani et al. 2017); SwiGLU 3 h f (Shazeer 2020, arXiv:2002.05202).
    Legend: h = hidden_size, f = ffn_hidden_size.
    """
    h, f = model.hidden_size, ffn_hidden_size
    mats = 3 if model.mlp == MlpKind.SWIGLU else 2
    bias = (f * (mats - 1) + h) if model.linear_bias else 0
    return mats * h * f + bias


def layer_weights(model: ModelSpec, *, layer_index: int) -> LayerWeights:
    """Parameters of layer `layer_index` (0-based), MoE or dense."""
    h = model.hidden_size
    norms = 2 * norm_params(model, h)
    attention = attention_params(model)
    moe = model.moe
    if moe is None or not model.is_moe_layer(layer_index):
        return LayerWeights(attention=attention, dense_mlp=mlp_params(model, model.ffn_hidden_size),
                            routed_experts=0, shared_experts=0, router=0, norms=norms)
    shared = mlp_params(model, moe.shared_expert_ffn_hidden_size) if moe.num_shared_experts else 0
    shared += h if moe.shared_expert_gate else 0
    return LayerWeights(
        attention=attention, dense_mlp=0,
        routed_experts=moe.num_experts * mlp_params(model, moe.expert_ffn_hidden_size),
        shared_experts=shared, router=h * moe.num_experts, norms=norms)


def embedding_params(model: ModelSpec) -> int:
    """Input embedding (V x h) plus a learned position table, if any."""
    return (model.vocab_size + model.learned_position_embeddings) * model.hidden_size


def head_params(model: ModelSpec) -> int:
    """Final norm plus the output projection (absent when tied to the embedding)."""
    head = 0 if model.tie_word_embeddings else model.vocab_size * model.hidden_size
    return head + norm_params(model, model.hidden_size)


def total_params(model: ModelSpec) -> int:
    """All parameters (MTP layers excluded)."""
    layers = sum(layer_weights(model, layer_index=i).dense_total
                 + layer_weights(model, layer_index=i).routed_experts
                 for i in range(model.num_layers))
    return layers + embedding_params(model) + head_params(model)


def stage_layers(model: ModelSpec, parallel: ParallelConfig) -> tuple[tuple[int, ...], ...]:
    """Layer indices whose weights each pipeline rank holds.

    Source: Megatron-LM 2021 (arXiv:2104.04473) Sec. 2.2.2: with v chunks rank i holds
    chunks i, i + p, ..., each of L / (p v) consecutive layers; V-shaped schedules (ZB-V,
    arXiv:2401.10241 Sec. 6; DualPipeV) give rank i virtual stages i and 2p - 1 - i; DualPipe
    (arXiv:2412.19437 Sec. 3.2.1) gives rank i stage i of one direction and stage p - 1 - i
    of the other, two copies of the model. Without interleaving, contiguous blocks of
    `layers_per_stage` (or an even split, extra layers to the first ranks).
    """
    layers, pp = model.num_layers, parallel.pp
    chunks = 2 if parallel.schedule in _V_SHAPED else parallel.vpp
    if parallel.layers_per_stage is None and chunks > 1 and layers % (pp * chunks) == 0:
        size = layers // (pp * chunks)

        def virtual(v: int) -> range:
            return range(v * size, (v + 1) * size)

        if parallel.schedule in _V_SHAPED:
            return tuple(tuple(virtual(s)) + tuple(virtual(2 * pp - 1 - s)) for s in range(pp))
        return tuple(tuple(i for c in range(chunks) for i in virtual(c * pp + s))
                     for s in range(pp))
    counts = parallel.layers_per_stage or tuple(
        layers // pp + (1 if s < layers % pp else 0) for s in range(pp))
    starts = [sum(counts[:s]) for s in range(pp)]
    blocks = [tuple(range(starts[s], starts[s] + counts[s])) for s in range(pp)]
    if parallel.schedule == PipelineSchedule.DUALPIPE:
        return tuple(blocks[s] + blocks[pp - 1 - s] if pp > 1 else blocks[s]
                     for s in range(pp))
    return tuple(blocks)


def model_copies(parallel: ParallelConfig) -> int:
    """Copies of the model the pipeline holds: 2 for DualPipe (one per direction), else 1.

    Source: DeepSeek-V3 (arXiv:2412.19437) Table 2: DualPipe keeps 2x the parameters.
    """
    return 2 if parallel.schedule == PipelineSchedule.DUALPIPE and parallel.pp > 1 else 1


def stage_weights(model: ModelSpec, parallel: ParallelConfig) -> tuple[StageWeights, ...]:
    """Parameters one rank of each pipeline stage holds, after TP, EP and ETP.

    Assumes: TP splits every matrix and bias of attention, MLP, shared experts, router and
    embeddings (vocab-parallel) evenly, norms are replicated; routed experts split E / ep per
    rank and each expert by etp; the first rank holds the embedding, the last the head (rank 0
    both for V shapes, both ends both for DualPipe), and a head rank without an embedding
    keeps its own copy of a tied embedding, as Megatron does.
    Deviation: rounds each division up, so per-rank counts can exceed exact shares by < tp.
    """
    tp, ep, etp = parallel.tp, parallel.ep, parallel.etp
    result = []
    for stage, indices in enumerate(stage_layers(model, parallel)):
        dense, expert, moe_layers = 0, 0, 0
        for i in indices:
            w = layer_weights(model, layer_index=i)
            dense += -(-(w.dense_total - w.norms) // tp) + w.norms
            expert += -(-w.routed_experts // (ep * etp))
            moe_layers += w.routed_experts > 0
        if stage in embedding_ranks(parallel):
            dense += -(-embedding_params(model) // tp)
        if stage in head_ranks(parallel):
            head = head_params(model) - norm_params(model, model.hidden_size)
            if model.tie_word_embeddings and stage not in embedding_ranks(parallel):
                head = model.vocab_size * model.hidden_size
            dense += -(-head // tp) + norm_params(model, model.hidden_size)
        result.append(StageWeights(stage=stage, num_layers=len(indices),
                                   num_moe_layers=moe_layers, dense_params=dense,
                                   expert_params=expert))
    return tuple(result)


def embedding_ranks(parallel: ParallelConfig) -> tuple[int, ...]:
    """Ranks holding an input embedding: the first, and for DualPipe also the last."""
    if parallel.schedule == PipelineSchedule.DUALPIPE:
        return (0, parallel.pp - 1)
    return (0,)


def head_ranks(parallel: ParallelConfig) -> tuple[int, ...]:
    """Ranks holding the output head: the last; rank 0 for V shapes; both ends for DualPipe."""
    if parallel.schedule in _V_SHAPED:
        return (0,)
    if parallel.schedule == PipelineSchedule.DUALPIPE:
        return (0, parallel.pp - 1)
    return (parallel.pp - 1,)


__all__ = [
    "LayerWeights",
    "StageWeights",
    "attention_params",
    "embedding_params",
    "embedding_ranks",
    "head_params",
    "head_ranks",
    "layer_weights",
    "mlp_params",
    "model_copies",
    "norm_params",
    "stage_layers",
    "stage_weights",
    "total_params",
]
