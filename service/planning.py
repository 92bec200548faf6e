"""Plan requests end to end: normalise, hash, answer from the store, solve once, store.

Owns: the normalised form of a plan request (defaults filled, `parallel` dropped, time
limit and CP-SAT workers clamped) and its SHA-256, the store lookup before solving, the
in-flight de-duplication key, turning an `InfeasibleError` into a stored infeasible plan,
building the `PlanRecord`, checking before any store call that the request holds only what
both backends store, and returning a search that finished while the store was down unstored
(`stored=False`, no id). Must not: build HTTP responses (routes do) or commit (repo does).
"""

import hashlib
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

from anyio import to_thread
from pydantic import BaseModel
from sqlalchemy import Engine
from sqlmodel import Session

from api_schemas.plan import Explanation, PlanResponse, PlanStatus
from api_schemas.requests import PlanRequest
from models.catalog.resolve import resolve_cluster
from models.errors import InfeasibleError
from service import limits
from service.core import call_core
from service.persistence import repo
from service.persistence.gate import StoreGate
from service.persistence.storable import check_storable
from service.persistence.tables import PlanRecord
from service.pool import SolverPool
from service.problems import LimitExceededError, SolveTimeoutError, StoreUnavailableError
from service.settings import Settings
from solver.throughput_bound import peak_tokens_per_s

logger = logging.getLogger(__name__)


class Planner(Protocol):
    """The library's plan function: `solver.plan`."""

    def __call__(self, request: PlanRequest, *,
                 progress: Callable[[str], None] | None = None) -> PlanResponse: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredPlan:
    """A plan as stored: its id, the served response and the diagnostics if infeasible."""

    plan_id: str | None
    """None when the store was unavailable as the search finished."""
    response: PlanResponse
    diagnostics: dict[str, Any] | None
    created: bool
    """True when this request caused the solve; False when answered from the store."""
    stored: bool = True
    """False when the search finished while the store was unavailable: returned, not kept."""

    @property
    def infeasible(self) -> bool:
        """Whether the search proved that no plan exists."""
        return self.response.status == PlanStatus.INFEASIBLE


def normalise_plan_request(request: PlanRequest, settings: Settings) -> PlanRequest:
    """The request as solved and hashed: limits clamped, the ignored `parallel` dropped."""
    given = request.solver.model_fields_set if "solver" in request.model_fields_set else set()
    time_limit_s = limits.clamp_time_limit(
        request.solver.time_limit_s if "time_limit_s" in given else None, settings)
    solver = request.solver.model_copy(update={
        "time_limit_s": time_limit_s,
        "num_workers": min(request.solver.num_workers, settings.max_search_workers),
    })
    return request.model_copy(update={"solver": solver, "parallel": None})


def request_hash(request: BaseModel) -> str:
    """SHA-256 of the canonical JSON of a normalised request (sorted keys, no spaces)."""
    canonical = json.dumps(request.model_dump(mode="json"), sort_keys=True,
                           separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def check_plan_bounds(request: PlanRequest, settings: Settings) -> str:
    """Check the documented bounds of a plan request, and refuse a throughput target above
    what the cluster could reach at peak; return the model's name."""
    limits.check_cluster(request.cluster, settings)
    limits.check_training(request.training, settings)
    spec = limits.check_model_input(request.model, settings)
    target = request.constraints.target_tokens_per_s
    if target is not None:
        cluster = call_core(resolve_cluster, request.cluster)
        gpus = cluster.world_size
        if request.constraints.max_gpus is not None:
            gpus = min(gpus, request.constraints.max_gpus)
        bound = peak_tokens_per_s(spec, cluster, sequence_length=request.training.sequence_length,
                                  gpus=gpus)
        if target > bound:
            raise LimitExceededError(
                f"constraints.target_tokens_per_s: {target:.6g} tokens/s is out of reach: even "
                f"with all {gpus} GPUs at their highest peak FLOP/s doing only the model's "
                f"FLOPs, this cluster trains at most {bound:.6g} tokens/s; lower the target or "
                "add GPUs", field="constraints.target_tokens_per_s")
    return spec.name


def _gpu_id(request: PlanRequest) -> str:
    gpu = request.cluster.gpu
    return gpu if isinstance(gpu, str) else gpu.id


def _infeasible_response(error: InfeasibleError, *, model_name: str,
                         gpu: str) -> PlanResponse:
    return PlanResponse(status=PlanStatus.INFEASIBLE, model_name=model_name, gpu=gpu,
                        explanation=Explanation(summary=error.detail))


def build_record(request: PlanRequest, response: PlanResponse, *, key: str, model_name: str,
                 diagnostics: dict[str, Any] | None) -> PlanRecord:
    """The row for a solved request; the response gets its id and creation time."""
    plan_id = uuid.uuid4().hex
    created_at = datetime.now(UTC)
    served = response.model_copy(update={"id": plan_id, "created_at": created_at})
    stats = served.solver.model_dump(mode="json") if served.solver is not None else None
    return PlanRecord(
        id=plan_id, created_at=created_at, request_hash=key, status=served.status.value,
        model_name=served.model_name or model_name, gpu=served.gpu or _gpu_id(request),
        world_size=served.world_size, objective=request.objective.value,
        wall_time_s=served.solver.wall_time_s if served.solver is not None else 0.0,
        request_json=request.model_dump(mode="json"),
        response_json=served.model_dump(mode="json"),
        solver_stats_json=stats, diagnostics_json=diagnostics)


def stored_plan(record: PlanRecord, *, created: bool) -> StoredPlan:
    """A `StoredPlan` read back from its row."""
    return StoredPlan(plan_id=record.id,
                      response=PlanResponse.model_validate(record.response_json),
                      diagnostics=record.diagnostics_json, created=created)


def _save(record: PlanRecord) -> Callable[[Engine], StoredPlan]:
    def save(engine: Engine) -> StoredPlan:
        with Session(engine) as session:
            saved = repo.save_plan(session=session, record=record)
            return stored_plan(saved, created=saved.id == record.id)
    return save


def solve_and_store(request: PlanRequest, *, key: str, model_name: str, planner: Planner,
                    store: StoreGate) -> StoredPlan:
    """Run the search (on a pool thread) and store its outcome, feasible or not; when the
    store is unavailable the outcome is returned unstored."""
    def progress(message: str) -> None:
        logger.info("plan %s: %s", key[:12], message)

    diagnostics: dict[str, Any] | None = None
    try:
        response = call_core(partial(planner, progress=progress), request)
    except InfeasibleError as error:
        diagnostics = error.diagnostics
        response = _infeasible_response(error, model_name=model_name, gpu=_gpu_id(request))
    if response.status == PlanStatus.UNKNOWN or (response.solver is not None
                                                 and response.solver.unexamined):
        # Out of time before any plan: not a proof of infeasibility, so not stored.
        raise SolveTimeoutError(
            f"{response.explanation.summary} Retry with a larger solver.time_limit_s.",
            time_limit_s=request.solver.time_limit_s, retry_after_s=1)
    record = build_record(request, response, key=key, model_name=model_name,
                          diagnostics=diagnostics)
    try:
        return store.call_sync(_save(record), what="store the plan", write=True)
    except StoreUnavailableError:
        logger.warning("plan %s solved while the store was unavailable; returned unstored",
                       key[:12])
        return StoredPlan(plan_id=None, response=response, diagnostics=diagnostics,
                          created=True, stored=False)


def _find_stored(key: str) -> Callable[[Engine], PlanRecord | None]:
    def find(engine: Engine) -> PlanRecord | None:
        with Session(engine) as session:
            return repo.find_plan_by_hash(session=session, request_hash=key)
    return find


async def create_plan(request: PlanRequest, *, settings: Settings, store: StoreGate,
                      pool: SolverPool, planner: Planner) -> StoredPlan:
    """Answer a plan request: from the store when an identical one was solved, otherwise by
    one search shared by every identical request in flight.

    Raises:
        LimitExceededError: an input over a documented bound, or a value no backend stores.
        InvalidSpecError: the planner rejected the request.
        OverloadedError: the solver pool is full.
        StoreUnavailableError: the store did not answer the look-up before the search.
        SolveTimeoutError: the search outlived its limit plus the grace period, or reached
            its limit without finding any plan (such outcomes are not stored).
    """
    normalised = normalise_plan_request(request, settings)
    check_storable(normalised.model_dump(mode="python"), field="")
    model_name = await to_thread.run_sync(check_plan_bounds, normalised, settings)
    key = request_hash(normalised)
    if not pool.in_flight(key):
        existing = await store.call(_find_stored(key), what="look up the request")
        if existing is not None:
            return stored_plan(existing, created=False)

    def work() -> StoredPlan:
        return solve_and_store(normalised, key=key, model_name=model_name, planner=planner,
                               store=store)

    timeout_s = normalised.solver.time_limit_s + settings.time_limit_grace_s
    return await pool.run(work, key=key, timeout_s=timeout_s, stores_result=True)


__all__ = [
    "Planner",
    "StoredPlan",
    "build_record",
    "check_plan_bounds",
    "create_plan",
    "normalise_plan_request",
    "request_hash",
    "solve_and_store",
    "stored_plan",
]
