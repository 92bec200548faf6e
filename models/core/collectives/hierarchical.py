"""Collectives over a real cluster: inside a node, across nodes, or both.

Owns: the time of a collective whose group has `ranks_per_node` members in each of
`num_nodes` nodes, as the faster of (a) a flat algorithm whose steps cross both link
classes, bottlenecked by the slowest, and (b) for all-reduce and broadcast, a two-level
algorithm (intra-node phase, inter-node phase over k NICs in parallel, intra-node phase);
all-gather and reduce-scatter across nodes are the flat ring only; and the all-to-all with an
explicit intra/inter byte split (the expert-parallel cost reuses it). Must not: decide which
ranks form a group (that is `models/mesh`) or what a training step sends (`models/traffic`).

Model (stated once, used everywhere here). A group of n = k * g ranks, k per node on g nodes,
node-contiguous. Flat ring: NCCL runs one ring per NIC (channel), each ring crossing every
node boundary once on its own rail, so the k ranks of a node drive k NICs together and a
rank's ring bytes pass at min(B_intra, k * B_nic); every step waits for the slower latency.
Two-level: all-reduce = intra reduce-scatter (M) + inter all-reduce of M/k among the g ranks
with the same local index (k of them in parallel, one NIC each) + intra all-gather (M).
Ring and two-level traffic only ever pairs GPUs with the same local index across nodes, which
share a rail, so `rail_optimized` changes only the all-to-all (see `all_to_all_split_cost`).
"""

from collections.abc import Callable

from api_schemas import ClusterSpec
from models.core.collectives.alpha_beta import (
    Algorithm,
    Collective,
    CollectiveCost,
    CountingBasis,
    LinkClass,
    candidate_algorithms,
    flat_collective_cost,
    paper_volume_bytes,
)
from models.core.collectives.fabric import Fabric, fabric_of, intra_node_bandwidth
from models.errors import InvalidSpecError


def collective_cost(collective: Collective, *, num_ranks: int, message_bytes: int,
                    fabric: Fabric | ClusterSpec, ranks_per_node: int) -> CollectiveCost:
    """Time of one collective over a group placed `ranks_per_node` per node on a cluster.

    Source: two-level collectives as in Thakur et al. 2005 (IJHPCA 19(1)) Sec. 4 applied
    per level; the flat multi-ring bound follows NCCL's one-ring-per-NIC channels (NCCL
    docs, "NCCL_ALGO" / "NCCL_MIN_NCHANNELS"). Legend: n = num_ranks, k = ranks_per_node,
    g = n / k nodes, M = message_bytes.
    Assumes: node-contiguous placement, one NIC per GPU, a non-blocking fabric.

    Raises:
        InvalidSpecError: k does not divide n, or k exceeds the GPUs of a node.
    """
    if isinstance(fabric, ClusterSpec):
        fabric = fabric_of(fabric)
    k, g = _split(num_ranks=num_ranks, ranks_per_node=ranks_per_node, fabric=fabric)
    if collective == Collective.ALL_TO_ALL:
        return uniform_all_to_all_cost(num_ranks=num_ranks, message_bytes=message_bytes,
                                       fabric=fabric, ranks_per_node=k)
    if g == 1:
        return _intra(collective, k, message_bytes, fabric)
    if k == 1:
        return _inter(collective, g, message_bytes, fabric)
    options = [_flat_cross_node(collective, num_ranks, k, message_bytes, fabric)]
    two_level = _TWO_LEVEL.get(collective)
    if two_level is not None:
        options.append(two_level(k, g, message_bytes, fabric))
    return min(options, key=lambda c: c.time_s)


def uniform_all_to_all_cost(*, num_ranks: int, message_bytes: int, fabric: Fabric,
                            ranks_per_node: int) -> CollectiveCost:
    """All-to-all where every rank sends M/n to every rank (itself included).

    Source: pairwise exchange, Thakur et al. 2005 (IJHPCA 19(1)) Sec. 4: (p-1)/p * M sent
    per rank; here split into the (k-1)/n * M that stays in the node and the (n-k)/n * M
    that crosses the NICs. Legend: p = n = num_ranks, k = ranks_per_node, M = message_bytes.
    """
    k, _ = _split(num_ranks=num_ranks, ranks_per_node=ranks_per_node, fabric=fabric)
    n = num_ranks
    cost = all_to_all_split_cost(
        num_ranks=n, ranks_per_node=k, fabric=fabric,
        intra_bytes_per_rank=-(-message_bytes * (k - 1) // n),
        inter_bytes_per_rank=-(-message_bytes * (n - k) // n),
    )
    return _with_message(cost, message_bytes)


def all_to_all_split_cost(*, num_ranks: int, ranks_per_node: int, intra_bytes_per_rank: int,
                          inter_bytes_per_rank: int, fabric: Fabric) -> CollectiveCost:
    """All-to-all with a given split of each rank's bytes between node peers and remote ranks.

    The expert-parallel model calls this with the split that its routing implies (e.g.
    node-limited routing caps the remote share). Both link classes work at once, so the
    bandwidth term is the slower of the two; latencies add up.
    Rail-optimised fabric (NCCL PXN): a message for a remote rank on another rail first
    crosses NVLink to the local GPU on that rail, so NVLink also carries (k-1)/k of the
    inter-node bytes, and messages to one remote node leave as one (g - 1 inter latencies).
    Otherwise each rank sends straight from its NIC to each of the n - k remote ranks.
    Source: pairwise exchange, Thakur et al. 2005 (IJHPCA 19(1)) Sec. 4; NCCL 2.12 PXN
    ("NCCL_PXN_DISABLE", NCCL environment-variable docs).
    Legend: n = num_ranks, k = ranks_per_node, g = n / k.

    Raises:
        InvalidSpecError: negative byte counts, or k does not divide n.
    """
    if intra_bytes_per_rank < 0 or inter_bytes_per_rank < 0:
        raise InvalidSpecError(
            f"intra_bytes_per_rank={intra_bytes_per_rank} and inter_bytes_per_rank="
            f"{inter_bytes_per_rank} must be >= 0", field="message_bytes")
    k, g = _split(num_ranks=num_ranks, ranks_per_node=ranks_per_node, fabric=fabric)
    nvlink_bytes = intra_bytes_per_rank
    intra_alpha = (k - 1) * fabric.intra_latency_s
    if fabric.rail_optimized and k > 1 and inter_bytes_per_rank > 0:
        nvlink_bytes += inter_bytes_per_rank * (k - 1) // k
        intra_alpha += fabric.intra_latency_s
        inter_messages = g - 1
    else:
        inter_messages = num_ranks - k
    inter_alpha = inter_messages * fabric.inter_latency_s if inter_bytes_per_rank else 0.0
    intra_beta = nvlink_bytes / intra_node_bandwidth(fabric, ranks_in_node=k) if k > 1 else 0.0
    inter_beta = inter_bytes_per_rank / fabric.inter_bandwidth_bytes_per_s
    sent = intra_bytes_per_rank + inter_bytes_per_rank
    phases = tuple(
        _phase(Collective.ALL_TO_ALL, Algorithm.PAIRWISE, link, ranks, nbytes, alpha, beta)
        for link, ranks, nbytes, alpha, beta in (
            (LinkClass.INTRA_NODE, k, nvlink_bytes, intra_alpha, intra_beta),
            (LinkClass.INTER_NODE, g, inter_bytes_per_rank, inter_alpha, inter_beta),
        ) if nbytes > 0
    )
    alpha_s = intra_alpha + inter_alpha
    beta_s = max(intra_beta, inter_beta)
    link = LinkClass.INTRA_NODE if g == 1 else (
        LinkClass.INTER_NODE if k == 1 else LinkClass.CROSS_NODE)
    return CollectiveCost(
        collective=Collective.ALL_TO_ALL,
        algorithm=Algorithm.PAIRWISE if len(phases) <= 1 else Algorithm.HIERARCHICAL,
        link=link, basis=CountingBasis.BYTES_SENT_PER_RANK, num_ranks=num_ranks,
        message_bytes=sent, bytes_sent_per_rank=sent, paper_volume_bytes=sent,
        wire_bytes=sent * num_ranks, alpha_s=alpha_s, beta_s=beta_s, time_s=alpha_s + beta_s,
        phases=phases if len(phases) > 1 else (),
    )


def _split(*, num_ranks: int, ranks_per_node: int, fabric: Fabric) -> tuple[int, int]:
    if num_ranks < 1 or ranks_per_node < 1:
        raise InvalidSpecError(
            f"num_ranks={num_ranks} and ranks_per_node={ranks_per_node} must be >= 1",
            field="num_ranks")
    if num_ranks % ranks_per_node:
        raise InvalidSpecError(
            f"ranks_per_node={ranks_per_node} does not divide num_ranks={num_ranks}: a group "
            "spread over nodes has the same number of members in each; pick a divisor",
            field="ranks_per_node")
    if ranks_per_node > fabric.gpus_per_node:
        raise InvalidSpecError(
            f"ranks_per_node={ranks_per_node} exceeds gpus_per_node={fabric.gpus_per_node}: "
            f"use at most {fabric.gpus_per_node}", field="ranks_per_node")
    return ranks_per_node, num_ranks // ranks_per_node


def _intra(collective: Collective, k: int, message_bytes: int, fabric: Fabric
           ) -> CollectiveCost:
    bandwidth = intra_node_bandwidth(fabric, ranks_in_node=k,
                                     point_to_point=collective == Collective.P2P)
    return flat_collective_cost(collective, num_ranks=k, message_bytes=message_bytes,
                                bandwidth_bytes_per_s=bandwidth,
                                latency_s=fabric.intra_latency_s, link=LinkClass.INTRA_NODE)


def _inter(collective: Collective, g: int, message_bytes: int, fabric: Fabric
           ) -> CollectiveCost:
    return flat_collective_cost(collective, num_ranks=g, message_bytes=message_bytes,
                                bandwidth_bytes_per_s=fabric.inter_bandwidth_bytes_per_s,
                                latency_s=fabric.inter_latency_s, link=LinkClass.INTER_NODE)


def _flat_cross_node(collective: Collective, n: int, k: int, message_bytes: int,
                     fabric: Fabric) -> CollectiveCost:
    """A flat ring over all n ranks: k rings on k rails, the slower link class decides."""
    bandwidth = min(intra_node_bandwidth(fabric, ranks_in_node=k),
                    k * fabric.inter_bandwidth_bytes_per_s)
    latency = max(fabric.intra_latency_s, fabric.inter_latency_s)
    ring_only = tuple(a for a in candidate_algorithms(collective) if a == Algorithm.RING)
    algorithm = ring_only[0] if ring_only else None
    return flat_collective_cost(collective, num_ranks=n, message_bytes=message_bytes,
                                bandwidth_bytes_per_s=bandwidth, latency_s=latency,
                                algorithm=algorithm, link=LinkClass.CROSS_NODE)


def _two_level_all_reduce(k: int, g: int, m: int, fabric: Fabric) -> CollectiveCost:
    shard = -(-m // k)
    return _compose(Collective.ALL_REDUCE, k * g, m, (
        _intra(Collective.REDUCE_SCATTER, k, m, fabric),
        _inter(Collective.ALL_REDUCE, g, shard, fabric),
        _intra(Collective.ALL_GATHER, k, m, fabric),
    ), inter_copies=k, intra_copies=g)


def _two_level_broadcast(k: int, g: int, m: int, fabric: Fabric) -> CollectiveCost:
    return _compose(Collective.BROADCAST, k * g, m, (
        _inter(Collective.BROADCAST, g, m, fabric),
        _intra(Collective.BROADCAST, k, m, fabric),
    ), inter_copies=1, intra_copies=g)


_TWO_LEVEL: dict[Collective, Callable[[int, int, int, Fabric], CollectiveCost]] = {
    Collective.ALL_REDUCE: _two_level_all_reduce,
    Collective.BROADCAST: _two_level_broadcast,
}
"""Collectives that also run as two levels across nodes. NCCL runs all-gather and
reduce-scatter across nodes as one ring over all n ranks (n - 1 latency rounds; its
hierarchical algorithms, NVLS/CollNet and tree, serve all-reduce), so ZeRO-3 / FSDP gathers
pay a latency that grows with the data-parallel group. Source: NCCL user guide, NCCL_ALGO
("Ring" is the algorithm of AllGather/ReduceScatter across nodes; "Tree", "CollnetDirect/
Chain" and "NVLS" apply to AllReduce)."""


def _compose(collective: Collective, n: int, message_bytes: int,
             phases: tuple[CollectiveCost, ...], *, inter_copies: int, intra_copies: int
             ) -> CollectiveCost:
    """Sequential phases: times and per-rank bytes add; wire bytes count every copy."""
    alpha_s = sum(p.alpha_s for p in phases)
    beta_s = sum(p.beta_s for p in phases)
    wire = sum(p.wire_bytes * (inter_copies if p.link == LinkClass.INTER_NODE else intra_copies)
               for p in phases)
    return CollectiveCost(
        collective=collective, algorithm=Algorithm.HIERARCHICAL, link=LinkClass.CROSS_NODE,
        basis=CountingBasis.BYTES_SENT_PER_RANK, num_ranks=n, message_bytes=message_bytes,
        bytes_sent_per_rank=sum(p.bytes_sent_per_rank for p in phases),
        paper_volume_bytes=paper_volume_bytes(collective, message_bytes), wire_bytes=wire,
        alpha_s=alpha_s, beta_s=beta_s, time_s=alpha_s + beta_s, phases=phases,
    )


def _phase(collective: Collective, algorithm: Algorithm, link: LinkClass, ranks: int,
           nbytes: int, alpha_s: float, beta_s: float) -> CollectiveCost:
    return CollectiveCost(
        collective=collective, algorithm=algorithm, link=link,
        basis=CountingBasis.BYTES_SENT_PER_RANK, num_ranks=ranks, message_bytes=nbytes,
        bytes_sent_per_rank=nbytes, paper_volume_bytes=nbytes, wire_bytes=nbytes * ranks,
        alpha_s=alpha_s, beta_s=beta_s, time_s=alpha_s + beta_s,
    )


def _with_message(cost: CollectiveCost, message_bytes: int) -> CollectiveCost:
    """Restate an all-to-all cost against the caller's whole send buffer M."""
    return CollectiveCost(
        collective=cost.collective, algorithm=cost.algorithm, link=cost.link,
        basis=cost.basis, num_ranks=cost.num_ranks, message_bytes=message_bytes,
        bytes_sent_per_rank=cost.bytes_sent_per_rank,
        paper_volume_bytes=paper_volume_bytes(Collective.ALL_TO_ALL, message_bytes),
        wire_bytes=cost.wire_bytes, alpha_s=cost.alpha_s, beta_s=cost.beta_s,
        time_s=cost.time_s, phases=cost.phases,
    )


__all__ = ["all_to_all_split_cost", "collective_cost", "uniform_all_to_all_cost"]
