"""A plan's pipeline split and schedule as Megatron-LM core_v0.14.0 arguments.

Owns: choosing, among the ways core_v0.14.0 can state a layer split, the simplest one that
reproduces the plan's layers per virtual stage exactly (even split, embedding/loss counted as
layers, uneven first/last rank, explicit layout string), and the notes for schedules
core_v0.14.0 does not have. Must not: emit model-shape, batch or precision flags.

Megatron-LM facts relied on (core_v0.14.0, `megatron/training/arguments.py`,
`megatron/core/transformer/transformer_block.py::get_num_layers_to_build`,
`megatron/core/transformer/pipeline_parallel_layer_layout.py`):
- virtual stage i runs on pipeline rank i mod pp (looped placement, Narayanan et al. 2021);
- `--account-for-embedding-in-pipeline-split` / `--account-for-loss-in-pipeline-split`
  count the embedding / loss as one layer slot of the first / last virtual stage;
- `--decoder-first/last-pipeline-num-layers` fix the first / last rank and split the rest
  evenly; with virtual stages they need `--num-virtual-stages-per-pipeline-rank`, and every
  rank's count must divide by the number of chunks;
- `--microbatch-group-size-per-virtual-pipeline-stage` sets the interleaving group N
  (`microbatch_group_size_per_vp_stage`, default pp; the schedule refuses N outside [pp, m]);
- `--pipeline-model-parallel-layout` lists every virtual stage: E embedding, t decoder
  layer, m MTP layer, L loss, `|` between stages, `x*n` repeats; MTP sits with the loss.
"""

from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import ParallelConfig
from models.core.layout import virtual_stage_sizes
from models.core.pipeline import schedule_traits
from solver.export.common import rank_layer_counts


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineArgs:
    """Pipeline flags for one plan and what they could not say."""

    args: tuple[str, ...]
    notes: tuple[str, ...]


def pipeline_args(spec: ModelSpec, parallel: ParallelConfig) -> PipelineArgs:
    """`--pipeline-model-parallel-size` and the flags that reproduce the plan's layer split.

    Schedules core_v0.14.0 lacks run as non-interleaved 1F1B with the same per-rank layer
    counts, and a note says what needs an extension.
    """
    p = parallel.pp
    args = ["--pipeline-model-parallel-size", str(p)]
    if p == 1:
        single = () if parallel.vpp == 1 else (
            f"vpp={parallel.vpp} with pp=1 has no effect in Megatron-LM (the interleaved "
            "schedule needs pp > 1); no virtual-stage flag is exported",)
        return PipelineArgs(args=tuple(args), notes=single)
    notes: list[str] = []
    traits = schedule_traits(parallel.schedule)
    if traits.exports.megatron_native:
        sizes, chunks = virtual_stage_sizes(spec, parallel), traits.num_chunks(parallel.vpp)
    else:
        sizes, chunks = rank_layer_counts(spec, parallel), 1
        notes.append(traits.exports.megatron_note)
    split_args, split_notes = split_flags(sizes, pp=p, chunks=chunks,
                                          num_mtp_layers=spec.num_mtp_layers)
    group = parallel.microbatch_group_size
    if group is not None and traits.takes_group_size and traits.exports.megatron_native:
        split_args += ["--microbatch-group-size-per-virtual-pipeline-stage", str(group)]
        if group < p:
            notes.append(
                f"microbatch_group_size={group} < pp={p} (all micro-batches in one group, "
                "Llama 3's schedule for fewer micro-batches than stages): Megatron-LM's "
                "interleaved schedule refuses a group outside [PP, M] "
                "(forward_backward_pipelining_with_interleaving); torch's "
                "ScheduleInterleaved1F1B (torchtitan) runs it")
    return PipelineArgs(args=tuple(args + split_args), notes=tuple(notes + split_notes))


def split_flags(sizes: list[int], *, pp: int, chunks: int,
                num_mtp_layers: int) -> tuple[list[str], list[str]]:
    """The simplest core_v0.14.0 flags that give exactly `sizes` layers per virtual stage.

    Args:
        sizes: transformer layers of each virtual stage, in virtual-stage order (stage i on
            rank i mod pp).
        pp: pipeline ranks.
        chunks: virtual stages per rank (1 without interleaving).
        num_mtp_layers: multi-token-prediction layers, placed with the loss.

    Returns:
        The flags and, when only the explicit layout string fits, a note saying why.
    """
    assert len(sizes) == pp * chunks, (sizes, pp, chunks)
    if len(set(sizes)) == 1:
        return (["--num-layers-per-virtual-pipeline-stage", str(sizes[0])] if chunks > 1
                else []), []
    counted = _account_for_flags(sizes, chunks=chunks)
    if counted is not None:
        return counted, []
    first_last = _first_last_flags(sizes, pp=pp, chunks=chunks)
    if first_last is not None:
        return first_last, []
    layout = layout_string(sizes, num_mtp_layers=num_mtp_layers)
    totals = [sum(sizes[c * pp + r] for c in range(chunks)) for r in range(pp)]
    note = (f"layers per rank {totals} (per virtual stage {sizes}) are uneven in a way "
            "--decoder-first/last-pipeline-num-layers cannot state (they need equal middle "
            "ranks, non-empty end ranks and whole, equal chunks per rank); the exact split is "
            "exported as --pipeline-model-parallel-layout (Megatron-LM core_v0.13 or newer)")
    return ["--pipeline-model-parallel-layout", layout], [note]


def _account_for_flags(sizes: list[int], *, chunks: int) -> list[str] | None:
    """Embedding and/or loss counted as a layer slot, when that reproduces `sizes`."""
    num_layers = sum(sizes)
    for embedding, loss in ((1, 1), (1, 0), (0, 1)):
        slots = num_layers + embedding + loss
        if slots % len(sizes):
            continue
        per_stage = slots // len(sizes)
        expected = [per_stage] * len(sizes)
        expected[0] -= embedding
        expected[-1] -= loss
        if expected != sizes:
            continue
        flags = []
        if embedding:
            flags.append("--account-for-embedding-in-pipeline-split")
        if loss:
            flags.append("--account-for-loss-in-pipeline-split")
        if chunks > 1:
            flags += ["--num-layers-per-virtual-pipeline-stage", str(per_stage)]
        return flags
    return None


def _first_last_flags(sizes: list[int], *, pp: int, chunks: int) -> list[str] | None:
    """Uneven first/last rank with equal middle ranks, when that reproduces `sizes`."""
    per_rank = [[sizes[c * pp + r] for c in range(chunks)] for r in range(pp)]
    if any(len(set(rank)) != 1 for rank in per_rank):
        return None
    totals = [sum(rank) for rank in per_rank]
    middle = totals[1:-1]
    if len(set(middle)) > 1 or totals[0] == 0 or totals[-1] == 0:
        return None
    even = middle[0] if middle else None
    flags: list[str] = []
    if totals[0] != even:
        flags += ["--decoder-first-pipeline-num-layers", str(totals[0])]
    if totals[-1] != even:
        flags += ["--decoder-last-pipeline-num-layers", str(totals[-1])]
    if chunks > 1:
        flags += ["--num-virtual-stages-per-pipeline-rank", str(chunks)]
    return flags


def layout_string(sizes: list[int], *, num_mtp_layers: int) -> str:
    """The `--pipeline-model-parallel-layout` value for `sizes` layers per virtual stage.

    Runs of equal middle stages are folded into `(...|)*r`. Example: sizes [1, 2, 2, 2, 1]
    with one MTP layer gives "Et|(t*2|)*3tmL".
    """
    texts = ["t" * count if count < 2 else f"t*{count}" for count in sizes]
    texts[0] = "E" + texts[0]
    texts[-1] += "m" * num_mtp_layers + "L"
    parts = [texts[0] + "|"]
    index = 1
    while index < len(texts) - 1:
        run = 1
        while index + run < len(texts) - 1 and texts[index + run] == texts[index]:
            run += 1
        parts.append(f"({texts[index]}|)*{run}" if run > 1 else texts[index] + "|")
        index += run
    return "".join(parts) + texts[-1]


__all__ = ["PipelineArgs", "layout_string", "pipeline_args", "split_flags"]
