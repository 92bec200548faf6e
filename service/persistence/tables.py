"""The database tables (the `*Record` meaning of "model").

Owns: `PlanRecord`, one stored plan: the normalised request, the full response, the solver
statistics and the columns plans are listed and filtered by; `CalibrationProfileRecord`, one
version of a calibration profile: its constants, its fit report and the runs it was fitted
on. Must not: hold logic; the repository (`repo.py`) reads and writes rows.
"""

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, DateTime, UniqueConstraint
from sqlmodel import Field, SQLModel


def utc_now() -> datetime:
    """The current time in UTC (timezone-aware)."""
    return datetime.now(UTC)


def json_field(description: str, *, nullable: bool = False) -> Any:
    """A JSON column (a fresh `Column` per call, as each table needs its own); a nullable
    one defaults to None, the other is required."""
    default: dict[str, Any] = {"default": None} if nullable else {}
    return Field(**default, sa_column=Column(JSON, nullable=nullable), description=description)


class PlanRecord(SQLModel, table=True):
    """A stored plan, feasible or infeasible, keyed by id and by its request hash."""

    __tablename__ = "plans"

    id: str = Field(primary_key=True, max_length=32,
                    description="Plan id (32 hexadecimal characters).")
    created_at: datetime = Field(
        default_factory=utc_now,
        sa_column=Column(DateTime(timezone=True), nullable=False, index=True),
        description="When the plan was stored (UTC).")
    request_hash: str = Field(max_length=64, unique=True, index=True,
                              description="SHA-256 of the normalised request.")
    status: str = Field(max_length=16, index=True, description="optimal | feasible | "
                        "infeasible.")
    model_name: str = Field(max_length=200, index=True, description="The LLM planned for.")
    gpu: str = Field(max_length=200, index=True, description="GPU id of the cluster.")
    world_size: int = Field(default=0, description="GPUs the plan uses (0 if infeasible).")
    objective: str = Field(max_length=32, description="What the search optimised.")
    wall_time_s: float = Field(default=0.0, description="Search wall time.")
    request_json: dict[str, Any] = json_field("The normalised request.")
    response_json: dict[str, Any] = json_field("The full PlanResponse as served.")
    solver_stats_json: dict[str, Any] | None = json_field(
        "Search statistics (candidates, pruned, gap, bound, wall time).", nullable=True)
    diagnostics_json: dict[str, Any] | None = json_field(
        "What binds, for infeasible plans.", nullable=True)


class CalibrationProfileRecord(SQLModel, table=True):
    """One version of a named calibration profile (a new fit of a name adds a version)."""

    __tablename__ = "calibration_profiles"
    __table_args__ = (UniqueConstraint("name", "version", name="uq_calibration_name_version"),)

    id: int | None = Field(default=None, primary_key=True, description="Row id.")
    name: str = Field(max_length=64, index=True, description="Profile name.")
    version: int = Field(ge=1, description="1 for the first fit of a name, then 2, 3, ...")
    created_at: datetime = Field(
        default_factory=utc_now,
        sa_column=Column(DateTime(timezone=True), nullable=False),
        description="When the version was stored (UTC).")
    gpu: str = Field(max_length=200, description="GPU preset id the runs ran on.")
    family: str = Field(max_length=32, description="Kernel family the constants scale.")
    gemm_efficiency_scale: float = Field(description="Fitted multiplier on eta_max.")
    step_overhead_s: float = Field(description="Fitted per-step overhead (seconds).")
    fit_json: dict[str, Any] = json_field("The CalibrationFit report as served.")
    request_json: dict[str, Any] = json_field("The runs the fit was made on.")


__all__ = ["CalibrationProfileRecord", "PlanRecord", "json_field", "utc_now"]
