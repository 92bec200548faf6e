"""A job request to a job row: the request normalised and hashed as its synchronous
endpoint does, then one job per distinct request.

Owns: `prepare` (calibration profile applied, bounds checked, time limit clamped, the
request hash the plan store uses, the job key `<kind>:<hash>`), `submit` (create the
job or join the identical one, and queue it when it is new or re-queued) and
`submit_sweep` (a sweep's job, keyed by its plan jobs' keys, and its plan jobs). Must not: run
searches or answer HTTP.
"""

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

from anyio import to_thread

from api_schemas.jobs import (
    FrontierJobRequest,
    JobKind,
    JobState,
    PlanJobRequest,
    ScheduleJobRequest,
    SweepJobRequest,
)
from service import limits
from service.calibration import apply_profile
from service.jobs import store, sweep
from service.jobs.execute import problem_of
from service.jobs.tables import JobRecord
from service.persistence.gate import StoreGate
from service.persistence.storable import check_storable
from service.planning import check_plan_bounds, normalise_plan_request, request_hash
from service.problems import StoreUnavailableError
from service.routes.pipeline import check_pipeline_bounds
from service.routes.run_level import _bounded as bounded_run_request
from service.searches import with_clamped_time_limit
from service.settings import Settings


class JobQueue(Protocol):
    """Where queued jobs go: the embedded runner or the distributed queue."""

    name: str

    async def enqueue(self, job_id: str) -> None:
        """Hand a queued job to whoever runs jobs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """A job request as it is stored."""

    kind: JobKind
    key: str
    request_hash: str
    request_json: dict[str, Any]


async def prepare(job: PlanJobRequest | FrontierJobRequest | ScheduleJobRequest, *,
                  settings: Settings, gate: StoreGate) -> Submission:
    """Normalise, check and hash the job's request.

    Raises:
        LimitExceededError: an input over a documented bound.
        InvalidSpecError: a domain rule fails (a profile of another GPU, ...).
        StoreUnavailableError: the store did not answer the profile look-up.
    """
    if isinstance(job, PlanJobRequest):
        plan = await apply_profile(job.request, store=gate)
        normalised = normalise_plan_request(plan, settings)
        check_storable(normalised.model_dump(mode="python"), field="request")
        await to_thread.run_sync(check_plan_bounds, normalised, settings)
        digest = request_hash(normalised)
        return Submission(kind=JobKind.PLAN, key=f"plan:{digest}", request_hash=digest,
                          request_json=normalised.model_dump(mode="json"))
    if isinstance(job, ScheduleJobRequest):
        check_pipeline_bounds(job.request, settings, ops_bound="optimize_ops")
        clamped = with_clamped_time_limit(job.request, requested_s=job.request.time_limit_s,
                                          settings=settings)
        digest = request_hash(clamped)
        return Submission(kind=JobKind.SCHEDULE, key=f"schedule:{digest}",
                          request_hash=digest, request_json=clamped.model_dump(mode="json"))
    frontier = await apply_profile(job.request, store=gate)
    for num_nodes in frontier.num_nodes_options:
        limits.check_cluster(frontier.cluster.model_copy(update={"num_nodes": num_nodes}),
                             settings)
    bounded = bounded_run_request(frontier, settings)
    check_storable(bounded.model_dump(mode="python"), field="request")
    digest = request_hash(bounded)
    return Submission(kind=JobKind.FRONTIER, key=f"frontier:{digest}", request_hash=digest,
                      request_json=bounded.model_dump(mode="json"))


async def submit(submission: Submission, *, gate: StoreGate, queue: JobQueue
                 ) -> tuple[JobRecord, bool]:
    """The job of this submission (new, joined or re-queued) and whether it was queued now.

    Raises:
        StoreUnavailableError: the store did not answer.
    """
    def create(engine: Any) -> tuple[JobRecord, bool]:
        return store.create_or_join(engine, key=submission.key, kind=submission.kind.value,
                                    request_hash=submission.request_hash,
                                    request_json=submission.request_json)

    record, queued = await gate.call(create, what="store the job")
    if queued or record.state == JobState.QUEUED:
        # A queued job joined is handed over again: if the process that created it stopped
        # before queuing it, this queues it; otherwise the queue refuses the duplicate (or
        # the second run finds the job taken).
        try:
            await queue.enqueue(record.id)
        except Exception as error:
            unavailable = StoreUnavailableError(
                f"the job queue ({queue.name}) did not take the job ({type(error).__name__}); "
                "resubmit it after Retry-After seconds", retry_after_s=gate.retry_after_s)
            await gate.call(lambda engine: store.abandon(engine, record.id,
                                                         problem=problem_of(unavailable)),
                            what="record the job as not queued")
            raise unavailable from error
    return record, queued


async def submit_sweep(job: SweepJobRequest, *, settings: Settings, gate: StoreGate,
                       queue: JobQueue) -> JobRecord:
    """The sweep's job: new (its plan jobs submitted, each merged with an identical one),
    the identical sweep's, or that one re-run when it had failed or been cancelled.

    Raises:
        LimitExceededError, InvalidSpecError: a grid point is out of bounds or invalid.
        StoreUnavailableError: the store or the queue did not answer.
    """
    children = [await prepare(child, settings=settings, gate=gate)
                for child in sweep.grid(job.request)]
    digest = hashlib.sha256(json.dumps([c.key for c in children]).encode()).hexdigest()

    def create(engine: Any) -> tuple[JobRecord, bool]:
        record, fresh = store.create_or_join(
            engine, key=f"sweep:{digest}", kind=JobKind.SWEEP.value, request_hash=digest,
            request_json=job.request.model_dump(mode="json"))
        if fresh:
            store.claim(engine, record.id, take_running=False)
        return record, fresh

    record, fresh = await gate.call(create, what="store the sweep")
    if not fresh:
        return record
    child_ids = [(await submit(child, gate=gate, queue=queue))[0].id for child in children]
    await gate.call(lambda engine: sweep.link(engine, record.id, child_ids),
                    what="link the sweep's plans")
    await gate.call(lambda engine: sweep.gather(engine, record.id), what="gather the sweep")
    return record


__all__ = ["JobQueue", "Submission", "prepare", "submit", "submit_sweep"]
