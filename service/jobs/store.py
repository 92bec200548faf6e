"""Reads and writes of job rows and their events: the only code that touches them.

Owns: creating a job or joining the identical one (the unique key; a failed or cancelled
one is re-queued), the state changes, each a conditional update so that exactly one party
wins a race (a worker claiming, a DELETE cancelling, a run finishing), the cancellation
flag, and the events, numbered per job from 1 without gaps. Every function takes the engine
and opens its own short transaction. Must not: run searches, decide HTTP statuses beyond
raising the job problems, or build responses.
"""

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, delete, func, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from api_schemas.jobs import FINAL_STATES, JobState
from service.jobs.tables import JobEventRecord, JobLinkRecord, JobRecord
from service.problems import JobFinishedError

logger = logging.getLogger(__name__)

PRUNE_BATCH = 500
"""Jobs deleted per statement (SQLite allows a bounded number of bound parameters)."""

EVENT_WRITE_TRIES = 5
"""Tries to append an event when another writer takes the same number first."""


def _now() -> datetime:
    return datetime.now(UTC)


def state_event(state: JobState, *, attempt: int, elapsed_s: float = 0.0,
                detail: str | None = None) -> dict[str, Any]:
    """The payload of a state-change event."""
    return {"type": "state", "state": state.value, "attempt": attempt,
            "elapsed_s": elapsed_s, "at": _now().isoformat(), "progress": None,
            "detail": detail}


def _append(session: Session, job_id: str, payload: dict[str, Any]) -> None:
    """Add the next event of `job_id` to the session's transaction (not committed)."""
    last = session.exec(select(func.max(JobEventRecord.seq))
                        .where(JobEventRecord.job_id == job_id)).one()
    session.add(JobEventRecord(job_id=job_id, seq=(last or 0) + 1, payload_json=payload))


def add_event(engine: Engine, job_id: str, payload: dict[str, Any]) -> None:
    """Append an event to the job's events (retried when a concurrent writer took the
    number)."""
    for _ in range(EVENT_WRITE_TRIES):
        with Session(engine) as session:
            _append(session, job_id, payload)
            try:
                session.commit()
                return
            except IntegrityError:
                session.rollback()
    raise RuntimeError(f"could not append an event to job {job_id} after "
                       f"{EVENT_WRITE_TRIES} tries")


def events_after(engine: Engine, job_id: str, seq: int, *, limit: int = 500
                 ) -> list[dict[str, Any]]:
    """The job's events numbered above `seq`, in order, each with its `seq`."""
    with Session(engine) as session:
        rows = session.exec(select(JobEventRecord)
                            .where(JobEventRecord.job_id == job_id, JobEventRecord.seq > seq)
                            .order_by(col(JobEventRecord.seq)).limit(limit)).all()
        return [{"seq": row.seq, **row.payload_json} for row in rows]


def get_job(engine: Engine, job_id: str) -> JobRecord | None:
    """The job with this id, or None."""
    with Session(engine) as session:
        return session.get(JobRecord, job_id)


def _by_key(session: Session, key: str) -> JobRecord | None:
    return session.exec(select(JobRecord).where(JobRecord.key == key)).first()


def create_or_join(engine: Engine, *, key: str, kind: str, request_hash: str,
                   request_json: dict[str, Any]) -> tuple[JobRecord, bool]:
    """The job of `key`: a new one, the identical one already there, or that one re-queued
    when it had failed or been cancelled. Returns the row and whether it must be queued
    (new or re-queued)."""
    with Session(engine) as session:
        record = JobRecord(id=uuid.uuid4().hex, key=key, kind=kind, request_hash=request_hash,
                           state=JobState.QUEUED.value, request_json=request_json)
        session.add(record)
        session.add(JobEventRecord(job_id=record.id, seq=1,
                                   payload_json=state_event(JobState.QUEUED, attempt=0)))
        try:
            session.commit()
            session.refresh(record)
            return record, True
        except IntegrityError:
            session.rollback()
    with Session(engine) as session:
        existing = _by_key(session, key)
        if existing is None:
            raise RuntimeError(f"job key {key[:24]} clashed but no job holds it")
        if existing.state not in (JobState.FAILED.value, JobState.CANCELLED.value):
            return existing, False
        requeued = session.execute(
            update(JobRecord)
            .where(col(JobRecord.id) == existing.id, col(JobRecord.state) == existing.state)
            .values(state=JobState.QUEUED.value, cancel_requested=False, finished_at=None,
                    started_at=None, result_json=None, error_json=None, plan_id=None))
        if requeued.rowcount == 1:  # type: ignore[attr-defined]
            _append(session, existing.id,
                    state_event(JobState.QUEUED, attempt=existing.attempts))
        session.commit()
        current = session.get(JobRecord, existing.id, populate_existing=True)
        assert current is not None
        return current, requeued.rowcount == 1  # type: ignore[attr-defined]


def claim(engine: Engine, job_id: str, *, take_running: bool) -> JobRecord | None:
    """Mark the job running as its next attempt, if it is queued (or, with `take_running`,
    running: its previous worker died, the queue gave it to this one) and not asked to
    stop; None when another party has it or it is final. A job asked to stop before it
    started is marked cancelled here."""
    states = [JobState.QUEUED.value]
    if take_running:
        states.append(JobState.RUNNING.value)
    with Session(engine) as session:
        taken = session.execute(
            update(JobRecord)
            .where(col(JobRecord.id) == job_id, col(JobRecord.state).in_(states),
                   col(JobRecord.cancel_requested).is_(False))
            .values(state=JobState.RUNNING.value, attempts=JobRecord.attempts + 1,
                    started_at=_now()))
        if taken.rowcount != 1:  # type: ignore[attr-defined]
            session.rollback()
            stopped = session.execute(
                update(JobRecord)
                .where(col(JobRecord.id) == job_id, col(JobRecord.state).in_(states),
                       col(JobRecord.cancel_requested).is_(True))
                .values(state=JobState.CANCELLED.value, finished_at=_now()))
            if stopped.rowcount == 1:  # type: ignore[attr-defined]
                _append(session, job_id, state_event(JobState.CANCELLED, attempt=0,
                                                     detail="cancelled before it ran again"))
            session.commit()
            return None
        record = session.get(JobRecord, job_id)
        assert record is not None
        _append(session, job_id, state_event(JobState.RUNNING, attempt=record.attempts))
        session.commit()
        session.refresh(record)
        return record


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOutcome:
    """How one run of a job ended: the columns `finish` writes (state, plan id, result,
    problem) and what its final event says (elapsed time, detail)."""

    state: JobState
    elapsed_s: float
    plan_id: str | None = None
    result: dict[str, Any] | None = None
    problem: dict[str, Any] | None = None
    detail: str | None = None


def _change_run(engine: Engine, job_id: str, *, attempt: int, values: dict[str, Any],
                event: dict[str, Any]) -> bool:
    """Set `values` on the job and append `event` in one transaction, if the job is still
    the running run `attempt`; False (nothing changed) when it is no longer that run's."""
    with Session(engine) as session:
        changed = session.execute(
            update(JobRecord)
            .where(col(JobRecord.id) == job_id, col(JobRecord.state) == JobState.RUNNING.value,
                   col(JobRecord.attempts) == attempt)
            .values(**values))
        if changed.rowcount != 1:  # type: ignore[attr-defined]
            session.rollback()
            return False
        _append(session, job_id, event)
        session.commit()
        return True


def finish(engine: Engine, job_id: str, *, attempt: int, outcome: JobOutcome) -> bool:
    """Record the outcome of the run `attempt` (done, failed or cancelled); False when the
    job is no longer that run's (re-queued elsewhere), in which case nothing changes."""
    return _change_run(
        engine, job_id, attempt=attempt,
        values={"state": outcome.state.value, "finished_at": _now(),
                "plan_id": outcome.plan_id, "result_json": outcome.result,
                "error_json": outcome.problem},
        event=state_event(outcome.state, attempt=attempt, elapsed_s=outcome.elapsed_s,
                          detail=outcome.detail))


def _queue_again(engine: Engine, job_id: str, *, attempt: int, detail: str) -> bool:
    """Put the run `attempt` back in the queue, saying why; False when the job is no longer
    that run's."""
    return _change_run(engine, job_id, attempt=attempt,
                       values={"state": JobState.QUEUED.value, "started_at": None},
                       event=state_event(JobState.QUEUED, attempt=attempt, detail=detail))


def requeue(engine: Engine, job_id: str, *, attempt: int) -> bool:
    """Put the run `attempt` back in the queue (its runner stopped); False when the job is
    no longer that run's."""
    return _queue_again(engine, job_id, attempt=attempt,
                        detail="its runner stopped; queued again")


def requeue_orphans(engine: Engine, *, started_before: datetime) -> list[str]:
    """Put back in the queue every job marked running by a run that started before
    `started_before` (its process ended without stopping it: killed, or lost with its
    machine), each as a conditional update on the attempt it was at, so that a run that
    still reports is fenced off (`finish` and `still_runs` no longer match it). Returns their
    ids, oldest first."""
    with Session(engine) as session:
        stale = session.exec(
            select(JobRecord.id, JobRecord.attempts)
            .where(JobRecord.state == JobState.RUNNING.value,
                   col(JobRecord.started_at) < started_before)
            .order_by(col(JobRecord.created_at))).all()
    return [job_id for job_id, attempt in stale
            if _queue_again(engine, job_id, attempt=attempt,
                            detail="its server process ended while it ran; queued again")]


def still_runs(engine: Engine, job_id: str, *, attempt: int) -> bool:
    """Whether the run `attempt` should go on: the job is still that run's and no DELETE
    asked it to stop."""
    with Session(engine) as session:
        record = session.get(JobRecord, job_id)
        return (record is not None and record.state == JobState.RUNNING.value
                and record.attempts == attempt and not record.cancel_requested)


def request_cancel(engine: Engine, job_id: str) -> JobRecord | None:
    """Ask the job to stop: a queued one is cancelled at once, a running one is flagged
    (its run stops at its next check and records `cancelled`). None when there is no such
    job.

    Raises:
        JobFinishedError: the job is done or failed.
    """
    with Session(engine) as session:
        record = session.get(JobRecord, job_id)
        if record is None:
            return None
        if record.state in (JobState.DONE.value, JobState.FAILED.value):
            raise JobFinishedError(
                f"job {job_id} is already {record.state}: there is nothing to cancel; its "
                "outcome stays readable with GET /v1/jobs/" + job_id)
        if record.state == JobState.QUEUED.value:
            cancelled = session.execute(
                update(JobRecord)
                .where(col(JobRecord.id) == job_id,
                       col(JobRecord.state) == JobState.QUEUED.value)
                .values(state=JobState.CANCELLED.value, cancel_requested=True,
                        finished_at=_now()))
            if cancelled.rowcount == 1:  # type: ignore[attr-defined]
                _append(session, job_id, state_event(JobState.CANCELLED,
                                                     attempt=record.attempts,
                                                     detail="cancelled while queued"))
                session.commit()
                return session.get(JobRecord, job_id, populate_existing=True)
            session.rollback()  # a worker took it meanwhile: flag it below
        session.execute(update(JobRecord)
                        .where(col(JobRecord.id) == job_id,
                               col(JobRecord.state).not_in([s.value for s in FINAL_STATES]))
                        .values(cancel_requested=True))
        session.commit()
        return session.get(JobRecord, job_id, populate_existing=True)


def abandon(engine: Engine, job_id: str, *, problem: dict[str, Any]) -> None:
    """Mark a queued job failed (its queue could not take it), so that the same request
    submitted again queues it again."""
    with Session(engine) as session:
        failed = session.execute(
            update(JobRecord)
            .where(col(JobRecord.id) == job_id, col(JobRecord.state) == JobState.QUEUED.value)
            .values(state=JobState.FAILED.value, finished_at=_now(), error_json=problem))
        if failed.rowcount == 1:  # type: ignore[attr-defined]
            _append(session, job_id, state_event(JobState.FAILED, attempt=0,
                                                 detail=str(problem.get("detail"))))
        session.commit()


def prune_finished(engine: Engine, *, finished_before: datetime) -> int:
    """Delete the jobs that reached a final state before `finished_before`, with their
    events and their links to their plan jobs; a plan job linked to a sweep that stays is
    kept with it. Stored plans are not touched. Returns how many jobs were deleted."""
    final = [state.value for state in FINAL_STATES]
    with Session(engine) as session:
        old = set(session.exec(select(JobRecord.id).where(
            col(JobRecord.state).in_(final),
            col(JobRecord.finished_at) < finished_before)).all())
        if not old:
            return 0
        links = session.exec(select(JobLinkRecord.parent_id, JobLinkRecord.child_id)).all()
        kept_by_parent = {child for parent, child in links if parent not in old}
        doomed = sorted(old - kept_by_parent)
        for start in range(0, len(doomed), PRUNE_BATCH):
            batch = doomed[start:start + PRUNE_BATCH]
            session.execute(delete(JobEventRecord).where(col(JobEventRecord.job_id).in_(batch)))
            session.execute(delete(JobLinkRecord).where(col(JobLinkRecord.parent_id).in_(batch)))
            session.execute(delete(JobRecord).where(col(JobRecord.id).in_(batch),
                                                    col(JobRecord.state).in_(final)))
        session.commit()
        return len(doomed)


def counts_by_state(engine: Engine) -> dict[str, int]:
    """How many jobs are in each state now (states with no job are left out)."""
    with Session(engine) as session:
        rows = session.exec(select(JobRecord.state, func.count())
                            .group_by(JobRecord.state)).all()
    return {str(state): int(count) for state, count in rows}


def queued_ids(engine: Engine) -> Sequence[str]:
    """Ids of the queued jobs, oldest first."""
    with Session(engine) as session:
        return session.exec(select(JobRecord.id)
                            .where(JobRecord.state == JobState.QUEUED.value)
                            .order_by(col(JobRecord.created_at))).all()


__all__ = ["JobOutcome", "abandon", "add_event", "claim", "create_or_join", "events_after",
           "finish", "get_job",
           "prune_finished", "queued_ids", "request_cancel", "requeue", "requeue_orphans",
           "state_event", "still_runs"]
