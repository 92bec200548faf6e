"""The weights one rank of each pipeline stage holds, as the gradient and ZeRO traffic needs them.

Owns: splitting what `models.core.params` counts over the ranks `models.core.layout` places it on:
TP shards the GEMM matrices and the vocabulary, EP x ETP the routed experts; norms, biases,
router, position table and the MTP projection stay replicated on every TP rank (the
convention of `models.core.memory`, so gradient bytes match the gradient buffers). Also the names
the traffic API exports for layer counts and placement. Must not: count weights from
matrix shapes (`models.core.params`), place layers or embeddings on ranks (`models.core.layout`),
count FLOPs or memory.
"""

from dataclasses import dataclass, fields
from itertools import chain

from api_schemas import ModelSpec, ParallelConfig
from models.core.layout import StageLayout, pipeline_layout
from models.core.params import (
    LayerParams,
    count_parameters,
    layer_attention_params,
    layer_params,
    mlp_params,
    mtp_module_params,
    norm_params,
)
from models.core.pipeline import schedule_traits
from models.core.rank_states import chunk_weight_kinds
from models.core.search_memo import current_memo, kept


class LayerWeights(LayerParams):
    """`models.core.params.LayerParams` under the name the traffic API exports."""

    __slots__ = ()

    @property
    def dense_total(self) -> int:
        """Everything but the routed experts (sharded by TP, reduced over DP x CP)."""
        return self.dense_part


@dataclass(frozen=True, slots=True, kw_only=True)
class StageWeights:
    """Parameters held by one rank of a pipeline stage."""

    stage: int
    num_layers: int
    """Transformer layers whose weights the rank holds (both copies under DualPipe)."""
    num_moe_layers: int
    num_linear_attention_layers: int = 0
    """Held layers whose token mixer is linear attention (state-passing CP)."""
    num_embeddings: int
    """Input embeddings held (`models.core.layout.StageLayout.num_embeddings`)."""
    num_heads: int
    """Output heads with their final norm (`StageLayout.num_heads`)."""
    num_mtp_modules: int
    """Multi-token-prediction modules, next to the head they share."""
    dense_params: int
    """Non-expert parameters on the rank, MTP modules included (after TP)."""
    expert_params: int
    """Routed-expert parameters on the rank, MTP modules included (after EP and ETP)."""


def layer_weights(model: ModelSpec, *, layer_index: int) -> LayerWeights:
    """Parameters of layer `layer_index` (0-based) by part, from `params.layer_params`."""
    params = layer_params(model, layer_index)
    return LayerWeights(**{f.name: getattr(params, f.name) for f in fields(params)})


def total_params(model: ModelSpec) -> int:
    """All parameters, MTP modules excluded (`models.core.params.count_parameters`)."""
    return count_parameters(model).total


def stage_layers(model: ModelSpec, parallel: ParallelConfig) -> tuple[tuple[int, ...], ...]:
    """Layer indices whose weights each pipeline rank holds (`layout.pipeline_layout`)."""
    return tuple(rank.layers for rank in pipeline_layout(model, parallel))


def model_copies(parallel: ParallelConfig) -> int:
    """Copies of the model the pipeline holds: 2 for bidirectional schedules (one per
    direction), else 1 (the schedule's record).

    Source: DeepSeek-V3 (arXiv:2412.19437) Table 2: DualPipe keeps 2x the parameters;
    Chimera (arXiv:2107.06925) Table 2 likewise; `models.core.layout` places the second copy.
    """
    return schedule_traits(parallel.schedule).weight_copies


def word_embedding_ranks(model: ModelSpec, parallel: ParallelConfig) -> tuple[int, ...]:
    """Pipeline ranks holding a copy of the word-embedding matrix: every rank with an input
    embedding, and, when the head is tied to it, every rank with an output head."""
    tied = model.tie_word_embeddings
    return tuple(rank.rank for rank in pipeline_layout(model, parallel)
                 if rank.num_embeddings or (tied and rank.num_heads))


def _dense_shard(model: ModelSpec, layer: LayerParams, tp: int, index: int) -> int:
    """Non-expert weights of layer `index` (of params `layer`) on one TP rank: GEMM matrices
    split, the rest whole."""
    matrices = layer_attention_params(model, index, matrices_only=True)
    if layer.dense_mlp:
        matrices += mlp_params(model, model.ffn_hidden_size, matrices_only=True)
    moe = model.moe
    if layer.shared_experts and moe is not None and moe.num_shared_experts:
        matrices += mlp_params(model, moe.shared_expert_ffn_hidden_size, matrices_only=True)
    return -(-matrices // tp) + layer.dense_part - matrices


def _rank_weights(model: ModelSpec, tp: int, experts_split: int, rank: StageLayout
                  ) -> StageWeights:
    # A layer's parameters depend only on its kind (dense or MoE, linear or full
    # attention): one of each, counted.
    kinds: dict[tuple[bool, bool], tuple[LayerParams, int, int]] = {}
    # Each layer's (MoE, linear attention) in `layers` order, kept per chunk tuple.
    layer_kinds = list(chain.from_iterable(chunk_weight_kinds(model, rank.chunks)))
    for index, kind in zip(rank.layers, layer_kinds, strict=True):
        known = kinds.get(kind)
        kinds[kind] = ((known[0], known[1] + 1, known[2]) if known
                       else (layer_params(model, index), 1, index))
    groups = list(kinds.values())
    if rank.num_mtp_modules:
        groups.append((mtp_module_params(model), rank.num_mtp_modules, model.num_layers - 1))
    dense = sum(count * _dense_shard(model, layer, tp, index) for layer, count, index in groups)
    expert = sum(count * -(-layer.routed_experts // experts_split)
                 for layer, count, _ in groups)
    h = model.hidden_size
    vocab_shard = -(-model.vocab_size // tp) * h
    dense += rank.num_embeddings * (vocab_shard + model.learned_position_embeddings * h)
    own_head = not model.tie_word_embeddings or rank.num_embeddings == 0
    dense += rank.num_heads * ((vocab_shard if own_head else 0) + norm_params(model, h))
    return StageWeights(stage=rank.rank, num_layers=len(rank.layers),
                        num_moe_layers=sum(count for layer, count, _ in kinds.values()
                                           if layer.routed_experts > 0),
                        num_linear_attention_layers=sum([linear for _, linear in layer_kinds]),
                        num_embeddings=rank.num_embeddings, num_heads=rank.num_heads,
                        num_mtp_modules=rank.num_mtp_modules, dense_params=dense,
                        expert_params=expert)


def stage_weights(model: ModelSpec, parallel: ParallelConfig) -> tuple[StageWeights, ...]:
    """Parameters one rank of each pipeline stage holds, after TP, EP and ETP.

    Source: Megatron-LM 2019 (arXiv:1909.08053) Sec. 3: column- and row-parallel GEMMs and
    the vocab-parallel embedding split their matrices over the t ranks of a TP group.
    Legend: t = tp, E = moe.num_experts, V = vocab_size.
    Assumes: TP splits every GEMM matrix (attention, dense MLP, shared experts, the
    vocab-parallel embedding and head, ceil(V / t) rows each); norms, biases, router, a
    learned position table and the MTP projection are replicated; routed experts split
    E / ep per rank and each expert by etp; a head rank without an embedding keeps its own
    copy of a tied embedding, as Megatron does. Placement (layers, embeddings, heads, MTP
    modules) is `models.core.layout.pipeline_layout`.
    Deviation: rounds each division up, so per-rank counts can exceed exact shares by < tp
    per matrix group.
    """
    layouts = pipeline_layout(model, parallel)
    # Kept on the search's tables of the model by what it reads (the search asks once per
    # estimate).
    memo = current_memo()
    table = memo.tables(model).stage_weights
    key = (parallel.tp, parallel.ep * parallel.etp, layouts)
    return kept(table, key, lambda: _stage_weights(model, *key))


def _stage_weights(model: ModelSpec, tp: int, experts_split: int,
                   layouts: tuple[StageLayout, ...]) -> tuple[StageWeights, ...]:
    """`stage_weights` of the rank layouts."""
    return tuple(_rank_weights(model, tp, experts_split, rank) for rank in layouts)


__all__ = [
    "LayerWeights",
    "StageWeights",
    "layer_weights",
    "model_copies",
    "stage_layers",
    "stage_weights",
    "total_params",
    "word_embedding_ranks",
]
