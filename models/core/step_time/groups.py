"""Process groups as the step-time model sees them, read from the one mesh.

Owns: `AxisGroups`, the view of `models.core.mesh.build_mesh` (built once per degrees and cluster
shape, cached) that the timing code uses: per axis the group size and the ranks per node a
collective is timed with (`models.core.traffic.items.timing_ranks_per_node`), and the per-layer
traffic context over that mesh. Must not: place ranks itself (`models.core.mesh` does) or time
anything.
"""

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.core.collectives import Collective, Fabric
from models.core.mesh import DeviceMesh, GroupKind, build_mesh
from models.core.traffic.context import LayerTrafficContext, group_placement
from models.core.traffic.items import timing_ranks_per_node

_KINDS = {"tp": GroupKind.TP, "cp": GroupKind.CP, "dp": GroupKind.DP, "dp_cp": GroupKind.DP_CP,
          "pp": GroupKind.PP, "etp": GroupKind.ETP, "ep": GroupKind.EP, "edp": GroupKind.EDP}


@dataclass(frozen=True, slots=True, kw_only=True)
class AxisGroup:
    """A parallel group as the timing model sees it: size and members per node."""

    size: int
    ranks_per_node: int


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class AxisGroups(Mapping[str, AxisGroup]):
    """Every axis's group (tp, cp, dp, dp_cp, pp, etp, ep, edp) over one mesh."""

    mesh: DeviceMesh

    def __getitem__(self, axis: str) -> AxisGroup:
        placement = group_placement(self.mesh, _KINDS[axis])
        return AxisGroup(size=placement.group_size,
                         ranks_per_node=timing_ranks_per_node(placement, Collective.ALL_GATHER))

    def __iter__(self) -> Iterator[str]:
        return iter(_KINDS)

    def __len__(self) -> int:
        return len(_KINDS)

    def layer_context(self, spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                      fabric: Fabric) -> LayerTrafficContext:
        """The per-layer traffic context of a configuration over this mesh."""
        return LayerTrafficContext(model=spec, training=training, parallel=parallel,
                                   fabric=fabric, mesh=self.mesh)


def axis_groups(parallel: ParallelConfig, *, gpus_per_node: int) -> AxisGroups:
    """The groups of every axis under Megatron's order tp-cp-ep-dp-pp, from `build_mesh`.

    Source: Megatron-LM `megatron/core/parallel_state.py` (rank generator, default order
    'tp-cp-ep-dp-pp'), as `models.core.mesh.layout.build_mesh` implements it; ranks fill nodes in
    order. A world that does not fill whole nodes is laid out gcd(world, gpus_per_node) per
    node.
    """
    world = parallel.world_size
    per_node = math.gcd(world, gpus_per_node)
    # A search keeps each mesh by its degrees (the only fields `build_mesh` reads).
    return AxisGroups(mesh=build_mesh(parallel, num_nodes=max(1, world // per_node),
                                      gpus_per_node=per_node))


__all__ = ["AxisGroup", "AxisGroups", "axis_groups"]
