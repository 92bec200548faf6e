"""Jobs: submit a search, read its state and result, cancel it, watch its progress.

Owns: POST /v1/jobs (202 + Location for a job queued or running, 200 when the identical
request's job is already final), GET /v1/jobs/{job_id} (state, and the result or the
problem once final; a plan job's result is its stored plan), DELETE /v1/jobs/{job_id}
(202 while a running search is being stopped, 200 once cancelled, 409 job-finished) and
GET /v1/jobs/{job_id}/events (server-sent events from the job's stored events: every event
after `Last-Event-ID`, in order, until a final state or `STREAM_LIMIT_S`). Every store call
through the store gate. Must not: run searches (the job queue does) or build error bodies.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy import Engine
from sqlmodel import Session

from api_schemas.jobs import (
    FINAL_STATES,
    JOB_REQUEST_EXAMPLE,
    JobKind,
    JobProgress,
    JobRequest,
    JobResponse,
    JobState,
    SweepJobRequest,
)
from service.deps import ContextDep
from service.jobs import store, sweep
from service.jobs.runtime import RunningQueue
from service.jobs.submit import prepare, submit, submit_sweep
from service.jobs.tables import JobRecord
from service.openapi import problem_responses
from service.persistence import repo
from service.problems import JobNotFoundError

router = APIRouter(tags=["jobs"])

POLL_INTERVAL_S = 0.25
"""How often an event stream looks for new events."""

KEEP_ALIVE_S = 15.0
"""Longest silence on an event stream before a comment line keeps it open."""

STREAM_LIMIT_S = 900.0
"""Longest one event stream stays open; a client reconnects with Last-Event-ID."""

_LOCATION = {"Location": {"description": "URL of the job.", "schema": {"type": "string"}}}
_JOB_ID = Path(max_length=32, pattern="^[0-9a-f]{32}$", description="Job id from POST /v1/jobs.",
               examples=["3f2b8c0d9e6a4b1c8d7e6f5a4b3c2d1e"])


def _queue(request: Request) -> RunningQueue:
    queue: RunningQueue = request.app.state.job_queue
    return queue


def _not_found(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(f"no job with id '{job_id}' is stored here; submit one with "
                            "POST /v1/jobs")


def _latest_progress(engine: Engine, job_id: str) -> JobProgress | None:
    events = store.events_after(engine, job_id, 0, limit=10_000)
    for event in reversed(events):
        if event.get("progress") is not None:
            return JobProgress.model_validate(event["progress"])
    return None


def _utc(moment: datetime) -> datetime:
    """A stored time as UTC (SQLite gives it back without its zone)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _response(engine: Engine, record: JobRecord) -> JobResponse:
    """The job as served; a done plan job carries its stored plan."""
    result = record.result_json
    if record.plan_id is not None and record.state == JobState.DONE.value:
        with Session(engine) as session:
            plan = repo.get_plan(session=session, plan_id=record.plan_id)
        result = plan.response_json if plan is not None else None
    return JobResponse(
        id=record.id, kind=JobKind(record.kind), state=JobState(record.state),
        request_hash=record.request_hash,
        attempts=record.attempts, created_at=_utc(record.created_at),
        started_at=_utc(record.started_at) if record.started_at is not None else None,
        finished_at=_utc(record.finished_at) if record.finished_at is not None else None,
        cancel_requested=record.cancel_requested, plan_id=record.plan_id,
        plan_url=f"/v1/plans/{record.plan_id}" if record.plan_id is not None else None,
        events_url=f"/v1/jobs/{record.id}/events", result=result, problem=record.error_json,
        progress=_latest_progress(engine, record.id))


def _read(job_id: str) -> Callable[[Engine], JobResponse | None]:
    def read(engine: Engine) -> JobResponse | None:
        record = store.get_job(engine, job_id)
        if record is not None and record.kind == JobKind.SWEEP and sweep.gather(engine, job_id):
            record = store.get_job(engine, job_id)
        return _response(engine, record) if record is not None else None
    return read


@router.post(
    "/v1/jobs", status_code=202, summary="Submit a search as a job",
    responses={
        202: {"description": "The job is queued or running (a new job, or the identical "
              "request's).", "headers": _LOCATION},
        200: {"description": "The identical request's job is already final.",
              "model": JobResponse, "headers": _LOCATION},
        **problem_responses("invalid-spec", "overloaded", "store-unavailable"),
    },
)
async def create_job(
    job: Annotated[JobRequest, Body(openapi_examples={"plan": {
        "summary": "A plan search as a job", "value": JOB_REQUEST_EXAMPLE}})],
    context: ContextDep, request: Request, response: Response,
) -> JobResponse:
    """Queue a plan search or a GPU frontier. The request is normalised and hashed as its
    synchronous endpoint does it; identical requests are one job (on every server and
    worker sharing the store), and a failed or cancelled one is queued again. Poll the
    `Location`, or follow `events_url` for progress."""
    if isinstance(job, SweepJobRequest):
        record = await submit_sweep(job, settings=context.settings, gate=context.store,
                                    queue=_queue(request))
    else:
        submission = await prepare(job, settings=context.settings, gate=context.store)
        record, _ = await submit(submission, gate=context.store, queue=_queue(request))
    served = await context.store.call(_read(record.id), what="read the job")
    assert served is not None
    response.headers["Location"] = f"/v1/jobs/{record.id}"
    if served.state in FINAL_STATES:
        response.status_code = 200
    return served


@router.get("/v1/jobs/{job_id}", summary="Read a job",
            responses=problem_responses("job-not-found", "store-unavailable", body=False))
async def read_job(job_id: Annotated[str, _JOB_ID], context: ContextDep) -> JobResponse:
    """The job's state, latest progress and, once final, its result or problem."""
    served = await context.store.call(_read(job_id), what="read the job")
    if served is None:
        raise _not_found(job_id)
    return served


@router.delete(
    "/v1/jobs/{job_id}", status_code=200, summary="Cancel a job",
    responses={202: {"description": "The search is being stopped; the job turns cancelled "
                     "within about a second.", "model": JobResponse},
               **problem_responses("job-not-found", "job-finished", "store-unavailable",
                                   body=False)})
async def cancel_job(job_id: Annotated[str, _JOB_ID], context: ContextDep,
                     response: Response) -> JobResponse:
    """Cancel a queued job at once, or stop a running search at its next check."""
    def cancel(engine: Engine) -> JobResponse | None:
        record = store.request_cancel(engine, job_id)
        if record is None:
            return None
        if record.kind == JobKind.SWEEP:
            sweep.cancel_children(engine, job_id)
        else:
            sweep.gather_parents(engine, job_id)
        record = store.get_job(engine, job_id)
        return _response(engine, record) if record is not None else None

    served = await context.store.call(cancel, what="cancel the job")
    if served is None:
        raise _not_found(job_id)
    if served.state != JobState.CANCELLED:
        response.status_code = 202
    return served


def _events_after(job_id: str, seq: int, engine: Engine) -> list[dict[str, Any]]:
    return store.events_after(engine, job_id, seq)


def _sse(event: dict[str, Any]) -> str:
    return f"id: {event['seq']}\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n"


@router.get(
    "/v1/jobs/{job_id}/events", summary="Watch a job's progress",
    response_class=StreamingResponse,
    responses={200: {"description": "Server-sent events, each `data` a JobEvent: `state` "
                     "events when the job changes state, `progress` events with the search's "
                     "incumbent, bound, gap, candidates and evaluations. The stream ends after "
                     "a final state.", "content": {"text/event-stream": {
                         "schema": {"type": "string"}}}},
               **problem_responses("job-not-found", "store-unavailable", body=False)})
async def job_events(
    job_id: Annotated[str, _JOB_ID], context: ContextDep,
    last_event_id: Annotated[str | None, Header(
        description="Resume after this event (SSE reconnection).")] = None,
) -> StreamingResponse:
    """The job's events from the first (or after `Last-Event-ID`), then each new one as it
    is recorded."""
    gate = context.store
    record = await gate.call(lambda engine: store.get_job(engine, job_id), what="read the job")
    if record is None:
        raise _not_found(job_id)
    start = int(last_event_id) if last_event_id and last_event_id.isdigit() else 0

    async def stream() -> AsyncIterator[str]:
        seen, opened, quiet_since = start, time.monotonic(), time.monotonic()
        while time.monotonic() - opened < STREAM_LIMIT_S:
            try:
                events = await gate.call(partial(_events_after, job_id, seen),
                                         what="read events")
            except Exception:
                events = []  # the store did not answer this time: try again
            for event in events:
                seen = event["seq"]
                yield _sse(event)
                if event["type"] == "state" and event["state"] in FINAL_STATES:
                    return
            if events:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= KEEP_ALIVE_S:
                quiet_since = time.monotonic()
                yield ": keep-alive\n\n"
            await asyncio.sleep(POLL_INTERVAL_S)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


__all__ = ["router"]
