"""Run-level answers: the training run as a whole, from repeated plans.

Owns: the time and cost to train on a token budget (one plan or one evaluation, times the
number of steps), the Pareto frontier of GPU count against step time and GPU-hours over the
cluster sizes a request allows (one search per size), and the sensitivity of the plan to
network bandwidth, HBM capacity and kernel efficiency (one search per changed cluster, plus
the baseline layout scored there). The searches split the request's `solver.time_limit_s`
equally. Must not: search itself (it calls a planner, `solver.api.plan` by default, and
`evaluate`) or do I/O.

Formulas: steps = ceil(tokens / (global_batch x sequence)); time = steps x step time;
GPU-hours = GPUs x time / 3600; cost = GPU-hours x price; the run with checkpoints and
failures from `models.labs.reliability` (Young 1974, Daly 2006). Deterministic model outputs, not
measurements.
"""

import math
import time
from collections.abc import Callable

from api_schemas.dtypes import DType
from api_schemas.plan import Explanation, PlanResponse, PlanStatus
from api_schemas.requests import ClusterInput, EvaluateRequest, PlanRequest
from api_schemas.run_level import (
    FrontierPoint,
    FrontierRequest,
    FrontierResponse,
    IntervalGoodput,
    ReliabilityEstimate,
    RunEstimateRequest,
    RunEstimateResponse,
    SensitivityFactor,
    SensitivityPoint,
    SensitivityRequest,
    SensitivityResponse,
)
from models.catalog.resolve import resolve_cluster, resolve_model
from models.errors import InfeasibleError
from models.labs.reliability import CheckpointPolicy, run_reliability
from solver.api import evaluate, plan

PlanFn = Callable[[PlanRequest], PlanResponse]
"""A search: `solver.api.plan` unless the caller supplies another (the service its own)."""

_RUN_FIELDS = {"token_budget", "reliability", "num_nodes_options", "deltas", "factors"}


def _plan_request(request: PlanRequest, *, time_limit_s: float | None = None,
                  cluster: ClusterInput | None = None) -> PlanRequest:
    """The plain plan request inside a run-level request, with a share of the time limit."""
    fields = request.model_dump(exclude=_RUN_FIELDS & set(type(request).model_fields))
    base = PlanRequest.model_validate(fields)
    updates: dict[str, object] = {}
    if time_limit_s is not None:
        updates["solver"] = base.solver.model_copy(update={"time_limit_s": time_limit_s})
    if cluster is not None:
        updates["cluster"] = cluster
    return base.model_copy(update=updates) if updates else base


def estimate_run(request: RunEstimateRequest, *, planner: PlanFn = plan) -> RunEstimateResponse:
    """Time and cost to train on `token_budget` tokens with the best plan (or the given
    `parallel` configuration, scored as is).

    Raises:
        InfeasibleError: no plan exists, or the given configuration does not fit.
    """
    base = _plan_request(request)
    if request.parallel is not None:
        answer = evaluate(EvaluateRequest(model=base.model, cluster=base.cluster,
                                          training=base.training, parallel=request.parallel))
    else:
        answer = planner(base)
    if answer.status == PlanStatus.INFEASIBLE or answer.time is None:
        raise InfeasibleError(
            "no plan to estimate the run with: " + answer.explanation.summary,
            diagnostics={"relaxations": list(answer.explanation.relaxations)})
    tokens_per_step = request.training.global_batch_size * request.training.sequence_length
    num_steps = math.ceil(request.token_budget / tokens_per_step)
    train_time_s = num_steps * answer.time.step_time_s
    gpu_hours = answer.world_size * train_time_s / 3600.0
    price = request.constraints.gpu_hour_price
    return RunEstimateResponse(
        status=answer.status, token_budget=request.token_budget,
        tokens_per_step=tokens_per_step, num_steps=num_steps,
        step_time_s=answer.time.step_time_s, train_time_s=train_time_s,
        train_days=train_time_s / 86400.0, world_size=answer.world_size, gpu_hours=gpu_hours,
        gpu_hour_price=price, cost=None if price is None else gpu_hours * price,
        reliability=_reliability(request, answer.world_size, train_time_s), plan=answer,
        **_run_range(answer, num_steps, price))


def _run_range(answer: PlanResponse, num_steps: int,
               price: float | None) -> dict[str, float | None]:
    """The run's days, GPU-hours and cost at the two ends of the plan's predicted step-time
    range (every field None when the plan has no range)."""
    band = answer.predicted_range
    if band is None or band.step_time_s_low is None or band.step_time_s_high is None:
        return {}
    out: dict[str, float | None] = {}
    for end, step_s in (("low", band.step_time_s_low), ("high", band.step_time_s_high)):
        seconds = num_steps * step_s
        hours = answer.world_size * seconds / 3600.0
        out[f"train_days_{end}"] = seconds / 86400.0
        out[f"gpu_hours_{end}"] = hours
        out[f"cost_{end}"] = None if price is None else hours * price
    return out


def _reliability(request: RunEstimateRequest, world_size: int,
                 train_time_s: float) -> ReliabilityEstimate:
    """The run's checkpoints and failures (`models.labs.reliability`)."""
    spec = resolve_model(request.model).spec
    cluster = resolve_cluster(request.cluster)
    settings = request.reliability
    run = run_reliability(
        spec, request.training, world_size=world_size, gpus_per_node=cluster.gpus_per_node,
        solve_s=train_time_s, policy=CheckpointPolicy(
            failures_per_gpu_hour=settings.failures_per_gpu_hour,
            storage_bandwidth_bytes_per_s=settings.storage_bandwidth_bytes_per_s,
            node_storage_bandwidth_bytes_per_s=settings.node_storage_bandwidth_bytes_per_s,
            host_link_bytes_per_s=cluster.pcie_bandwidth_bytes_per_s,
            async_save=settings.async_save, restart_s=settings.restart_s,
            interval_s=settings.checkpoint_interval_s))
    gpu_hours = world_size * run.wall_time_s / 3600.0
    price = request.constraints.gpu_hour_price
    return ReliabilityEstimate(
        checkpoint_bytes=run.checkpoint.total_bytes,
        checkpoint_bytes_per_rank=run.write.bytes_per_rank,
        checkpoint_write_s=run.write.write_s, checkpoint_blocking_s=run.write.blocking_s,
        job_mtbf_s=run.mtbf_s, young_interval_s=run.young_interval_s,
        daly_interval_s=run.daly_interval_s, checkpoint_interval_s=run.interval_s,
        expected_failures=run.expected_failures, wall_time_s=run.wall_time_s,
        wall_days=run.wall_time_s / 86400.0, goodput=run.goodput, gpu_hours=gpu_hours,
        cost=None if price is None else gpu_hours * price,
        goodput_by_interval=[IntervalGoodput(interval_s=interval, goodput=goodput)
                             for interval, goodput in run.goodput_curve()])


def _share(request: PlanRequest, searches: int) -> float:
    """Each search's equal share of the request's time limit."""
    return request.solver.time_limit_s / searches


def _search(planner: PlanFn, request: PlanRequest) -> PlanResponse:
    """One search of a sweep; a proven infeasibility is an answer, not an error."""
    try:
        return planner(request)
    except InfeasibleError as error:
        return PlanResponse(status=PlanStatus.INFEASIBLE,
                            explanation=Explanation(summary=error.detail))


def frontier(request: FrontierRequest, *, planner: PlanFn = plan) -> FrontierResponse:
    """The best plan on each allowed cluster size and which of them are Pareto-optimal in
    (GPUs, step time, GPU-hours per step)."""
    started = time.perf_counter()
    sizes = list(dict.fromkeys(request.num_nodes_options))
    share = _share(request, len(sizes))
    points = [_frontier_point(request, num_nodes, share, planner) for num_nodes in sizes]
    marked = mark_pareto(points)
    return FrontierResponse(points=marked,
                            pareto_num_gpus=[p.num_gpus for p in marked if p.pareto],
                            wall_time_s=time.perf_counter() - started)


def _frontier_point(request: FrontierRequest, num_nodes: int, share: float,
                    planner: PlanFn) -> FrontierPoint:
    cluster = request.cluster.model_copy(update={"num_nodes": num_nodes})
    answer = _search(planner, _plan_request(request, time_limit_s=share, cluster=cluster))
    return frontier_point(answer, num_nodes=num_nodes,
                          num_gpus=resolve_cluster(cluster).world_size)


def frontier_point(answer: PlanResponse, *, num_nodes: int, num_gpus: int) -> FrontierPoint:
    """The frontier's point of a plan answer on `num_nodes` nodes (`num_gpus` GPUs): its
    status and summary, and where it has a step time, its plan, throughput, GPU-hours per
    step, cost and predicted range."""
    if answer.status == PlanStatus.INFEASIBLE or answer.time is None:
        return FrontierPoint(num_nodes=num_nodes, num_gpus=num_gpus, status=answer.status,
                             summary=answer.explanation.summary)
    step = answer.time.step_time_s
    return FrontierPoint(
        num_nodes=num_nodes, num_gpus=num_gpus, status=answer.status,
        world_size=answer.world_size, parallel=answer.parallel, step_time_s=step,
        tokens_per_s=answer.throughput.tokens_per_s if answer.throughput else None,
        gpu_hours_per_step=answer.world_size * step / 3600.0,
        cost_per_token=answer.cost.cost_per_token if answer.cost else None,
        predicted_range=answer.predicted_range, summary=answer.explanation.summary)


def mark_pareto(points: list[FrontierPoint]) -> list[FrontierPoint]:
    """Flag the points no other point dominates in (world size, step time, GPU-hours per
    step): at most as large in all three and smaller in one. Points without a plan are
    never on the frontier."""
    def key(p: FrontierPoint) -> tuple[float, float, float] | None:
        if p.step_time_s is None or p.gpu_hours_per_step is None:
            return None
        return (float(p.world_size), p.step_time_s, p.gpu_hours_per_step)

    keys = [key(p) for p in points]
    marked = []
    for point, own in zip(points, keys, strict=True):
        dominated = own is None or any(
            other is not None and other != own
            and all(o <= m for o, m in zip(other, own, strict=True))
            for other in keys)
        marked.append(point.model_copy(update={"pareto": not dominated}))
    return marked


def changed_cluster(cluster: ClusterInput, factor: SensitivityFactor,
                    delta: float) -> ClusterInput:
    """`cluster` with one factor scaled by (1 + delta), as explicit overrides of the
    resolved values (so presets and earlier overrides are both honoured)."""
    resolved = resolve_cluster(cluster)
    scale = 1.0 + delta
    if factor == SensitivityFactor.NETWORK_BANDWIDTH:
        update: dict[str, object] = {
            "intra_node_bandwidth_bytes_per_s": resolved.intra_node.bandwidth_bytes_per_s * scale,
            "inter_node_bandwidth_bytes_per_s": resolved.inter_node.bandwidth_bytes_per_s * scale}
    elif factor == SensitivityFactor.HBM_CAPACITY:
        update = {"gpu_memory_bytes": int(resolved.gpu.memory_bytes * scale)}
    else:
        peaks: dict[DType, float] = {dtype: value * scale for dtype, value
                                     in resolved.gpu.dense_peak_flop_per_s.items() if value}
        update = {"peak_flop_per_s": peaks}
    return cluster.model_copy(update=update)


SENSITIVITY_NOTES = (
    "network_bandwidth scales the intra- and inter-node bandwidth together",
    "hbm_capacity scales the GPU memory before the headroom is taken",
    ("kernel_efficiency scales the achieved FLOP/s of every dtype (as a scaled peak), so "
     "MFU at those points is relative to the scaled peak"),
)


def sensitivity(request: SensitivityRequest, *, planner: PlanFn = plan) -> SensitivityResponse:
    """The plan on the cluster as given, then with each factor changed by each delta: the
    winner at every point and how the baseline layout fares there."""
    started = time.perf_counter()
    share = _share(request, 1 + len(request.factors) * len(request.deltas))
    base_answer = _search(planner, _plan_request(request, time_limit_s=share))
    baseline = _sensitivity_point(None, 0.0, base_answer, base_answer, base_answer)
    points = []
    for factor in request.factors:
        for delta in request.deltas:
            cluster = changed_cluster(request.cluster, factor, delta)
            answer = _search(planner, _plan_request(request, time_limit_s=share,
                                                    cluster=cluster))
            same = answer.parallel is not None and answer.parallel == base_answer.parallel
            scored = answer if same else None
            if scored is None and base_answer.parallel is not None:
                # The winner moved: score the baseline layout on the changed cluster.
                scored = evaluate(EvaluateRequest(
                    model=request.model, cluster=cluster, training=request.training,
                    parallel=base_answer.parallel))
            points.append(_sensitivity_point(factor, delta, answer, base_answer, scored))
    return SensitivityResponse(baseline=baseline, points=points,
                               wall_time_s=time.perf_counter() - started,
                               notes=list(SENSITIVITY_NOTES))


def _sensitivity_point(factor: SensitivityFactor | None, delta: float, answer: PlanResponse,
                       base: PlanResponse, scored: PlanResponse | None) -> SensitivityPoint:
    step = answer.time.step_time_s if answer.time is not None else None
    base_step = base.time.step_time_s if base.time is not None else None
    fits = scored is not None and scored.memory is not None and scored.memory.fits
    change = None if step is None or base_step is None else step / base_step - 1.0
    return SensitivityPoint(
        factor=factor, delta=delta, status=answer.status, parallel=answer.parallel,
        step_time_s=step,
        tokens_per_s=answer.throughput.tokens_per_s if answer.throughput else None,
        predicted_range=answer.predicted_range, plan_changed=answer.parallel != base.parallel,
        baseline_step_time_s=(scored.time.step_time_s if fits and scored is not None
                              and scored.time is not None else None),
        baseline_fits=None if scored is None else fits,
        step_time_change_frac=change)


__all__ = [
    "SENSITIVITY_NOTES",
    "PlanFn",
    "changed_cluster",
    "estimate_run",
    "frontier",
    "frontier_point",
    "mark_pareto",
    "sensitivity",
]
