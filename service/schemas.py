"""Request and response types that only the HTTP service has.

Owns: the plan listing page, the health report, the catalog listings, the Hugging Face
ingestion envelope and the problem-code documentation entry. Must not: compute anything;
planning types live in `api_schemas`.
"""

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import GpuSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.plan import PlanStatus
from api_schemas.problems import ProblemCode

_FROZEN = ConfigDict(frozen=True, json_schema_serialization_defaults_required=True)

# The parameter counts a model listing and a Hugging Face reading both report.
NumParameters = Annotated[int, Field(description="Total parameters (embeddings and head "
                                     "included, MTP excluded).")]
NumActivatedParameters = Annotated[int, Field(description="Parameters one token touches.")]
NumMtpParameters = Annotated[int, Field(description="Multi-token-prediction parameters, "
                                        "apart.")]
NumVisionParameters = Annotated[int, Field(
    description="Vision encoder, adapter and projector of a multimodal checkpoint (Llama 4), "
    "apart: not planned, but part of the published checkpoint, whose total is "
    "num_parameters + num_vision_parameters (+ MTP). 0 when there is none or its kind is "
    "not modelled (the notes say so).")]


class PlanSummary(BaseModel):
    """One row of the plan listing."""

    model_config = _FROZEN

    id: str = Field(description="Plan id; GET /v1/plans/{id} returns the full plan.")
    status: PlanStatus = Field(description="optimal | feasible | infeasible (stored plans "
                               "are never 'unknown': that outcome is answered with 503).")
    model_name: str = Field(description="The LLM planned for (preset id or config name).")
    gpu: str = Field(description="GPU id of the cluster.")
    world_size: int = Field(description="GPUs the plan uses (0 when infeasible).")
    objective: str = Field(description="What the search optimised.")
    created_at: datetime = Field(description="When the plan was stored (UTC).")
    parallel: ParallelConfig | None = Field(default=None, description="The chosen "
                                            "configuration (null when infeasible).")
    step_time_s: float | None = Field(default=None, description="Predicted step time.")
    tokens_per_s: float | None = Field(default=None, description="Predicted throughput.")
    summary: str = Field(default="", description="One-paragraph explanation.")


class PlanList(BaseModel):
    """A page of stored plans, newest first."""

    model_config = _FROZEN

    items: list[PlanSummary] = Field(description="The plans of this page.")
    total: int = Field(description="Plans matching the filters over all pages.")
    limit: int = Field(description="Page size used.")
    offset: int = Field(description="Index of the first item of this page.")
    next_offset: int | None = Field(description="Offset of the next page, or null at the end.")


class HealthReport(BaseModel):
    """Liveness and database reachability."""

    model_config = _FROZEN

    status: Literal["ok", "degraded"] = Field(description="'ok' when the database answers.")
    database: Literal["ok", "unreachable"] = Field(description="Result of a trivial query.")
    database_backend: str = Field(description="'sqlite' or 'postgresql'.")
    version: str = Field(description="Service version.")


class NodePresetInfo(BaseModel):
    """A typical server of the catalog (its links are derived from these figures)."""

    model_config = _FROZEN

    id: str = Field(description="Node preset id, usable as cluster.node.")
    gpu_id: str = Field(description="GPU preset it carries.")
    gpus_per_node: int = Field(description="GPUs per node.")
    intra_node_bandwidth_bytes_per_s: float = Field(description="Achievable scale-up "
                                                    "bandwidth per GPU per direction.")
    inter_node_bandwidth_bytes_per_s: float = Field(description="Achievable NIC bandwidth "
                                                    "per GPU per direction.")
    host_memory_bytes: int = Field(description="Host memory per node.")
    host_memory_bandwidth_bytes_per_s: float = Field(description="Aggregate CPU DRAM "
                                                     "bandwidth per node.")
    pcie_bandwidth_bytes_per_s: float = Field(description="Host<->GPU bandwidth per GPU per "
                                              "direction (PCIe or NVLink-C2C).")
    description: str = Field(description="What the preset models.")
    sources: list[str] = Field(description="Where the figures come from.")


class GpuCatalog(BaseModel):
    """GPU and node presets."""

    model_config = _FROZEN

    gpus: list[GpuSpec] = Field(description="Every GPU preset with its sources.")
    nodes: list[NodePresetInfo] = Field(description="Every node preset.")
    default_node: dict[str, str] = Field(description="Node preset used for each GPU when a "
                                         "request names none.")


class ModelCatalogEntry(BaseModel):
    """One model preset with its parameter counts."""

    model_config = _FROZEN

    id: str = Field(description="Preset id, usable as {'preset': id}.")
    source: Literal["hf_config", "megatron_gpt", "assumed"] = Field(
        description="A packaged Hugging Face config, a published Megatron GPT shape, or a "
        "shape assumed where the report gives only totals (see assumptions).")
    spec: ModelSpec = Field(description="The architecture.")
    num_parameters: NumParameters
    num_activated_parameters: NumActivatedParameters
    num_mtp_parameters: NumMtpParameters
    num_vision_parameters: NumVisionParameters = 0
    assumptions: list[str] = Field(
        default_factory=list, description="For an assumed preset, every figure it assumes "
        "where its source gives none.")


class ModelCatalog(BaseModel):
    """Model presets."""

    model_config = _FROZEN

    models: list[ModelCatalogEntry] = Field(description="Every model preset.")


class FromHfRequest(BaseModel):
    """Body of POST /v1/models/from-hf."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: dict[str, Any] = Field(description="The parsed Hugging Face config.json.")
    name: str | None = Field(default=None, max_length=200, description="Display name; "
                             "default `_name_or_path` or the model type.")


class FromHfResponse(BaseModel):
    """The ModelSpec read from a config, with its parameter counts."""

    model_config = _FROZEN

    spec: ModelSpec = Field(description="The architecture; post it as `model` of a plan.")
    model_type: str = Field(description="The config's model_type.")
    num_parameters: NumParameters
    num_activated_parameters: NumActivatedParameters
    num_mtp_parameters: NumMtpParameters
    num_vision_parameters: NumVisionParameters = 0
    notes: list[str] = Field(description="Every default or assumption applied while reading.")


class ProblemInfo(BaseModel):
    """Documentation of one problem code (the target of a problem's `type` URI)."""

    model_config = _FROZEN

    code: ProblemCode = Field(description="The stable code.")
    status: int = Field(description="HTTP status it is sent with.")
    title: str = Field(description="Its fixed title.")
    description: str = Field(description="When it is sent and which members it carries.")


__all__ = [
    "FromHfRequest",
    "FromHfResponse",
    "GpuCatalog",
    "HealthReport",
    "ModelCatalog",
    "ModelCatalogEntry",
    "NodePresetInfo",
    "PlanList",
    "PlanSummary",
    "ProblemInfo",
]
