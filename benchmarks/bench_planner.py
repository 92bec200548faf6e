"""Planner solve time on published-scale problems (a benchmark, not a test).

Run: .venv/bin/python benchmarks/bench_planner.py [--repeats 3] [--time-limit 10]

For each problem: median, min and max wall time of `solver.plan` over the repeats, the
status, the proven gap, candidates and evaluations, and the chosen plan.
"""

import argparse
import statistics
import time

from api_schemas import ClusterInput, ModelPreset, PlanRequest, SolverLimits, TrainingSpec
from solver import plan
from solver.explain import describe_parallel

PROBLEMS = [
    ("Llama 3.1 405B, 16,384 H100", "llama-3.1-405b", "h100-sxm5-80gb", 2048,
     TrainingSpec(global_batch_size=2048, sequence_length=8192)),
    ("DeepSeek-V3, 2,048 H800", "deepseek-v3", "h800-sxm5-80gb", 256,
     TrainingSpec(global_batch_size=15360, sequence_length=4096, compute_dtype="fp8",
                  optimizer="adamw", optimizer_state_dtype="bf16",
                  moe_keep_expert_outputs=False)),
    ("GPT 1T, 3,072 A100", "gpt-1008b", "a100-sxm4-80gb", 384,
     TrainingSpec(global_batch_size=3072, sequence_length=2048)),
    ("Llama 3.1 70B, 64 H100", "llama-3.1-70b", "h100-sxm5-80gb", 8,
     TrainingSpec(global_batch_size=512, sequence_length=8192)),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=10.0)
    args = parser.parse_args()
    print(f"{'problem':30s} {'median s':>9s} {'min s':>7s} {'max s':>7s} {'status':>9s} "
          f"{'gap':>6s} {'cands':>6s} {'evals':>6s}  plan")
    for label, model, gpu, nodes, training in PROBLEMS:
        request = PlanRequest(model=ModelPreset(preset=model),
                              cluster=ClusterInput(gpu=gpu, num_nodes=nodes), training=training,
                              solver=SolverLimits(time_limit_s=args.time_limit, top_k=3))
        times = []
        response = None
        for _ in range(args.repeats):
            started = time.perf_counter()
            response = plan(request)
            times.append(time.perf_counter() - started)
        assert response is not None and response.solver is not None
        gap = response.solver.gap
        layout = describe_parallel(response.parallel) if response.parallel else "-"
        step = f", {response.time.step_time_s:.2f} s/step, MFU {response.throughput.mfu:.1%}" \
            if response.time and response.throughput else ""
        print(f"{label:30s} {statistics.median(times):9.2f} {min(times):7.2f} {max(times):7.2f} "
              f"{response.status.value:>9s} "
              f"{(f'{100 * gap:.1f}%' if gap is not None else '-'):>6s} "
              f"{response.solver.candidates:6d} {response.solver.evaluated:6d}  {layout}{step}")


if __name__ == "__main__":
    main()
