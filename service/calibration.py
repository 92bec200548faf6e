"""Calibration profiles in the service: fitting and storing them, and applying one to a
request that names it.

Owns: turning a fit (`solver.calibration.calibrate`) into a stored profile version, reading
profiles back as `CalibrationProfile`, and `apply_profile`: replacing a request's
`cluster.profile` (a name) by `cluster.calibration` (the newest version's constants), so the
cost model receives constants and never reads the store. Must not: fit (solver) or build
HTTP responses (routes).
"""

from datetime import UTC, datetime
from typing import TypeVar, cast

from sqlalchemy import Engine
from sqlmodel import Session

from api_schemas.calibration import (
    CalibrationFit,
    CalibrationProfile,
    CalibrationProfileSummary,
    CalibrationRunsRequest,
)
from api_schemas.hardware import KernelCalibration
from api_schemas.requests import ClusterInput, EvaluateRequest, PlanRequest
from models.errors import InvalidSpecError
from service.persistence import repo
from service.persistence.gate import StoreGate
from service.persistence.tables import CalibrationProfileRecord

RequestT = TypeVar("RequestT", bound=EvaluateRequest | PlanRequest)


def profile_record(request: CalibrationRunsRequest, *, constants: KernelCalibration,
                   fit: CalibrationFit, family: str) -> CalibrationProfileRecord:
    """The row of a new fit (its version is set when it is stored)."""
    return CalibrationProfileRecord(
        name=request.profile, version=1, gpu=request.gpu, family=family,
        gemm_efficiency_scale=constants.gemm_efficiency_scale,
        step_overhead_s=constants.step_overhead_s, fit_json=fit.model_dump(mode="json"),
        request_json=request.model_dump(mode="json"))


def _utc(moment: datetime) -> datetime:
    """A stored time in UTC (SQLite returns it without its zone)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def profile_of(record: CalibrationProfileRecord) -> CalibrationProfile:
    """A stored version as the API serves it."""
    return CalibrationProfile(
        name=record.name, version=record.version, gpu=record.gpu, family=record.family,
        created_at=_utc(record.created_at), constants=constants_of(record),
        fit=CalibrationFit.model_validate(record.fit_json))


def summary_of(record: CalibrationProfileRecord) -> CalibrationProfileSummary:
    """A profile's newest version as the list shows it."""
    return CalibrationProfileSummary(
        name=record.name, latest_version=record.version, gpu=record.gpu, family=record.family,
        created_at=_utc(record.created_at), gemm_efficiency_scale=record.gemm_efficiency_scale,
        step_overhead_s=record.step_overhead_s,
        num_runs=int(record.fit_json.get("num_runs", 0)))


def constants_of(record: CalibrationProfileRecord) -> KernelCalibration:
    """The constants a request gets from this version (named with it): the fitted GEMM scale
    and overhead, the fitted MoE layer host issue time if the fit set one (kept in the
    fit report, `fit.moe_host_issue_s`), the microbenchmarks' link, attention and host-link
    constants, which the fit report keeps (`fit.microbenchmarks.applied`), and each fitted
    run's leave-one-out
    step-time error (measured / held-out prediction - 1), from which predictions on the
    profile take their range."""
    fit = CalibrationFit.model_validate(record.fit_json)
    errors = tuple(run.measured_step_time_s / run.leave_one_out_step_time_s - 1.0
                   for run in fit.runs)
    applied = (fit.microbenchmarks.applied if fit.microbenchmarks is not None
               else KernelCalibration())
    issue = fit.moe_host_issue_s.value if fit.moe_host_issue_s is not None else None
    return applied.model_copy(update={"gemm_efficiency_scale": record.gemm_efficiency_scale,
                                      "step_overhead_s": record.step_overhead_s,
                                      "moe_host_issue_s": issue,
                                      "profile": record.name, "version": record.version,
                                      "leave_one_out_errors": errors or None})


async def save_profile(record: CalibrationProfileRecord, *,
                       store: StoreGate) -> CalibrationProfileRecord:
    """Store `record` as the next version of its name."""
    def save(engine: Engine) -> CalibrationProfileRecord:
        with Session(engine) as session:
            saved = repo.save_profile_version(session=session, record=record)
            session.expunge(saved)
            return saved

    return await store.call(save, what="store the calibration profile", write=True)


async def read_profile(name: str, version: int | None, *,
                       store: StoreGate) -> CalibrationProfileRecord | None:
    """The newest (or the given) version of a profile, or None."""
    def read(engine: Engine) -> CalibrationProfileRecord | None:
        with Session(engine) as session:
            found = (repo.latest_profile(session=session, name=name) if version is None else
                     repo.get_profile(session=session, name=name, version=version))
            if found is not None:
                session.expunge(found)
            return found

    return await store.call(read, what="read the calibration profile")


def _gpu_id(cluster: ClusterInput) -> str:
    return cluster.gpu if isinstance(cluster.gpu, str) else cluster.gpu.id


async def apply_profile(request: RequestT, *, store: StoreGate) -> RequestT:
    """`request` with `cluster.profile` replaced by the newest version's constants
    (`cluster.calibration`); unchanged when it names no profile.

    Raises:
        InvalidSpecError: no profile of that name, or one fitted on another GPU.
        StoreUnavailableError: the store did not answer.
    """
    cluster = request.cluster
    if cluster.profile is None:
        return request
    record = await read_profile(cluster.profile, None, store=store)
    if record is None:
        raise InvalidSpecError(
            f"no calibration profile named '{cluster.profile}' is stored; GET "
            "/v1/calibration/profiles lists them and POST /v1/calibration/runs fits one",
            field="cluster.profile")
    if record.gpu != _gpu_id(cluster):
        raise InvalidSpecError(
            f"calibration profile '{record.name}' (version {record.version}) was fitted on "
            f"'{record.gpu}', not on '{_gpu_id(cluster)}': use a profile fitted on this GPU "
            "or fit one with POST /v1/calibration/runs", field="cluster.profile")
    expanded = cluster.model_copy(update={"profile": None,
                                          "calibration": constants_of(record)})
    # model_copy keeps the subclass (a run estimate stays a run estimate).
    return cast(RequestT, request.model_copy(update={"cluster": expanded}))


__all__ = ["apply_profile", "constants_of", "profile_of", "profile_record", "read_profile",
           "save_profile", "summary_of"]
