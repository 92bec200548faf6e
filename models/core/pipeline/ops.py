"""The executable form of a pipeline schedule: op kinds, stage placement, per-rank op lists.

Owns: `OpKind`, `Placement` (which rank and local chunk run each virtual stage of each
pipe), `PipelineProgram` (the ordered op list of every rank as integer columns) and
`ProgramBuilder`, which generators use to append ops. Must not: time anything (that is the
simulator) or decide an order (that is a generator).

Vocabulary. A *rank* is a pipeline device (0..p-1). A *virtual stage* is a slice of the
layers in layer order (0..S-1) within a *pipe*; most schedules have one pipe, DualPipe has
two (the reverse pipe runs stage s on rank PP-1-s). A micro-batch belongs to exactly one
pipe (DualPipe: the first m/2 go down, the rest go up). An op is F (forward), B (input
gradient), W (weight gradient), BW (B and W fused), or FB (an F and a BW of different
micro-batches overlapped as one unit, as DualPipe does).
"""

from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from api_schemas.parallel import PipelineSchedule

IntArray = npt.NDArray[np.int64]


class OpKind(IntEnum):
    """Kinds of scheduled op; FB is one overlapped unit of an F and a BW."""

    F = 0
    B = 1
    W = 2
    BW = 3
    FB = 4


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Placement:
    """Where each virtual stage of each pipe runs.

    `stage_rank[pipe, s]` is the rank and `stage_chunk[pipe, s]` the local chunk index of
    virtual stage s of `pipe`; `micro_batch_pipe[j]` is the pipe of micro-batch j.
    """

    num_ranks: int
    num_stages: int
    stage_rank: IntArray
    stage_chunk: IntArray
    micro_batch_pipe: IntArray

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches over all pipes."""
        return int(self.micro_batch_pipe.shape[0])


def linear_placement(*, num_ranks: int, num_micro_batches: int) -> Placement:
    """One stage per rank: stage s on rank s."""
    return _one_pipe(np.arange(num_ranks), np.zeros(num_ranks, dtype=np.int64),
                     num_ranks=num_ranks, num_micro_batches=num_micro_batches)


def looped_placement(*, num_ranks: int, num_chunks: int, num_micro_batches: int) -> Placement:
    """Interleaved: chunk c of rank d is virtual stage c p + d (Megatron-LM 2104.04473)."""
    stages = np.arange(num_ranks * num_chunks)
    return _one_pipe(stages % num_ranks, stages // num_ranks, num_ranks=num_ranks,
                     num_micro_batches=num_micro_batches)


def v_placement(*, num_ranks: int, num_micro_batches: int) -> Placement:
    """V shape: rank d runs stage d (chunk 0) and stage 2P-1-d (chunk 1)."""
    down = np.arange(num_ranks)
    ranks = np.concatenate([down, down[::-1]])
    chunks = np.repeat(np.array([0, 1], dtype=np.int64), num_ranks)
    return _one_pipe(ranks, chunks, num_ranks=num_ranks, num_micro_batches=num_micro_batches)


def bidirectional_placement(*, num_ranks: int, num_micro_batches: int) -> Placement:
    """DualPipe: pipe 0 runs stage s on rank s, pipe 1 on rank PP-1-s; chunk = pipe.

    The first half of the micro-batches flows down pipe 0, the second half up pipe 1.
    """
    down = np.arange(num_ranks)
    stage_rank = np.stack([down, down[::-1]])
    stage_chunk = np.stack([np.zeros(num_ranks, dtype=np.int64),
                            np.ones(num_ranks, dtype=np.int64)])
    half = num_micro_batches // 2
    pipes = (np.arange(num_micro_batches) >= half).astype(np.int64)
    return Placement(num_ranks=num_ranks, num_stages=num_ranks, stage_rank=stage_rank,
                     stage_chunk=stage_chunk, micro_batch_pipe=pipes)


def _one_pipe(ranks: IntArray, chunks: IntArray, *, num_ranks: int,
              num_micro_batches: int) -> Placement:
    return Placement(num_ranks=num_ranks, num_stages=int(ranks.shape[0]),
                     stage_rank=ranks.astype(np.int64)[None, :],
                     stage_chunk=chunks.astype(np.int64)[None, :],
                     micro_batch_pipe=np.zeros(num_micro_batches, dtype=np.int64))


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class PipelineProgram:
    """Every rank's ordered op list, as columns concatenated rank after rank.

    Rank r's ops are rows `rank_offsets[r]` to `rank_offsets[r+1]-1`, in issue order. For an
    FB row, (`micro_batch`, `stage`) is the forward and (`pair_micro_batch`, `pair_stage`) the
    fused backward; other rows hold -1 there.
    """

    schedule: PipelineSchedule | None
    placement: Placement
    chunks_per_stage_unit: int
    """Chunks that make one full-stage activation unit (v; 1 for DualPipe)."""
    rank_offsets: IntArray
    kind: IntArray
    micro_batch: IntArray
    stage: IntArray
    pair_micro_batch: IntArray
    pair_stage: IntArray

    @property
    def num_ranks(self) -> int:
        """Pipeline ranks."""
        return self.placement.num_ranks

    @property
    def num_ops(self) -> int:
        """Scheduled units (an FB pair counts once)."""
        return int(self.kind.shape[0])

    def rank_ops(self, rank: int) -> list[str]:
        """Rank `rank`'s list in a compact text form, e.g. ['F0.0', 'BW0.0', 'F1.0&BW0.3']."""
        lo, hi = int(self.rank_offsets[rank]), int(self.rank_offsets[rank + 1])
        return [self.describe(i) for i in range(lo, hi)]

    def describe(self, row: int) -> str:
        """Text form of one row: kind, micro-batch and virtual stage."""
        kind = OpKind(int(self.kind[row]))
        j, s = int(self.micro_batch[row]), int(self.stage[row])
        if kind == OpKind.FB:
            return f"F{j}.{s}&BW{int(self.pair_micro_batch[row])}.{int(self.pair_stage[row])}"
        return f"{kind.name}{j}.{s}"


class ProgramBuilder:
    """Collects per-rank op lists and freezes them into a `PipelineProgram`."""

    def __init__(self, placement: Placement) -> None:
        self._placement = placement
        self._rows: list[list[tuple[int, int, int, int, int]]] = [
            [] for _ in range(placement.num_ranks)
        ]
        self._columns: dict[int, tuple[IntArray, IntArray, IntArray]] = {}

    def set_rank_columns(self, rank: int, kind: IntArray, micro_batch: IntArray,
                         stage: IntArray) -> None:
        """Give rank `rank`'s whole list as columns (kind, micro-batch, stage) of unpaired
        ops (pairs hold -1): a generator that builds its order with array operations sets
        every rank this way instead of appending rows."""
        self._columns[rank] = (kind, micro_batch, stage)

    def _build_columns(self, *, schedule: PipelineSchedule | None,
                       chunks_per_stage_unit: int) -> PipelineProgram:
        ranks = range(self._placement.num_ranks)
        if sorted(self._columns) != list(ranks) or any(self._rows):
            raise ValueError("set every rank's columns, and append no rows beside them")
        counts = [self._columns[r][0].shape[0] for r in ranks]
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        kind, micro_batch, stage = (
            np.ascontiguousarray(np.concatenate([self._columns[r][i] for r in ranks]),
                                 dtype=np.int64) for i in range(3))
        unpaired = np.full(kind.shape[0], -1, dtype=np.int64)
        return PipelineProgram(
            schedule=schedule, placement=self._placement,
            chunks_per_stage_unit=chunks_per_stage_unit, rank_offsets=offsets,
            kind=kind, micro_batch=micro_batch, stage=stage,
            pair_micro_batch=unpaired, pair_stage=unpaired.copy())

    def rank(self, rank: int) -> list[tuple[int, int, int, int, int]]:
        """The mutable row list of one rank: (kind, micro_batch, stage, pair_mb, pair_stage)."""
        return self._rows[rank]

    def build(self, *, schedule: PipelineSchedule | None,
              chunks_per_stage_unit: int) -> PipelineProgram:
        """Freeze the lists (rows are copied into integer columns)."""
        if self._columns:
            return self._build_columns(schedule=schedule,
                                       chunks_per_stage_unit=chunks_per_stage_unit)
        counts = [len(rows) for rows in self._rows]
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        flat = [row for rows in self._rows for row in rows]
        table = (np.array(flat, dtype=np.int64).reshape(-1, 5) if flat
                 else np.zeros((0, 5), dtype=np.int64))
        return PipelineProgram(
            schedule=schedule, placement=self._placement,
            chunks_per_stage_unit=chunks_per_stage_unit, rank_offsets=offsets,
            kind=np.ascontiguousarray(table[:, 0]),
            micro_batch=np.ascontiguousarray(table[:, 1]),
            stage=np.ascontiguousarray(table[:, 2]),
            pair_micro_batch=np.ascontiguousarray(table[:, 3]),
            pair_stage=np.ascontiguousarray(table[:, 4]),
        )


__all__ = [
    "OpKind",
    "PipelineProgram",
    "Placement",
    "ProgramBuilder",
    "bidirectional_placement",
    "linear_placement",
    "looped_placement",
    "v_placement",
]
