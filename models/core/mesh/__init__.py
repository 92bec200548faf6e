"""The device mesh: rank coordinates, process groups and their validation.

Owns: Megatron-ordered rank coordinates and groups (TP, CP, DP, PP, DP x CP, EP, ETP,
expert-DP) with their node placement, and the rules a mesh must satisfy for a model,
cluster and recipe, each problem reported with a valid alternative. Must not: time
communication (`models.core.collectives`) or count traffic (`models.core.traffic`).
"""

from models.core.mesh.candidates import Severity
from models.core.mesh.layout import (
    AXIS_NAMES,
    DEFAULT_ORDER,
    AxisPlacement,
    DeviceMesh,
    GroupKind,
    RankGroup,
    build_mesh,
    expert_data_parallel_size,
    masked_rank_groups,
    parse_order,
    pipeline_groups_agree,
)
from models.core.mesh.validation import MeshAlternative, MeshProblem, mesh_problems, validate_mesh

__all__ = [
    "AXIS_NAMES",
    "DEFAULT_ORDER",
    "AxisPlacement",
    "DeviceMesh",
    "GroupKind",
    "MeshAlternative",
    "MeshProblem",
    "RankGroup",
    "Severity",
    "build_mesh",
    "expert_data_parallel_size",
    "masked_rank_groups",
    "mesh_problems",
    "parse_order",
    "pipeline_groups_agree",
    "validate_mesh",
]
