"""Alpha-beta cost of collectives, over one link class or a two-level cluster fabric.

Owns: collective kinds, algorithms, counting bases, per-call time and bytes, crossover
sizes, and the hierarchical intra/inter-node model (incl. the AMD xGMI full mesh). Must not:
know what a training step sends (that is `models.core.traffic`) or who is in a group
(`models.core.mesh`).
"""

from models.core.collectives.alpha_beta import (
    Algorithm,
    AlgorithmShape,
    Collective,
    CollectiveCost,
    CountingBasis,
    LinkClass,
    algorithm_shape,
    algorithm_switch_bytes,
    alpha_beta_crossover_bytes,
    bus_factor,
    candidate_algorithms,
    flat_collective_cost,
    paper_volume_bytes,
    ring_bytes_sent_per_rank,
    ring_shape,
    wire_bytes,
)
from models.core.collectives.fabric import (
    Fabric,
    fabric_of,
    full_mesh_link_bandwidth,
    intra_node_bandwidth,
)
from models.core.collectives.hierarchical import (
    all_to_all_split_cost,
    collective_cost,
    uniform_all_to_all_cost,
)
from models.core.collectives.report import estimate_collective

__all__ = [
    "Algorithm",
    "AlgorithmShape",
    "Collective",
    "CollectiveCost",
    "CountingBasis",
    "Fabric",
    "LinkClass",
    "algorithm_shape",
    "algorithm_switch_bytes",
    "all_to_all_split_cost",
    "alpha_beta_crossover_bytes",
    "bus_factor",
    "candidate_algorithms",
    "collective_cost",
    "estimate_collective",
    "fabric_of",
    "flat_collective_cost",
    "full_mesh_link_bandwidth",
    "intra_node_bandwidth",
    "paper_volume_bytes",
    "ring_bytes_sent_per_rank",
    "ring_shape",
    "uniform_all_to_all_cost",
    "wire_bytes",
]
