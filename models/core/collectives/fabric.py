"""The two link classes of a GPU cluster as the collective model sees them.

Owns: the per-GPU bandwidth and latency inside a node (NVLink/NVSwitch or an xGMI full
mesh) and between nodes (one NIC per GPU), and how much of the scale-up bandwidth a group
of k GPUs in one node can use. Must not: pick algorithms or time collectives (that is
`models/core/collectives/hierarchical.py`).
"""

from dataclasses import dataclass

from api_schemas import ClusterSpec, IntraNodeTopology
from models.errors import InvalidSpecError


@dataclass(frozen=True, slots=True, kw_only=True)
class Fabric:
    """Per-GPU, per-direction, achievable bandwidths and start-up latencies of a cluster.

    `intra_bandwidth_bytes_per_s` is what one GPU can send into its node: the NVSwitch port
    bandwidth, or for a full mesh the sum over its `gpus_per_node - 1` point-to-point links.
    `inter_bandwidth_bytes_per_s` is the NIC bandwidth of one GPU (one NIC per GPU).
    """

    gpus_per_node: int
    intra_bandwidth_bytes_per_s: float
    intra_latency_s: float
    inter_bandwidth_bytes_per_s: float
    inter_latency_s: float
    topology: IntraNodeTopology = IntraNodeTopology.SWITCH
    rail_optimized: bool = True

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise InvalidSpecError(f"gpus_per_node={self.gpus_per_node} must be >= 1",
                                   field="gpus_per_node")
        for name in ("intra_bandwidth_bytes_per_s", "inter_bandwidth_bytes_per_s"):
            if getattr(self, name) <= 0:
                raise InvalidSpecError(f"{name}={getattr(self, name)} must be positive",
                                       field=name)


def fabric_of(cluster: ClusterSpec) -> Fabric:
    """The fabric of a cluster description, its link bandwidths scaled by the cluster's
    calibration profile (`intra_node_bandwidth_scale`, `inter_node_bandwidth_scale`, fitted
    on collective microbenchmarks: `models.evidence.microbenchmarks`)."""
    calibration = cluster.calibration
    intra_scale = calibration.intra_node_bandwidth_scale if calibration is not None else 1.0
    inter_scale = calibration.inter_node_bandwidth_scale if calibration is not None else 1.0
    return Fabric(
        gpus_per_node=cluster.gpus_per_node,
        intra_bandwidth_bytes_per_s=cluster.intra_node.bandwidth_bytes_per_s * intra_scale,
        intra_latency_s=cluster.intra_node.latency_s,
        inter_bandwidth_bytes_per_s=cluster.inter_node.bandwidth_bytes_per_s * inter_scale,
        inter_latency_s=cluster.inter_node.latency_s,
        topology=cluster.intra_node_topology,
        rail_optimized=cluster.rail_optimized,
    )


def full_mesh_link_bandwidth(fabric: Fabric) -> float:
    """Bandwidth of one point-to-point link of a full mesh (per direction).

    Source: AMD CDNA 3 white paper / MI300X product page: 7 xGMI links per GPU in an 8-GPU
    mesh, 128 GB/s bidirectional per peer (the catalog's 'mi300x' entry).
    Legend: G = gpus_per_node; per_link = intra_bandwidth / (G - 1).
    """
    peers = fabric.gpus_per_node - 1
    if peers < 1:
        raise InvalidSpecError(
            "a full-mesh node needs at least 2 GPUs to have a link; set gpus_per_node >= 2 "
            "or intra_node_topology='switch'", field="gpus_per_node")
    return fabric.intra_bandwidth_bytes_per_s / peers


def intra_node_bandwidth(fabric: Fabric, *, ranks_in_node: int, point_to_point: bool = False
                         ) -> float:
    """Per-GPU bandwidth a group with `ranks_in_node` members in one node can use there.

    A switch gives every GPU its full port bandwidth whatever the group. In a full mesh a
    GPU reaches each peer over its own link, so a group of k GPUs uses k - 1 of the G - 1
    links, and a single point-to-point transfer one link.
    Source: AMD CDNA 3 white paper / MI300X product page: a full mesh, not a switch, so a GPU
    pair shares one 128 GB/s (bidirectional) link and the 8-GPU mesh offers at most
    7 x 128 GB/s per GPU.
    Assumes: inside a full mesh, reduce-scatter / all-gather / all-to-all run as direct
    exchanges (each rank sends its M/k shard for a peer straight over that peer's link), so
    the ring's (k-1)/k * M bytes leave over k - 1 links at once.
    Legend: k = ranks_in_node, G = gpus_per_node.
    """
    if fabric.topology == IntraNodeTopology.SWITCH:
        return fabric.intra_bandwidth_bytes_per_s
    link = full_mesh_link_bandwidth(fabric)
    if point_to_point:
        return link
    return link * max(1, ranks_in_node - 1)


def host_link_bandwidth(cluster: ClusterSpec) -> float:
    """Host<->GPU bandwidth per GPU per direction: the calibration profile's measured value
    (`host_link_bandwidth_bytes_per_s`, from host-link microbenchmarks) or the node's PCIe
    figure."""
    calibration = cluster.calibration
    if calibration is not None and calibration.host_link_bandwidth_bytes_per_s is not None:
        return calibration.host_link_bandwidth_bytes_per_s
    return cluster.pcie_bandwidth_bytes_per_s


__all__ = ["Fabric", "fabric_of", "full_mesh_link_bandwidth", "host_link_bandwidth",
           "intra_node_bandwidth"]
