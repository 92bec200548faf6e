"""Calibration: measured training runs in, a fitted cluster profile out.

Owns: a measured run
(`MeasuredRun`), the body of POST /v1/calibration/runs, and the profile and fit report it
answers with. Must not: fit or store (`models/evidence/calibration.py`, `solver/calibration.py`,
`service/`).
"""

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Self

from pydantic import Field, model_validator

from api_schemas._base import ResultModel, SpecModel
from api_schemas.hardware import KernelCalibration
from api_schemas.microbenchmarks import MicrobenchmarkFit, Microbenchmarks
from api_schemas.parallel import ParallelConfig
from api_schemas.requests import ModelField, ModelInput, TrainingField
from api_schemas.units import NonNegativeInt, PositiveBytes, PositiveInt

PROFILE_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
"""Profile names: lower-case letters, digits, '.', '_' and '-', at most 64 characters."""

MIN_CALIBRATION_RUNS = 4
"""Fewest runs one calibration takes: each leave-one-out fit then has 3 runs for 2
constants, so each has a residual degree of freedom."""

MAX_CALIBRATION_RUNS = 64
"""Most measured runs one calibration takes (each is scored at every grid point)."""

MAX_TRAINING_LOGS = 16
"""Most training logs one calibration takes (each becomes one run)."""

MAX_LOG_CHARS = 4_000_000
"""Longest training log text accepted (characters)."""

RunNodes = Annotated[PositiveInt, Field(description="Nodes of the run's cluster.",
                                        examples=[2])]
"""The `num_nodes` of a measured run, given as numbers or as a training log."""
RunGpusPerNode = Annotated[PositiveInt | None, Field(
    description="GPUs per node; default from the GPU's node preset.")]
"""Its `gpus_per_node`."""
RunLabel = Annotated[str | None, Field(max_length=200,
                                       description="A name for the run in the report.")]
"""Its `label`."""


class LogFramework(StrEnum):
    """Training frameworks whose logs the calibration parses."""

    MEGATRON_LM = "megatron-lm"
    TORCHTITAN = "torchtitan"


class MeasuredRun(SpecModel):
    """One training run a team measured: the configuration as POST /v1/evaluate takes it,
    with the cluster given by the calibration's GPU, and what was measured."""

    model: ModelField
    num_nodes: RunNodes
    gpus_per_node: RunGpusPerNode = None
    training: TrainingField
    parallel: ParallelConfig = Field(description="The configuration that ran.")
    step_time_s: float = Field(gt=0.0, le=86400.0,
                               description="Measured time of one optimizer step (seconds).",
                               examples=[4.2])
    peak_memory_bytes: PositiveBytes | None = Field(
        default=None, description="Measured peak memory per rank (bytes), if recorded.")
    label: RunLabel = None


class TrainingLog(SpecModel):
    """A training log as the framework printed it: parsed into one measured run (the
    configuration from its printed arguments, the step time from its per-step lines)."""

    framework: LogFramework = Field(description="'megatron-lm' or 'torchtitan'.")
    text: str = Field(min_length=1, max_length=MAX_LOG_CHARS,
                      description="The log text (rank 0's, or the rank that prints timings).")
    model: ModelInput = Field(description="The model that ran; the log's printed architecture "
                              "(layers, hidden size, heads) is checked against it.")
    num_nodes: RunNodes
    gpus_per_node: RunGpusPerNode = None
    skip_steps: NonNegativeInt | None = Field(
        default=None, description="Drop logged steps at or before this iteration as warm-up "
        "(default: the first logged interval and iterations 1-2).")
    label: RunLabel = None


class CalibrationRunsRequest(SpecModel):
    """Body of POST /v1/calibration/runs."""

    profile: str = Field(pattern=PROFILE_NAME_PATTERN, description="Profile name; a fit of "
                         "an existing name stores a new version.", examples=["our-h100"])
    gpu: str = Field(min_length=1, max_length=200, description="GPU preset id of every run.",
                     examples=["h100-sxm5-80gb"])
    node: str | None = Field(default=None, max_length=200,
                             description="Node preset id (default: the GPU's typical node).")
    runs: list[MeasuredRun] = Field(
        default_factory=list, max_length=MAX_CALIBRATION_RUNS,
        description="Measured runs (with `logs`, at least 4: two constants are fitted, with a "
        "degree of freedom left for their uncertainty in every leave-one-out fit).")
    logs: list[TrainingLog] = Field(
        default_factory=list, max_length=MAX_TRAINING_LOGS,
        description="Megatron-LM or torchtitan training logs, each parsed into one run.")
    microbenchmarks: Microbenchmarks | None = Field(
        default=None, description="Kernel and link microbenchmark results (the "
        "`calibration` kit's output): they set the attention, link and host-link constants "
        "and, with GEMM entries, the GEMM efficiency level.")

    @model_validator(mode="after")
    def _enough_runs(self) -> Self:
        total = len(self.runs) + len(self.logs)
        if total < MIN_CALIBRATION_RUNS:
            raise ValueError(
                f"runs: a calibration needs at least {MIN_CALIBRATION_RUNS} runs (runs and "
                f"logs together), got {total}: two constants are fitted with a degree of "
                "freedom left in every leave-one-out fit")
        if total > MAX_CALIBRATION_RUNS:
            raise ValueError(f"runs: at most {MAX_CALIBRATION_RUNS} runs and logs together, "
                             f"got {total}")
        return self


class ParsedLog(ResultModel):
    """What one training log gave: the run it became and the steps that timed it."""

    label: str = Field(description="The run's label in `runs` of the fit.")
    framework: LogFramework = Field(description="Framework whose format was parsed.")
    steps_logged: list[int] = Field(description="Iterations of every timing line found.")
    steps_used: list[int] = Field(description="Iterations whose timings were used.")
    warmup_skipped: list[int] = Field(description="Iterations dropped as warm-up.")
    step_time_s: float = Field(description="Median step time of the used lines (seconds).")
    step_time_min_s: float = Field(description="Fastest used line.")
    step_time_max_s: float = Field(description="Slowest used line.")
    logged_tflops_per_gpu: float | None = Field(
        default=None, description="Median TFLOP/s per GPU the framework printed (its own "
        "FLOP count), if printed.")
    peak_memory_bytes: int | None = Field(default=None, description="Largest peak memory "
                                          "per rank the log printed (bytes), if any.")
    peak_memory_kind: str | None = Field(default=None, description="Which figure that is.")
    run: MeasuredRun = Field(description="The configuration and timing the log became.")


class FittedConstant(ResultModel):
    """One fitted constant with its uncertainty."""

    value: float = Field(description="The least-squares value.")
    standard_error: float = Field(description="Asymptotic standard error (Gauss-Newton "
                                  "covariance, residual variance from n - 2 dof).")
    leave_one_out_min: float = Field(description="Smallest value over the leave-one-out fits.")
    leave_one_out_max: float = Field(description="Largest value over the leave-one-out fits.")


class RunResidual(ResultModel):
    """One submitted run against the uncalibrated, the fitted and the held-out model."""

    label: str = Field(description="The run's label, or 'run <index>'.")
    measured_step_time_s: float = Field(description="The measured step time (seconds).")
    uncalibrated_step_time_s: float = Field(description="The model without the profile.")
    fitted_step_time_s: float = Field(description="The model with the fitted constants.")
    leave_one_out_step_time_s: float = Field(
        description="Predicted by the constants fitted on the other runs.")
    peak_flop_bound_s: float = Field(description="Step time at 100% of the dense peak "
                                     "(model FLOPs / GPUs / peak): no run can be faster.")
    measured_peak_memory_bytes: int | None = Field(default=None,
                                                   description="As submitted, if given.")
    predicted_peak_memory_bytes: int = Field(description="The memory ledger's peak.")


class CalibrationFit(ResultModel):
    """What the fit found and how well it predicts runs it did not see."""

    num_runs: int = Field(description="Runs the fit was made on.")
    gemm_efficiency_scale: FittedConstant = Field(description="Multiplier on the family's "
                                                  "eta_max of every input format.")
    step_overhead_s: FittedConstant = Field(description="Fixed time per step (seconds).")
    gemm_peak_frac: dict[str, float] = Field(description="The calibrated eta_max per input "
                                             "format (family value x scale).")
    uncalibrated_relative_error: float = Field(description="Mean |predicted/measured - 1| "
                                               "of the model without the profile.")
    leave_one_out_relative_error: float = Field(
        description="Mean |predicted/measured - 1| of each run predicted by the constants "
        "fitted on the other runs.")
    fitted_relative_error: float = Field(description="Mean |predicted/measured - 1| of the "
                                         "fit on every run (in-sample).")
    log_residual_rms: float = Field(description="RMS of log(measured / fitted).")
    runs: list[RunResidual] = Field(description="Each run: measured, uncalibrated, fitted "
                                    "and held-out predictions.")
    method: str = Field(description="How the constants were fitted, in words.")
    logs: list[ParsedLog] = Field(default_factory=list,
                                  description="Each training log and what it was parsed into.")
    microbenchmarks: MicrobenchmarkFit | None = Field(
        default=None, description="Constants set from microbenchmarks, if any were given.")
    moe_host_issue_s: FittedConstant | None = Field(
        default=None, description="Fixed host time to issue one MoE layer forward (seconds), "
        "fitted with the other constants when at least 3 submitted MoE runs are host-bound "
        "(their step grows with it); null when the runs do not identify it "
        "(`moe_host_issue_note` says why) and the published value stays.")
    moe_host_issue_note: str = Field(default="", description="Whether the MoE layer host "
                                     "issue time was fitted, on how many runs, or why not.")


ProfileName = Annotated[str, Field(description="Profile name.")]
"""The `name` of a stored profile, in full or in the list."""
ProfileGpu = Annotated[str, Field(description="GPU preset id of the runs.")]
"""Its `gpu`."""
ProfileFamily = Annotated[str, Field(
    description="Kernel family whose eta_max the scale multiplies.")]
"""Its `family`."""


class CalibrationProfile(ResultModel):
    """A stored profile: its constants and the fit that produced them."""

    name: ProfileName
    version: int = Field(description="1 for the first fit of the name, then 2, 3, ...")
    gpu: ProfileGpu
    family: ProfileFamily
    created_at: datetime = Field(description="When this version was stored (UTC).")
    constants: KernelCalibration = Field(description="What `cluster.profile` applies.")
    fit: CalibrationFit = Field(description="The fit report of this version.")


class CalibrationProfileSummary(ResultModel):
    """One profile in the list: its newest version."""

    name: ProfileName
    latest_version: int = Field(description="Its newest version.")
    gpu: ProfileGpu
    family: ProfileFamily
    created_at: datetime = Field(description="When the newest version was stored (UTC).")
    gemm_efficiency_scale: float = Field(description="Newest fitted eta_max multiplier.")
    step_overhead_s: float = Field(description="Newest fitted per-step overhead (s).")
    num_runs: int = Field(description="Runs the newest version was fitted on.")


class CalibrationProfileList(ResultModel):
    """Every stored profile name with its newest version."""

    items: list[CalibrationProfileSummary] = Field(description="By name.")


__all__ = [
    "MAX_CALIBRATION_RUNS",
    "MIN_CALIBRATION_RUNS",
    "PROFILE_NAME_PATTERN",
    "CalibrationFit",
    "CalibrationProfile",
    "CalibrationProfileList",
    "CalibrationProfileSummary",
    "MAX_LOG_CHARS",
    "MAX_TRAINING_LOGS",
    "CalibrationRunsRequest",
    "FittedConstant",
    "LogFramework",
    "MeasuredRun",
    "ParsedLog",
    "TrainingLog",
    "ProfileFamily",
    "ProfileGpu",
    "ProfileName",
    "RunGpusPerNode",
    "RunLabel",
    "RunNodes",
    "RunResidual",
]
