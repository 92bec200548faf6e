"""A pipeline rank's parameters and model states, the inputs of its memory ledger lines.

Owns: the micro-batch count of a configuration, the expert-data-parallel degree, the
parameters one rank holds by sharding group (`rank_parameters`, read per layer weight kind),
the weight kinds of a rank's chunks and the model-state and EMA components of one rank
(`state_parts`). Conventions as in `models.core.memory`. Must not: count activations
(`models.core.rank_activations`), build or judge a ledger (`models.core.memory`), bound
one (`models.core.memory_floors`), or estimate time.
"""

import math

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import (
    ParallelConfig,
)
from api_schemas.training import TrainingSpec
from models.core.layout import StageLayout
from models.core.ledger_items import MemoryComponent, RankParameters
from models.core.mesh.layout import expert_data_parallel_size
from models.core.params import (
    head_params,
    largest_weight_matrix,
    layer_attention_params,
    layer_params,
    mlp_params,
    mtp_module_params,
    norm_params,
)
from models.core.search_memo import current_memo, kept
from models.core.sharded_states import ema_components, model_state_components
from models.errors import InvalidSpecError

StateParts = tuple[RankParameters, list[MemoryComponent], list[MemoryComponent],
                    list[MemoryComponent], list[MemoryComponent]]
"""A rank's parameter groups, model states (GPU, host) and EMA (GPU, host)."""


def micro_batch_count(training: TrainingSpec, parallel: ParallelConfig) -> int:
    """Micro-batches per step per pipeline: global batch / (micro-batch x dp).

    Raises:
        InvalidSpecError: when the global batch does not divide evenly.
    """
    per_replica, rest = divmod(training.global_batch_size, parallel.micro_batch_size * parallel.dp)
    if rest or per_replica == 0:
        raise InvalidSpecError(
            f"global_batch_size={training.global_batch_size} is not a multiple of "
            f"micro_batch_size x dp = {parallel.micro_batch_size} x {parallel.dp}; pick a batch "
            f"that is (e.g. {max(1, per_replica) * parallel.micro_batch_size * parallel.dp})",
            field="training.global_batch_size")
    if parallel.num_micro_batches is not None and parallel.num_micro_batches != per_replica:
        raise InvalidSpecError(
            f"num_micro_batches={parallel.num_micro_batches} disagrees with global_batch_size / "
            f"(micro_batch_size x dp) = {per_replica}; drop it or make them agree",
            field="parallel.num_micro_batches")
    return per_replica


def expert_data_parallel_degree(spec: ModelSpec, parallel: ParallelConfig) -> int:
    """Replicas of each expert shard (`models.core.mesh.layout.expert_data_parallel_size`); a
    dense model's are its tp x cp x dp ranks.

    Raises InvalidSpecError when ep x etp does not divide tp x cp x dp or ep does not divide
    the routed experts.
    """
    if spec.moe is None:
        return parallel.tp * parallel.cp * parallel.dp
    edp = expert_data_parallel_size(parallel)
    if spec.moe.num_experts % parallel.ep:
        raise InvalidSpecError(
            f"ep={parallel.ep} does not divide the {spec.moe.num_experts} routed experts; pick a "
            "divisor", field="parallel.ep")
    return edp


WeightKinds = tuple[tuple[tuple[bool, bool], ...], ...]
"""Per chunk of a rank, each layer's weight kind: (MoE block, linear-attention mixer)."""


def _weight_mix(layout: StageLayout, kinds: WeightKinds) -> tuple[tuple[int, int], ...]:
    """(a layer index, how many) per weight kind among the rank's layers (`kinds`, its
    `chunk_weight_kinds`): MoE or dense MLP, and linear or full attention (a hybrid model's
    token mixers differ in weights); the index is the rank's first layer of the kind."""
    counts: dict[tuple[bool, bool], int] = {}
    first: dict[tuple[bool, bool], int] = {}
    for chunk, chunk_kinds in zip(layout.chunks, kinds, strict=True):
        for index, kind in zip(chunk, chunk_kinds, strict=True):
            counts[kind] = counts.get(kind, 0) + 1
            first.setdefault(kind, index)
    return tuple([(first[kind], counts[kind]) for kind in first])


def _first_of_each_kind(mix: tuple[tuple[int, int], ...],
                        kinds: WeightKinds) -> dict[bool, int]:
    """One layer index per MoE kind (dense False, MoE True) among the rank's layers: the
    first of the weight kinds in `mix` (in the rank's layer order) with that MoE kind."""
    moe_of: dict[tuple[bool, bool], bool] = {}
    for chunk_kinds in kinds:
        for kind in chunk_kinds:
            moe_of.setdefault(kind, kind[0])
    out: dict[bool, int] = {}
    for (index, _), kind in zip(mix, moe_of, strict=True):
        out.setdefault(moe_of[kind], index)
    return out


def rank_parameters(spec: ModelSpec, parallel: ParallelConfig, layout: StageLayout
                    ) -> RankParameters:
    """Parameters one rank holds by sharding group (kept per layer mix and degrees,
    `_rank_parameters`)."""
    return _rank_parameters(spec, parallel.tp, parallel.ep, parallel.etp,
                            _weight_mix(layout, chunk_weight_kinds(spec, layout.chunks)),
                            layout.num_embeddings, layout.num_heads, layout.num_mtp_modules)


def optimizer_shard_params(spec: ModelSpec, parallel: ParallelConfig,
                           layout: StageLayout) -> float:
    """Parameters whose optimizer states one rank updates: its ZeRO shard (dense over
    DP x CP, experts over expert-DP), or all it holds without ZeRO."""
    held = rank_parameters(spec, parallel, layout)
    edp = expert_data_parallel_size(parallel)
    sharded = parallel.zero_stage >= 1
    return (held.gemm + held.vectors + held.embedding + held.head) / (
        parallel.dp * parallel.cp if sharded else 1) + held.experts / (edp if sharded else 1)


def _rank_parameters(spec: ModelSpec, tp: int, ep: int, etp: int,
                     mix: tuple[tuple[int, int], ...],
                     num_embeddings: int, num_heads: int, num_mtp: int) -> RankParameters:
    """`_count_rank_parameters`, kept on the search's tables of the model."""
    memo = current_memo()
    table = memo.tables(spec).rank_parameters
    key = (tp, ep, etp, mix, num_embeddings, num_heads, num_mtp)
    return kept(table, key, lambda: _count_rank_parameters(spec, *key))


def _count_rank_parameters(spec: ModelSpec, tp: int, ep: int, etp: int,
                           mix: tuple[tuple[int, int], ...],
                           num_embeddings: int, num_heads: int, num_mtp: int) -> RankParameters:
    gemm = vectors = experts = largest_layer = 0
    kinds = [(layer_params(spec, i), count, layer_attention_params(spec, i, matrices_only=True))
             for i, count in mix if count]
    if num_mtp:
        kinds.append((mtp_module_params(spec), num_mtp,
                      layer_attention_params(spec, spec.num_layers - 1, matrices_only=True)))
    for layer, count, attn_matrices in kinds:
        layer_gemm = attn_matrices
        if layer.dense_mlp:
            layer_gemm += mlp_params(spec, spec.ffn_hidden_size, matrices_only=True)
        if layer.shared_experts:
            moe = spec.moe
            assert moe is not None
            layer_gemm += mlp_params(spec, moe.shared_expert_ffn_hidden_size, matrices_only=True)
        layer_vectors = layer.dense_part - layer_gemm
        layer_experts = 0
        if layer.num_routed_experts:
            layer_experts = math.ceil(layer.num_routed_experts / ep * layer.routed_expert_each
                                      / etp)
        shard = math.ceil(layer_gemm / tp) + layer_vectors + layer_experts
        gemm += count * math.ceil(layer_gemm / tp)
        vectors += count * layer_vectors
        experts += count * layer_experts
        largest_layer = max(largest_layer, shard)
    vocab_shard = math.ceil(spec.vocab_size / tp) * spec.hidden_size
    positions = spec.learned_position_embeddings * spec.hidden_size
    embedding = num_embeddings * (vocab_shard + positions)
    head_copy = vocab_shard if head_params(spec) or num_embeddings == 0 else 0
    head = num_heads * head_copy
    vectors += num_heads * norm_params(spec, spec.hidden_size)
    return RankParameters(gemm=gemm, vectors=vectors, embedding=embedding, head=head,
                        experts=experts, largest_layer=largest_layer,
                        largest_matrix=largest_weight_matrix(spec))


def _layer_shard_params(spec: ModelSpec, parallel: ParallelConfig, index: int) -> int:
    """Parameters of layer `index` one rank holds: its GEMM weights / tp, its vectors, and
    its routed experts / (ep x etp), as `rank_parameters` shards them (the size of one
    layer's gradients in a Pipeline ZeRO-2 chunk buffer)."""
    one = _rank_parameters(spec, parallel.tp, parallel.ep, parallel.etp, ((index, 1),), 0, 0, 0)
    return one.gemm + one.vectors + one.experts


def _chunk_moe_runs(kinds: WeightKinds) -> list[int]:
    """Per chunk, its MoE layers (from its weight kinds)."""
    runs = []
    for chunk_kinds in kinds:
        moe = 0
        for kind in chunk_kinds:
            moe += kind[0]
        runs.append(moe)
    return runs


def state_parts(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                 layout: StageLayout) -> StateParts:
    """A rank's parameter groups, model states (GPU, host) and EMA (GPU, host)."""
    edp = expert_data_parallel_degree(spec, parallel)
    kinds = chunk_weight_kinds(spec, layout.chunks)
    mix = _weight_mix(layout, kinds)
    groups = _rank_parameters(spec, parallel.tp, parallel.ep, parallel.etp, mix,
                              layout.num_embeddings, layout.num_heads, layout.num_mtp_modules)
    per_kind = {kind: _layer_shard_params(spec, parallel, i)
                for kind, i in _first_of_each_kind(mix, kinds).items()}
    chunk_params = max([(len(chunk) - moe) * per_kind.get(False, 0)
                        + moe * per_kind.get(True, 0)
                        for chunk, moe in zip(layout.chunks, _chunk_moe_runs(kinds),
                                              strict=True)], default=0)
    states, host_states = model_state_components(training, parallel, groups, edp, chunk_params)
    total_params = groups.gemm + groups.vectors + groups.embedding + groups.head + groups.experts
    ema_gpu, ema_host = ema_components(training, parallel, total_params)
    return groups, states, host_states, ema_gpu, ema_host


def chunk_weight_kinds(spec: ModelSpec, chunks: tuple[tuple[int, ...], ...]
                        ) -> tuple[tuple[tuple[bool, bool], ...], ...]:
    """Per chunk, each layer's weight kind: (MoE block, linear-attention mixer); kept on
    the search's tables of the model."""
    memo = current_memo()
    table = memo.tables(spec).weight_kinds
    return kept(table, chunks, lambda: _chunk_weight_kinds(spec, chunks))


def _chunk_weight_kinds(spec: ModelSpec, chunks: tuple[tuple[int, ...], ...]
                        ) -> tuple[tuple[tuple[bool, bool], ...], ...]:
    return tuple([tuple([(spec.is_moe_layer(i), spec.is_linear_attention_layer(i))
                         for i in chunk])
                  for chunk in chunks])


__all__ = [
    "optimizer_shard_params",
    "StateParts",
    "WeightKinds",
    "chunk_weight_kinds",
    "expert_data_parallel_degree",
    "micro_batch_count",
    "rank_parameters",
    "state_parts",
]
