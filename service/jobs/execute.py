"""One run of one job: claim it, search under a cancellation token and a progress sink,
record the outcome.

Owns: `run_job` (called on a worker thread by either runner), the watcher that stops the
search when a DELETE flags the job or the job is no longer this run's (every
`WATCH_INTERVAL_S`, through `solver.cancel`), the progress events (`solver.progress`
reports, numbered searches), and what each kind computes and keeps: a plan is answered from
the plan store or searched and stored there (one stored plan per request hash), a frontier's
or a schedule optimisation's answer is kept with the job. Failures become the problem+json
the synchronous endpoint would answer. Must not: know which queue delivered the job, or answer HTTP.
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session

from api_schemas.jobs import JobKind, JobState
from api_schemas.pipeline import PipelineOptimizeRequest
from api_schemas.requests import PlanRequest
from api_schemas.run_level import FrontierRequest
from models.errors import PlannerError
from service import limits
from service.jobs import store, sweep
from service.jobs.tables import JobRecord
from service.persistence import repo
from service.persistence.gate import StoreGate
from service.planning import Planner, check_plan_bounds, solve_and_store
from service.problems import PROBLEM_STATUS, PROBLEM_TITLES, StoreUnavailableError, problem_type
from service.settings import Settings
from solver.cancel import Cancelled, CancelToken, active
from solver.progress import SearchProgress, listening

logger = logging.getLogger(__name__)

STOPPING = "the job runner is stopping"
"""Why a run stopped when its runner shut down (the job is queued again)."""

WATCH_INTERVAL_S = 0.5
"""How often a running job reads its cancellation flag."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobServices:
    """What a run needs: the database, the plan store gate, the settings, the planner."""

    engine: Engine
    store: StoreGate
    settings: Settings
    planner: Planner


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What a finished run keeps."""

    plan_id: str | None = None
    result: dict[str, Any] | None = None


def problem_of(error: PlannerError) -> dict[str, Any]:
    """The problem+json body of a domain error, as the synchronous endpoints answer it."""
    body: dict[str, Any] = {"type": problem_type(error.code), "title": PROBLEM_TITLES[error.code],
                            "status": PROBLEM_STATUS[error.code], "detail": error.detail,
                            "code": error.code}
    if error.diagnostics is not None:
        body["diagnostics"] = error.diagnostics
    return body


def _plan(record: JobRecord, services: JobServices) -> Outcome:
    request = PlanRequest.model_validate(record.request_json)
    with Session(services.engine) as session:
        existing = repo.find_plan_by_hash(session=session, request_hash=record.request_hash)
    if existing is not None:
        return Outcome(plan_id=existing.id)
    model_name = check_plan_bounds(request, services.settings)
    stored = solve_and_store(request, key=record.request_hash, model_name=model_name,
                             planner=services.planner, store=services.store)
    if stored.plan_id is None:
        raise StoreUnavailableError("the search finished but the plan store did not answer, "
                                    "so the plan is not kept; resubmit the job",
                                    retry_after_s=services.settings.retry_after_s)
    return Outcome(plan_id=stored.plan_id)


def _frontier(record: JobRecord, services: JobServices) -> Outcome:
    from service.solver_calls import frontier

    request = FrontierRequest.model_validate(record.request_json)
    result = limits.finite_answer(partial(frontier, planner=services.planner), request)
    return Outcome(result=result.model_dump(mode="json"))


def _schedule(record: JobRecord, services: JobServices) -> Outcome:
    from service.solver_calls import optimize_request

    request = PipelineOptimizeRequest.model_validate(record.request_json)
    result = limits.finite_answer(optimize_request, request)
    return Outcome(result=result.model_dump(mode="json"))


COMPUTE: dict[str, Callable[[JobRecord, JobServices], Outcome]] = {
    JobKind.PLAN.value: _plan,
    JobKind.FRONTIER.value: _frontier,
    JobKind.SCHEDULE.value: _schedule,
}
"""What each kind runs."""


class _Progress:
    """The progress sink of one run: each report becomes an event."""

    def __init__(self, engine: Engine, record: JobRecord, started: float) -> None:
        self._engine = engine
        self._record = record
        self._started = started
        self._search = 1
        self._after_final = False

    def __call__(self, report: SearchProgress) -> None:
        if self._after_final:
            self._search += 1
        self._after_final = report.final
        progress = {"objective": report.objective, "candidates": report.candidates,
                    "evaluated": report.evaluated, "incumbent": report.incumbent,
                    "bound": report.bound, "gap": report.gap,
                    "search_elapsed_s": report.elapsed_s, "search": self._search}
        payload = store.state_event(JobState.RUNNING, attempt=self._record.attempts,
                                    elapsed_s=time.perf_counter() - self._started)
        payload.update(type="progress", progress=progress)
        try:
            store.add_event(self._engine, self._record.id, payload)
        except Exception:  # a lost report must not fail the search
            logger.warning("job %s: progress event not written", self._record.id, exc_info=True)


def _watch(engine: Engine, record: JobRecord, token: CancelToken, done: threading.Event,
           stopping: threading.Event | None) -> None:
    """Until `done`, stop the run when the job is flagged or no longer this run's, or the
    runner is stopping."""
    while not done.wait(WATCH_INTERVAL_S):
        if stopping is not None and stopping.is_set():
            token.cancel(STOPPING)
            return
        try:
            going_on = store.still_runs(engine, record.id, attempt=record.attempts)
        except Exception:
            logger.warning("job %s: cancellation flag not readable", record.id, exc_info=True)
            continue
        if not going_on:
            token.cancel("the job was cancelled")
            return


def run_job(job_id: str, services: JobServices, *, take_running: bool,
            stopping: threading.Event | None = None) -> JobState | None:
    """Run the job if this caller gets it (see `store.claim`); the state it ended in, or
    None when it was not this caller's to run. When `stopping` is set (the runner shuts
    down) the search stops and the job is queued again for the next runner."""
    record = store.claim(services.engine, job_id, take_running=take_running)
    if record is None:
        logger.info("job %s not claimed (taken, final or cancelled)", job_id)
        return None
    started = time.perf_counter()
    token = CancelToken()
    done = threading.Event()
    watcher = threading.Thread(target=_watch,
                               args=(services.engine, record, token, done, stopping),
                               name=f"atlas-job-watch-{job_id[:8]}", daemon=True)
    watcher.start()
    logger.info("job %s (%s) running, attempt %d", job_id, record.kind, record.attempts)
    state, outcome, problem, detail = JobState.DONE, Outcome(), None, None
    try:
        with active(token), listening(_Progress(services.engine, record, started)):
            outcome = COMPUTE[record.kind](record, services)
    except Cancelled as error:
        state, detail = JobState.CANCELLED, str(error) or "cancelled"
    except PlannerError as error:
        state, problem, detail = JobState.FAILED, problem_of(error), error.detail
    except Exception:
        logger.exception("job %s failed", job_id)
        state, detail = JobState.FAILED, "internal error (logged by the worker)"
        problem = {"type": problem_type("internal"), "title": PROBLEM_TITLES["internal"],
                   "status": 500, "detail": detail, "code": "internal"}
    finally:
        done.set()
    if state == JobState.CANCELLED and token.reason == STOPPING:
        store.requeue(services.engine, job_id, attempt=record.attempts)
        logger.info("job %s queued again: %s", job_id, STOPPING)
        return JobState.QUEUED
    kept = store.finish(services.engine, job_id, attempt=record.attempts,
                        outcome=store.JobOutcome(
                            state=state, elapsed_s=time.perf_counter() - started,
                            plan_id=outcome.plan_id, result=outcome.result, problem=problem,
                            detail=detail))
    logger.info("job %s %s after %.2f s%s", job_id, state.value, time.perf_counter() - started,
                "" if kept else " (no longer this run's: outcome dropped)")
    if kept:
        try:
            sweep.gather_parents(services.engine, job_id)
        except Exception:  # a read of the sweep gathers it again
            logger.warning("job %s: its sweeps not gathered", job_id, exc_info=True)
    return state if kept else None


__all__ = ["COMPUTE", "STOPPING", "WATCH_INTERVAL_S", "JobServices", "Outcome", "problem_of",
           "run_job"]
