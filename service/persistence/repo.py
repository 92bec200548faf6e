"""Repository functions: the only code that reads and writes plan rows, and the only code
that commits.

Owns: saving a plan (answering with the existing row when the same request hash was stored
concurrently by another worker), reading one by id or by request hash, and listing them with
filters and pagination. Every function is keyword-only with the session first. Must not:
build API responses or decide HTTP statuses.
"""

import logging
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, func, select

from service.persistence.tables import CalibrationProfileRecord, PlanRecord

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanPage:
    """One page of stored plans, newest first, and the count over every page."""

    records: tuple[PlanRecord, ...]
    total: int


def save_plan(*, session: Session, record: PlanRecord) -> PlanRecord:
    """Store a plan and return the stored row.

    When another writer stored the same request hash first (the unique index fires), the
    transaction is rolled back and that earlier row is returned instead, so identical
    requests always map to one plan.
    """
    session.add(record)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        existing = find_plan_by_hash(session=session, request_hash=record.request_hash)
        if existing is None:
            raise
        logger.info("plan %s already stored as %s", record.request_hash[:12], existing.id)
        return existing
    session.refresh(record)
    return record


def get_plan(*, session: Session, plan_id: str) -> PlanRecord | None:
    """The plan with this id, or None."""
    return session.get(PlanRecord, plan_id)


def find_plan_by_hash(*, session: Session, request_hash: str) -> PlanRecord | None:
    """The plan stored for this normalised-request hash, or None."""
    statement = select(PlanRecord).where(PlanRecord.request_hash == request_hash)
    return session.exec(statement).first()


def list_plans(*, session: Session, limit: int, offset: int = 0, model_name: str | None = None,
               gpu: str | None = None, status: str | None = None) -> PlanPage:
    """Stored plans newest first, filtered by exact model name, GPU id and status."""
    conditions = []
    if model_name is not None:
        conditions.append(col(PlanRecord.model_name) == model_name)
    if gpu is not None:
        conditions.append(col(PlanRecord.gpu) == gpu)
    if status is not None:
        conditions.append(col(PlanRecord.status) == status)
    count = select(func.count()).select_from(PlanRecord).where(*conditions)
    total = session.exec(count).one()
    page = (select(PlanRecord).where(*conditions)
            .order_by(col(PlanRecord.created_at).desc(), col(PlanRecord.id).desc())
            .offset(offset).limit(limit))
    return PlanPage(records=tuple(session.exec(page).all()), total=int(total))


PROFILE_VERSION_ATTEMPTS = 5
"""Writes of a new profile version tried before giving up when other writers keep taking
the next version number of the same name first."""


def save_profile_version(*, session: Session,
                         record: CalibrationProfileRecord) -> CalibrationProfileRecord:
    """Store `record` as the next version of its name (1 for a new name) and return it.

    The version is the highest stored one plus one; when a concurrent writer took that
    number first (the unique (name, version) index fires) the write is retried with the
    next one.
    """
    for _ in range(PROFILE_VERSION_ATTEMPTS):
        latest = latest_profile(session=session, name=record.name)
        row = CalibrationProfileRecord.model_validate(
            {**record.model_dump(exclude={"id"}),
             "version": 1 if latest is None else latest.version + 1})
        session.add(row)
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
            logger.info("profile %s version taken concurrently; retrying", record.name)
            continue
        session.refresh(row)
        return row
    raise RuntimeError(f"could not store a new version of profile '{record.name}' after "
                       f"{PROFILE_VERSION_ATTEMPTS} attempts")


def latest_profile(*, session: Session, name: str) -> CalibrationProfileRecord | None:
    """The newest version of the profile `name`, or None."""
    statement = (select(CalibrationProfileRecord)
                 .where(CalibrationProfileRecord.name == name)
                 .order_by(col(CalibrationProfileRecord.version).desc()).limit(1))
    return session.exec(statement).first()


def get_profile(*, session: Session, name: str,
                version: int) -> CalibrationProfileRecord | None:
    """One version of the profile `name`, or None."""
    statement = select(CalibrationProfileRecord).where(
        CalibrationProfileRecord.name == name, CalibrationProfileRecord.version == version)
    return session.exec(statement).first()


def list_profiles(*, session: Session) -> tuple[CalibrationProfileRecord, ...]:
    """The newest version of every profile name, by name."""
    newest = (select(CalibrationProfileRecord.name,
                     func.max(CalibrationProfileRecord.version).label("version"))
              .group_by(CalibrationProfileRecord.name).subquery())
    statement = (select(CalibrationProfileRecord)
                 .join(newest, (col(CalibrationProfileRecord.name) == newest.c.name)
                       & (col(CalibrationProfileRecord.version) == newest.c.version))
                 .order_by(col(CalibrationProfileRecord.name)))
    return tuple(session.exec(statement).all())


__all__ = ["PROFILE_VERSION_ATTEMPTS", "PlanPage", "find_plan_by_hash", "get_plan",
           "get_profile", "latest_profile", "list_plans", "list_profiles", "save_plan",
           "save_profile_version"]
