"""Request and response of `POST /v1/mesh`: rank coordinates, groups and mesh problems.

Owns: the mesh request (cluster shape, parallel configuration, axis order, optionally the
model and training recipe for the model-dependent rules) and the response (world size,
validity, problems each with a valid alternative, per-axis placement and collectives, and
per-rank coordinates and groups). Must not: build groups or check rules (`models/mesh`).
"""

from enum import StrEnum

from pydantic import ConfigDict, Field

from api_schemas._base import ResultModel, SpecModel
from api_schemas.architecture import ModelSpec
from api_schemas.collectives import Collective
from api_schemas.hardware import ClusterSpec, GpuSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from api_schemas.units import PositiveInt


class ClusterShape(SpecModel):
    """Just the shape of a cluster: enough for rank placement."""

    num_nodes: PositiveInt = Field(description="Number of nodes.", examples=[4])
    gpus_per_node: PositiveInt = Field(description="GPUs per node (the scale-up domain).",
                                       examples=[8])
    gpu: str | GpuSpec | None = Field(
        default=None, description="GPU preset id or object; not needed for the mesh itself.",
        examples=["h100-sxm5-80gb"])


class MeshRequest(SpecModel):
    """A parallel configuration to lay out on a cluster."""

    cluster: ClusterSpec | ClusterShape = Field(
        description="The cluster: a full description or just nodes x GPUs per node.")
    parallel: ParallelConfig = Field(description="Degrees, schedule and batch split.")
    order: str = Field(
        default="tp-cp-ep-dp-pp",
        description="Rank order of the mesh axes, first varies fastest (Megatron's "
        "'order'); every axis of degree > 1 must appear.", examples=["tp-cp-ep-dp-pp"])
    model: ModelSpec | None = Field(
        default=None, description="The LLM architecture; without it, rules about heads, "
        "widths, layers and experts are not checked.")
    training: TrainingSpec | None = Field(
        default=None, description="The recipe; without it, batch and sequence rules are "
        "not checked.")
    max_ranks: PositiveInt = Field(
        default=256, le=65536, description="List at most this many ranks (from rank 0).",
        examples=[32])

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra={"examples": [{
        "cluster": {"num_nodes": 4, "gpus_per_node": 8},
        "parallel": {"tp": 2, "cp": 2, "dp": 4, "pp": 2, "ep": 4, "etp": 2,
                     "sequence_parallel": True},
        "order": "tp-cp-ep-dp-pp", "max_ranks": 32}]})


class ProblemSeverity(StrEnum):
    """Whether a problem makes the mesh unusable or only worth a second look."""

    ERROR = "error"
    WARNING = "warning"


class MeshAlternativeOut(ResultModel):
    """A configuration that passes every error rule, close to the one asked about."""

    parallel: ParallelConfig = Field(description="The alternative configuration.")
    order: str = Field(description="Its axis order.")
    change: str = Field(description="What changed, e.g. 'tp 3 -> 4'.",
                        examples=["tp 3 -> 4, dp 8 -> 6"])


class MeshProblemOut(ResultModel):
    """One violated rule."""

    rule: str = Field(description="Stable rule id.", examples=["tp-divides-heads"])
    severity: ProblemSeverity = Field(description="'error' or 'warning'.")
    field: str = Field(description="The request field at fault.", examples=["parallel.tp"])
    message: str = Field(description="What is wrong, with the values, and why.")
    values: dict[str, int | str | bool] = Field(description="The values the rule compared.")
    alternative: MeshAlternativeOut | None = Field(
        description="A valid configuration nearby; null if none exists on this cluster.")


class AxisCollectiveOut(ResultModel):
    """A collective an axis runs."""

    collective: Collective = Field(description="The collective.")
    frequency: str = Field(description="'per_layer_per_micro_batch', 'per_micro_batch' or "
                           "'per_step'.")
    purpose: str = Field(description="What it carries.")


class AxisOut(ResultModel):
    """Where the groups of one kind sit and what they exchange."""

    kind: str = Field(description="'tp', 'cp', 'dp', 'pp', 'dp_cp', 'ep', 'etp' or 'edp'.")
    group_size: int = Field(description="Members per group.")
    num_groups: int = Field(description="Number of groups of this kind.")
    all_intra_node: bool = Field(description="True when every group stays inside a node.")
    max_nodes_spanned: int = Field(description="Nodes spanned by the widest group.")
    ranks_per_node: int = Field(description="Members per node in that group.")
    collectives: list[AxisCollectiveOut] = Field(
        description="Collectives on this axis and how often they run.")


class RankOut(ResultModel):
    """One rank: its node, coordinates and groups."""

    rank: int = Field(description="Global rank.")
    node: int = Field(description="Node index.")
    local_rank: int = Field(description="Index inside the node.")
    coords: dict[str, int] = Field(description="Coordinates tp, cp, dp, pp, etp, ep, edp.")
    groups: dict[str, list[int]] = Field(
        description="Members of each group the rank is in (tp, cp, dp, pp, dp_cp, ep, etp, "
        "edp).")


class MeshResponse(ResultModel):
    """The laid-out mesh and everything wrong with it."""

    world_size: int = Field(description="GPUs in the cluster.")
    valid: bool = Field(description="True when no rule reports an error.")
    order: str = Field(description="The normalised axis order (missing size-1 axes appended).")
    degrees: dict[str, int] = Field(description="tp, cp, dp, pp, ep, etp and the derived edp.")
    problems: list[MeshProblemOut] = Field(description="Errors and warnings in rule order.")
    axes: list[AxisOut] = Field(description="Per group kind placement (empty if the degrees "
                                "do not tile the cluster).")
    ranks: list[RankOut] = Field(description="Ranks 0..max_ranks-1.")
    ranks_truncated: bool = Field(description="True when more ranks exist than are listed.")


__all__ = [
    "AxisCollectiveOut",
    "AxisOut",
    "ClusterShape",
    "MeshAlternativeOut",
    "MeshProblemOut",
    "MeshRequest",
    "MeshResponse",
    "ProblemSeverity",
    "RankOut",
]
