"""Every objective on each benchmark problem: status, wall time and proven gap (a benchmark,
not a test).

Run: .venv/bin/python benchmarks/bench_objectives.py [--time-limit 60] [--only 128]

Objectives: throughput, fewest GPUs (with and without a tokens/s target), cost per token and
least memory, on Llama 3.1 70B with 128 and 512 H100s and on Mixtral 8x7B with 64 H100s. The
throughput target of each problem is half the throughput of its throughput-optimal plan, so
reaching it needs a real fraction of the cluster.
"""

import argparse
import time

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    PlanRequest,
    SolverLimits,
    TrainingSpec,
)
from api_schemas.requests import Objective
from solver import plan
from solver.explain import describe_parallel

PROBLEMS = [
    ("Llama 3.1 70B, 128 H100", "llama-3.1-70b", 16,
     TrainingSpec(global_batch_size=1024, sequence_length=8192)),
    ("Llama 3.1 70B, 512 H100", "llama-3.1-70b", 64,
     TrainingSpec(global_batch_size=2048, sequence_length=8192)),
    ("Mixtral 8x7B, 64 H100", "mixtral-8x7b", 8,
     TrainingSpec(global_batch_size=512, sequence_length=4096)),
]
PRICE = 2.0
"""GPU-hour price for the cost objective."""


def _row(label: str, objective: str, request: PlanRequest) -> float | None:
    started = time.perf_counter()
    response = plan(request)
    wall_s = time.perf_counter() - started
    stats = response.solver
    gap = stats.gap if stats is not None else None
    gap_text = f"{100 * gap:.1f}%" if gap is not None else "-"
    layout = describe_parallel(response.parallel) if response.parallel else "-"
    tokens = response.throughput.tokens_per_s if response.throughput else None
    print(f"{label:26s} {objective:22s} {response.status.value:>10s} {wall_s:7.1f} "
          f"{gap_text:>6s} {response.world_size:5d} "
          f"{(f'{tokens:,.0f}' if tokens else '-'):>10s}  {layout}", flush=True)
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--only", default="", help="run only problems whose label has this")
    args = parser.parse_args()
    limits = SolverLimits(time_limit_s=args.time_limit, top_k=0, num_workers=2)
    print(f"{'problem':26s} {'objective':22s} {'status':>10s} {'wall s':>7s} {'gap':>6s} "
          f"{'GPUs':>5s} {'tokens/s':>10s}  plan")
    for label, model, nodes, training in PROBLEMS:
        if args.only not in label:
            continue
        base = PlanRequest(model=ModelPreset(preset=model),
                           cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=nodes),
                           training=training, solver=limits)
        best = _row(label, "throughput", base)
        _row(label, "min_gpus", base.model_copy(update={"objective": Objective.MIN_GPUS}))
        if best:
            target = round(best / 2)
            _row(label, f"min_gpus >= {target:,} t/s", base.model_copy(update={
                "objective": Objective.MIN_GPUS,
                "constraints": Constraints(target_tokens_per_s=target)}))
        _row(label, "cost_per_token", base.model_copy(update={
            "objective": Objective.COST_PER_TOKEN,
            "constraints": Constraints(gpu_hour_price=PRICE)}))
        _row(label, "min_memory", base.model_copy(update={"objective": Objective.MIN_MEMORY}))


if __name__ == "__main__":
    main()
