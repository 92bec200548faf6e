"""Alpha-beta cost of one collective over a single class of link.

Owns: each algorithm's round count and bytes-on-the-critical-path factor, the three
counting bases (paper volume, bytes sent per rank, bytes on the wire), the NCCL bus-bandwidth
factor, the choice of the faster algorithm and the alpha/beta crossover size (the enums
themselves are part of the contract, `api_schemas.collectives`). Must not: know about
nodes, NICs or topologies (that is `models/core/collectives/hierarchical.py`), or about training
(that is `models/traffic`).

Conventions for the message size M (`message_bytes`), as in nccl-tests:
all-reduce: the tensor every rank holds (input = output); reduce-scatter: the full input
(each rank keeps M/n); all-gather: the full output (each rank contributes M/n);
all-to-all: each rank's whole send buffer (M/n to every rank, itself included);
broadcast: the root's tensor; p2p: the tensor sent.
"""

import math
from dataclasses import dataclass
from fractions import Fraction

from api_schemas.collectives import Algorithm, Collective, CountingBasis, LinkClass
from models.errors import InvalidSpecError


@dataclass(frozen=True, slots=True, kw_only=True)
class AlgorithmShape:
    """The two numbers an alpha-beta model needs from an algorithm.

    time = rounds * latency + bytes_factor * message_bytes / bandwidth.
    """

    rounds: int
    bytes_factor: Fraction
    """Exact ratio of critical-path bytes to message bytes (e.g. 2(n-1)/n)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveCost:
    """Time and bytes of one call of a collective.

    `time_s = alpha_s + beta_s`; `basis` names the basis of the bytes in `beta_s`. For a
    hierarchical collective `phases` holds the per-level costs that add up to the total.
    """

    collective: Collective
    algorithm: Algorithm
    link: LinkClass
    basis: CountingBasis
    num_ranks: int
    message_bytes: int
    bytes_sent_per_rank: int
    paper_volume_bytes: int
    wire_bytes: int
    alpha_s: float
    beta_s: float
    time_s: float
    phases: tuple["CollectiveCost", ...] = ()

    @property
    def algorithm_bandwidth_bytes_per_s(self) -> float:
        """NCCL's algbw: message_bytes / time_s (0 for an empty message)."""
        return self.message_bytes / self.time_s if self.time_s > 0 else 0.0

    @property
    def bus_bandwidth_bytes_per_s(self) -> float:
        """NCCL's busbw: algbw times the collective's bus factor (see `bus_factor`)."""
        return self.algorithm_bandwidth_bytes_per_s * bus_factor(self.collective, self.num_ranks)


def bus_factor(collective: Collective, num_ranks: int) -> float:
    """Factor that turns NCCL's algorithm bandwidth into bus bandwidth.

    Source: NVIDIA nccl-tests, doc/PERFORMANCE.md ("bus bandwidth"): all-reduce 2(n-1)/n,
    reduce-scatter, all-gather and all-to-all (n-1)/n, broadcast and p2p 1.
    Legend: n = num_ranks.
    """
    n = num_ranks
    if collective == Collective.ALL_REDUCE:
        return 2 * (n - 1) / n
    if collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL):
        return (n - 1) / n
    return 1.0


def paper_volume_bytes(collective: Collective, message_bytes: int) -> int:
    """The papers' communication volume of one call: all-reduce 2M, every other kind M.

    Source: ZeRO, Rajbhandari et al. 2019, arXiv:1910.02054, Sec. 7.1 (all-reduce = 2Psi as
    reduce-scatter Psi + all-gather Psi); DeepSpeed-Ulysses arXiv:2309.14509 Sec. 3.2 counts
    an all-to-all of a per-rank buffer M as M per link.
    Legend: Psi, M = message_bytes.
    Deviation: drops the ring factor (n-1)/n that `bytes_sent_per_rank` keeps.
    """
    return 2 * message_bytes if collective == Collective.ALL_REDUCE else message_bytes


def ring_bytes_sent_per_rank(collective: Collective, *, num_ranks: int,
                             message_bytes: int) -> int:
    """Bytes one rank sends in a ring collective (rounded up to whole bytes).

    Source: Thakur, Rabenseifner, Gropp 2005, "Optimization of collective communication
    operations in MPICH", IJHPCA 19(1), Sec. 4 (ring all-gather (p-1)/p * n; reduce-scatter
    likewise; all-reduce = reduce-scatter + all-gather); seed ledger Sec. 1.4.
    Legend: p = num_ranks, n = M = message_bytes.
    """
    return _ceil_bytes(ring_shape(collective, num_ranks).bytes_factor * message_bytes)


def ring_shape(collective: Collective, num_ranks: int) -> AlgorithmShape:
    """Rounds and critical-path bytes factor of the ring (or chain) algorithm.

    Source: Thakur et al. 2005 (IJHPCA 19(1)) Sec. 4: ring all-gather (p-1)alpha +
    (p-1)/p n beta; reduce-scatter the same; all-reduce = reduce-scatter + all-gather
    2(p-1)alpha + 2(p-1)/p n beta (Patarasuk and Yuan 2009 show this is bandwidth-optimal);
    pairwise all-to-all (p-1)alpha + (p-1)/p n beta; a pipelined chain broadcast sends the
    whole message once per rank, (p-1)alpha + n beta.
    Legend: p = num_ranks, n = message_bytes, alpha = latency_s, beta = 1/bandwidth.
    Assumes: a pipelined chain broadcast whose chunk count is large enough that the fill
    time is the p-1 latencies.
    """
    n = num_ranks
    if collective == Collective.ALL_REDUCE:
        return AlgorithmShape(rounds=2 * (n - 1), bytes_factor=Fraction(2 * (n - 1), n))
    if collective == Collective.BROADCAST:
        return AlgorithmShape(rounds=n - 1, bytes_factor=Fraction(1 if n > 1 else 0))
    if collective == Collective.P2P:
        return AlgorithmShape(rounds=1, bytes_factor=Fraction(1))
    return AlgorithmShape(rounds=n - 1, bytes_factor=Fraction(n - 1, n))


def algorithm_shape(collective: Collective, algorithm: Algorithm,
                    num_ranks: int) -> AlgorithmShape:
    """Rounds and bytes factor of `algorithm` for `collective` on `num_ranks` ranks.

    Source: Thakur et al. 2005 (IJHPCA 19(1)) Sec. 4: recursive-doubling all-reduce
    lg(p) alpha + n lg(p) beta; binomial-tree broadcast lg(p)(alpha + n beta).
    Legend: p = num_ranks, n = message_bytes.
    Deviation: non-power-of-two p uses ceil(lg p) rounds (MPICH adds pre/post steps; the
    difference is at most two rounds).

    Raises:
        InvalidSpecError: the algorithm does not implement the collective.
    """
    if num_ranks < 1:
        raise InvalidSpecError(f"num_ranks={num_ranks} must be at least 1", field="num_ranks")
    if num_ranks == 1 and collective != Collective.P2P:
        return AlgorithmShape(rounds=0, bytes_factor=Fraction(0))
    lg = math.ceil(math.log2(num_ranks)) if num_ranks > 1 else 0
    if algorithm == Algorithm.RING and collective != Collective.P2P:
        return ring_shape(collective, num_ranks)
    if algorithm == Algorithm.RECURSIVE_DOUBLING and collective == Collective.ALL_REDUCE:
        return AlgorithmShape(rounds=lg, bytes_factor=Fraction(lg))
    if algorithm == Algorithm.BINOMIAL_TREE and collective == Collective.BROADCAST:
        return AlgorithmShape(rounds=lg, bytes_factor=Fraction(lg))
    if algorithm == Algorithm.PAIRWISE and collective == Collective.ALL_TO_ALL:
        return ring_shape(collective, num_ranks)
    if algorithm == Algorithm.DIRECT and collective == Collective.P2P:
        return ring_shape(collective, num_ranks)
    raise InvalidSpecError(
        f"algorithm '{algorithm}' does not implement collective '{collective}'; use one of "
        f"{[a.value for a in candidate_algorithms(collective)]}",
        field="algorithm",
    )


def candidate_algorithms(collective: Collective) -> tuple[Algorithm, ...]:
    """Algorithms the model chooses from for a collective (fastest wins, as NCCL tunes).

    Source: NCCL chooses per call between ring and tree for all-reduce from its own cost
    model (NCCL docs, NCCL_ALGO); the small-message all-reduce here is Thakur et al.'s
    recursive doubling, the latency-optimal counterpart of NCCL's tree.
    """
    if collective == Collective.ALL_REDUCE:
        return (Algorithm.RING, Algorithm.RECURSIVE_DOUBLING)
    if collective == Collective.BROADCAST:
        return (Algorithm.RING, Algorithm.BINOMIAL_TREE)
    if collective == Collective.ALL_TO_ALL:
        return (Algorithm.PAIRWISE,)
    if collective == Collective.P2P:
        return (Algorithm.DIRECT,)
    return (Algorithm.RING,)


def wire_bytes(collective: Collective, algorithm: Algorithm, *, num_ranks: int,
               message_bytes: int) -> int:
    """Bytes sent by all ranks together in one call.

    Source: as `algorithm_shape`: symmetric algorithms (ring, recursive doubling, pairwise)
    have every rank send the critical-path bytes; a chain or binomial broadcast delivers the
    message to each of the p-1 other ranks once; a p2p sends it once.
    Legend: p = num_ranks, M = message_bytes.
    """
    if collective == Collective.P2P:
        return message_bytes
    if collective == Collective.BROADCAST:
        return (num_ranks - 1) * message_bytes
    shape = algorithm_shape(collective, algorithm, num_ranks)
    return _ceil_bytes(num_ranks * shape.bytes_factor * message_bytes)


def flat_collective_cost(collective: Collective, *, num_ranks: int, message_bytes: int,
                         bandwidth_bytes_per_s: float, latency_s: float,
                         algorithm: Algorithm | None = None,
                         link: LinkClass = LinkClass.EXPLICIT) -> CollectiveCost:
    """Alpha-beta time of one collective over one link class; fastest algorithm if None.

    Source: Hockney's alpha-beta model as used by Thakur et al. 2005 (IJHPCA 19(1)) Sec. 3:
    time = rounds * alpha + bytes_on_critical_path * beta.
    Legend: alpha = latency_s, beta = 1 / bandwidth_bytes_per_s, M = message_bytes.
    Assumes: bandwidth is achievable per rank per direction; no congestion, no compute of the
    reduction, full-duplex links.

    Raises:
        InvalidSpecError: non-positive bandwidth, negative latency or message size, or an
            algorithm that does not implement the collective.
    """
    _check_link(bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=latency_s,
                message_bytes=message_bytes)
    if collective == Collective.P2P and num_ranks != 2:
        raise InvalidSpecError(
            f"a p2p involves exactly 2 ranks, got num_ranks={num_ranks}: set num_ranks=2",
            field="num_ranks",
        )
    options = (algorithm,) if algorithm is not None else candidate_algorithms(collective)
    costs = [
        _cost_of(collective, a, num_ranks=num_ranks, message_bytes=message_bytes,
                 bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=latency_s, link=link)
        for a in options
    ]
    return min(costs, key=lambda c: c.time_s)


def _cost_of(collective: Collective, algorithm: Algorithm, *, num_ranks: int,
             message_bytes: int, bandwidth_bytes_per_s: float, latency_s: float,
             link: LinkClass) -> CollectiveCost:
    shape = algorithm_shape(collective, algorithm, num_ranks)
    alpha_s = shape.rounds * latency_s
    beta_s = float(shape.bytes_factor) * message_bytes / bandwidth_bytes_per_s
    return CollectiveCost(
        collective=collective,
        algorithm=algorithm,
        link=link,
        basis=CountingBasis.BYTES_SENT_PER_RANK,
        num_ranks=num_ranks,
        message_bytes=message_bytes,
        bytes_sent_per_rank=_ceil_bytes(shape.bytes_factor * message_bytes),
        paper_volume_bytes=paper_volume_bytes(collective, message_bytes) if num_ranks > 1 else 0,
        wire_bytes=wire_bytes(collective, algorithm, num_ranks=num_ranks,
                              message_bytes=message_bytes) if num_ranks > 1 else 0,
        alpha_s=alpha_s,
        beta_s=beta_s,
        time_s=alpha_s + beta_s,
    )


def alpha_beta_crossover_bytes(collective: Collective, *, num_ranks: int,
                               bandwidth_bytes_per_s: float, latency_s: float,
                               algorithm: Algorithm = Algorithm.RING) -> float:
    """Message size at which the latency term equals the bandwidth term.

    Below it the alpha term dominates (latency-bound), above it the beta term. From
    rounds * alpha = bytes_factor * M / B: M* = rounds * alpha * B / bytes_factor; for a
    ring all-reduce M* = n * alpha * B.
    Source: alpha-beta model of Thakur et al. 2005 (IJHPCA 19(1)) Sec. 3; seed ledger Sec. 5.2.
    Legend: alpha = latency_s, B = bandwidth_bytes_per_s, n = num_ranks.

    Raises:
        InvalidSpecError: a single rank (no communication, no crossover).
    """
    shape = algorithm_shape(collective, algorithm, num_ranks)
    if shape.bytes_factor == 0:
        raise InvalidSpecError(
            f"num_ranks={num_ranks}: a collective on one rank moves no bytes, so it has no "
            "alpha/beta crossover; use num_ranks >= 2",
            field="num_ranks",
        )
    return shape.rounds * latency_s * bandwidth_bytes_per_s / float(shape.bytes_factor)


def algorithm_switch_bytes(collective: Collective, *, num_ranks: int,
                           bandwidth_bytes_per_s: float, latency_s: float,
                           small: Algorithm, large: Algorithm) -> float:
    """Message size where `small` and `large` take equal time (e.g. recursive doubling vs ring).

    From r_s alpha + f_s M / B = r_l alpha + f_l M / B: M = (r_l - r_s) alpha B / (f_s - f_l).
    Source: alpha-beta model of Thakur et al. 2005 (IJHPCA 19(1)) Sec. 3.
    Legend: r = rounds, f = bytes_factor, alpha = latency_s, B = bandwidth_bytes_per_s.

    Raises:
        InvalidSpecError: the two algorithms never cross (same bytes factor).
    """
    s = algorithm_shape(collective, small, num_ranks)
    lg = algorithm_shape(collective, large, num_ranks)
    if s.bytes_factor == lg.bytes_factor:
        raise InvalidSpecError(
            f"'{small}' and '{large}' move the same bytes on {num_ranks} ranks, so neither "
            "overtakes the other; compare algorithms with different bytes factors",
            field="algorithm",
        )
    return (lg.rounds - s.rounds) * latency_s * bandwidth_bytes_per_s / float(
        s.bytes_factor - lg.bytes_factor)


def _check_link(*, bandwidth_bytes_per_s: float, latency_s: float, message_bytes: int) -> None:
    if bandwidth_bytes_per_s <= 0:
        raise InvalidSpecError(
            f"bandwidth_bytes_per_s={bandwidth_bytes_per_s} must be positive, e.g. 160e9 for "
            "an H800 NVLink or 50e9 for a 400 Gb/s NIC", field="bandwidth_bytes_per_s")
    if latency_s < 0:
        raise InvalidSpecError(f"latency_s={latency_s} must be >= 0, e.g. 5e-6",
                               field="latency_s")
    if message_bytes < 0:
        raise InvalidSpecError(f"message_bytes={message_bytes} must be >= 0",
                               field="message_bytes")


def _ceil_bytes(value: Fraction) -> int:
    """Round an exact fractional byte count up (a partial byte still occupies the wire)."""
    return math.ceil(value)


__all__ = [
    "Algorithm",
    "AlgorithmShape",
    "Collective",
    "CollectiveCost",
    "CountingBasis",
    "LinkClass",
    "algorithm_shape",
    "algorithm_switch_bytes",
    "alpha_beta_crossover_bytes",
    "bus_factor",
    "candidate_algorithms",
    "flat_collective_cost",
    "paper_volume_bytes",
    "ring_bytes_sent_per_rank",
    "ring_shape",
    "wire_bytes",
]
