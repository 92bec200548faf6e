"""Wire types of planning jobs: what `POST /v1/jobs` takes and what `GET /v1/jobs/{id}`
and its event stream answer.

Owns: `JobRequest` (a kind and the request of that kind: a plan, a GPU frontier, a
pipeline schedule optimisation or a sweep over a grid, `SweepRequest`), the job
states, `JobResponse` and `JobEvent` (one progress report of a running job). Must not:
compute anything beyond validation.
"""

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import ConfigDict, Field, PositiveInt, model_validator

from api_schemas._base import ResultModel, SpecModel
from api_schemas.pipeline import PipelineOptimizeRequest
from api_schemas.requests import PLAN_REQUEST_EXAMPLE, ModelInput, PlanRequest
from api_schemas.run_level import FrontierPoint, FrontierRequest
from api_schemas.training import TrainingSpec


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
    SWEEP = "sweep"
    """A grid of plans (model x cluster size x recipe), each a plan job of its own, gathered
    into a frontier per model and recipe once every one is final."""


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


MAX_SWEEP_POINTS = 64
"""Most plans one sweep fans out (models x cluster sizes x recipes)."""


class SweepRequest(SpecModel):
    """A grid of plan searches: every model on every cluster size with every recipe; the
    rest (GPU, constraints, objective, solver limits) from `base`."""

    base: PlanRequest = Field(description="The plan request each point varies; its model, "
                              "cluster.num_nodes and training are replaced by the grid's.")
    models: list[ModelInput] = Field(min_length=1, max_length=8,
                                     description="The models (presets, configs or fields).")
    num_nodes_options: list[PositiveInt] = Field(min_length=1, max_length=16,
                                                 description="Cluster sizes in nodes.")
    recipes: list[TrainingSpec] = Field(min_length=1, max_length=8,
                                        description="The training recipes.")

    @model_validator(mode="after")
    def _small_enough(self) -> Self:
        points = len(self.models) * len(self.num_nodes_options) * len(self.recipes)
        if points > MAX_SWEEP_POINTS:
            raise ValueError(f"the grid has {points} points (models x num_nodes_options x "
                             f"recipes); at most {MAX_SWEEP_POINTS}: split the sweep")
        return self


class SweepJobRequest(SpecModel):
    """A sweep as a job: its plan jobs run on the queue like any other."""

    kind: Literal[JobKind.SWEEP] = Field(description="'sweep'.")
    request: SweepRequest = Field(description="The grid.")


class SweepPoint(ResultModel):
    """One plan of a sweep."""

    job_id: str = Field(description="Its plan job.")
    plan_id: str | None = Field(description="Its stored plan (None if the job did not end "
                                "done).")
    point: FrontierPoint = Field(description="The plan on this cluster size (as a frontier "
                                 "point; `pareto` within its model and recipe).")


class SweepFrontier(ResultModel):
    """The points of one model and recipe over the cluster sizes."""

    model_index: int = Field(description="Index into `models`.")
    recipe_index: int = Field(description="Index into `recipes`.")
    points: list[SweepPoint] = Field(description="One per cluster size, in request order.")
    pareto_num_gpus: list[int] = Field(description="GPU counts of the Pareto-optimal points.")


class SweepResponse(ResultModel):
    """A finished sweep: a frontier per model and recipe."""

    frontiers: list[SweepFrontier] = Field(description="Model-major, then recipe.")


JobRequest = Annotated[PlanJobRequest | FrontierJobRequest | ScheduleJobRequest
                       | SweepJobRequest, Field(discriminator="kind")]
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
                                          "PipelineOptimizeResponse, SweepResponse).")
    problem: dict[str, Any] | None = Field(description="Once failed: the problem+json the "
                                           "synchronous endpoint would have answered.")
    progress: JobProgress | None = Field(description="The latest search report.")


__all__ = ["FINAL_STATES", "JOB_REQUEST_EXAMPLE", "FrontierJobRequest", "JobEvent", "JobKind",
           "JobProgress", "JobRequest", "JobResponse", "JobState", "PlanJobRequest",
           "MAX_SWEEP_POINTS", "ScheduleJobRequest", "SweepFrontier", "SweepJobRequest",
           "SweepPoint", "SweepRequest", "SweepResponse"]
