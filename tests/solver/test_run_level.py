"""Run-level answers: time and cost to train, the GPU frontier, and sensitivity."""

import math
from typing import Any

import pytest

from api_schemas.plan import PlanStatus
from api_schemas.requests import ClusterInput, EvaluateRequest, PlanRequest
from api_schemas.run_level import (
    FrontierPoint,
    FrontierRequest,
    RunEstimateRequest,
    SensitivityFactor,
    SensitivityRequest,
)
from models.catalog.resolve import resolve_cluster
from models.errors import InfeasibleError
from solver import evaluate, plan
from solver.run_level import changed_cluster, estimate_run, frontier, mark_pareto, sensitivity

SMALL: dict[str, Any] = {
    "model": {"preset": "llama-3.1-8b"},
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1},
    "training": {"global_batch_size": 64, "sequence_length": 4096},
    "solver": {"time_limit_s": 60, "num_workers": 1},
}
"""Each search proves its answer in well under a second on an idle host; the limit (split
between a request's searches) is generous so that a loaded host does not cut one short
and change the answer."""


def test_run_estimate_multiplies_the_plan_out() -> None:
    request = RunEstimateRequest.model_validate(
        {**SMALL, "token_budget": 10**12, "constraints": {"gpu_hour_price": 2.5}})
    run = estimate_run(request)
    assert run.tokens_per_step == 64 * 4096
    assert run.num_steps == math.ceil(10**12 / (64 * 4096))
    assert run.plan.time is not None and run.step_time_s == run.plan.time.step_time_s
    assert run.train_time_s == pytest.approx(run.num_steps * run.step_time_s)
    assert run.train_days == pytest.approx(run.train_time_s / 86400)
    assert run.gpu_hours == pytest.approx(run.world_size * run.train_time_s / 3600)
    assert run.cost == pytest.approx(run.gpu_hours * 2.5)
    assert run.plan.cost is not None
    assert run.plan.cost.cost_per_token == pytest.approx(run.cost / run.num_steps
                                                         / run.tokens_per_step, rel=1e-9)


def test_run_estimate_counts_checkpoints_and_failures() -> None:
    parallel = {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1}
    base = {**SMALL, "token_budget": 10**12, "parallel": parallel,
            "constraints": {"gpu_hour_price": 2.0}}
    run = estimate_run(RunEstimateRequest.model_validate(base))
    rel = run.reliability
    assert rel.checkpoint_interval_s == rel.daly_interval_s > 0
    assert rel.wall_time_s > run.train_time_s and 0 < rel.goodput < 1
    assert rel.goodput == pytest.approx(run.train_time_s / rel.wall_time_s)
    assert rel.cost == pytest.approx(rel.gpu_hours * 2.0) and rel.cost > (run.cost or 0)
    assert rel.checkpoint_bytes_per_rank == math.ceil(rel.checkpoint_bytes / run.world_size)
    hourly = estimate_run(RunEstimateRequest.model_validate(
        {**base, "reliability": {"checkpoint_interval_s": 3600, "async_save": True}}))
    assert hourly.reliability.checkpoint_interval_s == 3600
    assert hourly.reliability.checkpoint_blocking_s < rel.checkpoint_blocking_s
    flaky = estimate_run(RunEstimateRequest.model_validate(
        {**base, "reliability": {"failures_per_gpu_hour": 1e-3}}))
    assert flaky.reliability.goodput < rel.goodput
    assert flaky.reliability.daly_interval_s < rel.daly_interval_s


def test_run_estimate_scores_a_given_configuration() -> None:
    parallel = {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1}
    request = RunEstimateRequest.model_validate(
        {**SMALL, "token_budget": 10**9, "parallel": parallel})
    run = estimate_run(request)
    scored = evaluate(EvaluateRequest.model_validate({**{k: SMALL[k] for k in (
        "model", "cluster", "training")}, "parallel": parallel}))
    assert scored.time is not None and run.step_time_s == scored.time.step_time_s
    assert run.plan.parallel is not None and run.plan.parallel.tp == 2 and run.cost is None


def test_run_estimate_without_a_plan_is_infeasible() -> None:
    request = RunEstimateRequest.model_validate(
        {**SMALL, "model": {"preset": "llama-3.1-405b"}, "token_budget": 10**12})
    with pytest.raises(InfeasibleError):
        estimate_run(request)


def _point(gpus: int, step: float | None) -> FrontierPoint:
    return FrontierPoint(num_nodes=gpus // 8, num_gpus=gpus, world_size=gpus,
                         status=PlanStatus.OPTIMAL if step else PlanStatus.INFEASIBLE,
                         step_time_s=step,
                         gpu_hours_per_step=gpus * step / 3600 if step else None)


def test_pareto_drops_dominated_and_planless_points() -> None:
    points = [_point(8, 4.0), _point(16, 1.9), _point(32, 1.9), _point(64, None)]
    marked = mark_pareto(points)
    # 32 GPUs: no faster than 16 and costlier: dominated. 8 GPUs: slower but cheaper: kept.
    assert [p.pareto for p in marked] == [True, True, False, False]


def test_frontier_plans_every_allowed_size() -> None:
    result = frontier(FrontierRequest.model_validate({**SMALL, "num_nodes_options": [1, 2]}))
    assert [p.num_gpus for p in result.points] == [8, 16]
    assert all(p.status != PlanStatus.INFEASIBLE for p in result.points)
    assert result.pareto_num_gpus == [p.num_gpus for p in mark_pareto(result.points)
                                      if p.pareto]
    first, second = result.points
    assert first.step_time_s is not None and second.step_time_s is not None
    assert second.step_time_s < first.step_time_s


def test_each_frontier_point_is_the_plan_of_its_size_alone() -> None:
    """A frontier's point on each size carries what planning that size alone answers (with
    the same share of the limit): status, layout, step time, throughput and summary, also
    for the sizes without a plan (1 and 2 nodes cannot hold Llama 3.1 70B) and on 3 nodes
    (a pipeline of 3 stages)."""
    sizes = [1, 2, 3]
    request = {**SMALL, "model": {"preset": "llama-3.1-70b"}}
    result = frontier(FrontierRequest.model_validate({**request, "num_nodes_options": sizes}))
    share = SMALL["solver"]["time_limit_s"] / len(sizes)
    for point, num_nodes in zip(result.points, sizes, strict=True):
        alone = plan(PlanRequest.model_validate({
            **request, "cluster": {**request["cluster"], "num_nodes": num_nodes},
            "solver": {**request["solver"], "time_limit_s": share}}))
        assert point.num_nodes == num_nodes
        assert alone.status != PlanStatus.UNKNOWN
        assert point.status == alone.status
        assert point.summary == alone.explanation.summary
        assert point.parallel == alone.parallel
        if alone.time is None:
            assert point.step_time_s is None
            continue
        assert point.world_size == alone.world_size
        assert point.step_time_s == alone.time.step_time_s
        assert alone.throughput is not None
        assert point.tokens_per_s == alone.throughput.tokens_per_s
        assert point.predicted_range == alone.predicted_range


@pytest.mark.parametrize("factor", list(SensitivityFactor))
def test_changed_cluster_scales_one_factor(factor: SensitivityFactor) -> None:
    cluster = ClusterInput(gpu="h100-sxm5-80gb", num_nodes=2)
    base, moved = resolve_cluster(cluster), resolve_cluster(changed_cluster(cluster, factor,
                                                                            -0.2))
    pairs = {
        SensitivityFactor.NETWORK_BANDWIDTH: (base.inter_node.bandwidth_bytes_per_s,
                                              moved.inter_node.bandwidth_bytes_per_s),
        SensitivityFactor.HBM_CAPACITY: (base.gpu.memory_bytes, moved.gpu.memory_bytes),
        SensitivityFactor.KERNEL_EFFICIENCY: (base.gpu.dense_peak_flop_per_s["bf16"],
                                              moved.gpu.dense_peak_flop_per_s["bf16"]),
    }
    for kind, (before, after) in pairs.items():
        assert after == pytest.approx(before * (0.8 if kind == factor else 1.0), rel=1e-6)


def test_less_hbm_changes_the_winner_and_says_the_baseline_no_longer_fits() -> None:
    request = SensitivityRequest.model_validate(
        {**SMALL, "factors": ["hbm_capacity", "kernel_efficiency"], "deltas": [-0.3]})
    result = sensitivity(request)
    assert result.baseline.factor is None and result.baseline.delta == 0.0
    hbm, kernels = result.points
    assert hbm.baseline_fits is False and hbm.plan_changed and hbm.parallel is not None
    assert kernels.baseline_fits is True and kernels.step_time_change_frac is not None
    assert kernels.step_time_change_frac > 0.0
    assert len(result.notes) == 3


def test_sensitivity_rejects_a_zero_delta() -> None:
    with pytest.raises(ValueError, match="deltas"):
        SensitivityRequest.model_validate({**SMALL, "deltas": [0.0]})
