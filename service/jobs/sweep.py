"""Sweeps: a grid of plan jobs gathered into a frontier per model and recipe.

Owns: the grid's plan requests in order (model, then recipe, then cluster size), the links
from a sweep to its plan jobs, gathering (once every plan job is final, the sweep is
finished with a `SweepResponse`: one frontier point per plan, Pareto-marked within its
model and recipe; a conditional update, so exactly one gatherer finishes it) and cancelling
a sweep's plan jobs. A sweep is never queued itself: its plan jobs are, and whoever
finishes the last one gathers it (`service/jobs/execute.py`), as does a read of the sweep.
Must not: run searches.
"""

import logging
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from api_schemas.jobs import (
    FINAL_STATES,
    JobKind,
    JobState,
    PlanJobRequest,
    SweepFrontier,
    SweepPoint,
    SweepRequest,
    SweepResponse,
)
from api_schemas.plan import PlanResponse, PlanStatus
from api_schemas.requests import PlanRequest
from api_schemas.run_level import FrontierPoint
from service.jobs import store
from service.jobs.tables import JobLinkRecord, JobRecord
from service.persistence import repo
from service.problems import JobFinishedError

logger = logging.getLogger(__name__)


def grid(sweep: SweepRequest) -> list[PlanJobRequest]:
    """The sweep's plan jobs, model-major, then recipe, then cluster size."""
    jobs = []
    for model in sweep.models:
        for training in sweep.recipes:
            for num_nodes in sweep.num_nodes_options:
                cluster = sweep.base.cluster.model_copy(update={"num_nodes": num_nodes})
                request = sweep.base.model_copy(update={
                    "model": model, "training": training, "cluster": cluster})
                jobs.append(PlanJobRequest(kind=JobKind.PLAN, request=request))
    return jobs


def link(engine: Engine, sweep_id: str, child_ids: list[str]) -> None:
    """Record the sweep's plan jobs by position (positions already linked are kept)."""
    with Session(engine) as session:
        known = {row.position for row in session.exec(
            select(JobLinkRecord).where(JobLinkRecord.parent_id == sweep_id)).all()}
        for position, child_id in enumerate(child_ids):
            if position not in known:
                session.add(JobLinkRecord(parent_id=sweep_id, child_id=child_id,
                                          position=position))
        try:
            session.commit()
        except IntegrityError:  # linked concurrently by an identical submission
            session.rollback()


def _children(session: Session, sweep_id: str) -> list[JobRecord | None]:
    links = session.exec(select(JobLinkRecord).where(JobLinkRecord.parent_id == sweep_id)
                         .order_by(col(JobLinkRecord.position))).all()
    return [session.get(JobRecord, row.child_id) for row in links]


def _point(session: Session, child: JobRecord) -> SweepPoint:
    from models.catalog.resolve import resolve_cluster
    from solver.run_level import frontier_point

    request = PlanRequest.model_validate(child.request_json)
    num_nodes = request.cluster.num_nodes
    num_gpus = resolve_cluster(request.cluster).world_size
    plan = (repo.get_plan(session=session, plan_id=child.plan_id)
            if child.plan_id is not None else None)
    if plan is None:
        why = (child.error_json or {}).get("detail") or f"the plan job was {child.state}"
        return SweepPoint(job_id=child.id, plan_id=None, point=FrontierPoint(
            num_nodes=num_nodes, num_gpus=num_gpus, status=PlanStatus.UNKNOWN, summary=why))
    answer = PlanResponse.model_validate(plan.response_json)
    return SweepPoint(job_id=child.id, plan_id=plan.id,
                      point=frontier_point(answer, num_nodes=num_nodes, num_gpus=num_gpus))


def _response(sweep: SweepRequest, points: list[SweepPoint]) -> SweepResponse:
    from solver.run_level import mark_pareto

    sizes = len(sweep.num_nodes_options)
    frontiers = []
    for group, start in enumerate(range(0, len(points), sizes)):
        members = points[start:start + sizes]
        marked = mark_pareto([member.point for member in members])
        members = [member.model_copy(update={"point": point})
                   for member, point in zip(members, marked, strict=True)]
        frontiers.append(SweepFrontier(
            model_index=group // len(sweep.recipes), recipe_index=group % len(sweep.recipes),
            points=members, pareto_num_gpus=[p.num_gpus for p in marked if p.pareto]))
    return SweepResponse(frontiers=frontiers)


def gather(engine: Engine, sweep_id: str) -> bool:
    """Finish the sweep if every one of its plan jobs is final; True when this call did."""
    with Session(engine) as session:
        sweep = session.get(JobRecord, sweep_id)
        if sweep is None or sweep.state != JobState.RUNNING.value:
            return False
        children = _children(session, sweep_id)
        if not children or any(c is None or c.state not in FINAL_STATES for c in children):
            return False
        request = SweepRequest.model_validate(sweep.request_json)
        points = [_point(session, child) for child in children if child is not None]
        result: dict[str, Any] = _response(request, points).model_dump(mode="json")
        attempt, cancelled = sweep.attempts, sweep.cancel_requested
    state = JobState.CANCELLED if cancelled else JobState.DONE
    return store.finish(engine, sweep_id, attempt=attempt, outcome=store.JobOutcome(
        state=state, elapsed_s=0.0, result=result, detail="cancelled" if cancelled else None))


def gather_parents(engine: Engine, child_id: str) -> None:
    """Gather every sweep this plan job belongs to."""
    with Session(engine) as session:
        parents = session.exec(select(JobLinkRecord.parent_id)
                               .where(JobLinkRecord.child_id == child_id)).all()
    for parent_id in set(parents):
        gather(engine, parent_id)


def cancel_children(engine: Engine, sweep_id: str) -> None:
    """Ask every plan job of the sweep to stop (those already finished are left)."""
    with Session(engine) as session:
        ids = [c.id for c in _children(session, sweep_id) if c is not None]
    for child_id in ids:
        try:
            store.request_cancel(engine, child_id)
        except JobFinishedError:
            pass
    gather(engine, sweep_id)


__all__ = ["cancel_children", "gather", "gather_parents", "grid", "link"]
