"""Request and response bodies of POST /v1/pipeline/simulate and POST /v1/pipeline/optimize.

Owns: the JSON shapes other tools rely on: `schedule`, `num_stages`, `num_micro_batches`,
`num_chunks`, `durations` {"F", "B", "W"} in the request; `makespan`, `bubble_fraction`,
`peak_in_flight`, `timeline` [{"stage", "op", "micro_batch", "chunk", "start", "end"}] in
the response; `memory_limit` and `time_limit_s` in, `status` and `lower_bound` out for the
optimizer. Must not: simulate or optimise anything (validation only).

Units: seconds for every time, bytes (integers) for activation sizes, activation counts in
full-stage units (one micro-batch's activations over L/p layers) unless the name says
`chunks`.
"""

from typing import Literal

from pydantic import ConfigDict, Field

from api_schemas._base import ResultModel, SpecModel
from api_schemas.parallel import PipelineSchedule
from api_schemas.units import (
    Bytes,
    DurationSeconds,
    Fraction,
    PositiveInt,
    Seconds,
    TimeLimitSeconds,
)

PerStageSeconds = DurationSeconds | tuple[DurationSeconds, ...]
PerStageBytes = Bytes | tuple[Bytes, ...]


class PipelineOpDurations(SpecModel):
    """Seconds per op of one micro-batch on one chunk (a number, or one per virtual stage)."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True,
                              validate_by_alias=True)

    forward_s: PerStageSeconds = Field(
        default=1.0, alias="F", description="Forward of one micro-batch through one chunk; "
        "a list gives one value per virtual stage in layer order.", examples=[1.0])
    backward_input_s: PerStageSeconds = Field(
        default=1.0, alias="B", description="Backward for the input gradient (B); a fused "
        "backward costs B + W.", examples=[1.0])
    backward_weight_s: PerStageSeconds = Field(
        default=1.0, alias="W", description="Backward for the weight gradient (W).",
        examples=[1.0])
    overlapped_pair_s: DurationSeconds | None = Field(
        default=None, alias="FB", description="One overlapped F&B pair (DualPipe); null means "
        "no overlap gain, F + B + W.", examples=[None])


class PipelineActivationBytes(SpecModel):
    """Activation bytes of one micro-batch on one chunk, and the part B frees."""

    forward_bytes: PerStageBytes = Field(
        description="Bytes an F allocates (per virtual stage or one value for all).",
        examples=[2_415_919_104])
    freed_by_input_grad_bytes: PerStageBytes = Field(
        description="Of those, bytes released when the B ends; W releases the rest "
        "(Zero Bubble Table 1: M_B vs M_W).", examples=[2_281_701_376])


class _PipelineSpec(SpecModel):
    """Fields shared by the simulate and optimize requests."""

    schedule: PipelineSchedule = Field(
        description="One of " + ", ".join(f"'{name}'" for name in PipelineSchedule) + ".",
        examples=["zb_h1"])
    num_stages: PositiveInt = Field(description="Pipeline ranks (the PP degree).",
                                    examples=[8])
    num_micro_batches: PositiveInt = Field(
        description="Micro-batches per iteration (DualPipe: both directions together).",
        examples=[32])
    num_chunks: PositiveInt = Field(
        default=1, description="Model chunks per rank: the schedule's fixed count (2 for the "
        "V shapes, 1 for linear and bidirectional placements) or >= 2 where it interleaves.",
        examples=[1])
    durations: PipelineOpDurations = Field(
        default_factory=PipelineOpDurations, description="Per-op durations of one chunk.")
    p2p_latency_s: DurationSeconds = Field(
        default=0.0, description="Latency added to every dependency between two ranks.",
        examples=[2.0e-5])
    activation_bytes: PipelineActivationBytes | None = Field(
        default=None, description="Enables `peak_activation_bytes` in the response.")
    include_timeline: bool = Field(
        default=True, description="Return every op's start and end (large for big m).")


class PipelineSimulateRequest(_PipelineSpec):
    """Simulate one handcrafted schedule."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra={"examples": [{
        "schedule": "interleaved_1f1b", "num_stages": 8, "num_micro_batches": 32,
        "num_chunks": 2, "durations": {"F": 0.0105, "B": 0.0112, "W": 0.0098},
        "p2p_latency_s": 2.0e-5,
    }]})

    group_size: PositiveInt | None = Field(
        default=None, description="Interleaved micro-batch group N (Megatron "
        "microbatch_group_size_per_vp_stage); null means N = num_stages.", examples=[None])


class PipelineOptimizeRequest(_PipelineSpec):
    """Find the minimum-makespan order for the schedule's placement under a memory limit."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra={"examples": [{
        "schedule": "zb_h1", "num_stages": 8, "num_micro_batches": 32,
        "durations": {"F": 0.021, "B": 0.025, "W": 0.017}, "memory_limit": 10,
        "time_limit_s": 10,
    }]})

    memory_limit: float = Field(
        gt=0.0, description="Peak in-flight activations per rank, full-stage units (8 = the "
        "1F1B peak of the first of 8 ranks).", examples=[10])
    time_limit_s: TimeLimitSeconds = Field(
        default=10.0, description="CP-SAT wall-time limit (0.1 s to 600 s).", examples=[10])


class PipelineTimelineEntry(ResultModel):
    """One scheduled op; an overlapped pair carries its backward half too."""

    stage: int = Field(description="Pipeline rank.")
    op: Literal["F", "B", "W", "BW", "FB"] = Field(description="Op kind.")
    micro_batch: int = Field(description="Micro-batch (of the forward half for FB).")
    chunk: int = Field(description="Chunk on the rank (DualPipe: 0 = forward direction).")
    virtual_stage: int = Field(description="Stage index in layer order within its pipe.")
    start: float = Field(description="Start, seconds from the iteration start.")
    end: float = Field(description="End, seconds.")
    backward_micro_batch: int | None = Field(default=None,
                                             description="FB only: the backward micro-batch.")
    backward_chunk: int | None = Field(default=None, description="FB only: its chunk.")


class PipelineTransfer(ResultModel):
    """One message between two ranks: an activation forward or an input gradient backward."""

    src_stage: int = Field(description="Sending pipeline rank.")
    dst_stage: int = Field(description="Receiving pipeline rank.")
    kind: Literal["activation", "gradient"] = Field(
        description="'activation' (an F output) or 'gradient' (a B output).")
    micro_batch: int = Field(description="Micro-batch of the producing op.")
    src_op: int = Field(description="Index in `timeline` of the producing op.")
    dst_op: int = Field(description="Index in `timeline` of the consuming op.")
    start: float = Field(description="Send time (the producer's end), seconds.")
    end: float = Field(description="Arrival (start + p2p_latency_s), seconds.")


class PipelineSimulateResponse(ResultModel):
    """Timing and activation peaks of one iteration."""

    makespan: Seconds = Field(description="Iteration time, seconds.")
    bubble_fraction: Fraction = Field(
        description="Global bubble: 1 - total busy / (ranks x makespan).")
    span_bubble_fraction: Fraction = Field(
        description="Per-rank span bubble (Zero Bubble definition): the worst rank's idle "
        "inside its own first-start..last-end span over that span.")
    peak_in_flight: list[float] = Field(
        description="Per rank: peak activations held until W, full-stage units.")
    peak_in_flight_chunks: list[int] = Field(
        description="Per rank: the same in micro-batch x chunk units.")
    peak_until_b: list[float] = Field(
        description="Per rank: peak activations held until B, full-stage units.")
    peak_activation_bytes: list[Bytes] | None = Field(
        default=None, description="Per rank: peak bytes when activation_bytes was given.")
    busy_s: list[float] = Field(description="Per rank: compute time.")
    idle_s: list[float] = Field(description="Per rank: makespan - busy (global definition).")
    span_bubble_s: list[float] = Field(
        description="Per rank: idle inside the rank's own span (Zero Bubble definition).")
    timeline: list[PipelineTimelineEntry] = Field(
        default_factory=list, description="Every op in rank, then start order.")
    critical_path: list[int] = Field(
        default_factory=list, description="Indices into `timeline` of the chain of ops (and "
        "the transfers between them) that sets the makespan, in time order; empty without "
        "the timeline.")
    transfers: list[PipelineTransfer] = Field(
        default_factory=list, description="Every message between two ranks with the "
        "interval it occupies; empty without the timeline.")


class PipelineOptimizeResponse(PipelineSimulateResponse):
    """The best order found, with its proof or its bound and gap."""

    status: Literal["optimal", "feasible"] = Field(
        description="'optimal' = proven minimum; 'feasible' = best found, see lower_bound.")
    lower_bound: Seconds = Field(description="Proven lower bound on the optimal makespan.")
    gap: Fraction = Field(description="(makespan - lower_bound) / makespan.")
    baseline_schedule: PipelineSchedule | None = Field(
        description="Best handcrafted schedule within the limit (null: none fits).")
    baseline_makespan: Seconds = Field(
        description="Its makespan (or that of one micro-batch at a time).")
    method: str = Field(description="'bound-attained', 'cp-sat' or 'cp-sat-windows'.")
    memory_limit_chunks: int = Field(description="The limit in micro-batch x chunk units.")
    time_quantum_s: Seconds = Field(description="Seconds per CP-SAT tick (costs round up).")
    wall_time_s: Seconds = Field(description="Optimizer wall time.")


__all__ = [
    "PipelineActivationBytes",
    "PipelineOpDurations",
    "PipelineOptimizeRequest",
    "PipelineOptimizeResponse",
    "PipelineSimulateRequest",
    "PipelineSimulateResponse",
    "PipelineTimelineEntry",
]
