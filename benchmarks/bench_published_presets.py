"""Published systems as presets, end to end: each published layout scored under the cost
model, the planner's own plan on the same cluster and recipe, and where they differ
(a benchmark, not a test).

Run: .venv/bin/python benchmarks/bench_published_presets.py [--time-limit 10]
"""

import argparse

from api_schemas import ClusterInput, ModelPreset, PlanRequest, SolverLimits
from models.published import published_runs
from solver import plan
from solver.explain import describe_parallel
from solver.published import difference_text, score_published_run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--time-limit", type=float, default=10.0)
    args = parser.parse_args()
    for run in published_runs():
        published = score_published_run(run)
        response = plan(PlanRequest(model=ModelPreset(preset=run.model_preset),
                                    cluster=ClusterInput(gpu=run.gpu, num_nodes=run.num_nodes),
                                    training=run.training,
                                    solver=SolverLimits(time_limit_s=args.time_limit, top_k=0)))
        print(f"== {run.description} ({run.world_size} GPUs)")
        if published is None:
            print("   published layout: does not fit under the cost model")
        else:
            print(f"   published: {describe_parallel(run.parallel)}: "
                  f"{published.step_time_s:.2f} s/step, MFU {published.mfu:.1%}")
        if response.parallel is None or response.time is None:
            print(f"   planner: {response.status.value}: {response.explanation.summary}")
            continue
        print(f"   planner ({response.status.value}, {response.solver.wall_time_s:.1f} s): "
              f"{describe_parallel(response.parallel)}: {response.time.step_time_s:.2f} s/step")
        if published is not None:
            from models.catalog import cluster_preset, model_preset
            from models.step_time import estimate_step

            planned = estimate_step(model_preset(run.model_preset), run.training,
                                    response.parallel,
                                    cluster_preset(run.gpu, num_nodes=run.num_nodes))
            assert planned.step_time_s <= published.step_time_s * (1 + 1e-9), run.id
            print("   difference: " + difference_text(run.parallel, published,
                                                     response.parallel, planned))


if __name__ == "__main__":
    main()
