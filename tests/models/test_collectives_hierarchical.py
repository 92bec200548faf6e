"""Collectives on a two-level fabric: NVSwitch or xGMI inside nodes, NICs between them."""

import pytest

from api_schemas import (
    Algorithm,
    ClusterSpec,
    Collective,
    CollectiveEstimateRequest,
    GpuSpec,
    IntraNodeTopology,
    LinkClass,
    LinkSpec,
)
from models.core.collectives import (
    Fabric,
    all_to_all_split_cost,
    collective_cost,
    estimate_collective,
    fabric_of,
    flat_collective_cost,
    full_mesh_link_bandwidth,
    intra_node_bandwidth,
)
from models.errors import InvalidSpecError

GIB = 2**30
# DeepSeek-V3 (arXiv:2412.19437 Sec. 3.2.2): ~160 GB/s NVLink, ~50 GB/s IB per H800.
H800 = Fabric(gpus_per_node=8, intra_bandwidth_bytes_per_s=160e9, intra_latency_s=3e-6,
              inter_bandwidth_bytes_per_s=50e9, inter_latency_s=10e-6)
# MI300X: 7 xGMI links of 64 GB/s per direction (128 GB/s bidirectional per peer).
MI300X = Fabric(gpus_per_node=8, intra_bandwidth_bytes_per_s=7 * 64e9, intra_latency_s=3e-6,
                inter_bandwidth_bytes_per_s=50e9, inter_latency_s=10e-6,
                topology=IntraNodeTopology.FULL_MESH)


def test_group_inside_a_node_uses_nvlink_only() -> None:
    c = collective_cost(Collective.ALL_REDUCE, num_ranks=8, message_bytes=GIB, fabric=H800,
                        ranks_per_node=8)
    assert c.link == LinkClass.INTRA_NODE
    assert c.beta_s == pytest.approx(2 * 7 / 8 * GIB / 160e9)


def test_one_rank_per_node_uses_the_nic_only() -> None:
    c = collective_cost(Collective.ALL_GATHER, num_ranks=4, message_bytes=GIB, fabric=H800,
                        ranks_per_node=1)
    assert c.link == LinkClass.INTER_NODE
    assert c.beta_s == pytest.approx(3 / 4 * GIB / 50e9)


def test_two_level_all_reduce_phases_add_up() -> None:
    """DP all-reduce over 4 nodes x 8: intra RS, inter AR of M/8 over 8 NICs, intra AG."""
    m = 8 * 2**20  # latency-heavy enough that two levels beat the flat ring
    c = collective_cost(Collective.ALL_REDUCE, num_ranks=32, message_bytes=m, fabric=H800,
                        ranks_per_node=8)
    assert c.algorithm == Algorithm.HIERARCHICAL
    rs, ar, ag = c.phases
    assert (rs.collective, rs.link, rs.num_ranks) == (Collective.REDUCE_SCATTER,
                                                      LinkClass.INTRA_NODE, 8)
    assert (ar.collective, ar.link, ar.num_ranks, ar.message_bytes) == (
        Collective.ALL_REDUCE, LinkClass.INTER_NODE, 4, m // 8)
    assert (ag.collective, ag.link) == (Collective.ALL_GATHER, LinkClass.INTRA_NODE)
    assert c.time_s == pytest.approx(rs.time_s + ar.time_s + ag.time_s)
    assert c.bytes_sent_per_rank == rs.bytes_sent_per_rank + ar.bytes_sent_per_rank + \
        ag.bytes_sent_per_rank
    flat = flat_collective_cost(Collective.ALL_REDUCE, num_ranks=32, message_bytes=m,
                                bandwidth_bytes_per_s=min(160e9, 8 * 50e9),
                                latency_s=10e-6, algorithm=Algorithm.RING)
    assert c.time_s < flat.time_s


def test_flat_ring_across_nodes_is_bottlenecked_by_the_slowest_link() -> None:
    """A large all-reduce: k rings on k rails, so a rank's bytes pass at min(B_nv, k B_nic)."""
    fabric = Fabric(gpus_per_node=8, intra_bandwidth_bytes_per_s=900e9, intra_latency_s=3e-6,
                    inter_bandwidth_bytes_per_s=25e9, inter_latency_s=10e-6)
    m = 16 * GIB
    for k, bottleneck in ((8, 200e9), (2, 50e9)):
        c = collective_cost(Collective.ALL_REDUCE, num_ranks=4 * k, message_bytes=m,
                            fabric=fabric, ranks_per_node=k)
        n = 4 * k
        flat = 2 * (n - 1) * 10e-6 + 2 * (n - 1) / n * m / bottleneck
        two_level = (2 * (k - 1) / k * m / 900e9 + 2 * 3 / 4 * (m / k) / 25e9
                     + 2 * (k - 1) * 3e-6 + 2 * 3 * 10e-6)
        assert c.time_s == pytest.approx(min(flat, two_level), rel=1e-6)
        assert c.link == LinkClass.CROSS_NODE


def test_full_mesh_group_uses_k_minus_1_of_the_links() -> None:
    """xGMI is per-pair: 4 GPUs of an 8-GPU mesh reach each other over 3 of the 7 links."""
    assert full_mesh_link_bandwidth(MI300X) == pytest.approx(64e9)
    assert intra_node_bandwidth(MI300X, ranks_in_node=4) == pytest.approx(3 * 64e9)
    assert intra_node_bandwidth(MI300X, ranks_in_node=8) == pytest.approx(7 * 64e9)
    assert intra_node_bandwidth(MI300X, ranks_in_node=2, point_to_point=True) == \
        pytest.approx(64e9)
    switch = Fabric(gpus_per_node=8, intra_bandwidth_bytes_per_s=7 * 64e9,
                    intra_latency_s=3e-6, inter_bandwidth_bytes_per_s=50e9,
                    inter_latency_s=10e-6)
    mesh4 = collective_cost(Collective.ALL_REDUCE, num_ranks=4, message_bytes=GIB,
                            fabric=MI300X, ranks_per_node=4)
    switch4 = collective_cost(Collective.ALL_REDUCE, num_ranks=4, message_bytes=GIB,
                              fabric=switch, ranks_per_node=4)
    assert mesh4.beta_s == pytest.approx(switch4.beta_s * 7 / 3)
    mesh8 = collective_cost(Collective.ALL_REDUCE, num_ranks=8, message_bytes=GIB,
                            fabric=MI300X, ranks_per_node=8)
    switch8 = collective_cost(Collective.ALL_REDUCE, num_ranks=8, message_bytes=GIB,
                              fabric=switch, ranks_per_node=8)
    assert mesh8.beta_s == pytest.approx(switch8.beta_s)


def test_uniform_all_to_all_splits_bytes_between_nvlink_and_nics() -> None:
    n, k, m = 64, 8, 64 * 2**20
    c = collective_cost(Collective.ALL_TO_ALL, num_ranks=n, message_bytes=m, fabric=H800,
                        ranks_per_node=k)
    intra, inter = c.phases
    assert inter.bytes_sent_per_rank == m * (n - k) // n
    # rail-optimised: NVLink carries the node-local bytes plus the PXN forward of (k-1)/k
    # of the remote bytes
    assert intra.bytes_sent_per_rank == m * (k - 1) // n + (m * (n - k) // n) * (k - 1) // k
    assert c.bytes_sent_per_rank == m * (n - 1) // n
    assert c.beta_s == pytest.approx(max(intra.beta_s, inter.beta_s))
    assert c.alpha_s == pytest.approx(8 * 3e-6 + 7 * 10e-6)


def test_all_to_all_split_without_rails_sends_straight_from_each_nic() -> None:
    flat = Fabric(gpus_per_node=8, intra_bandwidth_bytes_per_s=160e9, intra_latency_s=3e-6,
                  inter_bandwidth_bytes_per_s=50e9, inter_latency_s=10e-6,
                  rail_optimized=False)
    c = all_to_all_split_cost(num_ranks=64, ranks_per_node=8, intra_bytes_per_rank=1000,
                              inter_bytes_per_rank=50_000_000, fabric=flat)
    assert c.alpha_s == pytest.approx(7 * 3e-6 + 56 * 10e-6)
    assert c.beta_s == pytest.approx(50_000_000 / 50e9)


def test_node_limited_split_is_cheaper_than_uniform() -> None:
    """The EP model passes a smaller inter-node share; the cost follows the NIC bytes."""
    uniform = all_to_all_split_cost(num_ranks=64, ranks_per_node=8, fabric=H800,
                                    intra_bytes_per_rank=7_000_000,
                                    inter_bytes_per_rank=56_000_000)
    limited = all_to_all_split_cost(num_ranks=64, ranks_per_node=8, fabric=H800,
                                    intra_bytes_per_rank=7_000_000,
                                    inter_bytes_per_rank=28_000_000)
    assert limited.time_s < uniform.time_s
    assert limited.phases[1].beta_s == pytest.approx(uniform.phases[1].beta_s / 2)


def test_p2p_inside_and_across_nodes() -> None:
    intra = collective_cost(Collective.P2P, num_ranks=2, message_bytes=GIB, fabric=MI300X,
                            ranks_per_node=2)
    inter = collective_cost(Collective.P2P, num_ranks=2, message_bytes=GIB, fabric=MI300X,
                            ranks_per_node=1)
    assert intra.beta_s == pytest.approx(GIB / 64e9)
    assert inter.beta_s == pytest.approx(GIB / 50e9)


@pytest.mark.parametrize("n, k, match", [(12, 8, "does not divide"), (32, 16, "exceeds")])
def test_bad_placement_raises(n: int, k: int, match: str) -> None:
    with pytest.raises(InvalidSpecError, match=match):
        collective_cost(Collective.ALL_REDUCE, num_ranks=n, message_bytes=GIB, fabric=H800,
                        ranks_per_node=k)


def _cluster() -> ClusterSpec:
    gpu = GpuSpec(id="h800-sxm5-80gb", name="NVIDIA H800 SXM5 80GB", memory_bytes=80 * GIB,
                  hbm_bandwidth_bytes_per_s=3.35e12, dense_peak_flop_per_s={"bf16": 989.4e12})
    return ClusterSpec(gpu=gpu, num_nodes=4, gpus_per_node=8,
                       intra_node=LinkSpec(bandwidth_bytes_per_s=160e9, latency_s=3e-6),
                       inter_node=LinkSpec(bandwidth_bytes_per_s=50e9, latency_s=10e-6))


def test_fabric_of_cluster_copies_links() -> None:
    f = fabric_of(_cluster())
    assert (f.gpus_per_node, f.intra_bandwidth_bytes_per_s, f.inter_latency_s) == (8, 160e9,
                                                                                   10e-6)
    by_cluster = collective_cost(Collective.ALL_GATHER, num_ranks=32, message_bytes=GIB,
                                 fabric=_cluster(), ranks_per_node=8)
    by_fabric = collective_cost(Collective.ALL_GATHER, num_ranks=32, message_bytes=GIB,
                                fabric=H800, ranks_per_node=8)
    assert by_cluster.time_s == pytest.approx(by_fabric.time_s)


def test_estimate_endpoint_logic_explicit_and_cluster() -> None:
    explicit = estimate_collective(CollectiveEstimateRequest(
        collective=Collective.ALL_REDUCE, num_ranks=32, message_bytes=2**28,
        bandwidth_bytes_per_s=50e9, latency_s=1e-5))
    assert explicit.bytes_sent_per_rank == 2 * 31 * 2**28 // 32
    assert explicit.basis == "bytes_sent_per_rank"
    assert explicit.alpha_beta_crossover_bytes == pytest.approx(32 * 1e-5 * 50e9)
    clustered = estimate_collective(CollectiveEstimateRequest(
        collective=Collective.ALL_REDUCE, num_ranks=32, message_bytes=2**20,
        cluster=_cluster(), ranks_per_node=8))
    assert clustered.algorithm == Algorithm.HIERARCHICAL
    assert len(clustered.phases) == 3


@pytest.mark.parametrize("fields", [
    {},
    {"bandwidth_bytes_per_s": 50e9},
    {"bandwidth_bytes_per_s": 50e9, "latency_s": 1e-5, "cluster": "x"},
])
def test_estimate_request_needs_exactly_one_link_source(fields: dict[str, object]) -> None:
    body: dict[str, object] = {"collective": "all_reduce", "num_ranks": 8,
                               "message_bytes": 1024, **fields}
    if body.get("cluster") == "x":
        body["cluster"] = _cluster().model_dump()
    with pytest.raises(ValueError, match="bandwidth"):
        CollectiveEstimateRequest.model_validate(body)
