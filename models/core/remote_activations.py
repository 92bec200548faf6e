"""Remote activation offload across pipeline ranks: stored activations of the ranks that
hold the most moved into the spare memory of the ranks that hold the least.

Owns: the lowest common peak a pipeline's ranks reach when a rank may send part of its
stored (in-flight) activations to other ranks of its pipeline group, bounded by each
receiver's free memory at its own peak; which ranks send and receive how much; and the bytes
each sender moves per step and their time over the link between the ranks. Must not: build
the memory ledger (`models.core.memory` does), choose the per-stage policy, or do I/O.

Source: [K3] Kimi K3, arXiv:2607.24653 (seed ledger Sec. 9.4-9.5): the unified activation
manager gives every tensor saved for backward a storage backend (recompute, block-wise FP8,
local offload, remote offload); under interleaved 1F1B the front pipeline ranks hold more
activations, and K3 moves activations into other PP ranks' memory (Mooncake Transfer
Engine) to balance capacity, with layer-granularity prefetch overlapping compute. That
front ranks hold more follows from the schedule: under 1F1B rank i of p keeps p - i
micro-batches in flight ([NAR21] arXiv:2104.04473 Sec. 2.2; `models.core.memory` counts them).
Assumptions (the source gives no figure): a receiver's room is the capacity less its own
ledger peak (the least free memory it has anywhere in the schedule, so the bound holds at
every instant); only the in-flight layer activations move (not the recompute working set,
logits or buffers); a moved share of a rank's in-flight bytes is the same share of every
micro-batch x chunk unit, sent once after its forward and fetched back once before its
backward.
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteBalance:
    """The pipeline's ranks before and after balancing."""

    totals_before: tuple[int, ...]
    totals_after: tuple[int, ...]
    sent: tuple[int, ...]
    received: tuple[int, ...]
    level: int
    """The common peak the senders are brought down to."""

    @property
    def peak_before(self) -> int:
        """Largest rank total without remote offload."""
        return max(self.totals_before)

    @property
    def peak_after(self) -> int:
        """Largest rank total with it."""
        return max(self.totals_after)


def _need_and_room(totals: list[int], level: int, capacity: int) -> tuple[int, int]:
    need = sum([max(0, t - level) for t in totals])
    room = sum([max(0, min(level, capacity) - t) for t in totals])
    return need, room


def balance_remote_activations(*, totals: list[int], movable: list[int], capacity: int,
                               least_level: int = 0) -> RemoteBalance:
    """The lowest level L every rank can be brought down to: rank i sends max(0, t_i - L)
    (at most its movable bytes m_i, so L >= max(t_i - m_i)) and rank j takes up to
    min(L, capacity) - t_j; L is the least value where what must be sent fits in the room
    (binary search: the need falls and the room grows as L rises). Receivers fill from the
    emptiest rank up, so the most room is used first. `least_level` keeps L from going
    lower (a plan passes its capacity: only the bytes over it move, the least traffic that
    fits); 0 brings the peak as low as it goes (the memory lab's what-if).
    """
    if not totals or len(totals) != len(movable):
        raise ValueError("one total and one movable amount per rank")
    if min(movable) < 0 or any(m > t for m, t in zip(movable, totals, strict=True)):
        raise ValueError("movable bytes must be between 0 and the rank's total")
    low = max(least_level, *(t - m for t, m in zip(totals, movable, strict=True)))
    if low >= max(totals):
        return RemoteBalance(totals_before=tuple(totals), totals_after=tuple(totals),
                             sent=(0,) * len(totals), received=(0,) * len(totals),
                             level=max(totals))
    high = max(totals)
    while low < high:
        middle = (low + high) // 2
        need, room = _need_and_room(totals, middle, capacity)
        if need <= room:
            high = middle
        else:
            low = middle + 1
    level = high
    sent = [max(0, t - level) for t in totals]
    left = sum(sent)
    received = [0] * len(totals)
    for index in sorted(range(len(totals)), key=lambda i: (totals[i], i)):
        if left == 0:
            break
        take = min(left, max(0, min(level, capacity) - totals[index]))
        received[index] = take
        left -= take
    after = tuple(t - s + r for t, s, r in zip(totals, sent, received, strict=True))
    return RemoteBalance(totals_before=tuple(totals), totals_after=after, sent=tuple(sent),
                         received=tuple(received), level=level)


def fits_after_remote_offload(*, totals: list[int], movable: list[int], capacity: int) -> bool:
    """Whether `balance_remote_activations(..., least_level=capacity)` brings every rank
    within `capacity`, without the search: the balance reaches the level L = capacity
    exactly when no rank's unmovable bytes exceed it (L >= max(t_i - m_i)) and what the
    ranks over it must send fits in the room the others have under it
    (sum max(0, t_i - C) <= sum max(0, C - t_i)); any level the search settles on above C
    leaves a rank over the capacity. Same sources and assumptions as the balance."""
    if len(totals) != len(movable):
        raise ValueError("one total and one movable amount per rank")
    if any(total - moved > capacity for total, moved in zip(totals, movable, strict=True)):
        return False
    need, room = _need_and_room(totals, capacity, capacity)
    return need <= room


def remote_offload_bytes_per_step(*, moved_bytes: int, in_flight_units: int,
                                  units_per_step: int) -> int:
    """Bytes a sender moves per step: its moved share f = moved / in-flight bytes of every
    one of the m x v micro-batch x chunk units it processes, out after forward and back
    before backward: 2 x moved x (m v) / (units in flight at its peak)."""
    if in_flight_units < 1 or units_per_step < 1:
        raise ValueError("units in flight and per step must be positive")
    return math.ceil(2 * moved_bytes * units_per_step / in_flight_units)


__all__ = ["RemoteBalance", "balance_remote_activations", "fits_after_remote_offload",
           "remote_offload_bytes_per_step"]
