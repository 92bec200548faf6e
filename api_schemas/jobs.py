"""Wire types of planning jobs: what `POST /v1/jobs` takes and what `GET /v1/jobs/{id}`
and its event stream answer.

Owns: `JobRequest` (a kind and the request of that kind: a plan, a GPU frontier or a
pipeline schedule optimisation), the job
states, `JobResponse` and `JobEvent` (one progress report of a running job). Must not:
compute anything beyond validation.
"""

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from api_schemas._base import ResultModel, SpecModel
from api_schemas.pipeline import PipelineOptimizeRequest
from api_schemas.requests import PLAN_REQUEST_EXAMPLE, PlanRequest
from api_schemas.run_level import FrontierRequest


class JobKind(StrEnum):
    """What a job computes."""

    PLAN = "plan"
    """A plan search (`POST /v1/plans`); the plan is stored and linked."""
    FRONTIER = "frontier"
    """A GPU frontier over cluster sizes (`POST /v1/frontier`); the answer is kept with the
    job."""
    SCHEDULE = "schedule"
    """A pipeline schedule optimisation (`POST /v1/pipeline/optimize`); the answer is kept
    with the job."""


class JobState(StrEnum):
    """Where a job is. `done`, `failed` and `cancelled` are final."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL_STATES = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})
"""States a job never leaves (a new identical submission re-queues a failed or cancelled
one)."""


class PlanJobRequest(SpecModel):
    """A plan search as a job."""

    kind: Literal[JobKind.PLAN] = Field(description="'plan'.")
    request: PlanRequest = Field(description="The request `POST /v1/plans` takes.")


class FrontierJobRequest(SpecModel):
    """A GPU frontier as a job."""

    kind: Literal[JobKind.FRONTIER] = Field(description="'frontier'.")
    request: FrontierRequest = Field(description="The request `POST /v1/frontier` takes.")


class ScheduleJobRequest(SpecModel):
    """A pipeline schedule optimisation as a job."""

    kind: Literal[JobKind.SCHEDULE] = Field(description="'schedule'.")
    request: PipelineOptimizeRequest = Field(description="The request "
                                             "`POST /v1/pipeline/optimize` takes.")


JobRequest = Annotated[PlanJobRequest | FrontierJobRequest | ScheduleJobRequest,
                       Field(discriminator="kind")]
"""A job to run: its kind and the request of that kind."""

JOB_REQUEST_EXAMPLE: dict[str, Any] = {"kind": "plan", "request": PLAN_REQUEST_EXAMPLE}


class JobProgress(ResultModel):
    """Where the job's current search stands (a frontier runs one search per size)."""

    objective: str = Field(description="What the search minimises (unit of `incumbent` and "
                           "`bound`): step_time (seconds), cost_per_token, min_gpus, ...")
    candidates: int = Field(description="Candidate meshes listed so far.")
    evaluated: int = Field(description="Candidates scored exactly so far.")
    incumbent: float | None = Field(description="Objective value of the best plan so far.")
    bound: float | None = Field(description="Lowest objective value any candidate not yet "
                                "evaluated could reach.")
    gap: float | None = Field(description="(incumbent - bound) / incumbent.")
    search_elapsed_s: float = Field(description="Seconds since this search started.")
    search: int = Field(description="Which search of the job this is (1 for a plan; one per "
                        "cluster size for a frontier).")


class JobEvent(ResultModel):
    """One event of a job, as `GET /v1/jobs/{id}/events` sends it (the SSE `data`)."""

    seq: int = Field(description="Position in the job's events, from 1, without gaps; the "
                     "SSE `id`.")
    type: Literal["state", "progress"] = Field(description="'state' when the job changed "
                                               "state, 'progress' for a search report.")
    state: JobState = Field(description="The job's state when the event was recorded.")
    attempt: int = Field(description="Which run of the job (a job whose worker died runs "
                         "again as the next attempt).")
    elapsed_s: float = Field(description="Seconds since this attempt started running (0 "
                             "before).")
    at: datetime = Field(description="When the event was recorded (UTC).")
    progress: JobProgress | None = Field(default=None, description="The search report "
                                         "(progress events).")
    detail: str | None = Field(default=None, description="Why, for failed and cancelled.")


class JobResponse(ResultModel):
    """A job: its state and, once done, its result."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="Job id (32 hexadecimal characters).")
    kind: JobKind = Field(description="What the job computes.")
    state: JobState = Field(description="queued, running, done, failed or cancelled.")
    request_hash: str = Field(description="SHA-256 of the normalised request: identical "
                              "requests are one job.")
    attempts: int = Field(description="Runs started so far (more than 1 after a worker died "
                          "and the job was re-queued).")
    created_at: datetime = Field(description="When the job was submitted (UTC).")
    started_at: datetime | None = Field(description="When its latest run started.")
    finished_at: datetime | None = Field(description="When it reached a final state.")
    cancel_requested: bool = Field(description="Whether a DELETE asked it to stop.")
    plan_id: str | None = Field(description="The stored plan (kind plan, once done).")
    plan_url: str | None = Field(description="Where to read the stored plan.")
    events_url: str = Field(description="The job's server-sent progress events.")
    result: dict[str, Any] | None = Field(description="Once done: the answer, as the "
                                          "synchronous endpoint of the kind gives it "
                                          "(PlanResponse, FrontierResponse, "
                                          "PipelineOptimizeResponse).")
    problem: dict[str, Any] | None = Field(description="Once failed: the problem+json the "
                                           "synchronous endpoint would have answered.")
    progress: JobProgress | None = Field(description="The latest search report.")


__all__ = ["FINAL_STATES", "JOB_REQUEST_EXAMPLE", "FrontierJobRequest", "JobEvent", "JobKind",
           "JobProgress", "JobRequest", "JobResponse", "JobState", "PlanJobRequest",
           "ScheduleJobRequest"]
