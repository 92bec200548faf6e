"""Calibration: measured runs in, a stored, versioned cluster profile out.

Owns: POST /v1/calibration/runs (the fit on a pool thread, then a new profile version
stored; 201 + Location), GET /v1/calibration/profiles and GET
/v1/calibration/profiles/{name} (`?version=`), every store call through the store gate.
Must not: fit (solver.calibration) or touch the database outside the gate.
"""

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, Response
from sqlalchemy import Engine
from sqlmodel import Session

from api_schemas.calibration import (
    PROFILE_NAME_PATTERN,
    CalibrationProfile,
    CalibrationProfileList,
    CalibrationRunsRequest,
)
from api_schemas.requests import ClusterInput
from service import limits
from service.calibration import profile_of, profile_record, read_profile, save_profile, summary_of
from service.core import call_core
from service.deps import ContextDep
from service.openapi import problem_responses
from service.persistence import repo
from service.persistence.storable import check_storable
from service.persistence.tables import CalibrationProfileRecord
from service.planning import request_hash
from service.problems import ProfileNotFoundError
from service.solver_calls import calibrate

router = APIRouter(tags=["calibration"])

CALIBRATION_TIMEOUT_S = 120.0
"""Longest wait for a fit (each run is scored at every grid scale)."""

RUNS_EXAMPLE = {
    "profile": "our-h100",
    "gpu": "h100-sxm5-80gb",
    "runs": [
        {"model": {"preset": "llama-3.1-8b"}, "num_nodes": 1,
         "training": {"global_batch_size": gbs, "sequence_length": 4096},
         "parallel": {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1, "zero_stage": 1,
                      "sequence_parallel": True},
         "step_time_s": t}
        for gbs, t in ((16, 1.23), (32, 2.1), (64, 3.92), (256, 14.5))
    ],
}


def _check_bounds(request: CalibrationRunsRequest, context: ContextDep) -> None:
    settings = context.settings
    for run in request.runs:
        cluster = ClusterInput(gpu=request.gpu, node=request.node, num_nodes=run.num_nodes,
                               gpus_per_node=run.gpus_per_node)
        limits.check_cluster(cluster, settings)
        limits.check_training(run.training, settings)
        limits.check_parallel(run.parallel, run.training, settings)
        limits.check_model_input(run.model, settings)
    for log in request.logs:
        limits.check_cluster(ClusterInput(gpu=request.gpu, node=request.node,
                                          num_nodes=log.num_nodes,
                                          gpus_per_node=log.gpus_per_node), settings)
        limits.check_model_input(log.model, settings)


@router.post(
    "/v1/calibration/runs", status_code=201,
    summary="Fit a cluster profile to measured training runs",
    responses={201: {"description": "The fit, stored as the next version of the profile.",
                     "headers": {"Location": {"description": "URL of the stored version.",
                                              "schema": {"type": "string"}}}},
               **problem_responses("invalid-spec", "overloaded", "solver-time-limit",
                                   "store-unavailable")})
async def calibrate_runs(
    request: Annotated[CalibrationRunsRequest, Body(openapi_examples={
        "four-runs": {"summary": "Four Llama 3.1 8B runs on one H100 node",
                       "value": RUNS_EXAMPLE}})],
    context: ContextDep, response: Response,
) -> CalibrationProfile:
    """Fit the GPU family's GEMM efficiency level (a multiplier on its eta_max) and a fixed
    per-step overhead to measured step times, by least squares on log step time. Each run
    is the configuration POST /v1/evaluate takes (the cluster given by `gpu`, `node` and
    the run's `num_nodes`) and its measured step time; `logs` gives Megatron-LM or
    torchtitan training logs instead, each parsed into its configuration and median
    steady-state step time (the first logged interval and iterations 1-2 are warm-up).
    `microbenchmarks` (the `calibration` kit's JSON) set the scale-up and scale-out
    bandwidth, attention efficiency and host-link constants before the fit, and with GEMM
    entries the GEMM level too (the runs then fit only the overhead). A run faster than its
    model FLOPs at 100% of the dense peak, a peak memory above the GPU's, a microbenchmark
    above the peak FLOP/s or link rate, or a log lacking its configuration or timings is
    refused (422 naming the field and the reason), as is a fit that puts a constant outside
    its physical limits. The answer gives each constant with its standard error and
    leave-one-out range, and the leave-one-out relative error next to the uncalibrated
    model's; the profile is stored as the next version of its name (`cluster.profile` in
    evaluate and plan requests applies it)."""
    check_storable(request.model_dump(mode="python"), field="")
    _check_bounds(request, context)
    result = await context.pool.run(partial(call_core, calibrate, request),
                                    key=f"calibration:{request_hash(request)}",
                                    timeout_s=CALIBRATION_TIMEOUT_S)
    limits.require_finite(result.fit)
    saved = await save_profile(profile_record(request, constants=result.constants,
                                              fit=result.fit, family=result.family),
                               store=context.store)
    response.headers["Location"] = (f"/v1/calibration/profiles/{saved.name}"
                                    f"?version={saved.version}")
    return profile_of(saved)


@router.get("/v1/calibration/profiles", summary="List calibration profiles",
            responses=problem_responses("store-unavailable", body=False))
async def list_calibration_profiles(context: ContextDep) -> CalibrationProfileList:
    """Every stored profile name with its newest version's constants."""
    def read(engine: Engine) -> tuple[CalibrationProfileRecord, ...]:
        with Session(engine) as session:
            found = repo.list_profiles(session=session)
            for row in found:
                session.expunge(row)
            return found

    records = await context.store.call(read, what="list the calibration profiles")
    return CalibrationProfileList(items=[summary_of(r) for r in records])


@router.get("/v1/calibration/profiles/{name}", summary="Read a calibration profile",
            responses=problem_responses("profile-not-found", "store-unavailable",
                                        body=False))
async def read_calibration_profile(
    name: Annotated[str, Path(pattern=PROFILE_NAME_PATTERN, description="Profile name.",
                              examples=["our-h100"])],
    context: ContextDep,
    version: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="A version "
                                         "(default: the newest).")] = None,
) -> CalibrationProfile:
    """A profile's newest (or given) version: constants, uncertainties and the fit report."""
    record = await read_profile(name, version, store=context.store)
    if record is None:
        which = f"version {version} of " if version is not None else ""
        raise ProfileNotFoundError(
            f"no {which}calibration profile '{name}' is stored here; GET "
            "/v1/calibration/profiles lists them, POST /v1/calibration/runs fits one")
    return profile_of(record)


__all__ = ["router"]
