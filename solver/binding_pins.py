"""What leaves a pinned request without a single mesh: the framework target or a pin.

Owns: counting the meshes a request's constraints leave on the whole cluster for its
framework target (the same enumeration and framework filter the search uses:
`solver.space.candidate_meshes` under `solver.targets.target_constraints`, then
`solver.targets.admits_mesh`), and naming what binds: the framework target when target
'any' has meshes (with the framework rules that refuse them), and each single pin whose
release alone gives meshes. Must not: search plans (`solver/relax.py` turns what binds into
relaxations with plans) or change the request.
"""

import time
from dataclasses import dataclass
from typing import Any

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.requests import Constraints
from api_schemas.training import TrainingSpec
from solver.planner import hardware_constraints
from solver.space import candidate_meshes
from solver.targets import TargetRequest, admits_mesh, target_blockers, target_constraints

MESH_PINS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch_size", "schedule",
             "zero_stage", "sequence_parallel", "cp_kind")
"""The constraint fields that pin the mesh or schedule (each tried released on its own)."""

ANY = "any"


@dataclass(frozen=True, slots=True, kw_only=True)
class Binding:
    """What binds in a request that leaves no mesh."""

    framework_meshes: int
    """Meshes the same pins leave with framework 'any' (0 when the target is already 'any'
    or when the framework is not what binds)."""
    framework_rules: tuple[str, ...]
    """Why the target's frameworks refuse the first of those meshes (their capability
    tables)."""
    pins: dict[str, Any]
    """Each single pin (field -> its value) whose release alone leaves meshes."""
    pin_meshes: dict[str, int]
    """How many meshes each of those releases leaves."""


def mesh_count(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
               constraints: Constraints, *, deadline: float | None = None) -> int:
    """Meshes on the whole cluster that the constraints and their framework target admit."""
    narrowed = target_constraints(hardware_constraints(constraints, cluster, training))
    meshes = candidate_meshes(spec, training, world_size=cluster.world_size,
                              gpus_per_node=cluster.gpus_per_node, constraints=narrowed,
                              deadline=deadline)
    request = TargetRequest(spec, training, narrowed)
    return sum(admits_mesh(spec, training, c, request) for c in meshes)


def _pinned(constraints: Constraints) -> dict[str, Any]:
    given = constraints.model_dump(mode="json", exclude_defaults=True)
    return {field: given[field] for field in MESH_PINS if field in given}


def find_binding(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                 constraints: Constraints, *, deadline: float | None = None) -> Binding:
    """What binds when `constraints` leave no mesh: the framework target (meshes with target
    'any', and the rules refusing the first) and each pin whose release alone gives meshes
    under the request's own target."""
    framework_meshes, rules = 0, tuple[str, ...]()
    if constraints.framework != ANY:
        wide = constraints.model_copy(update={"framework": ANY, "framework_version": None})
        framework_meshes = mesh_count(spec, training, cluster, wide, deadline=deadline)
        if framework_meshes:
            narrowed = target_constraints(hardware_constraints(wide, cluster, training))
            first = candidate_meshes(spec, training, world_size=cluster.world_size,
                                     gpus_per_node=cluster.gpus_per_node,
                                     constraints=narrowed, deadline=deadline)[0]
            zero = constraints.zero_stage
            pinned = {"zero_stage": zero} if isinstance(zero, int) else {}
            rules = tuple(dict.fromkeys(target_blockers(
                spec, training, first.parallel(**pinned), constraints)))
    pins: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for field, value in _pinned(constraints).items():
        if deadline is not None and time.perf_counter() >= deadline:
            break
        released = constraints.model_copy(update={field: None})
        n = mesh_count(spec, training, cluster, released, deadline=deadline)
        if n:
            pins[field], counts[field] = value, n
    return Binding(framework_meshes=framework_meshes, framework_rules=rules, pins=pins,
                   pin_meshes=counts)


def binding_texts(binding: Binding, constraints: Constraints) -> list[str]:
    """The binding constraints in words (empty when neither the framework nor one pin binds:
    the pins bind together, or divisibility does)."""
    target = constraints.framework or "the released frameworks"
    runs = "run" if constraints.framework is None else "runs"
    out = []
    if binding.framework_meshes:
        rules = "; ".join(binding.framework_rules) or "the capability table"
        out.append(f"the framework target binds: {target} {runs} none of the "
                   f"{binding.framework_meshes} meshes these pins allow (framework 'any' "
                   f"keeps them): {rules}")
    for field, value in binding.pins.items():
        out.append(f"the pin {field}={value} binds: releasing it alone leaves "
                   f"{binding.pin_meshes[field]} meshes for {target}")
    return out


__all__ = ["MESH_PINS", "Binding", "binding_texts", "find_binding", "mesh_count"]
