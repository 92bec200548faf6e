"""The job tables.

Owns: `JobRecord` (one job: its kind, unique key, state, normalised request, outcome and
cancellation flag), `JobEventRecord` (its events in order, numbered from 1 without
gaps) and `JobLinkRecord` (a sweep's plan jobs by grid position). Must not: hold logic;
`service/jobs/store.py` and `service/jobs/sweep.py` read and write the rows.
"""

from datetime import datetime
from typing import Any

from sqlalchemy import Column, DateTime, UniqueConstraint
from sqlmodel import Field, SQLModel

from service.persistence.tables import json_field, utc_now


class JobRecord(SQLModel, table=True):
    """A submitted job; identical requests share one row (the unique `key`)."""

    __tablename__ = "jobs"

    id: str = Field(primary_key=True, max_length=32, description="Job id (32 hex characters).")
    key: str = Field(max_length=96, unique=True, index=True,
                     description="Kind and SHA-256 of the normalised request.")
    kind: str = Field(max_length=16, description="plan | frontier.")
    request_hash: str = Field(max_length=64, description="SHA-256 of the normalised request.")
    state: str = Field(max_length=16, index=True,
                       description="queued | running | done | failed | cancelled.")
    attempts: int = Field(default=0, description="Runs started so far.")
    cancel_requested: bool = Field(default=False, description="A DELETE asked it to stop.")
    created_at: datetime = Field(
        default_factory=utc_now, sa_column=Column(DateTime(timezone=True), nullable=False))
    started_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True))
    finished_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True))
    request_json: dict[str, Any] = json_field("The normalised request.")
    plan_id: str | None = Field(default=None, max_length=32,
                                description="The stored plan (kind plan, once done).")
    result_json: dict[str, Any] | None = json_field(
        "The answer of kinds whose results are not stored elsewhere.", nullable=True)
    error_json: dict[str, Any] | None = json_field(
        "The problem+json of a failed job.", nullable=True)


class JobEventRecord(SQLModel, table=True):
    """One event of a job (a state change or a search report)."""

    __tablename__ = "job_events"
    __table_args__ = (UniqueConstraint("job_id", "seq", name="uq_job_event_seq"),)

    id: int | None = Field(default=None, primary_key=True, description="Row id.")
    job_id: str = Field(max_length=32, index=True, description="The job.")
    seq: int = Field(ge=1, description="Position in the job's events, from 1.")
    payload_json: dict[str, Any] = json_field("The event as served (JobEvent).")




class JobLinkRecord(SQLModel, table=True):
    """A sweep's plan job at one grid position (a plan job may serve several sweeps)."""

    __tablename__ = "job_links"
    __table_args__ = (UniqueConstraint("parent_id", "position", name="uq_job_link_position"),)

    id: int | None = Field(default=None, primary_key=True, description="Row id.")
    parent_id: str = Field(max_length=32, index=True, description="The sweep job.")
    child_id: str = Field(max_length=32, index=True, description="The plan job.")
    position: int = Field(ge=0, description="Grid position (model, recipe, then size).")


__all__ = ["JobEventRecord", "JobLinkRecord", "JobRecord"]
