"""Which transformer layers, embeddings and heads each pipeline rank holds.

Owns: the split of layers into virtual pipeline stages (chunks), their placement on ranks
as the schedule's record says (linear, looped, V-shaped, or bidirectional with a mirrored
second copy), uneven per-rank layer counts, and where the embedding, the output head and
the multi-token-prediction modules sit. Must not: size anything in bytes, or compare
schedule names (read `models.core.pipeline.schedule_traits`).

Sources: Megatron-LM 2021 arXiv:2104.04473 Sec. 2.2.2 (chunk c of rank d is stage c p + d);
Zero Bubble arXiv:2401.10241 Sec. 6 (V placement: stages d and 2p - 1 - d on rank d);
DeepSeek-V3 arXiv:2412.19437 Sec. 3.2.1 (DualPipe: rank r holds stage r of one direction and
stage PP - 1 - r of the other; embedding and head on the same rank, shared with MTP).
"""

from dataclasses import dataclass, field
from operator import attrgetter

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import ParallelConfig
from models.core.pipeline.registry import schedule_traits
from models.core.pipeline.traits import ScheduleTraits
from models.core.search_memo import current_memo, kept
from models.errors import InvalidSpecError


@dataclass(frozen=True, slots=True, kw_only=True)
class StageLayout:
    """What one pipeline rank holds."""

    rank: int
    chunks: tuple[tuple[int, ...], ...]
    """Layer indices of each model chunk on this rank, in chunk order."""
    num_embeddings: int
    """Input embedding tables held (DualPipe's end ranks hold one per direction)."""
    num_heads: int
    """Output heads (with final norm) held; DualPipe's end ranks hold one per direction."""
    num_mtp_modules: int
    layers: tuple[int, ...] = field(init=False, compare=False, repr=False)
    """All layer indices whose weights live on this rank (duplicates across copies kept),
    from `chunks` (layouts are memoised, so the search reads it far more often than it is
    built)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers",
                           tuple([index for chunk in self.chunks for index in chunk]))


def layout_traits(parallel: ParallelConfig) -> ScheduleTraits:
    """The schedule's record, after checking `vpp` against the chunks it places.

    Raises:
        InvalidSpecError: an unknown schedule, or a `vpp` the schedule cannot place.
    """
    traits = schedule_traits(parallel.schedule)
    fixed = traits.fixed_chunks
    if fixed is not None and parallel.vpp != fixed:
        raise InvalidSpecError(
            f"schedule='{parallel.schedule}' places {fixed} chunk(s) per rank "
            f"({traits.placement} placement): set vpp={fixed} (got vpp={parallel.vpp})",
            field="parallel.vpp")
    group = parallel.microbatch_group_size
    if group is not None and not traits.takes_group_size:
        raise InvalidSpecError(
            f"microbatch_group_size={group} only applies to interleaved schedules, got "
            f"schedule='{parallel.schedule}': drop it", field="parallel.microbatch_group_size")
    return traits


def num_virtual_stages(parallel: ParallelConfig) -> int:
    """Model chunks of one pipe the layers are split into: p x the chunks per rank."""
    return layout_traits(parallel).num_virtual_stages(parallel.pp, parallel.vpp)


def rank_of_virtual_stage(parallel: ParallelConfig, stage: int) -> int:
    """The pipeline rank that runs virtual stage `stage` (of the first pipe)."""
    return layout_traits(parallel).rank_of_stage(parallel.pp, stage)


def virtual_stage_sizes(spec: ModelSpec, parallel: ParallelConfig) -> list[int]:
    """Layers per virtual stage.

    With `layers_per_virtual_stage` the counts are taken as given (zeros allowed: an
    embedding-only first chunk, a loss-only last one, as Megatron-LM's
    `--pipeline-model-parallel-layout`). With `layers_per_stage` (one count per rank) each
    rank's count is spread evenly over its chunks. Otherwise the layers are split evenly and
    the remainder goes to middle stages first (from the second-to-last backwards), sparing
    the first stage (most in-flight activations under 1F1B) and the last (output head and
    logits).
    """
    total = spec.num_layers
    count = num_virtual_stages(parallel)
    explicit = parallel.layers_per_virtual_stage
    if explicit is not None:
        if len(explicit) != count or sum(explicit) != total:
            raise InvalidSpecError(
                f"layers_per_virtual_stage {list(explicit)} has {len(explicit)} entries summing "
                f"to {sum(explicit)}; schedule='{parallel.schedule}' with pp={parallel.pp}, "
                f"vpp={parallel.vpp} has {count} virtual stages and the model {total} layers: "
                "give one count per virtual stage, adding up",
                field="parallel.layers_per_virtual_stage")
        return list(explicit)
    if parallel.layers_per_stage is not None:
        if sum(parallel.layers_per_stage) != total:
            raise InvalidSpecError(
                f"layers_per_stage {list(parallel.layers_per_stage)} sums to "
                f"{sum(parallel.layers_per_stage)} but the model has {total} layers; make "
                "the counts add up", field="parallel.layers_per_stage")
        sizes = [0] * count
        chunks_of_rank: dict[int, list[int]] = {}
        for stage in range(count):
            chunks_of_rank.setdefault(rank_of_virtual_stage(parallel, stage), []).append(stage)
        for rank, stages in chunks_of_rank.items():
            base, extra = divmod(parallel.layers_per_stage[rank], len(stages))
            for position, stage in enumerate(stages):
                sizes[stage] = base + (1 if position < extra else 0)
        return sizes
    if total < count:
        raise InvalidSpecError(
            f"{total} layers cannot fill {count} pipeline stages (pp={parallel.pp}, "
            f"vpp={parallel.vpp}, schedule={parallel.schedule}); lower pp or vpp to at most "
            f"{total} stages", field="parallel.pp")
    base, extra = divmod(total, count)
    sizes = [base] * count
    order = list(range(count - 2, 0, -1)) + [count - 1, 0]
    for stage in order[:extra]:
        sizes[stage] += 1
    return sizes


LAYOUT_FIELDS = ("pp", "vpp", "schedule", "layers_per_stage", "layers_per_virtual_stage",
                 "microbatch_group_size")
"""The configuration fields a pipeline layout reads (a test records what `_pipeline_layout`
reads and checks it against these): its key on the model's tables."""

_layout_key = attrgetter(*LAYOUT_FIELDS)


def pipeline_layout(spec: ModelSpec, parallel: ParallelConfig) -> tuple[StageLayout, ...]:
    """The layers, embeddings, heads and MTP modules of every pipeline rank.

    Kept on the search's tables of the model by the configuration fields it reads,
    `LAYOUT_FIELDS` (the search asks for the same layout once per memory probe and per
    step-time estimate)."""
    memo = current_memo()
    return kept(memo.tables(spec).layouts,
                _layout_key(parallel), lambda: _pipeline_layout(spec, parallel))


def _pipeline_layout(spec: ModelSpec, parallel: ParallelConfig) -> tuple[StageLayout, ...]:
    sizes = virtual_stage_sizes(spec, parallel)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    stage_layers = [tuple(range(starts[i], starts[i] + sizes[i])) for i in range(len(sizes))]
    p = parallel.pp
    chunks: dict[int, list[tuple[int, ...]]] = {rank: [] for rank in range(p)}
    for stage, layers in enumerate(stage_layers):
        chunks[rank_of_virtual_stage(parallel, stage)].append(layers)
    last_rank = rank_of_virtual_stage(parallel, len(sizes) - 1)
    embeddings = {rank: 0 for rank in range(p)}
    heads = {rank: 0 for rank in range(p)}
    embeddings[0] += 1
    heads[last_rank] += 1
    if layout_traits(parallel).num_pipes == 2:
        # The reverse direction: stage s on rank p - 1 - s, a second copy of the weights.
        for rank in range(p):
            chunks[rank].append(stage_layers[p - 1 - rank])
        embeddings[p - 1] += 1
        heads[0] += 1
    # MTP modules sit with the output head they share (one set per head copy).
    return tuple(
        StageLayout(rank=rank, chunks=tuple(chunks[rank]), num_embeddings=embeddings[rank],
                    num_heads=heads[rank], num_mtp_modules=spec.num_mtp_layers * heads[rank])
        for rank in range(p)
    )


__all__ = [
    "LAYOUT_FIELDS",
    "StageLayout",
    "layout_traits",
    "num_virtual_stages",
    "pipeline_layout",
    "rank_of_virtual_stage",
    "virtual_stage_sizes",
]
