"""The joint fit of the MoE layer's host issue time on tabulated step times: exact tables
fitted back, and fits that leave the physical limits (above a measured step over its MoE
layer forwards, or below zero while the runs are host-bound) refused with the reason."""

from collections.abc import Sequence

import pytest

from api_schemas.requests import EvaluateRequest
from models.catalog.resolve import resolve_cluster, resolve_model
from models.core.compute import ComputeContext
from models.core.moe.host_issue import (
    MOE_HOST_ISSUE_S,
    MOE_HOST_LAUNCH_S,
    moe_expert_launches,
    moe_host_issue_s,
)
from models.evidence.calibration import Fit, RunCurve, fit_overhead
from models.evidence.calibration_moe import (
    ISSUE_TOLERANCE_S,
    RunSurface,
    fit_with_issue,
    host_bound_runs,
    issue_grid,
    issue_limit,
    issue_problems,
)

SCALES = (0.5, 1.0, 1.5)


def surface(*, gemm_s: float, rest_s: float, forwards: int, gpu_s: float, measured_s: float,
            limit: float) -> RunSurface:
    """A run whose step is gemm_s / s + rest_s + forwards x max(h, gpu_s): `forwards` MoE
    layer forwards, each the longer of the host time h and its GPU time."""
    issues = issue_grid(limit)
    rows = tuple(RunCurve(measured_s=measured_s, scales=SCALES, model_s=tuple(
        gemm_s / s + rest_s + forwards * max(h, gpu_s) for s in SCALES)) for h in issues)
    return RunSurface(measured_s=measured_s, issues=issues, rows=rows, moe_forwards=forwards)


def fixed_scale(curves: Sequence[RunCurve]) -> Fit:
    """The overhead alone, the GEMM scale held at 1."""
    return fit_overhead(list(curves), scale=1.0, scale_se=0.0)


def runs(true_issue: float, limit: float) -> list[RunSurface]:
    specs = ((1.0, 0.5, 96, 0.004), (2.0, 0.2, 48, 0.006), (0.5, 1.0, 192, 0.003),
             (3.0, 0.1, 24, 0.008))
    return [surface(gemm_s=g, rest_s=r, forwards=f, gpu_s=gpu, limit=limit,
                    measured_s=g + r + f * max(true_issue, gpu))
            for g, r, f, gpu in specs]


def test_exact_tables_give_the_host_issue_time_back() -> None:
    limit = 0.05
    result = fit_with_issue(runs(0.0115, limit), fit_at=fixed_scale, free_scale=False)
    assert result.issue_s == pytest.approx(0.0115, abs=ISSUE_TOLERANCE_S)
    # h within its search tolerance moves up to 192 MoE forwards; the overhead takes the rest.
    assert result.fit.overhead_s == pytest.approx(0.0, abs=192 * ISSUE_TOLERANCE_S)
    assert result.host_bound_runs == 4


def test_the_limit_is_the_shortest_step_over_its_moe_forwards() -> None:
    surfaces = runs(0.0115, 1.0)
    assert issue_limit(surfaces) == pytest.approx(
        min(s.measured_s / s.moe_forwards for s in surfaces))
    dense = RunSurface(measured_s=1.0, issues=(0.0,), rows=(surfaces[0].rows[0],),
                       moe_forwards=0)
    assert issue_limit([dense]) == float("inf")
    assert dense.issue_slope(1.0, 0.01) == 0.0


def test_a_host_time_above_a_measured_step_over_its_moe_layers_is_refused() -> None:
    # Tables that need more host time than the shortest measured step leaves per MoE
    # layer forward (the measured steps are 20x the model's at the published host time).
    limit = 0.02
    surfaces = [surface(gemm_s=1.0, rest_s=0.5, forwards=f, gpu_s=0.004, limit=limit,
                        measured_s=20 * (1.5 + f * 0.008)) for f in (4, 8, 16, 32)]
    result = fit_with_issue(surfaces, fit_at=fixed_scale, free_scale=False)
    problems = issue_problems(result, surfaces, limit=limit)
    assert len(problems) == 1 and "runs into its upper limit 20 ms" in problems[0]


def test_a_host_time_below_zero_for_host_bound_runs_is_refused() -> None:
    # Each MoE forward's GPU time 1 ms shorter than its per-expert launches alone (so the
    # runs stay host-bound at h = 0), and steps shorter than the model at h = 0: the best
    # value is negative.
    limit = 0.05
    surfaces = [surface(gemm_s=g, rest_s=0.5, forwards=f, gpu_s=-0.001, limit=limit,
                        measured_s=g + 0.5 - f * 0.0009) for g, f in
                ((1.0, 96), (2.0, 48), (0.5, 192), (3.0, 24))]
    result = fit_with_issue(surfaces, fit_at=fixed_scale, free_scale=False)
    assert result.issue_s == pytest.approx(0.0, abs=ISSUE_TOLERANCE_S)
    assert host_bound_runs(surfaces, 1.0, 0.0) == 4
    problems = issue_problems(result, surfaces, limit=limit)
    assert len(problems) == 1 and "negative host time is not physical" in problems[0]


def test_a_calibration_host_time_replaces_the_published_one_and_nothing_else() -> None:
    request = EvaluateRequest.model_validate({
        "model": {"preset": "qwen3-30b-a3b"}, "cluster": {"gpu": "h100-sxm5-80gb",
                                                          "num_nodes": 1},
        "training": {"global_batch_size": 32, "sequence_length": 4096},
        "parallel": {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "micro_batch_size": 1}})
    spec = resolve_model(request.model).spec
    gpu = resolve_cluster(request.cluster).gpu
    ctx = ComputeContext(gpu=gpu, seq_len=4096, micro_batch_size=1, ep=8)
    launches = moe_expert_launches(spec, ctx)
    assert launches == 128 // 8 * 2
    assert moe_host_issue_s(spec, ctx) == pytest.approx(
        MOE_HOST_ISSUE_S + launches * MOE_HOST_LAUNCH_S)
    fitted = ComputeContext(gpu=gpu, seq_len=4096, micro_batch_size=1, ep=8,
                            moe_host_issue_s=0.002)
    assert moe_host_issue_s(spec, fitted) == pytest.approx(0.002 + launches * 3.8e-6)


def test_a_negative_or_huge_host_time_is_refused_in_a_request() -> None:
    from pydantic import ValidationError

    base = {"model": {"preset": "qwen3-30b-a3b"},
            "training": {"global_batch_size": 32, "sequence_length": 4096},
            "parallel": {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "micro_batch_size": 1}}
    for value in (-0.001, 2.0):
        with pytest.raises(ValidationError) as refused:
            EvaluateRequest.model_validate({**base, "cluster": {
                "gpu": "h100-sxm5-80gb", "num_nodes": 1,
                "calibration": {"moe_host_issue_s": value}}})
        assert refused.value.errors()[0]["loc"][-1] == "moe_host_issue_s"
