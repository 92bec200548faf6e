"""Request and response of `POST /v1/collectives/estimate`, and the collective vocabulary.

Owns: the closed sets of collectives, algorithms, counting bases and link classes, the
estimate request (a collective, a group size, a message, and either a cluster with ranks
per node or an explicit bandwidth and latency) and its response. Must not: compute times
(that is `models/collectives`).
"""

from enum import StrEnum
from typing import Self

from pydantic import ConfigDict, Field, model_validator

from api_schemas._base import ResultModel, SpecModel
from api_schemas.hardware import ClusterSpec
from api_schemas.units import (
    Bytes,
    DurationSeconds,
    Fraction,
    PositiveBytesPerSecond,
    PositiveInt,
)


class Collective(StrEnum):
    """Communication primitives the cost model times."""

    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    P2P = "p2p"


class Algorithm(StrEnum):
    """How a collective is carried out."""

    RING = "ring"
    """n-1 neighbour steps per pass (bandwidth-optimal); broadcast as a pipelined chain."""
    RECURSIVE_DOUBLING = "recursive_doubling"
    """log2(n) pairwise exchanges of the whole message (latency-optimal all-reduce)."""
    BINOMIAL_TREE = "binomial_tree"
    """log2(n) rounds, the whole message per round (short broadcasts)."""
    PAIRWISE = "pairwise"
    """All-to-all as n-1 pairwise exchanges."""
    DIRECT = "direct"
    """One send from one rank to another."""
    HIERARCHICAL = "hierarchical"
    """Two levels: inside each node, then across nodes over the NICs (see phases)."""


class CountingBasis(StrEnum):
    """What a byte count counts; numbers on different bases are not comparable."""

    PAPER_VOLUME = "paper_volume"
    """The papers' approximation: all-reduce 2M, reduce-scatter M, all-gather M, others M."""
    BYTES_SENT_PER_RANK = "bytes_sent_per_rank"
    """What one rank sends on the algorithm's critical path, e.g. ring 2(n-1)/n * M."""
    BYTES_ON_WIRE = "bytes_on_wire"
    """Sum of the bytes sent by all ranks."""


class LinkClass(StrEnum):
    """Which links a collective (or one of its phases) runs over."""

    EXPLICIT = "explicit"
    """A caller-given bandwidth and latency."""
    INTRA_NODE = "intra_node"
    """NVLink/NVSwitch or xGMI inside one node."""
    INTER_NODE = "inter_node"
    """The NICs between nodes."""
    CROSS_NODE = "cross_node"
    """Both link classes; the slowest link sets the pace."""


class CollectiveEstimateRequest(SpecModel):
    """One collective on one group: give a cluster (+ ranks per node) or a bandwidth/latency."""

    collective: Collective = Field(
        description="'all_reduce', 'reduce_scatter', 'all_gather', 'all_to_all', 'broadcast' "
        "or 'p2p'.", examples=["all_reduce"])
    num_ranks: PositiveInt = Field(description="Ranks in the group (2 for 'p2p').",
                                   examples=[32])
    message_bytes: Bytes = Field(
        description="Message size M in bytes: the tensor each rank holds for all-reduce, the "
        "full input for reduce-scatter, the full output for all-gather, each rank's whole "
        "send buffer for all-to-all, the root's tensor for broadcast, the tensor for p2p.",
        examples=[268435456])
    cluster: ClusterSpec | None = Field(
        default=None, description="Cluster whose intra- and inter-node links carry the "
        "collective; requires ranks_per_node unless the group fits in one node.")
    ranks_per_node: PositiveInt | None = Field(
        default=None, description="Group members per node (node-contiguous); null = "
        "min(num_ranks, gpus_per_node).", examples=[8])
    bandwidth_bytes_per_s: PositiveBytesPerSecond | None = Field(
        default=None, description="Explicit per-rank, per-direction bandwidth "
        "(instead of a cluster).", examples=[50e9])
    latency_s: DurationSeconds | None = Field(
        default=None, description="Explicit per-step latency alpha (instead of a cluster).",
        examples=[1e-5])
    algorithm: Algorithm | None = Field(
        default=None, description="Force an algorithm (explicit links only); null = the "
        "fastest, as NCCL's tuner would choose.")
    overlap_frac: Fraction = Field(
        default=0.0, description="Share of the collective's time that can run behind "
        "compute (0 = nothing overlaps, e.g. a TP all-reduce on the critical path; close to "
        "1 for a bucketed gradient reduction, whose last bucket stays exposed).",
        examples=[0.9])
    overlap_window_s: DurationSeconds | None = Field(
        default=None, description="Compute time the collective can hide behind (e.g. one "
        "micro-batch's backward); null = not bounded by compute.", examples=[0.004])

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra={"examples": [{
        "collective": "all_reduce", "num_ranks": 32, "message_bytes": 268435456,
        "bandwidth_bytes_per_s": 50e9, "latency_s": 1e-5}]})

    @model_validator(mode="after")
    def _one_link_source(self) -> Self:
        explicit = self.bandwidth_bytes_per_s is not None or self.latency_s is not None
        if (self.cluster is None) == (not explicit):
            raise ValueError(
                "give either 'cluster' (with 'ranks_per_node') or both "
                "'bandwidth_bytes_per_s' and 'latency_s', not both and not neither")
        if explicit and (self.bandwidth_bytes_per_s is None or self.latency_s is None):
            raise ValueError("explicit links need both 'bandwidth_bytes_per_s' and 'latency_s'")
        if self.collective == Collective.P2P and self.num_ranks != 2:
            raise ValueError(f"collective='p2p' involves 2 ranks, got num_ranks={self.num_ranks}")
        if self.algorithm is not None and self.cluster is not None:
            raise ValueError("'algorithm' can only be forced with explicit bandwidth/latency")
        return self


class CollectivePhase(ResultModel):
    """One level of a hierarchical collective."""

    collective: Collective = Field(description="What this phase does.")
    algorithm: Algorithm = Field(description="Algorithm of the phase.")
    link: LinkClass = Field(description="Links the phase runs over.")
    num_ranks: int = Field(description="Ranks taking part in one instance of the phase.")
    message_bytes: int = Field(description="Message of the phase in bytes.")
    bytes_sent_per_rank: int = Field(description="Bytes one rank sends in the phase.")
    alpha_s: float = Field(description="Latency part of the phase in seconds.")
    beta_s: float = Field(description="Bandwidth part of the phase in seconds.")
    time_s: float = Field(description="alpha_s + beta_s.")


class CollectiveEstimateResponse(ResultModel):
    """Bytes and alpha-beta time of one collective call, with the counting basis named."""

    collective: Collective = Field(description="The collective.")
    algorithm: Algorithm = Field(description="The algorithm chosen (the fastest).")
    link: LinkClass = Field(description="Links used.")
    basis: CountingBasis = Field(
        description="Basis of the bytes that drive beta_s: bytes sent per rank on the "
        "critical path.")
    num_ranks: int = Field(description="Ranks in the group.")
    message_bytes: int = Field(description="Message size M.")
    bytes_sent_per_rank: int = Field(description="Bytes one rank sends (e.g. ring "
                                     "2(n-1)/n * M for all-reduce).", examples=[520093696])
    paper_volume_bytes: int = Field(description="The papers' volume: all-reduce 2M, others M.")
    wire_bytes: int = Field(description="Bytes sent by all ranks together.")
    time_s: float = Field(description="alpha_s + beta_s in seconds.", examples=[0.0107])
    alpha_s: float = Field(description="Latency part: rounds x latency.")
    beta_s: float = Field(description="Bandwidth part: bytes on the critical path / bandwidth.")
    algorithm_bandwidth_bytes_per_s: float = Field(description="NCCL algbw: M / time_s.")
    bus_bandwidth_bytes_per_s: float = Field(description="NCCL busbw: algbw x bus factor.")
    alpha_beta_crossover_bytes: float | None = Field(
        default=None, description="Message size where the alpha and beta terms are equal for "
        "this algorithm on explicit links (null for hierarchical estimates).")
    phases: list[CollectivePhase] = Field(
        default_factory=list, description="Per-level costs of a hierarchical collective.")
    hidden_s: float = Field(
        default=0.0, description="Part of time_s that runs behind compute: min(time_s x "
        "overlap_frac, overlap_window_s).", examples=[0.004])
    exposed_s: float = Field(
        default=0.0, description="Part of time_s left on the critical path: time_s - "
        "hidden_s.", examples=[0.0067])


__all__ = [
    "Algorithm",
    "Collective",
    "CollectiveEstimateRequest",
    "CollectiveEstimateResponse",
    "CollectivePhase",
    "CountingBasis",
    "LinkClass",
]
