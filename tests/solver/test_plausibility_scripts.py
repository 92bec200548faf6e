"""Every plan of the benchmark scripts other than bench_planner.py (whose problems are
`plan_set.BENCHMARK_REQUESTS`, checked in test_plausibility.py) carries a plausibility note.

One test per request: nothing is shared between them, so the run hands them out one by one
(`SPLIT_BY_PARAMETER` in tests/conftest.py) rather than as one long test on one worker.
"""

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
from plan_set import BENCHMARK_REQUESTS
from test_plausibility import assert_plausibility_note

from api_schemas import (
    ClusterInput,
    ModelPreset,
    PlanRequest,
    PlanStatus,
    SolverLimits,
    TrainingSpec,
)
from models.evidence.published import PUBLISHED_SYSTEMS, published_runs
from solver import plan

pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


BENCH_LIMITS = SolverLimits(time_limit_s=10, top_k=0)

RETRY_LIMITS = SolverLimits(time_limit_s=120, top_k=0)
"""The limit of a request asked again when a loaded host cut its first search before any
plan (`BENCH_LIMITS`' 10 s): the test then checks the answer, never skips it."""


def benchmark_requests() -> list[tuple[str, PlanRequest]]:
    """The plan requests of the scripts in benchmarks/ other than bench_planner.py (whose
    problems are `plan_set.BENCHMARK_REQUESTS`), each at `BENCH_LIMITS`."""
    out: list[tuple[str, PlanRequest]] = []
    first = _module("bench_first_call")
    out += [(f"{preset} {seq}", PlanRequest(
        model=ModelPreset(preset=preset), cluster=ClusterInput(gpu=gpu, num_nodes=nodes),
        training=TrainingSpec(global_batch_size=batch, sequence_length=seq), solver=BENCH_LIMITS))
        for preset, gpu, nodes, batch in first.PROBLEMS for seq in first.SEQUENCE_LENGTHS]
    objectives = _module("bench_objectives")
    out += [(label, PlanRequest(model=ModelPreset(preset=model),
                                cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=nodes),
                                training=training, solver=BENCH_LIMITS))
            for label, model, nodes, training in objectives.PROBLEMS]
    runs = [r for r in published_runs() if r.id.startswith("megatron2021")]
    runs += list(PUBLISHED_SYSTEMS)
    out += [(run.id, PlanRequest(
        model=run.model if run.model is not None else ModelPreset(preset=run.model_preset),
        cluster=ClusterInput(gpu=run.gpu, num_nodes=run.num_nodes,
                             gpus_per_node=run.gpus_per_node),
        training=run.training, solver=BENCH_LIMITS)) for run in runs]
    return out


REQUESTS = dict(benchmark_requests())


def test_the_benchmark_scripts_ask_for_at_least_40_plans() -> None:
    assert len(REQUESTS) == len(benchmark_requests())  # no label stands for two requests
    assert len(REQUESTS) + len(BENCHMARK_REQUESTS) >= 40


@pytest.mark.parametrize("label", list(REQUESTS))
def test_every_plan_of_the_benchmark_scripts_carries_a_plausibility_note(label: str) -> None:
    request = REQUESTS[label]
    response = plan(request)
    if response.status == PlanStatus.UNKNOWN:
        # The 10 s limit ran out before any plan: a loaded host, not an answer (on a quiet
        # 2-core host every request plans). Asked again with `RETRY_LIMITS`, it must plan.
        response = plan(request.model_copy(update={"solver": RETRY_LIMITS}))
    assert response.throughput is not None, (label, response.status)
    assert math.isfinite(response.throughput.tokens_per_s), label
    assert_plausibility_note(response, label)
