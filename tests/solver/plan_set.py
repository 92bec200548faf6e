"""The benchmark set of planning requests the round-trip and framework tests share: dense,
MoE, long-context, fewest-GPU and published-preset problems, each small enough to solve in
a few seconds on a CI machine; and the problems of `benchmarks/bench_planner.py`.

`PLAN_SET` maps a readable id to a `PlanRequest`; `solved(id)` plans it once per test run.
`BENCHMARK_REQUESTS` maps each bench_planner label to its request (at `BENCHMARK_LIMITS`);
`benchmark_solved(label)` plans it once per test run. The modules that use them run on one
worker process together (`SHARED_WORK` in tests/conftest.py), so each is solved once.
"""

import functools
import sys
from pathlib import Path

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    PlanRequest,
    PlanResponse,
    SolverLimits,
    TrainingSpec,
)
from api_schemas.requests import Objective
from models.evidence.published import published_run
from solver import plan

LIMITS = SolverLimits(time_limit_s=60, top_k=2, num_workers=1)
"""Each problem's search completes on its own (Kimi K2, the longest, in about 8 s on an idle
2-core host); the limit is generous so that a loaded host does not stop one short, with a
merely feasible plan or none."""


def _request(model: str, gpu: str, nodes: int, training: TrainingSpec, *,
             objective: Objective = Objective.THROUGHPUT, **constraints: object) -> PlanRequest:
    return PlanRequest(model=ModelPreset(preset=model), cluster=ClusterInput(gpu=gpu,
                       num_nodes=nodes), training=training,
                       constraints=Constraints.model_validate(constraints),
                       objective=objective, solver=LIMITS)


def _published(run_id: str, **constraints: object) -> PlanRequest:
    run = published_run(run_id)
    return PlanRequest(model=ModelPreset(preset=run.model_preset),
                       cluster=ClusterInput(gpu=run.gpu, num_nodes=run.num_nodes,
                                            gpus_per_node=run.gpus_per_node),
                       training=run.training, constraints=Constraints.model_validate(constraints),
                       solver=LIMITS)


PLAN_SET: dict[str, PlanRequest] = {
    "dense-8b-1node": _request("llama-3.1-8b", "h100-sxm5-80gb", 1,
                               TrainingSpec(global_batch_size=64, sequence_length=4096)),
    "dense-70b-8nodes": _request("llama-3.1-70b", "h100-sxm5-80gb", 8,
                                 TrainingSpec(global_batch_size=512, sequence_length=8192)),
    "dense-gpt2-1node": _request("gpt2", "a100-sxm4-80gb", 1,
                                 TrainingSpec(global_batch_size=512, sequence_length=1024)),
    "moe-mixtral-4nodes": _request("mixtral-8x7b", "h100-sxm5-80gb", 4,
                                   TrainingSpec(global_batch_size=512, sequence_length=4096)),
    "moe-olmoe-1node": _request("olmoe-1b-7b-0924", "h100-sxm5-80gb", 1,
                                TrainingSpec(global_batch_size=256, sequence_length=4096)),
    "long-8b-128k": _request("llama-3.1-8b", "h100-sxm5-80gb", 4,
                             TrainingSpec(global_batch_size=16, sequence_length=131072)),
    "fewest-70b-of-16nodes": _request("llama-3.1-70b", "h100-sxm5-80gb", 16,
                                      TrainingSpec(global_batch_size=512, sequence_length=4096),
                                      objective=Objective.MIN_GPUS),
    "published-megatron-gpt-18.4b": _published("megatron2021-gpt-18.4b"),
    "published-kimi-k2": _published("kimi-k2-256"),
}


@functools.cache
def solved(problem: str) -> PlanResponse:
    """The plan of one problem of `PLAN_SET` (solved once per test session)."""
    return plan(PLAN_SET[problem])


sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_planner  # noqa: E402 - the benchmarks folder is not a package

BENCHMARK_LIMITS = SolverLimits(time_limit_s=120, top_k=3, num_workers=1)
"""The benchmark's top_k; a time limit generous enough for each search to complete on a
loaded 2-core host (each takes seconds alone)."""

BENCHMARK_REQUESTS: dict[str, PlanRequest] = {
    label: request.model_copy(update={"solver": BENCHMARK_LIMITS})
    for label, request in bench_planner.problem_requests(with_open=False, time_limit_s=10)}
"""`benchmarks/bench_planner.py`'s problems (its default constraints), by label."""


@functools.cache
def benchmark_solved(label: str) -> PlanResponse:
    """The plan of one problem of `BENCHMARK_REQUESTS` (solved once per test session)."""
    return plan(BENCHMARK_REQUESTS[label])


__all__ = ["BENCHMARK_LIMITS", "BENCHMARK_REQUESTS", "PLAN_SET", "benchmark_solved", "solved"]
