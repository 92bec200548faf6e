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
from api_schemas.parallel import (
    ContextParallelKind,
    FullLayers,
    ParallelConfig,
    PipelineSchedule,
    Recompute,
    RecomputeMode,
    RecomputeModule,
    StagePolicy,
)
from api_schemas.plan import (
    Alternative,
    Explanation,
    MemoryComponentReport,
    MemoryReport,
    PlanResponse,
    PlanStatus,
    SolverStats,
    StageMemoryReport,
    Throughput,
    TimeBreakdown,
)
from api_schemas.requests import (
    ClusterInput,
    Constraints,
    EvaluateRequest,
    ModelFromHf,
    ModelInput,
    ModelPreset,
    Objective,
    PlanRequest,
    SolverLimits,
)
from api_schemas.problems import FieldError, ProblemCode, ProblemDetail
from api_schemas.training import EmaPlacement, Fp8WeightStorage, OptimizerKind, TrainingSpec
from api_schemas.units import GIB

__all__ = [
    "GIB",
    "Alternative",
    "AttentionKind",
    "ClusterInput",
    "ClusterSpec",
    "Constraints",
    "ContextParallelKind",
    "DType",
    "EmaPlacement",
    "EvaluateRequest",
    "Explanation",
    "FieldError",
    "Fp8WeightStorage",
    "FullLayers",
    "GpuSpec",
    "IntraNodeTopology",
    "LinkSpec",
    "MLASpec",
    "MemoryComponentReport",
    "MemoryReport",
    "MlpKind",
    "MoESpec",
    "ModelFromHf",
    "ModelInput",
    "ModelPreset",
    "ModelSpec",
    "NormKind",
    "Objective",
    "OptimizerKind",
    "ParallelConfig",
    "PipelineSchedule",
    "PlanRequest",
    "PlanResponse",
    "PlanStatus",
    "ProblemCode",
    "ProblemDetail",
    "Recompute",
    "RecomputeMode",
    "RecomputeModule",
    "SolverLimits",
    "SolverStats",
    "StageMemoryReport",
    "StagePolicy",
    "Throughput",
    "TimeBreakdown",
    "TrainingSpec",
]
