"""Calibration: measured training runs in, a fitted cluster profile out.

Owns: a measured run
(`MeasuredRun`), the body of POST /v1/calibration/runs, and the profile and fit report it
answers with. Must not: fit or store (`models/calibration.py`, `solver/calibration.py`,
`service/`).
"""

from datetime import datetime

from pydantic import Field

from api_schemas._base import ResultModel, SpecModel
from api_schemas.hardware import KernelCalibration
from api_schemas.parallel import ParallelConfig
from api_schemas.requests import ModelInput
from api_schemas.training import TrainingSpec
from api_schemas.units import PositiveBytes, PositiveInt

PROFILE_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
"""Profile names: lower-case letters, digits, '.', '_' and '-', at most 64 characters."""

MIN_CALIBRATION_RUNS = 4
"""Fewest runs one calibration takes: each leave-one-out fit then has 3 runs for 2
constants, so each has a residual degree of freedom."""

MAX_CALIBRATION_RUNS = 64
"""Most measured runs one calibration takes (each is scored at every grid point)."""


class MeasuredRun(SpecModel):
    """One training run a team measured: the configuration as POST /v1/evaluate takes it,
    with the cluster given by the calibration's GPU, and what was measured."""

    model: ModelInput = Field(description="Preset, Hugging Face config or explicit fields.")
    num_nodes: PositiveInt = Field(description="Nodes of the run's cluster.", examples=[2])
    gpus_per_node: PositiveInt | None = Field(
        default=None, description="GPUs per node; default from the GPU's node preset.")
    training: TrainingSpec = Field(description="Batch, sequence and precision recipe.")
    parallel: ParallelConfig = Field(description="The configuration that ran.")
    step_time_s: float = Field(gt=0.0, le=86400.0,
                               description="Measured time of one optimizer step (seconds).",
                               examples=[4.2])
    peak_memory_bytes: PositiveBytes | None = Field(
        default=None, description="Measured peak memory per rank (bytes), if recorded.")
    label: str | None = Field(default=None, max_length=200,
                              description="A name for the run in the report.")


class CalibrationRunsRequest(SpecModel):
    """Body of POST /v1/calibration/runs."""

    profile: str = Field(pattern=PROFILE_NAME_PATTERN, description="Profile name; a fit of "
                         "an existing name stores a new version.", examples=["our-h100"])
    gpu: str = Field(min_length=1, max_length=200, description="GPU preset id of every run.",
                     examples=["h100-sxm5-80gb"])
    node: str | None = Field(default=None, max_length=200,
                             description="Node preset id (default: the GPU's typical node).")
    runs: list[MeasuredRun] = Field(
        min_length=MIN_CALIBRATION_RUNS, max_length=MAX_CALIBRATION_RUNS,
        description="Measured runs (at least 4: two constants are fitted, with a degree of "
        "freedom left for their uncertainty in every leave-one-out fit).")


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


class CalibrationProfile(ResultModel):
    """A stored profile: its constants and the fit that produced them."""

    name: str = Field(description="Profile name.")
    version: int = Field(description="1 for the first fit of the name, then 2, 3, ...")
    gpu: str = Field(description="GPU preset id of the runs.")
    family: str = Field(description="Kernel family whose eta_max the scale multiplies.")
    created_at: datetime = Field(description="When this version was stored (UTC).")
    constants: KernelCalibration = Field(description="What `cluster.profile` applies.")
    fit: CalibrationFit = Field(description="The fit report of this version.")


class CalibrationProfileSummary(ResultModel):
    """One profile in the list: its newest version."""

    name: str = Field(description="Profile name.")
    latest_version: int = Field(description="Its newest version.")
    gpu: str = Field(description="GPU preset id of the runs.")
    family: str = Field(description="Kernel family whose eta_max the scale multiplies.")
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
    "CalibrationRunsRequest",
    "FittedConstant",
    "MeasuredRun",
    "RunResidual",
]
