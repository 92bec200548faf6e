"""Run-level questions: the whole training run rather than one step.

Owns: the request and response types of POST /v1/run/estimate (time and cost to train on a
token budget, with checkpoints and failures), POST /v1/frontier (GPU count against step
time and cost over the cluster sizes the user allows) and POST /v1/sensitivity (how the
plan moves when network bandwidth, HBM capacity or kernel efficiency change). Must not:
compute anything.
"""

from enum import StrEnum
from typing import Annotated, Self

from pydantic import ConfigDict, Field, model_validator

from api_schemas._base import ResultModel, SpecModel
from api_schemas.parallel import ParallelConfig
from api_schemas.plan import PlanResponse, PlanStatus, PredictedRange
from api_schemas.requests import PLAN_REQUEST_EXAMPLE, PlanRequest
from api_schemas.units import (
    Bytes,
    DurationSeconds,
    PositiveBytesPerSecond,
    PositiveDurationSeconds,
    PositiveInt,
    Seconds,
)

MAX_FRONTIER_SIZES = 16
"""Most cluster sizes one frontier request may list."""
MAX_SENSITIVITY_DELTAS = 4
"""Most relative changes per factor one sensitivity request may list."""


LLAMA3_FAILURES_PER_GPU_HOUR = 419 / (54 * 24 * 16_384)
"""Unexpected job interruptions per GPU-hour in Llama 3's pre-training: 419 in a 54-day
snapshot on 16,384 H100 GPUs (arXiv:2407.21783 Sec. 3.3.4); about one per 50,700 GPU-hours."""
LLAMA3_STORAGE_BANDWIDTH_BYTES_PER_S = 2e12
"""Sustained write bandwidth of Llama 3's Tectonic store, 2 TB/s (arXiv:2407.21783
Sec. 3.3.1)."""
DGX_H100_STORAGE_BANDWIDTH_BYTES_PER_S = 1e11
"""One node's storage links: a DGX H100 carries two ConnectX-7 cards for storage and
in-band traffic at up to 400 Gb/s each, 100 GB/s in all (NVIDIA DGX H100 user guide,
hardware overview)."""
DEFAULT_RESTART_S = 600.0
"""Time from a failure to training again (detect, reschedule, load the checkpoint): an
assumption of this product, not a published figure; give your cluster's."""


class ReliabilitySpec(SpecModel):
    """How the cluster fails and how the run checkpoints (defaults from Llama 3's report)."""

    failures_per_gpu_hour: float = Field(
        default=LLAMA3_FAILURES_PER_GPU_HOUR, gt=0.0, le=1.0,
        description="Job-stopping failures per GPU-hour; default from Llama 3 "
        "(arXiv:2407.21783 Sec. 3.3.4: 419 unexpected interruptions in 54 days on 16,384 "
        "GPUs).", examples=[1.97e-5])
    storage_bandwidth_bytes_per_s: PositiveBytesPerSecond = Field(
        default=LLAMA3_STORAGE_BANDWIDTH_BYTES_PER_S,
        description="Aggregate write bandwidth of the checkpoint store; default Llama 3's "
        "2 TB/s (Sec. 3.3.1).")
    node_storage_bandwidth_bytes_per_s: PositiveBytesPerSecond = Field(
        default=DGX_H100_STORAGE_BANDWIDTH_BYTES_PER_S,
        description="One node's links to the store; default a DGX H100's two 400 Gb/s "
        "storage NICs (100 GB/s).")
    async_save: bool = Field(
        default=False, description="Save asynchronously (Megatron-LM --async-save): training "
        "stops only for the copy to host memory, and saves are at least one write apart.")
    restart_s: DurationSeconds = Field(
        default=DEFAULT_RESTART_S, description="Time from a failure to training again "
        "(an assumption by default; give your cluster's).")
    checkpoint_interval_s: PositiveDurationSeconds | None = Field(
        default=None, description="Training time between saves to evaluate (more than 0 "
        "s); default the optimum (Daly 2006).")


class IntervalGoodput(ResultModel):
    """Goodput of the run at one checkpoint interval."""

    interval_s: Seconds = Field(description="Training time between saves.")
    goodput: float = Field(description="Failure-free training time over expected wall time "
                           "at this interval (Daly 2006).")


class ReliabilityEstimate(ResultModel):
    """Checkpoints and failures over the run: deterministic model outputs."""

    checkpoint_bytes: Bytes = Field(description="One full checkpoint: weights, master "
                                    "weights and optimizer moments.")
    checkpoint_bytes_per_rank: Bytes = Field(description="Each rank's share under a fully "
                                             "parallel save.")
    checkpoint_write_s: Seconds = Field(description="Time to write one checkpoint at the "
                                        "storage bandwidth.")
    checkpoint_blocking_s: Seconds = Field(description="Time training stops per save.")
    job_mtbf_s: Seconds = Field(description="Mean time between failures of the whole job.")
    young_interval_s: Seconds = Field(description="Young (1974): sqrt(2 x blocking x MTBF).")
    daly_interval_s: Seconds = Field(description="Daly (2006)'s higher-order optimum.")
    checkpoint_interval_s: Seconds = Field(description="The interval evaluated.")
    expected_failures: float = Field(description="Failures expected over the run.")
    wall_time_s: Seconds = Field(description="Expected wall time with saves, failures and "
                                 "restarts (Daly 2006).")
    wall_days: float = Field(description="wall_time_s in days of 86,400 s.")
    goodput: float = Field(description="Failure-free training time over expected wall time.")
    gpu_hours: float = Field(description="world_size x wall_time_s / 3600.")
    cost: float | None = Field(default=None, description="gpu_hours x gpu_hour_price.")
    goodput_by_interval: list[IntervalGoodput] = Field(
        default_factory=list, description="Goodput at intervals spaced evenly in log scale "
        "from a tenth of Daly's optimum to ten times it: what a shorter or longer interval "
        "costs (an asynchronous save's intervals start at its write time).")


class RunEstimateRequest(PlanRequest):
    """A plan request plus the number of tokens to train on. With `parallel` given, that
    configuration is scored instead of searched for."""

    token_budget: PositiveInt = Field(description="Training tokens of the whole run.",
                                      examples=[15_000_000_000_000])
    reliability: ReliabilitySpec = Field(
        default_factory=ReliabilitySpec,
        description="Failures and checkpoints; defaults from Llama 3's report.")

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra={"examples": [
        {**PLAN_REQUEST_EXAMPLE, "token_budget": 15_000_000_000_000}]})


class RunEstimateResponse(ResultModel):
    """How long and how much the run takes under the plan's predicted step time."""

    status: PlanStatus = Field(description="Status of the plan the estimate rests on.")
    token_budget: int = Field(description="Training tokens asked for.")
    tokens_per_step: int = Field(description="global_batch_size x sequence_length.")
    num_steps: int = Field(description="Optimizer steps: ceil(token_budget / tokens_per_step).")
    step_time_s: Seconds = Field(description="Predicted time of one step.")
    train_time_s: Seconds = Field(description="num_steps x step_time_s.")
    train_days: float = Field(description="train_time_s in days of 86,400 s.")
    world_size: int = Field(description="GPUs of the plan.")
    gpu_hours: float = Field(description="world_size x train_time_s / 3600.")
    gpu_hour_price: float | None = Field(default=None, description="The request's price.")
    cost: float | None = Field(default=None, description="gpu_hours x gpu_hour_price, when a "
                               "price is given.")
    reliability: ReliabilityEstimate = Field(
        description="The run with checkpoints and failures.")
    plan: PlanResponse = Field(description="The plan (or evaluation) the estimate uses.")
    train_days_low: float | None = Field(
        default=None, description="train_days at the low step time of "
        "`plan.predicted_range` (None when it gives no range; it says what backs it).")
    train_days_high: float | None = Field(
        default=None, description="train_days at the high step time of the range.")
    gpu_hours_low: float | None = Field(default=None, description="gpu_hours at the low "
                                        "step time.")
    gpu_hours_high: float | None = Field(default=None, description="gpu_hours at the high "
                                         "step time.")
    cost_low: float | None = Field(default=None, description="cost at the low step time.")
    cost_high: float | None = Field(default=None, description="cost at the high step time.")


class FrontierRequest(PlanRequest):
    """A plan request whose cluster size varies: one search per allowed number of nodes,
    sharing `solver.time_limit_s`."""

    num_nodes_options: list[PositiveInt] = Field(
        min_length=1, max_length=MAX_FRONTIER_SIZES,
        description="Cluster sizes to try, in nodes of cluster.gpus_per_node GPUs; "
        "cluster.num_nodes is ignored.", examples=[[1, 2, 4, 8]])

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra={"examples": [
        {**PLAN_REQUEST_EXAMPLE, "num_nodes_options": [4, 8, 16]}]})


WinningLayout = Annotated[ParallelConfig | None, Field(description="The winning layout.")]
"""The layout of the plan that wins at a frontier or sensitivity point."""
WinningStepTime = Annotated[Seconds | None, Field(description="Its step time.")]
"""That plan's step time."""
WinningThroughput = Annotated[float | None, Field(description="Its throughput.")]
"""That plan's tokens per second."""
WinningRange = Annotated[PredictedRange | None, Field(
    description="Range of its step time and tokens/s (as a plan's).")]
"""That plan's predicted range of both."""


class FrontierPoint(ResultModel):
    """The best plan found on one cluster size."""

    num_nodes: int = Field(description="Nodes of this point.")
    num_gpus: int = Field(description="GPUs of the cluster at this point.")
    status: PlanStatus = Field(description="Status of its search.")
    world_size: int = Field(default=0, description="GPUs the plan uses (may be fewer).")
    parallel: WinningLayout = None
    step_time_s: WinningStepTime = None
    tokens_per_s: WinningThroughput = None
    gpu_hours_per_step: float | None = Field(default=None, description="world_size x "
                                             "step_time_s / 3600: the cost in GPU-hours.")
    cost_per_token: float | None = Field(default=None, description="With a gpu_hour_price.")
    predicted_range: WinningRange = None
    pareto: bool = Field(default=False, description="No other point uses no more GPUs with "
                         "no longer steps and no more GPU-hours per step, one strictly less.")
    summary: str = Field(default="", description="The plan's summary or why none exists.")


class FrontierResponse(ResultModel):
    """Every point and the Pareto-optimal ones."""

    points: list[FrontierPoint] = Field(description="One per cluster size, in request order.")
    pareto_num_gpus: list[int] = Field(description="GPU counts of the Pareto-optimal points.")
    wall_time_s: Seconds = Field(description="Time the searches took together.")


class SensitivityFactor(StrEnum):
    """What a sensitivity point changes."""

    NETWORK_BANDWIDTH = "network_bandwidth"
    """Intra- and inter-node bandwidth together."""
    HBM_CAPACITY = "hbm_capacity"
    """GPU memory bytes."""
    KERNEL_EFFICIENCY = "kernel_efficiency"
    """Achieved FLOP/s, as a scaled peak FLOP/s of every dtype."""


class SensitivityRequest(PlanRequest):
    """A plan request and the relative changes to try on each factor."""

    deltas: list[float] = Field(
        default=[-0.2, 0.2], min_length=1, max_length=MAX_SENSITIVITY_DELTAS,
        description="Relative changes, e.g. -0.2 = 20% less; each in (-1, 10].",
        examples=[[-0.2, 0.2]])
    factors: list[SensitivityFactor] = Field(
        default=list(SensitivityFactor), min_length=1,
        description="Factors to vary (default all three).")

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra={"examples": [
        {**PLAN_REQUEST_EXAMPLE, "deltas": [-0.2, 0.2]}]})

    @model_validator(mode="after")
    def _check_deltas(self) -> Self:
        for delta in self.deltas:
            if not -1.0 < delta <= 10.0 or delta == 0.0:
                raise ValueError(f"deltas: {delta} is outside (-1, 10] or zero; give relative "
                                 "changes such as -0.2 or 0.2")
        return self


class SensitivityPoint(ResultModel):
    """The plan that wins with one factor changed, and the baseline plan's fate there."""

    factor: SensitivityFactor | None = Field(description="Null for the baseline.")
    delta: float = Field(description="Relative change applied (0 for the baseline).")
    status: PlanStatus = Field(description="Status of the search at this point.")
    parallel: WinningLayout = None
    step_time_s: WinningStepTime = None
    tokens_per_s: WinningThroughput = None
    predicted_range: WinningRange = None
    plan_changed: bool = Field(default=False, description="The winner differs from the "
                               "baseline's layout.")
    baseline_step_time_s: Seconds | None = Field(
        default=None, description="The baseline layout's step time at this point; null if it "
        "no longer fits.")
    baseline_fits: bool | None = Field(default=None, description="Whether the baseline "
                                       "layout still fits here.")
    step_time_change_frac: float | None = Field(
        default=None, description="Winner's step time vs the baseline's, e.g. +0.07.")


class SensitivityResponse(ResultModel):
    """The baseline and one point per factor and change."""

    baseline: SensitivityPoint = Field(description="The plan on the cluster as given.")
    points: list[SensitivityPoint] = Field(description="Per factor, per delta.")
    wall_time_s: Seconds = Field(description="Time the searches took together.")
    notes: list[str] = Field(default_factory=list, description="How each factor is applied.")


__all__ = [
    "DEFAULT_RESTART_S",
    "DGX_H100_STORAGE_BANDWIDTH_BYTES_PER_S",
    "LLAMA3_FAILURES_PER_GPU_HOUR",
    "LLAMA3_STORAGE_BANDWIDTH_BYTES_PER_S",
    "MAX_FRONTIER_SIZES",
    "MAX_SENSITIVITY_DELTAS",
    "IntervalGoodput",
    "ReliabilityEstimate",
    "ReliabilitySpec",
    "FrontierPoint",
    "FrontierRequest",
    "FrontierResponse",
    "RunEstimateRequest",
    "RunEstimateResponse",
    "SensitivityFactor",
    "SensitivityPoint",
    "SensitivityRequest",
    "SensitivityResponse",
    "WinningLayout",
    "WinningRange",
    "WinningStepTime",
    "WinningThroughput",
]
