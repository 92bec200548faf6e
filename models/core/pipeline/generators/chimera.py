"""Chimera: two 1F1B pipelines in opposite directions merged on the same ranks.

Owns: Chimera's per-rank op order (the "flat" merge of the reference Sec. 2.8), its
parameter rules, its closed form and its record `CHIMERA`. Must not: check the parameters
every schedule shares (the registry does) or time a request (the merge below runs on unit
slots to decide an order, which the simulator then times with the real durations).

Placement (Li & Hoefler, SC'21, arXiv:2107.06925 Sec. 3.1): D ranks, two pipes of D stages;
the down pipe runs stage s on rank s, the up pipe stage s on rank D-1-s, so every rank
holds two stages' weights (2x parameters, as DualPipe). The first N/2 micro-batches flow
down, the others up.

Order. Each pipe keeps 1F1B's per-stage order over its N/2 micro-batches. The two lists of
a rank are merged by list scheduling on unit slots (F = 1, fused backward = 1, the paper's
counting): whenever a rank is free it runs whichever of its two head ops became ready
first; at a tie, the op on the deeper stage of its own pipe (the one nearer its loss). The
merged lists are the rank's order.
"""

import math

from api_schemas.parallel import PipelineSchedule
from models.core.pipeline.ops import (
    OpKind,
    PipelineProgram,
    ProgramBuilder,
    bidirectional_placement,
)
from models.core.pipeline.traits import FrameworkNames, ScheduleTraits, StagePlacement, require

_F, _BW = int(OpKind.F), int(OpKind.BW)
Row = tuple[int, int, int, int, int]

MERGE_FORWARD_SLOTS = 1.0
MERGE_BACKWARD_SLOTS = 1.0
"""Slot lengths of the merge: Chimera counts a forward and a backward as one slot each
(arXiv:2107.06925 Fig. 3 and Table 2), the costs under which its bubble formula holds."""


def _one_f_one_b_rows(*, stages: int, stage: int, micro_batches: range) -> list[Row]:
    """1F1B's order of one stage of a pipe: D-1-s warm-up forwards, F/BW pairs, drain."""
    ids = list(micro_batches)
    warmup = min(stages - 1 - stage, len(ids))
    rows: list[Row] = [(_F, j, stage, -1, -1) for j in ids[:warmup]]
    for k in range(len(ids) - warmup):
        rows.append((_F, ids[warmup + k], stage, -1, -1))
        rows.append((_BW, ids[k], stage, -1, -1))
    rows.extend([(_BW, j, stage, -1, -1) for j in ids[len(ids) - warmup:]])
    return rows


def chimera(*, num_stages: int, num_micro_batches: int) -> PipelineProgram:
    """Chimera on D ranks with N micro-batches, N/2 per direction.

    Source: Li & Hoefler, SC'21, arXiv:2107.06925 Sec. 3.1 (bidirectional pipelines, two
    stage replicas per rank); merge rule and tie-break of the reference Sec. 2.8, which
    reproduce the paper's bubble ratio (D-2)/(2N+D-2) at equal slot costs.
    Legend: D=num_stages, N=num_micro_batches.
    Deviation: the paper's "forward doubling / backward halving" for N > D is not built;
    for N > D the two pipes keep streaming 1F1B (the reference's "flat" mode), which holds
    up to D+1 micro-batches per rank instead of the paper's [D/2+1, D].
    """
    d_count, n = num_stages, num_micro_batches
    half = n // 2
    placement = bidirectional_placement(num_ranks=d_count, num_micro_batches=n)
    lists = [
        (_one_f_one_b_rows(stages=d_count, stage=r, micro_batches=range(half)),
         _one_f_one_b_rows(stages=d_count, stage=d_count - 1 - r, micro_batches=range(half, n)))
        for r in range(d_count)
    ]
    builder = ProgramBuilder(placement)
    for r, rows in enumerate(_merge(lists, num_stages=d_count, half=half)):
        builder.rank(r).extend(rows)
    return builder.build(schedule=PipelineSchedule.CHIMERA, chunks_per_stage_unit=1)


def _merge(lists: list[tuple[list[Row], list[Row]]], *, num_stages: int,
           half: int) -> list[list[Row]]:
    """List-schedule each rank's two pipe lists on unit slots; returns the merged lists.

    Every op takes one slot, so the schedule is a sequence of rounds: in round t every rank
    runs one of its two head ops that is ready by t (its dependencies placed in earlier
    rounds), the one on the deeper stage of its own pipe first, then the down pipe's. An op
    placed in round t ends at t + 1, so it readies nothing in its own round and the ranks
    of a round may be taken in any order. A rank with no ready head idles that round.
    """
    del half  # each row carries its own stage; the pipe follows from the list it is in
    assert MERGE_FORWARD_SLOTS == MERGE_BACKWARD_SLOTS == 1.0, "rounds need unit slots"
    last = num_stages - 1
    f_end: dict[tuple[int, int], int] = {}
    b_end: dict[tuple[int, int], int] = {}
    heads = [[0, 0] for _ in range(num_stages)]
    merged: list[list[Row]] = [[] for _ in range(num_stages)]
    never = math.inf
    total = sum(len(a) + len(b) for a, b in lists)
    done = t = 0
    while done < total:
        placed: list[tuple[int, int, Row]] = []
        for r in range(num_stages):
            best: tuple[int, int, Row] | None = None
            for pipe in (0, 1):
                queue = lists[r][pipe]
                head = heads[r][pipe]
                if head >= len(queue):
                    continue
                row = queue[head]
                j, s = row[1], row[2]
                if row[0] == _F:
                    ready = s == 0 or f_end.get((j, s - 1), never) <= t
                else:
                    ready = f_end.get((j, s), never) <= t and (
                        s == last or b_end.get((j, s + 1), never) <= t)
                if ready and (best is None or s > best[0]):
                    best = (s, pipe, row)
            if best is not None:
                placed.append((r, best[1], best[2]))
        assert placed, "the two 1F1B lists of a Chimera rank cannot deadlock"
        t += 1
        for r, pipe, row in placed:
            heads[r][pipe] += 1
            (f_end if row[0] == _F else b_end)[(row[1], row[2])] = t
            merged[r].append(row)
        done += len(placed)
    return merged


def _chimera_rule(p: int, m: int, _v: int, _n: int | None) -> None:
    """Chimera pairs rank r with rank D-1-r and splits N into two equal pipes
    (arXiv:2107.06925 Sec. 3.1: D and N even)."""
    require(p % 2 == 0, "num_stages", p,
            "schedule='chimera' pairs rank r with rank D-1-r: use an even num_stages")
    require(m % 2 == 0, "num_micro_batches", m,
            "schedule='chimera' feeds half the micro-batches from each end: use an even "
            "num_micro_batches")
    require(m >= p, "num_micro_batches", m,
            f"schedule='chimera' needs num_micro_batches >= num_stages = {p} (one basic unit "
            "of D micro-batches)")


def _chimera_peak(p: int, m: int, _v: int, d: int, _n: int | None) -> int:
    """min(D+1, N/2 + 1 + min(d, D-1-d)) micro-batches held until BW on rank d of the flat
    merge: D/2+1 .. D for N = D (the paper's range [(D/2+1) M_a, D M_a], arXiv:2107.06925
    Table 2), D+1 on every rank once N >= 2D (the reference Sec. 2.8). Derived from the
    merged order and pinned against it on every even D <= 16, N <= 64."""
    return min(p + 1, m // 2 + 1 + min(d, p - 1 - d))


def _chimera_bubble(p: int, m: int, f: float, b: float, w: float,
                    pair: float) -> tuple[float, float] | None:
    """(D-2) slots of idle per rank with F = B + W (one slot each): the bubble ratio
    (D-2)/(2N+D-2) of arXiv:2107.06925 Table 2, as the reference Sec. 2.8 reproduces it."""
    del m, pair
    if f != b + w:
        return None
    idle = (p - 2) * f
    return idle, idle


CHIMERA = ScheduleTraits(
    schedule=PipelineSchedule.CHIMERA, placement=StagePlacement.BIDIRECTIONAL,
    fixed_chunks=1, weight_copies=2, split_backward=False, overlapped_pairs=False,
    takes_group_size=False,
    generator=lambda p, m, _v, _n: chimera(num_stages=p, num_micro_batches=m),
    rule=_chimera_rule, peak_form=_chimera_peak, peak_until_b_form=None,
    bubble_form=_chimera_bubble,
    exports=FrameworkNames(
        megatron_native=False,
        megatron_note="schedule 'chimera': Chimera (arXiv:2107.06925) is not in Megatron-LM "
                      "core_v0.14.0; exported as non-interleaved 1F1B with the down-pipe "
                      "split; the second weight replica and the bidirectional feed need a "
                      "framework extension",
        torchtitan="1F1B",
        torchtitan_note="fallback: Chimera (two weight replicas, bidirectional) has no "
                        "torch.distributed.pipelining class",
        torchtitan_fallback="schedule 'chimera' has no torch.distributed.pipelining class; "
                            "exported as 1F1B with the down-pipe split",
        deepspeed_native=False),
    source="Li & Hoefler SC'21 arXiv:2107.06925 Sec. 3 and Table 2 (bubble (D-2)/(2N+D-2), "
           "2x weights)")


__all__ = ["CHIMERA", "chimera"]
