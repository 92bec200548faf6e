"""What bound a simulated iteration: its critical path and its point-to-point transfers.

Owns: `pipeline_links(compiled, timeline, p2p_latency_s)`, which walks back from the op that
ends last through the dependency (or same-rank predecessor) that released each op exactly
when it started, and lists every activation or gradient transfer between two ranks with the
interval the simulator charged for it. Must not: time anything itself (it reads the
simulator's start and end times) or know how the result is shown.
"""

from dataclasses import dataclass

from models.core.pipeline.metrics import Timeline
from models.core.pipeline.simulator import CompiledProgram

TIME_TOLERANCE_S = 1e-9
"""Two instants closer than this (relative to the makespan) are the same instant."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Transfer:
    """One activation (forward) or input-gradient (backward) message between two ranks."""

    src_rank: int
    dst_rank: int
    kind: str
    """'activation' (F output to the next stage) or 'gradient' (B output to the previous)."""
    micro_batch: int
    src_row: int
    """Timeline row of the op that produced the message."""
    dst_row: int
    """Timeline row of the op that consumes it."""
    start_s: float
    """When the producing op ended."""
    end_s: float
    """When the message is ready on the receiving rank (start + the P2P latency)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineLinks:
    """The critical path (timeline rows, in time order) and every cross-rank transfer."""

    critical_path: tuple[int, ...]
    transfers: tuple[Transfer, ...]


def _producers(compiled: CompiledProgram) -> dict[int, int]:
    """Ready-time slot -> the row whose end fills it (the two spare slots excluded)."""
    sentinel = compiled.num_slots - 2
    produced: dict[int, int] = {}
    rows = compiled.rows
    for row, (a, b) in enumerate(zip(rows.out_a, rows.out_b, strict=True)):
        for slot in (a, b):
            if slot < sentinel:
                produced[slot] = row
    return produced


def _transfers(compiled: CompiledProgram, timeline: Timeline, produced: dict[int, int],
               p2p_latency_s: float) -> list[Transfer]:
    rank, end = timeline.rank.tolist(), timeline.end_s.tolist()
    micro_batch = compiled.program.micro_batch.tolist()
    rows = compiled.rows
    found = []
    for row in range(len(rank)):
        for crosses, slot, kind in ((compiled.cross_prev[row], rows.dep_prev[row],
                                     "activation"),
                                    (compiled.cross_next[row], rows.dep_next[row],
                                     "gradient")):
            if not crosses or slot not in produced:
                continue
            src = produced[slot]
            found.append(Transfer(src_rank=rank[src], dst_rank=rank[row], kind=kind,
                                  micro_batch=micro_batch[src], src_row=src, dst_row=row,
                                  start_s=end[src], end_s=end[src] + p2p_latency_s))
    return found


def _critical_path(compiled: CompiledProgram, timeline: Timeline, produced: dict[int, int],
                   p2p_latency_s: float) -> list[int]:
    start, end = timeline.start_s.tolist(), timeline.end_s.tolist()
    rank = timeline.rank.tolist()
    rows = compiled.rows
    if not end:
        return []
    makespan = max(end)
    tolerance = TIME_TOLERANCE_S * max(1.0, makespan)
    row = max(range(len(end)), key=lambda r: (end[r], -r))
    path = [row]
    while start[row] > tolerance:
        arrivals = ((rows.dep_prev[row], p2p_latency_s * bool(compiled.cross_prev[row])),
                    (rows.dep_next[row], p2p_latency_s * bool(compiled.cross_next[row])),
                    (rows.dep_local[row], 0.0))
        previous = None
        for slot, latency in arrivals:
            source = produced.get(slot)
            if source is not None and abs(end[source] + latency - start[row]) <= tolerance:
                previous = source
                break
        if previous is None and row > 0 and rank[row - 1] == rank[row] \
                and abs(end[row - 1] - start[row]) <= tolerance:
            previous = row - 1
        if previous is None:
            break
        row = previous
        path.append(row)
    return path[::-1]


def pipeline_links(compiled: CompiledProgram, timeline: Timeline, *,
                   p2p_latency_s: float) -> PipelineLinks:
    """The critical path and the transfers of a simulated iteration.

    The simulator starts every op as soon as its inputs are ready and its rank is free, so
    each op but the first has a predecessor whose release time equals its start: an input
    (plus the P2P latency when it crosses ranks) or the rank's previous op. Following those
    back from the last op to end gives a chain whose durations and latencies add up to the
    makespan.
    """
    produced = _producers(compiled)
    return PipelineLinks(
        critical_path=tuple(_critical_path(compiled, timeline, produced, p2p_latency_s)),
        transfers=tuple(_transfers(compiled, timeline, produced, p2p_latency_s)))


__all__ = ["PipelineLinks", "Transfer", "pipeline_links"]
