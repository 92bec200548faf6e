"""Cluster calibration (`POST /v1/calibration/runs`) checked on runs made by the cost model.

Runs: seven Llama 3.1 8B / 70B configurations on H100 nodes whose step time is generated
by the cost model with known constants (GEMM efficiency x 0.85, 0.30 s per step) times
log-normal noise (2%). The fit (`solver.calibration.calibrate`) must give the constants
back within their stated standard errors; the table shows the uncalibrated model, the fit
and each run held out. Then 200 draws of the pure fit on eight tabulated runs check that
the stated standard errors cover the truth as often as Student's t says.

Then the published H100 SXM5 80GB rows of research/data/published_runs.json that
`research/validate_published.py` predicts: every other row (by id) is a measured run of one
cluster profile, the others are held out, and their error is printed before and after the
profile. Measured step times are the rows' printed figures turned into seconds per step with
the predicted configuration's tokens (tokens/s) or model FLOPs (TFLOP/s) per step.

Then the MoE layer's host issue time: three dense and four MoE configurations (Qwen3-30B-A3B,
Mixtral 8x7B) generated with GEMM efficiency x 0.85, 0.30 s per step and a 12 ms host issue
time per MoE layer forward (the published value is 7.9 ms), noise 2%; the joint fit must
give the host time back within its standard error, and 40 draws check how often it does.

Usage: python research/calibrate_cluster.py  (prints the figures of research/CALIBRATION.md
Sec. 5)
"""

import math
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from api_schemas.calibration import CalibrationFit, CalibrationRunsRequest
from api_schemas.hardware import KernelCalibration
from api_schemas.requests import EvaluateRequest
from models.catalog.kernels import PROFILES
from models.catalog.resolve import resolve_cluster, resolve_model
from models.core.step_time import estimate_step
from models.evidence.calibration import RunCurve, fit_constants, leave_one_out, physical_problems
from solver.calibration import GRID_POINTS, calibrate, scale_limits

sys.path.insert(0, str(Path(__file__).parent))
import validate_published  # noqa: E402 - the research folder is not a package

GPU = "h100-sxm5-80gb"
CONFIGS: tuple[tuple[str, int, int, int, dict[str, int]], ...] = (
    ("llama-3.1-8b", 1, 16, 4096, {"tp": 2, "pp": 1, "dp": 4}),
    ("llama-3.1-8b", 1, 64, 4096, {"tp": 2, "pp": 1, "dp": 4}),
    ("llama-3.1-8b", 1, 8, 2048, {"tp": 1, "pp": 1, "dp": 8}),
    ("llama-3.1-8b", 2, 128, 8192, {"tp": 4, "pp": 1, "dp": 4}),
    ("llama-3.1-70b", 2, 32, 4096, {"tp": 8, "pp": 2, "dp": 1}),
    ("llama-3.1-70b", 4, 64, 4096, {"tp": 8, "pp": 4, "dp": 1}),
    ("llama-3.1-8b", 1, 256, 4096, {"tp": 2, "pp": 1, "dp": 4}),
)


def runs_made_with(calibration: KernelCalibration, sigma: float, seed: int,
                   configs: tuple[tuple[str, int, int, int, dict[str, int]], ...] = CONFIGS
                   ) -> list[dict[str, Any]]:
    """Runs timed by the cost model with every constant of `calibration`, times log-normal
    noise of `sigma`."""
    rng = random.Random(seed)
    runs = []
    for model, nodes, batch, seq, degrees in configs:
        request = EvaluateRequest.model_validate({
            "model": {"preset": model}, "cluster": {"gpu": GPU, "num_nodes": nodes},
            "training": {"global_batch_size": batch, "sequence_length": seq},
            "parallel": {**degrees, "micro_batch_size": 1, "schedule": "1f1b",
                         "zero_stage": 1, "sequence_parallel": degrees["tp"] > 1}})
        cluster = resolve_cluster(request.cluster).model_copy(update={"calibration": calibration})
        true_s = estimate_step(resolve_model(request.model).spec, request.training,
                               request.parallel, cluster).step_time_s
        runs.append({"model": {"preset": model}, "num_nodes": nodes,
                     "training": request.training.model_dump(mode="json"),
                     "parallel": request.parallel.model_dump(mode="json"),
                     "step_time_s": true_s * rng.lognormvariate(0.0, sigma),
                     "label": f"{model} {nodes}n gbs {batch} s {seq}"})
    return runs


def generated_runs(scale: float, overhead_s: float, sigma: float, seed: int,
                   configs: tuple[tuple[str, int, int, int, dict[str, int]], ...] = CONFIGS
                   ) -> list[dict[str, Any]]:
    """`configs` timed with a known GEMM scale and per-step overhead."""
    return runs_made_with(KernelCalibration(gemm_efficiency_scale=scale,
                                            step_overhead_s=overhead_s), sigma, seed, configs)


def coverage(draws: int = 200) -> dict[str, float]:
    """Share of draws whose truth lies within 1 and 2 stated standard errors."""
    limits = (0.15, 1.5)
    scales = tuple(limits[0] * (limits[1] / limits[0]) ** (k / 16) for k in range(17))
    shapes = [(0.1, 0.5), (0.3, 2.0), (1.0, 6.0), (0.05, 0.2), (2.0, 20.0), (0.5, 1.0),
              (0.2, 9.0), (1.5, 3.0)]
    hits = {"s1": 0, "s2": 0, "o1": 0, "o2": 0}
    for seed in range(draws):
        rng = random.Random(seed)
        curves = [RunCurve(measured_s=(f + g / 0.9 + 0.4) * math.exp(rng.gauss(0.0, 0.03)),
                           scales=scales, model_s=tuple(f + g / s for s in scales))
                  for f, g in shapes]
        fit = fit_constants(curves, scale_limits=limits)
        zs, zo = abs(fit.scale - 0.9) / fit.scale_se, abs(fit.overhead_s - 0.4) / fit.overhead_se
        hits["s1"] += zs < 1
        hits["s2"] += zs < 2
        hits["o1"] += zo < 1
        hits["o2"] += zo < 2
    return {k: v / draws for k, v in hits.items()}


def published_curves(gpu: str) -> list[tuple[str, RunCurve]]:
    """Each predictable published row on `gpu`: its measured step time and the model's
    step time over the admissible GEMM efficiency scales."""
    lo, hi = scale_limits(PROFILES["hopper"])
    scales = tuple(lo * (hi / lo) ** (k / (GRID_POINTS - 1)) for k in range(GRID_POINTS))
    out = []
    for row in sorted(validate_published.DATA["runs"], key=lambda r: r["id"]):
        if row["hardware"]["gpu"] != gpu:
            continue
        base = validate_published.best_estimate(row)
        if base is None:
            continue
        measured, gpus = row["measured"], row["hardware"]["num_gpus"]
        if measured.get("tokens_per_s_per_gpu"):
            step = base.tokens_per_step / (measured["tokens_per_s_per_gpu"] * gpus)
        elif measured.get("tflops_per_gpu"):
            flop = (base.hardware_flop_full_attention
                    if row["id"].startswith(("megatron2021", "bloom"))
                    else base.model_flop_full_attention)
            step = flop / (measured["tflops_per_gpu"] * 1e12 * gpus)
        elif measured.get("iteration_time_s"):
            step = measured["iteration_time_s"]
        else:
            continue
        times = []
        for scale in scales:
            est = validate_published.best_estimate(
                row, KernelCalibration(gemm_efficiency_scale=scale))
            assert est is not None
            times.append(est.step_time_s)
        out.append((row["id"], RunCurve(measured_s=step, scales=scales, model_s=tuple(times))))
    return out


def published_benchmark(gpu: str = "h100-sxm5-80gb") -> None:
    """Fit a profile on every other published row of `gpu`; error on the others."""
    rows = published_curves(gpu)
    fit_rows, held_rows = rows[0::2], rows[1::2]
    limits = scale_limits(PROFILES["hopper"])
    fit = fit_constants([c for _, c in fit_rows], scale_limits=limits)
    problems = physical_problems(fit, scale_limits=limits, limit_reasons=("floor", "peak"))
    loo = leave_one_out([c for _, c in fit_rows], scale_limits=limits)

    def errors(curves: list[RunCurve], scale: float, overhead: float) -> list[float]:
        return [abs((c.model_at(scale) + overhead) / c.measured_s - 1.0) for c in curves]

    held = [c for _, c in held_rows]
    before, after = errors(held, 1.0, 0.0), errors(held, fit.scale, fit.overhead_s)
    print(f"3. Published {gpu} rows: fitted on {len(fit_rows)}, held out {len(held_rows)}")
    print(f"   scale {fit.scale:.4f} +- {fit.scale_se:.4f}, overhead {fit.overhead_s:.4f} "
          f"+- {fit.overhead_se:.4f} s{' (clamped)' if fit.clamped_overhead else ''}; "
          f"refused: {'; '.join(problems) if problems else 'no'}")
    fit_curves = [c for _, c in fit_rows]
    loo_err = [abs(p / c.measured_s - 1.0) for (_, p), c in zip(loo, fit_curves, strict=True)]
    print(f"   fit rows: uncalibrated mean |err| {statistics.mean(errors(fit_curves, 1, 0)):.3f}, "
          f"leave-one-out {statistics.mean(loo_err):.3f}")
    print(f"   held out: mean |err| {statistics.mean(before):.3f} -> {statistics.mean(after):.3f}, "
          f"median {statistics.median(before):.3f} -> {statistics.median(after):.3f}, "
          f"max {max(before):.3f} -> {max(after):.3f}")


MOE_CONFIGS: tuple[tuple[str, int, int, int, dict[str, int]], ...] = (
    ("llama-3.1-8b", 1, 16, 4096, {"tp": 2, "pp": 1, "dp": 4}),
    ("llama-3.1-8b", 1, 64, 4096, {"tp": 2, "pp": 1, "dp": 4}),
    ("llama-3.1-8b", 2, 128, 8192, {"tp": 4, "pp": 1, "dp": 4}),
    ("qwen3-30b-a3b", 1, 32, 4096, {"tp": 1, "pp": 1, "dp": 8, "ep": 8}),
    ("qwen3-30b-a3b", 2, 128, 2048, {"tp": 1, "pp": 2, "dp": 8, "ep": 8}),
    ("qwen3-30b-a3b", 1, 64, 8192, {"tp": 2, "pp": 1, "dp": 4, "ep": 4}),
    ("mixtral-8x7b", 2, 64, 4096, {"tp": 2, "pp": 2, "dp": 4, "ep": 4}),
)
MOE_TRUTH = KernelCalibration(gemm_efficiency_scale=0.85, step_overhead_s=0.30,
                              moe_host_issue_s=0.012)


def moe_runs(sigma: float, seed: int) -> list[dict[str, Any]]:
    """`MOE_CONFIGS` generated with `MOE_TRUTH`, times log-normal noise."""
    return runs_made_with(MOE_TRUTH, sigma, seed, MOE_CONFIGS)


def _print_relative_errors(fit: CalibrationFit) -> None:
    print(f"   mean |pred/meas - 1|: uncalibrated {fit.uncalibrated_relative_error:.3f}, "
          f"leave-one-out {fit.leave_one_out_relative_error:.3f}, "
          f"in-sample {fit.fitted_relative_error:.3f}")


def moe_benchmark(draws: int = 40) -> None:
    fit = calibrate(CalibrationRunsRequest.model_validate(
        {"profile": "moe", "gpu": GPU, "runs": moe_runs(0.02, 1)})).fit
    h = fit.moe_host_issue_s
    assert h is not None, fit.moe_host_issue_note
    s, o = fit.gemm_efficiency_scale, fit.step_overhead_s
    print("4. MoE host issue time (truth: scale 0.85, overhead 0.30 s, host 12 ms, noise 2%)")
    print(f"   host     {h.value * 1e3:.3f} +- {h.standard_error * 1e3:.3f} ms (leave-one-out "
          f"{h.leave_one_out_min * 1e3:.3f}..{h.leave_one_out_max * 1e3:.3f})")
    print(f"   scale    {s.value:.4f} +- {s.standard_error:.4f}; overhead {o.value:.4f} +- "
          f"{o.standard_error:.4f} s")
    _print_relative_errors(fit)
    within = [0, 0]
    for seed in range(100, 100 + draws):
        got = calibrate(CalibrationRunsRequest.model_validate(
            {"profile": "moe", "gpu": GPU, "runs": moe_runs(0.02, seed)})).fit.moe_host_issue_s
        assert got is not None
        z = abs(got.value - 0.012) / got.standard_error
        within[0] += z <= 1
        within[1] += z <= 2
    print(f"   {draws} draws: host within 1 / 2 SE: {within[0] / draws:.3f} / "
          f"{within[1] / draws:.3f} (t with 4 dof: 0.63 / 0.88)")


def main() -> None:
    request = CalibrationRunsRequest.model_validate(
        {"profile": "synthetic", "gpu": GPU, "runs": generated_runs(0.85, 0.30, 0.02, 1)})
    fit = calibrate(request).fit
    s, o = fit.gemm_efficiency_scale, fit.step_overhead_s
    print("1. Recovery on the cost model (truth: scale 0.85, overhead 0.30 s, noise 2%)")
    print(f"   scale    {s.value:.4f} +- {s.standard_error:.4f} "
          f"(leave-one-out {s.leave_one_out_min:.4f}..{s.leave_one_out_max:.4f})")
    print(f"   overhead {o.value:.4f} +- {o.standard_error:.4f} s "
          f"(leave-one-out {o.leave_one_out_min:.4f}..{o.leave_one_out_max:.4f})")
    _print_relative_errors(fit)
    for run in fit.runs:
        print(f"   {run.label:34s} measured {run.measured_step_time_s:7.3f} "
              f"uncal {run.uncalibrated_step_time_s:7.3f} fit {run.fitted_step_time_s:7.3f} "
              f"held-out {run.leave_one_out_step_time_s:7.3f} bound {run.peak_flop_bound_s:6.3f}")
    cov = coverage()
    print("2. Standard-error coverage, 200 draws of 8 runs (t with 6 dof: 0.64 / 0.91)")
    print(f"   scale within 1 / 2 SE: {cov['s1']:.3f} / {cov['s2']:.3f}; "
          f"overhead: {cov['o1']:.3f} / {cov['o2']:.3f}")
    published_benchmark()
    moe_benchmark()


if __name__ == "__main__":
    main()
