"""Published systems as presets: each one's per-stage memory ledger under its own recipe,
then (with --plan) its layout scored under the cost model against the planner's own plan
on the same cluster and recipe (a benchmark, not a test).

Run: .venv/bin/python benchmarks/bench_published_presets.py [--plan] [--time-limit 10]
"""

import argparse

from api_schemas import ClusterInput, ModelPreset, PlanRequest, SolverLimits
from api_schemas.requests import DEFAULT_MEMORY_HEADROOM_FRAC
from models.catalog.presets import cluster_preset
from models.core.memory import MemoryLedger, memory_ledger
from models.core.step_time import estimate_step
from models.evidence.published import PUBLISHED_SYSTEMS, PublishedRun, run_model
from solver import plan
from solver.explain import describe_parallel
from solver.published import difference_text, score_published_run

GIB = 2**30
KINDS = ("parameters", "gradients", "optimizer", "activations", "other")


def ledger_of(run: PublishedRun) -> MemoryLedger:
    """The run's ledger under the request's default headroom."""
    cluster = cluster_preset(run.gpu, num_nodes=run.num_nodes, gpus_per_node=run.gpus_per_node)
    cluster = cluster.model_copy(update={"memory_headroom_frac": DEFAULT_MEMORY_HEADROOM_FRAC})
    return memory_ledger(run_model(run), run.training, run.parallel, cluster)


def print_ledger(run: PublishedRun) -> None:
    ledger = ledger_of(run)
    verdict = "fits" if ledger.fits else "DOES NOT FIT"
    print(f"== {run.description} ({run.world_size} GPUs): {describe_parallel(run.parallel)}")
    print(f"   peak {ledger.peak_bytes / GIB:.1f} GiB (stage {ledger.binding_stage}) of "
          f"{ledger.capacity_bytes / GIB:.1f} GiB = {ledger.peak_bytes / ledger.capacity_bytes:.2f}"
          f" x cap, host {ledger.host_peak_bytes / GIB:.1f} of "
          f"{ledger.host_capacity_per_gpu_bytes / GIB:.0f} GiB per GPU: {verdict}")
    print("   stage  layers  " + "  ".join(f"{k[:6]:>6}" for k in KINDS) + "   total   host")
    for stage in ledger.stages:
        cells = "  ".join(f"{stage.bytes_of(k) / GIB:6.1f}" for k in KINDS)  # type: ignore[arg-type]
        print(f"   {stage.stage:5d}  {stage.num_layers:6d}  {cells}  {stage.total_bytes / GIB:6.1f}"
              f"  {stage.host_bytes / GIB:5.1f}")
    print(f"   how sure: {run.confidence}")


def compare_with_planner(run: PublishedRun, time_limit_s: float) -> None:
    published = score_published_run(run)
    model = run.model if run.model is not None else ModelPreset(preset=run.model_preset)
    response = plan(PlanRequest(model=model,
                                cluster=ClusterInput(gpu=run.gpu, num_nodes=run.num_nodes),
                                training=run.training,
                                solver=SolverLimits(time_limit_s=time_limit_s, top_k=0)))
    if published is None:
        print("   published layout: does not fit under the cost model")
    else:
        print(f"   published: {published.step_time_s:.2f} s/step, MFU {published.mfu:.1%}")
    if response.parallel is None or response.time is None:
        print(f"   planner: {response.status.value}: {response.explanation.summary}")
        return
    print(f"   planner ({response.status.value}, {response.solver.wall_time_s:.1f} s): "
          f"{describe_parallel(response.parallel)}: {response.time.step_time_s:.2f} s/step")
    if published is not None:
        cluster = cluster_preset(run.gpu, num_nodes=run.num_nodes)
        planned = estimate_step(run_model(run), run.training, response.parallel, cluster)
        print("   difference: " + difference_text(run.parallel, published,
                                                 response.parallel, planned))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", action="store_true", help="also run the planner")
    parser.add_argument("--time-limit", type=float, default=10.0)
    args = parser.parse_args()
    for run in PUBLISHED_SYSTEMS:
        print_ledger(run)
        if args.plan:
            compare_with_planner(run, args.time_limit)


if __name__ == "__main__":
    main()
