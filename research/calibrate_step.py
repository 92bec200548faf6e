"""Step-level calibration of the A100 GEMM efficiency on at most three Megatron-LM rows.

Run: .venv/bin/python research/calibrate_step.py

Scans eta_max of the Ampere kernel profile, scores each value on the calibration rows
(mean |log error| of hardware TFLOP/s per GPU), and prints the errors of the chosen value on
every held-out A100 row that prints a throughput: the other Megatron-LM 2021 Table 1 rows,
Korthikanti et al. Table 5, GPT-3 175B and BLOOM 176B (MT-NLG 530B prints no throughput and is
listed as such). The unknown micro-batch size of each row is the best predicted of 1, 2, 4, 8
that fits.
"""

import dataclasses
import math
import statistics

from api_schemas import DType
from models.catalog import kernels
from models.core.step_time import StepEstimate, clear_step_time_cache
from models.evidence.published import PublishedRun, published_runs
from solver.published import score_published_run

CALIBRATION = ("megatron2021-gpt-1.7b", "megatron2021-gpt-145.6b", "megatron2021-gpt-1008b")


def observed_and_predicted(run: PublishedRun, est: StepEstimate) -> tuple[float, float] | None:
    """(printed, predicted) in the run's own convention; None when the run prints neither a
    TFLOP/s figure nor an iteration time (a memory-only preset such as MT-NLG 530B)."""
    if run.printed_tflops_per_gpu is not None:
        predicted = (est.hardware_tflops_per_gpu_full_attention
                     if run.tflops_convention == "hardware"
                     else est.tflops_per_gpu_full_attention)
        return run.printed_tflops_per_gpu, predicted
    if run.printed_iteration_time_s is None:
        return None
    return run.printed_iteration_time_s, est.step_time_s


def set_eta(eta: float) -> None:
    """Replace the Ampere GEMM efficiency (16-bit) in the live profile table."""
    profile = kernels.PROFILES["ampere"]
    fracs = dict(profile.gemm_peak_frac, **{DType.BF16: eta, DType.FP16: eta})
    kernels.PROFILES["ampere"] = dataclasses.replace(profile, gemm_peak_frac=fracs)
    clear_step_time_cache()


def main() -> None:
    runs = [r for r in published_runs() if r.gpu.startswith("a100")]
    calib = [r for r in runs if r.id in CALIBRATION]
    scores = []
    for step in range(56, 91, 2):
        eta = step / 100
        set_eta(eta)
        errs = []
        for run in calib:
            est = score_published_run(run)
            pair = observed_and_predicted(run, est) if est is not None else None
            if pair is not None:
                obs, pred = pair
                errs.append(abs(math.log(pred / obs)))
        scores.append((statistics.mean(errs), eta))
        print(f"eta {eta:.2f}: calibration mean |log err| {statistics.mean(errs):.3f}")
    best_eta = min(scores)[1]
    set_eta(best_eta)
    print(f"\nchosen eta_max (Ampere, 16-bit) = {best_eta:.2f}\n")
    held = []
    for run in runs:
        if run.printed_tflops_per_gpu is None and run.printed_iteration_time_s is None:
            print(f"{run.id:32s} prints no throughput (memory-only preset)")
            continue
        est = score_published_run(run)
        if est is None:
            print(f"{run.id:32s} no fitting micro-batch")
            continue
        pair = observed_and_predicted(run, est)
        assert pair is not None  # runs without a printed figure were skipped above
        obs, pred = pair
        rel = pred / obs - 1
        tag = "calibration" if run.id in CALIBRATION else "held out"
        if run.id not in CALIBRATION:
            held.append(abs(rel))
        unit = "TF/s" if run.printed_tflops_per_gpu is not None else "s/iter"
        print(f"{run.id:32s} {tag:11s} printed {obs:8.2f} predicted {pred:8.2f} {unit:6s} "
              f"error {100 * rel:+6.1f}%")
    print(f"\nheld out: n={len(held)} median |error| {100 * statistics.median(held):.1f}% "
          f"max {100 * max(held):.1f}%")


if __name__ == "__main__":
    main()
