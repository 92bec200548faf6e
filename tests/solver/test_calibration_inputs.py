"""Calibration from training logs and microbenchmarks on the real cost model: recorded-format
logs become runs of the fit; microbenchmarks generated with known constants set the link,
attention and GEMM constants, and the runs' overhead is then fitted back within its stated
uncertainty; a broken log or microbenchmark names its field."""

from pathlib import Path
from typing import Any

import pytest
from microbenchmark_data import generated_microbenchmarks

from api_schemas.calibration import CalibrationRunsRequest
from api_schemas.hardware import KernelCalibration
from models.errors import InvalidSpecError
from research.calibrate_cluster import GPU, runs_made_with
from solver.calibration import calibrate

LOGS = Path(__file__).resolve().parent / "training_logs"
LOG_FILES = (("megatron_llama3-8b_tp2_dp4.log", "megatron-lm", 1),
             ("megatron_llama3-8b_tp2_dp8_2nodes.log", "megatron-lm", 2),
             ("torchtitan_llama3-8b_fsdp8.log", "torchtitan", 1),
             ("torchtitan_llama3-8b_fsdp16_2nodes.log", "torchtitan", 2))


def logs() -> list[dict[str, Any]]:
    return [{"framework": fw, "text": (LOGS / name).read_text(),
             "model": {"preset": "llama-3.1-8b"}, "num_nodes": nodes}
            for name, fw, nodes in LOG_FILES]


def test_four_recorded_logs_are_a_calibration() -> None:
    result = calibrate(CalibrationRunsRequest.model_validate(
        {"profile": "logs", "gpu": GPU, "logs": logs()}))
    fit = result.fit
    assert fit.num_runs == 4 and len(fit.logs) == 4
    assert [p.framework.value for p in fit.logs] == ["megatron-lm"] * 2 + ["torchtitan"] * 2
    assert [r.measured_step_time_s for r in fit.runs] == [p.step_time_s for p in fit.logs]
    assert fit.runs[0].measured_step_time_s == pytest.approx(7.1054)
    assert fit.runs[0].label == "megatron-lm log 0"
    # The samples' timings (written, not measured) sit within 1% of the uncalibrated H100
    # model: the fit keeps the GEMM level near 1 and predicts each left-out log within 5%.
    assert fit.gemm_efficiency_scale.value == pytest.approx(1.0, abs=0.05)
    assert fit.uncalibrated_relative_error < 0.02
    assert fit.leave_one_out_relative_error < 0.05
    assert fit.microbenchmarks is None


def test_logs_and_runs_count_together_and_a_broken_log_names_its_field() -> None:
    body = {"profile": "mixed", "gpu": GPU, "logs": logs()[:2], "runs": []}
    with pytest.raises(ValueError, match="at least 4 runs"):
        CalibrationRunsRequest.model_validate(body)
    broken = logs()
    broken[3]["num_nodes"] = 3
    with pytest.raises(InvalidSpecError) as refused:
        calibrate(CalibrationRunsRequest.model_validate(
            {"profile": "x", "gpu": GPU, "logs": broken}))
    assert refused.value.field == "logs.3.text"
    assert "16 GPUs" in refused.value.detail and "24 GPUs" in refused.value.detail




def test_microbenchmarks_set_the_constants_and_the_runs_fit_the_overhead_back() -> None:
    bench, truth = generated_microbenchmarks(seed=11, sigma=0.02)
    applied = KernelCalibration(gemm_efficiency_scale=truth["gemm_efficiency_scale"],
                                step_overhead_s=0.25,
                                intra_node_bandwidth_scale=truth["intra_node_bandwidth_scale"],
                                inter_node_bandwidth_scale=truth["inter_node_bandwidth_scale"],
                                attention_efficiency_scale=truth["attention_efficiency_scale"])
    result = calibrate(CalibrationRunsRequest.model_validate({
        "profile": "bench", "gpu": GPU, "runs": runs_made_with(applied, 0.01, seed=5),
        "microbenchmarks": bench.model_dump(mode="json")}))
    fit, constants = result.fit, result.constants
    assert fit.microbenchmarks is not None and fit.microbenchmarks.gemm_sets_level
    scale = fit.gemm_efficiency_scale
    assert abs(scale.value - truth["gemm_efficiency_scale"]) <= 3 * scale.standard_error
    overhead = fit.step_overhead_s
    assert abs(overhead.value - 0.25) <= 3 * overhead.standard_error
    assert 0 < overhead.standard_error < 0.1
    for name in ("intra_node_bandwidth_scale", "inter_node_bandwidth_scale",
                 "attention_efficiency_scale"):
        assert getattr(constants, name) == pytest.approx(truth[name], rel=0.05), name
    assert "microbenchmarks' link, attention" in fit.method
    assert fit.leave_one_out_relative_error < 0.03


def test_an_impossible_microbenchmark_refuses_the_calibration() -> None:
    bench, _ = generated_microbenchmarks(seed=1, sigma=0.0)
    data = bench.model_dump(mode="json")
    data["gemm"][0]["tflops"] = 5000.0
    with pytest.raises(InvalidSpecError) as refused:
        calibrate(CalibrationRunsRequest.model_validate({
            "profile": "bad", "gpu": GPU, "runs": runs_made_with(KernelCalibration(), 0.0, 0)[:4],
            "microbenchmarks": data}))
    assert refused.value.field == "microbenchmarks.gemm.0.tflops"
