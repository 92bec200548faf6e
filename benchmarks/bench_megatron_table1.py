"""Megatron-LM 2021 Table 1: predicted TFLOP/s per GPU of each published configuration next
to the printed value, and the planner's own plan (a benchmark, not a test).

Run: .venv/bin/python benchmarks/bench_megatron_table1.py [--time-limit 10]

Calibration uses three rows (marked); the median and maximum relative error are printed for
the seven others. TFLOP/s of the published configuration are hardware FLOPs (recomputation
counted) with the full attention matrix, Megatron-LM 2021 Eq. 3, the convention the table
prints; the planner's plan ("plan TF/s") is given in model FLOPs with the full attention
matrix (`tflops_per_gpu_full_attention`), what it delivers to training. The unprinted
micro-batch is the best predicted of 1, 2, 4, 8 that fits.
"""

import argparse
import statistics

from api_schemas import ClusterInput, ModelPreset, PlanRequest, SolverLimits
from models.evidence.published import published_runs
from solver import plan
from solver.explain import describe_parallel
from solver.published import score_published_run

CALIBRATION = ("megatron2021-gpt-1.7b", "megatron2021-gpt-145.6b", "megatron2021-gpt-1008b")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--time-limit", type=float, default=10.0)
    args = parser.parse_args()
    errors = []
    print(f"{'row':26s} {'role':11s} {'printed':>8s} {'predicted':>9s} {'error':>7s} "
          f"{'plan TF/s':>9s} {'plan s':>7s} {'status':>8s}  planner's plan")
    for run in (r for r in published_runs() if r.id.startswith("megatron2021")):
        est = score_published_run(run)
        assert est is not None and run.printed_tflops_per_gpu is not None
        predicted = est.hardware_tflops_per_gpu_full_attention
        error = predicted / run.printed_tflops_per_gpu - 1
        role = "calibration" if run.id in CALIBRATION else "held out"
        if role == "held out":
            errors.append(abs(error))
        response = plan(PlanRequest(
            model=ModelPreset(preset=run.model_preset),
            cluster=ClusterInput(gpu=run.gpu, num_nodes=run.num_nodes), training=run.training,
            solver=SolverLimits(time_limit_s=args.time_limit, top_k=0)))
        assert response.throughput is not None and response.parallel is not None
        print(f"{run.id:26s} {role:11s} {run.printed_tflops_per_gpu:8.0f} {predicted:9.1f} "
              f"{100 * error:+6.1f}% {response.throughput.tflops_per_gpu_full_attention or 0:9.1f} "
              f"{response.solver.wall_time_s if response.solver else 0:7.2f} "
              f"{response.status.value:>8s}  {describe_parallel(response.parallel)}")
    print(f"\nheld-out rows: n={len(errors)}, "
          f"median |error| {100 * statistics.median(errors):.1f}%, "
          f"max |error| {100 * max(errors):.1f}%")


if __name__ == "__main__":
    main()
