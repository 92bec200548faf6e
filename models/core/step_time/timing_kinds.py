"""The timing kinds of a model's layers: what tells two layers' step-time pieces apart.

Owns: `timing_kind` (a layer's MoE-ness, token mixer, attention window and chunk), the
model's kinds in order of first appearance (`kind_layers`) and each chunk's kinds
(`chunk_timing_kinds`), kept on the search's tables of the model.
Must not: time a layer (`models.core.step_time.stage`).
"""

from api_schemas.architecture import ModelSpec
from models.core.search_memo import current_memo, kept, model_tables
from models.core.step_time.layer_inputs import TimingKind


def timing_kind(spec: ModelSpec, index: int) -> TimingKind:
    """Layer `index`'s MoE-ness, linear or full attention, attention window and attention
    chunk: two layers of a model that agree on these take the same compute, collectives and
    ZeRO-3 traffic under one configuration (their weights and attention cost are alike), so
    `stage_time` times each such kind once per rank, `layer_parts` keys its memo on it, and
    ranks whose chunks hold the same sequence of kinds share their stage times. MoE-ness
    alone is not enough: gpt-oss and Gemma 2 alternate sliding-window and full attention,
    Kimi Linear interleaves linear and full attention, Llama 4 chunked and global
    attention, within one MoE kind. Read from the model's table of every layer's kind
    (made on first ask), as the search asks it for every layer it times."""
    tables = model_tables(spec)
    kinds = tables.layer_kinds
    if kinds is None:
        kinds = tables.layer_kinds = tuple([_timing_kind(spec, i)
                                            for i in range(spec.num_layers)])
    return kinds[index] if 0 <= index < len(kinds) else _timing_kind(spec, index)


def _timing_kind(spec: ModelSpec, index: int) -> TimingKind:
    return (spec.is_moe_layer(index), spec.is_linear_attention_layer(index),
            spec.attention_window(index), spec.attention_chunk(index))


def kind_layers(spec: ModelSpec) -> tuple[tuple[TimingKind, int, int], ...]:
    """Each timing kind of the model's layers (`timing_kind`) with its first layer and how
    many layers share it, in the order of first appearance: what a bound that times one
    layer per kind multiplies it by (kept on the search's tables of the model)."""
    tables = model_tables(spec)
    if tables.kind_layers is None:
        tables.kind_layers = _kind_layers(spec)
    return tables.kind_layers


def _kind_layers(spec: ModelSpec) -> tuple[tuple[TimingKind, int, int], ...]:
    first: dict[TimingKind, int] = {}
    count: dict[TimingKind, int] = {}
    for index in range(spec.num_layers):
        kind = timing_kind(spec, index)
        first.setdefault(kind, index)
        count[kind] = count.get(kind, 0) + 1
    return tuple((kind, first[kind], count[kind]) for kind in first)


def chunk_timing_kinds(spec: ModelSpec, chunks: tuple[tuple[int, ...], ...]
                        ) -> tuple[tuple[TimingKind, ...], ...]:
    """`timing_kind` of every layer of each chunk (shared by the configurations that place
    the same layers on a rank: kept on the search's tables of the model)."""
    memo = current_memo()
    table = memo.tables(spec).timing_kinds
    return kept(table, chunks,
                lambda: tuple([tuple([timing_kind(spec, i) for i in chunk])
                               for chunk in chunks]))


__all__ = ["chunk_timing_kinds", "kind_layers", "timing_kind"]
