"""Calibrating a cluster profile from measured runs: each run scored by the cost model over
the GEMM efficiency scale, checked against physics, then fitted (`models.evidence.calibration`).

Owns: `calibrate(request)`: parsing the training logs into runs (`solver.logs`), fitting
the microbenchmarks' constants (`models.evidence.microbenchmarks`) and applying them to every run,
resolving each run like POST /v1/evaluate (model, the calibration's GPU and node, mesh
rules), refusing runs no hardware could produce (a step faster than its model FLOPs at 100%
of the dense peak, a peak memory above the GPU's memory), tabulating each run's model step
time over the admissible scales, the fit (both constants, or the overhead alone when GEMM
microbenchmarks set the GEMM level), its leave-one-out check and the refusal of unphysical
constants. Must not: store profiles or read the database (the service does).
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from api_schemas._base import field_path
from api_schemas.architecture import ModelSpec
from api_schemas.calibration import (
    CalibrationFit,
    CalibrationRunsRequest,
    FittedConstant,
    MeasuredRun,
    ParsedLog,
    RunResidual,
)
from api_schemas.hardware import ClusterSpec, KernelCalibration
from api_schemas.parallel import ParallelConfig
from api_schemas.requests import ClusterInput
from api_schemas.training import TrainingSpec
from models.catalog.kernels import GEMM_EFFICIENCY_FLOOR_FRAC, KernelProfile, profile_for
from models.catalog.resolve import resolve_cluster, resolve_model
from models.core.memory import memory_ledger
from models.core.mesh import validate_mesh
from models.core.moe.host_issue import MOE_HOST_ISSUE_S
from models.core.search_memo import within_search_memo
from models.core.step_time import estimate_step
from models.errors import PlannerError
from models.evidence.calibration import (
    CalibrationRefused,
    Fit,
    RunCurve,
    fit_constants,
    fit_overhead,
    leave_one_out,
    physical_problems,
    relative_error,
)
from models.evidence.calibration_moe import (
    MIN_HOST_BOUND_MOE_RUNS,
    IssueFit,
    RunSurface,
    fit_with_issue,
    issue_grid,
    issue_leave_one_out,
    issue_limit,
    issue_problems,
)
from models.evidence.microbenchmarks import MicrobenchmarkResult, fit_microbenchmarks
from solver.api import used_nodes
from solver.logs import parse_training_log

GRID_POINTS = 17
"""GEMM efficiency scales (log-spaced over the admissible range) at which each run's step
time is evaluated; the fit interpolates linearly in 1/s between them."""

ISSUE_SCALE_STRIDE = 2
"""An MoE run's rows over the host issue time are tabulated at every second GEMM scale of the
grid (9 of 17; T stays linear in 1/s between them), to keep a fit of many large MoE runs
within the endpoint's time limit."""

METHOD = ("least squares on ln(step time): t = T(s) + o, T the cost model with every eta_max "
          "x s (tabulated at 17 scales, linear in 1/s between them), o a fixed per-step "
          "overhead; standard errors from the Gauss-Newton covariance with RSS/(n-2); "
          "leave-one-out: each run predicted by the fit on the others")

METHOD_FIXED = ("least squares on ln(step time): t = T(s) + o with s, the GEMM efficiency "
                "scale, set by the GEMM microbenchmarks (fitted kernel level over the family's "
                "kernel table) and o, a fixed per-step overhead, fitted; its standard error "
                "from the one-parameter Gauss-Newton covariance with RSS/(n-1); leave-one-out: "
                "each run predicted by the overhead fitted on the others")


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationResult:
    """A fit ready to store: its constants, the report, and the GPU family it applies to."""

    constants: KernelCalibration
    fit: CalibrationFit
    family: str


def scale_limits(profile: KernelProfile) -> tuple[float, float]:
    """The admissible GEMM efficiency scales of a family: no format's eta_max below
    `GEMM_EFFICIENCY_FLOOR_FRAC` nor above 1."""
    fracs = profile.gemm_peak_frac.values()
    return GEMM_EFFICIENCY_FLOOR_FRAC / min(fracs), 1.0 / max(fracs)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Scored:
    curve: RunCurve
    uncalibrated_s: float
    bound_s: float
    peak_bytes: int
    measured_peak_bytes: int | None
    label: str
    moe_forwards: int
    """MoE layer forwards per step on the busiest pipeline rank (at least): MoE layers per
    rank (rounded up) x micro-batches; 0 for a dense model."""
    spec: ModelSpec
    training: TrainingSpec
    parallel: ParallelConfig
    cluster: ClusterSpec


def _with_field(error: PlannerError, prefix: str) -> PlannerError:
    where = field_path(prefix, error.field) if error.field else prefix
    error.field = where
    error.detail = f"{where}: {error.detail}"
    error.args = (error.detail,)
    return error


def _cluster(request: CalibrationRunsRequest, run: MeasuredRun) -> ClusterSpec:
    return resolve_cluster(ClusterInput(gpu=request.gpu, node=request.node,
                                        num_nodes=run.num_nodes,
                                        gpus_per_node=run.gpus_per_node))


def _score(request: CalibrationRunsRequest, where: str, run: MeasuredRun,
           scales: Sequence[float], applied: KernelCalibration) -> _Scored:
    try:
        spec = resolve_model(run.model).spec
        cluster = _cluster(request, run)
        nodes, per_node = used_nodes(run.parallel.world_size, cluster)
        validate_mesh(run.parallel, model=spec, num_nodes=nodes, gpus_per_node=per_node,
                      training=run.training)
        base = estimate_step(spec, run.training, run.parallel, cluster)
        ledger = memory_ledger(spec, run.training, run.parallel, cluster)
        times = tuple(
            estimate_step(spec, run.training, run.parallel, cluster.model_copy(update={
                "calibration": applied.model_copy(update={"gemm_efficiency_scale": s,
                                                          "step_overhead_s": 0.0})
            })).step_time_s
            for s in scales)
    except PlannerError as error:
        raise _with_field(error, where) from error
    bound = base.model_flop / base.world_size / base.peak_flop_per_s
    dtype = run.training.compute_dtype.value
    if run.step_time_s < bound:
        raise CalibrationRefused(
            f"{where}.step_time_s: {run.step_time_s:.4g} s is physically impossible: the "
            f"step's model FLOPs alone take {bound:.4g} s on {base.world_size} GPUs at 100% "
            f"of the dense {dtype} peak ({base.peak_flop_per_s / 1e12:,.0f} TFLOP/s each); "
            "check the configuration (batch, sequence, GPU count) and the unit (seconds)",
            field=f"{where}.step_time_s")
    if run.peak_memory_bytes is not None and run.peak_memory_bytes > cluster.gpu.memory_bytes:
        raise CalibrationRefused(
            f"{where}.peak_memory_bytes: {run.peak_memory_bytes:,} bytes is more than the "
            f"{cluster.gpu.name}'s {cluster.gpu.memory_bytes:,} bytes of memory; give the "
            "peak per rank in bytes", field=f"{where}.peak_memory_bytes")
    moe_forwards = (-(-spec.num_moe_layers // run.parallel.pp) * base.num_micro_batches
                    if spec.moe is not None else 0)
    return _Scored(curve=RunCurve(measured_s=run.step_time_s, scales=tuple(scales),
                                  model_s=times),
                   uncalibrated_s=base.step_time_s, bound_s=bound,
                   peak_bytes=ledger.peak_bytes,
                   measured_peak_bytes=run.peak_memory_bytes,
                   label=run.label or f"run {where.split('.')[-1]}",
                   moe_forwards=moe_forwards, spec=spec, training=run.training,
                   parallel=run.parallel, cluster=cluster)


def _surface(scored: _Scored, scales: Sequence[float], issues: Sequence[float],
             applied: KernelCalibration) -> RunSurface:
    """A scored run's model step time over (h, s): one row per h for an MoE run, its
    published-h curve alone for a dense run (h does not move it)."""
    if scored.moe_forwards == 0:
        return RunSurface(measured_s=scored.curve.measured_s, issues=(0.0,),
                          rows=(scored.curve,), moe_forwards=0)
    scales = scales[::ISSUE_SCALE_STRIDE]
    rows = tuple(
        RunCurve(measured_s=scored.curve.measured_s, scales=tuple(scales), model_s=tuple(
            estimate_step(scored.spec, scored.training, scored.parallel,
                          scored.cluster.model_copy(update={"calibration": applied.model_copy(
                              update={"gemm_efficiency_scale": s, "step_overhead_s": 0.0,
                                      "moe_host_issue_s": h})})).step_time_s
            for s in scales))
        for h in issues)
    return RunSurface(measured_s=scored.curve.measured_s, issues=tuple(issues), rows=rows,
                      moe_forwards=scored.moe_forwards)


@dataclass(frozen=True, slots=True, kw_only=True)
class _IssueOutcome:
    fit: IssueFit | None
    """The joint fit with h, when the runs identify h."""
    surfaces: tuple[RunSurface, ...]
    note: str


def _fit_issue(scored: Sequence[_Scored], scales: Sequence[float], applied: KernelCalibration,
               fit_at: Callable[[Sequence[RunCurve]], Fit], *, free_scale: bool
               ) -> _IssueOutcome:
    """Fit the MoE layer's host issue time with the other constants when the runs identify
    it; otherwise say why it is left at the published value.

    Raises:
        CalibrationRefused: the fitted h leaves its physical limits.
    """
    published = f"the published {MOE_HOST_ISSUE_S * 1e3:.3g} ms is kept"
    moe = sum(s.moe_forwards > 0 for s in scored)
    if moe < MIN_HOST_BOUND_MOE_RUNS:
        return _IssueOutcome(fit=None, surfaces=(), note=(
            f"MoE layer host issue time not fitted: {moe} of the {len(scored)} runs are MoE "
            f"runs and {MIN_HOST_BOUND_MOE_RUNS} host-bound MoE runs are needed; {published}"))
    surfaces = [RunSurface(measured_s=s.curve.measured_s, issues=(0.0,), rows=(s.curve,),
                           moe_forwards=s.moe_forwards) for s in scored]
    limit = issue_limit(surfaces)
    issues = issue_grid(limit)
    surfaces = [_surface(s, scales, issues, applied) for s in scored]
    joint = fit_with_issue(surfaces, fit_at=fit_at, free_scale=free_scale)
    problems = issue_problems(joint, surfaces, limit=limit)
    if problems:
        raise CalibrationRefused("the fit is refused: " + "; ".join(problems),
                                 field="runs")
    if joint.host_bound_runs < MIN_HOST_BOUND_MOE_RUNS or not math.isfinite(joint.issue_se):
        why = (f"only {joint.host_bound_runs} of the {moe} MoE runs are host-bound at the "
               f"best value ({joint.issue_s * 1e3:.3g} ms; a host-bound run's step grows with "
               f"it) and {MIN_HOST_BOUND_MOE_RUNS} are needed"
               if joint.host_bound_runs < MIN_HOST_BOUND_MOE_RUNS else
               "the runs cannot tell it from the GEMM efficiency and the per-step overhead")
        return _IssueOutcome(fit=None, surfaces=tuple(surfaces), note=(
            f"MoE layer host issue time not fitted: {why}; {published}"))
    return _IssueOutcome(fit=joint, surfaces=tuple(surfaces), note=(
        f"MoE layer host issue time fitted on {joint.host_bound_runs} host-bound MoE runs "
        f"(of {moe}): {joint.issue_s * 1e3:.4g} ms, standard error "
        f"{joint.issue_se * 1e3:.2g} ms (published {MOE_HOST_ISSUE_S * 1e3:.3g} ms)"))


def _constant(value: float, se: float, loo: Sequence[float]) -> FittedConstant:
    return FittedConstant(value=value, standard_error=se if math.isfinite(se) else -1.0,
                          leave_one_out_min=min(loo), leave_one_out_max=max(loo))


def _runs(request: CalibrationRunsRequest) -> tuple[list[tuple[str, MeasuredRun]],
                                                     list[ParsedLog]]:
    """Every run with its field path: the measured runs, then each log parsed."""
    runs = [(f"runs.{i}", run) for i, run in enumerate(request.runs)]
    parsed = []
    for i, log in enumerate(request.logs):
        where = f"logs.{i}"
        try:
            spec = resolve_model(log.model).spec
            cluster = resolve_cluster(ClusterInput(gpu=request.gpu, node=request.node,
                                                   num_nodes=log.num_nodes,
                                                   gpus_per_node=log.gpus_per_node))
            result = parse_training_log(log, spec=spec, gpus_per_node=cluster.gpus_per_node,
                                        where=where)
        except PlannerError as error:
            if error.field and error.field.startswith(where):
                raise
            raise _with_field(error, where) from error
        parsed.append(result)
        runs.append((where, result.run))
    return runs, parsed


def _microbenchmarks(request: CalibrationRunsRequest, first: MeasuredRun
                     ) -> MicrobenchmarkResult | None:
    if request.microbenchmarks is None:
        return None
    return fit_microbenchmarks(request.microbenchmarks, _cluster(request, first))


@dataclass(frozen=True, slots=True, kw_only=True)
class _Calibrated:
    """A checked fit with its held-out refits: what the report and the constants come from."""

    family: KernelProfile
    applied: KernelCalibration
    micro: MicrobenchmarkResult | None
    fixed: tuple[float, float] | None
    """(scale, standard error) that the microbenchmarks set, held in the fit."""
    parsed: list[ParsedLog]
    scored: list[_Scored]
    fit: Fit
    joint: IssueFit | None
    held_issue: list[tuple[IssueFit, float]] | None
    held: list[tuple[Fit, float]]
    issue_note: str


def _scale_grid(lo: float, hi: float) -> list[float]:
    """Geometric grid from lo to hi; the end points are set exactly (the power can round
    past hi, which would put the largest eta_max a hair above the dense peak)."""
    return [lo] + [lo * (hi / lo) ** (k / (GRID_POINTS - 1))
                   for k in range(1, GRID_POINTS - 1)] + [hi]


def _refuse_unphysical(fit: Fit, family: KernelProfile, *, fixed: bool) -> None:
    """Refuse a fit whose constants leave their physical limits or cannot be told apart."""
    lo, hi = scale_limits(family)
    reasons = (f"{family.family} GEMMs at {GEMM_EFFICIENCY_FLOOR_FRAC:.0%} of the "
               "dense peak, the documented floor", f"{family.family} GEMMs at 100% "
               "of the dense peak")
    problems = physical_problems(fit, scale_limits=(lo, hi), limit_reasons=reasons)
    if fixed:
        problems = [p for p in problems if "GEMM efficiency scale" not in p]
    if problems:
        raise CalibrationRefused("the fit is refused: " + "; ".join(problems), field="runs")
    if not math.isfinite(fit.scale_se) or not math.isfinite(fit.overhead_se):
        raise CalibrationRefused(
            "the fit is refused: the runs cannot tell the GEMM efficiency from the per-step "
            "overhead apart (their model step times move together); add runs whose GEMM "
            "share differs (other batch sizes, sequence lengths or models)", field="runs")


def _calibrated(request: CalibrationRunsRequest) -> _Calibrated:
    runs, parsed = _runs(request)
    first = runs[0][1]
    try:
        family_profile = profile_for(_cluster(request, first).gpu)
    except PlannerError as error:
        raise _with_field(error, "gpu") from error
    micro = _microbenchmarks(request, first)
    applied = micro.report.applied if micro is not None else KernelCalibration()
    fixed = ((micro.gemm_scale, micro.gemm_scale_se)
             if micro is not None and micro.gemm_scale is not None else None)
    lo, hi = scale_limits(family_profile)
    scales = _scale_grid(lo, hi)
    scored = [_score(request, where, run, scales, applied) for where, run in runs]
    fit_at: Callable[[Sequence[RunCurve]], Fit] = (
        (lambda cs: fit_constants(cs, scale_limits=(lo, hi))) if fixed is None else
        (lambda cs: fit_overhead(cs, scale=fixed[0], scale_se=fixed[1])))
    outcome = _fit_issue(scored, scales, applied, fit_at, free_scale=fixed is None)
    joint = outcome.fit
    if joint is not None:
        scored = [replace(s, curve=surface.curve_at(joint.issue_s))
                  for s, surface in zip(scored, outcome.surfaces, strict=True)]
    curves = [s.curve for s in scored]
    fit = joint.fit if joint is not None else fit_at(curves)
    _refuse_unphysical(fit, family_profile, fixed=fixed is not None)
    held_issue = (issue_leave_one_out(outcome.surfaces, fit_at=fit_at,
                                      free_scale=fixed is None, near=joint.issue_s)
                  if joint is not None else None)
    held = (leave_one_out(curves, scale_limits=(lo, hi), fixed_scale=fixed)
            if held_issue is None else [(r.fit, pred) for r, pred in held_issue])
    return _Calibrated(family=family_profile, applied=applied, micro=micro, fixed=fixed,
                       parsed=parsed, scored=scored, fit=fit, joint=joint,
                       held_issue=held_issue, held=held, issue_note=outcome.note)


def _fit_report(c: _Calibrated) -> CalibrationFit:
    fit, scored, held, joint = c.fit, c.scored, c.held, c.joint
    residuals = [_residual(s, fit, loo_pred) for s, (_, loo_pred) in zip(scored, held,
                                                                         strict=True)]
    n = len(scored)
    fitted_pred = [s.curve.model_at(fit.scale) + fit.overhead_s for s in scored]
    method = METHOD if c.fixed is None else METHOD_FIXED
    if c.micro is not None:
        method += ("; the microbenchmarks' link, attention and host-link constants are "
                   "applied to every run before the fit")
    return CalibrationFit(
        num_runs=n,
        gemm_efficiency_scale=_constant(fit.scale, fit.scale_se, [f.scale for f, _ in held]),
        step_overhead_s=_constant(fit.overhead_s, fit.overhead_se,
                                  [f.overhead_s for f, _ in held]),
        gemm_peak_frac={d.value: f * fit.scale for d, f in c.family.gemm_peak_frac.items()},
        uncalibrated_relative_error=sum(relative_error(s.uncalibrated_s, s.curve.measured_s)
                                        for s in scored) / n,
        leave_one_out_relative_error=sum(relative_error(p, s.curve.measured_s)
                                         for s, (_, p) in zip(scored, held, strict=True)) / n,
        fitted_relative_error=sum(relative_error(p, s.curve.measured_s)
                                  for s, p in zip(scored, fitted_pred, strict=True)) / n,
        log_residual_rms=math.sqrt(fit.rss / n), runs=residuals,
        method=method + ("; the overhead came out negative within noise and was set to 0"
                         if fit.clamped_overhead else ""),
        logs=c.parsed, microbenchmarks=c.micro.report if c.micro is not None else None,
        moe_host_issue_s=(_constant(joint.issue_s, joint.issue_se,
                                    [r.issue_s for r, _ in c.held_issue])
                          if joint is not None and c.held_issue is not None else None),
        moe_host_issue_note=c.issue_note)


@within_search_memo
def calibrate(request: CalibrationRunsRequest) -> CalibrationResult:
    """Fit the GEMM efficiency scale and the per-step overhead of `request.gpu` to the runs
    and logs, after the microbenchmarks (if any) set the link, attention and host-link
    constants (and, with GEMM entries, the GEMM efficiency scale: then only the overhead is
    fitted to the runs).

    Raises:
        InvalidSpecError: a run or log the cost model cannot score or parse (field
            `runs.<i>...` / `logs.<i>.text`), a physically impossible run or microbenchmark,
            a fit whose constants leave their physical limits or cannot be told apart (the
            message says which and why).
    """
    c = _calibrated(request)
    constants = c.applied.model_copy(update={
        "gemm_efficiency_scale": c.fit.scale, "step_overhead_s": c.fit.overhead_s,
        "moe_host_issue_s": c.joint.issue_s if c.joint is not None else None,
        "leave_one_out_errors": tuple(s.curve.measured_s / p - 1.0
                                      for s, (_, p) in zip(c.scored, c.held, strict=True))})
    return CalibrationResult(constants=constants, fit=_fit_report(c), family=c.family.family)


def _residual(scored: _Scored, fit: Fit, loo_pred: float) -> RunResidual:
    run_meas = scored.curve.measured_s
    return RunResidual(
        label=scored.label, measured_step_time_s=run_meas,
        uncalibrated_step_time_s=scored.uncalibrated_s,
        fitted_step_time_s=scored.curve.model_at(fit.scale) + fit.overhead_s,
        leave_one_out_step_time_s=loo_pred, peak_flop_bound_s=scored.bound_s,
        measured_peak_memory_bytes=scored.measured_peak_bytes,
        predicted_peak_memory_bytes=scored.peak_bytes)


__all__ = ["GRID_POINTS", "CalibrationResult", "calibrate", "scale_limits"]
