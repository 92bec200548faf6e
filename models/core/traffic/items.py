"""The value objects of step traffic: one item per (axis, collective, phase), and the step.

Owns: `TrafficItem` (what is sent, how often, over which group, how long it takes, how much
of it can hide behind compute), `StepTraffic` (the items of one pipeline stage for one
training step, with per-axis totals), the frequency/phase vocabularies and `make_item`, which
times an item with the collectives model from the group's placement. Must not: decide what a
layer sends (that is `tensor.py`, `pipeline.py`, `data.py`).
"""

from dataclasses import dataclass
from enum import StrEnum

from models.core.collectives import (
    Collective,
    CollectiveCost,
    Fabric,
    collective_cost,
)
from models.core.mesh import AxisPlacement
from models.core.search_memo import current_memo, kept


class TrafficAxis(StrEnum):
    """Mesh axis a communication belongs to."""

    TP = "tp"
    CP = "cp"
    PP = "pp"
    EP = "ep"
    """Expert dispatch/combine over the expert-parallel group."""
    DP = "dp"
    """Dense gradients and ZeRO traffic over the DP x CP group."""
    EDP = "edp"
    """Expert gradients over the expert data-parallel group."""


class Frequency(StrEnum):
    """How often a communication happens."""

    PER_LAYER_PER_MICRO_BATCH = "per_layer_per_micro_batch"
    PER_MICRO_BATCH = "per_micro_batch"
    PER_STEP = "per_step"


class Phase(StrEnum):
    """Where in the step a communication happens."""

    FORWARD = "forward"
    BACKWARD = "backward"
    RECOMPUTE = "recompute"
    """The forward collectives repeated by activation recomputation during backward."""
    OPTIMIZER = "optimizer"
    """Around the optimizer step (gradient reduction, parameter gather)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrafficItem:
    """One kind of call in a training step, as seen by one rank of one pipeline stage."""

    axis: TrafficAxis
    name: str
    collective: Collective
    phase: Phase
    frequency: Frequency
    stage: int
    message_bytes: int
    calls_per_step: int
    group_size: int
    ranks_per_node: int
    nodes_spanned: int
    cost: CollectiveCost
    """Cost of one call (algorithm, basis, alpha and beta parts)."""
    overlap_frac: float
    """Fraction of the item's time that can hide behind compute (an upper bound)."""
    overlap_note: str

    @property
    def time_per_call_s(self) -> float:
        """Time of one call."""
        return self.cost.time_s

    @property
    def time_per_step_s(self) -> float:
        """Time of all calls of one step."""
        return self.cost.time_s * self.calls_per_step

    @property
    def exposed_time_per_step_s(self) -> float:
        """Time per step left on the critical path if the overlappable part hides fully."""
        return self.time_per_step_s * (1.0 - self.overlap_frac)

    @property
    def bytes_sent_per_rank_per_step(self) -> int:
        """Bytes one rank sends for this item in one step (ring / algorithm basis)."""
        return self.cost.bytes_sent_per_rank * self.calls_per_step

    @property
    def paper_volume_bytes_per_step(self) -> int:
        """The papers' volume (all-reduce 2M, others M) of this item in one step."""
        return self.cost.paper_volume_bytes * self.calls_per_step


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTraffic:
    """All communication of one pipeline stage's rank in one training step."""

    stage: int
    num_micro_batches: int
    num_layers: int
    items: tuple[TrafficItem, ...]

    def of_axis(self, axis: TrafficAxis) -> tuple[TrafficItem, ...]:
        """Items of one axis."""
        return tuple(i for i in self.items if i.axis == axis)

    def time_s(self, axis: TrafficAxis | None = None) -> float:
        """Communication time per step (all items, or one axis), before overlap."""
        return sum(i.time_per_step_s for i in self._pick(axis))

    def exposed_time_s(self, axis: TrafficAxis | None = None) -> float:
        """Communication time per step that cannot hide behind compute."""
        return sum(i.exposed_time_per_step_s for i in self._pick(axis))

    def bytes_sent_per_rank(self, axis: TrafficAxis | None = None) -> int:
        """Bytes sent by the rank per step."""
        return sum(i.bytes_sent_per_rank_per_step for i in self._pick(axis))

    def _pick(self, axis: TrafficAxis | None) -> tuple[TrafficItem, ...]:
        return self.items if axis is None else self.of_axis(axis)


def make_item(*, axis: TrafficAxis, name: str, collective: Collective, phase: Phase,
              frequency: Frequency, stage: int, message_bytes: int, calls_per_step: int,
              placement: AxisPlacement, fabric: Fabric, overlap_frac: float,
              overlap_note: str) -> TrafficItem:
    """Time one item over its group's placement on the fabric."""
    size = 2 if collective == Collective.P2P else placement.group_size
    per_node = timing_ranks_per_node(placement, collective)
    return TrafficItem(
        axis=axis, name=name, collective=collective, phase=phase, frequency=frequency,
        stage=stage, message_bytes=message_bytes, calls_per_step=calls_per_step,
        group_size=size, ranks_per_node=per_node,
        nodes_spanned=1 if per_node == size else size // per_node,
        cost=call_cost(collective, placement, message_bytes, fabric),
        overlap_frac=min(1.0, max(0.0, overlap_frac)), overlap_note=overlap_note)


def call_cost(collective: Collective, placement: AxisPlacement, message_bytes: int,
              fabric: Fabric) -> CollectiveCost:
    """Cost of one call of `collective` over a group placed as `placement` (a P2P is one hop
    between two neighbours of the group)."""
    size = 2 if collective == Collective.P2P else placement.group_size
    key = (collective, size, max(0, int(message_bytes)),
           timing_ranks_per_node(placement, collective), fabric)
    memo = current_memo()
    return kept(memo.collective_costs, key,
                lambda: _cost(*key))


def _cost(collective: Collective, size: int, message_bytes: int, ranks_per_node: int,
          fabric: Fabric) -> CollectiveCost:
    return collective_cost(collective, num_ranks=size, message_bytes=message_bytes,
                           fabric=fabric, ranks_per_node=ranks_per_node)


def timing_ranks_per_node(placement: AxisPlacement, collective: Collective) -> int:
    """Ranks per node used for timing: a p2p between neighbours of a group spanning nodes is
    timed over the NIC (the slowest hop paces a ring or a pipeline); a group spread unevenly
    over nodes is timed as if every member were on its own node (pessimistic)."""
    if collective == Collective.P2P:
        return 2 if placement.all_intra_node else 1
    size, k = placement.group_size, placement.ranks_per_node
    if size % k == 0 and size // k == placement.max_nodes_spanned:
        return k
    return 1


__all__ = [
    "Frequency",
    "Phase",
    "StepTraffic",
    "TrafficAxis",
    "TrafficItem",
    "call_cost",
    "make_item",
    "timing_ranks_per_node",
]
