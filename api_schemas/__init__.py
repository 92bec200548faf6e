"""Public request/response types of atlas-planner (pydantic v2).

Owns: the contract shared by the API, the CLI, the library and the cost model. Must not:
import any other package of this project, or compute anything beyond validation.
"""

from api_schemas.architecture import (
    AttentionKind,
    MLASpec,
    MlpKind,
    ModelSpec,
    MoESpec,
    NormKind,
)
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec, GpuSpec, IntraNodeTopology, LinkSpec
from api_schemas.moe import (
    MoePlacementRequest,
    MoePlacementResponse,
    MoeRoute,
    PlacementPlanner,
    PlacementStatus,
)
from api_schemas.parallel import (
    ContextParallelKind,
    FullLayers,
    ParallelConfig,
    PipelineSchedule,
    Recompute,
    RecomputeMode,
    StagePolicy,
)
from api_schemas.problems import FieldError, ProblemCode, ProblemDetail
from api_schemas.training import EmaPlacement, Fp8WeightStorage, OptimizerKind, TrainingSpec
from api_schemas.units import GIB

__all__ = [
    "GIB",
    "AttentionKind",
    "ClusterSpec",
    "ContextParallelKind",
    "DType",
    "EmaPlacement",
    "FieldError",
    "Fp8WeightStorage",
    "FullLayers",
    "GpuSpec",
    "IntraNodeTopology",
    "LinkSpec",
    "MLASpec",
    "MlpKind",
    "ModelSpec",
    "MoESpec",
    "MoePlacementRequest",
    "MoePlacementResponse",
    "MoeRoute",
    "NormKind",
    "OptimizerKind",
    "ParallelConfig",
    "PipelineSchedule",
    "PlacementPlanner",
    "PlacementStatus",
    "ProblemCode",
    "ProblemDetail",
    "Recompute",
    "RecomputeMode",
    "StagePolicy",
    "TrainingSpec",
]
