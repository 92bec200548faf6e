"""Megatron-LM 2021 Table 1: predicted TFLOP/s per GPU of each published configuration next
to the printed value, and the planner's own plan (a benchmark, not a test).

Run: .venv/bin/python benchmarks/bench_megatron_table1.py [--time-limit 10]

Calibration uses three rows (marked); the median and maximum relative error are printed for
the seven others. TFLOP/s are hardware FLOPs (recomputation counted), Megatron-LM 2021 Eq. 3.
The unprinted micro-batch is the best predicted of 1, 2, 4, 8 that fits.
"""

import argparse
import statistics

from api_schemas import ClusterInput, ModelPreset, PlanRequest, SolverLimits
from models.catalog import cluster_preset, model_preset
from models.errors import InvalidSpecError
from models.memory import memory_ledger
from models.published import PublishedRun, published_runs
from models.step_time import StepEstimate, estimate_step
from solver import plan
from solver.explain import describe_parallel

CALIBRATION = ("megatron2021-gpt-1.7b", "megatron2021-gpt-145.6b", "megatron2021-gpt-1008b")


def published_estimate(run: PublishedRun) -> StepEstimate | None:
    """The published layout's best fitting micro-batch."""
    spec = model_preset(run.model_preset)
    cluster = cluster_preset(run.gpu, num_nodes=run.num_nodes, gpus_per_node=run.gpus_per_node)
    best = None
    for mbs in (1, 2, 4, 8):
        parallel = run.parallel.model_copy(update={"micro_batch_size": mbs})
        try:
            if not memory_ledger(spec, run.training, parallel, cluster).fits:
                continue
            est = estimate_step(spec, run.training, parallel, cluster)
        except InvalidSpecError:
            continue
        if best is None or est.step_time_s < best.step_time_s:
            best = est
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--time-limit", type=float, default=10.0)
    args = parser.parse_args()
    errors = []
    print(f"{'row':26s} {'role':11s} {'printed':>8s} {'predicted':>9s} {'error':>7s} "
          f"{'plan TF/s':>9s} {'plan s':>7s} {'status':>8s}  planner's plan")
    for run in (r for r in published_runs() if r.id.startswith("megatron2021")):
        est = published_estimate(run)
        assert est is not None and run.printed_tflops_per_gpu is not None
        predicted = est.hardware_tflops_per_gpu
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
              f"{100 * error:+6.1f}% {response.throughput.hardware_tflops_per_gpu:9.1f} "
              f"{response.solver.wall_time_s if response.solver else 0:7.2f} "
              f"{response.status.value:>8s}  {describe_parallel(response.parallel)}")
    print(f"\nheld-out rows: n={len(errors)}, median |error| {100 * statistics.median(errors):.1f}%,"
          f" max |error| {100 * max(errors):.1f}%")


if __name__ == "__main__":
    main()
