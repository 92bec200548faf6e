"""torchtitan's own job-config loader (v0.2.2, `ConfigManager.parse_args`) accepts every
torchtitan export of the exporter cases and of plans searched for the torchtitan target,
and reads back the plan's degrees, schedule, micro-batch and recompute mode.

Needs torchtitan 0.2.2 and tyro, which `.ci/run` installs; elsewhere the module is skipped
with that reason.
"""

import functools

import pytest
from test_export_cases import CASES
from torchtitan_loader import PINNED, check_torchtitan, installed, load_job_config

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    ParallelConfig,
    PlanRequest,
    SolverLimits,
    TrainingSpec,
)
from solver import plan

if installed() != PINNED:
    pytest.skip(f"torchtitan {PINNED} is not installed (found {installed()}); .ci/run installs "
                "it with --no-deps next to tyro", allow_module_level=True)

TARGET_PLANS = {
    "dense-70b": ("llama-3.1-70b", 8, TrainingSpec(global_batch_size=512, sequence_length=8192)),
    "moe-mixtral": ("mixtral-8x7b", 4, TrainingSpec(global_batch_size=512,
                                                    sequence_length=4096)),
    "long-8b": ("llama-3.1-8b", 2, TrainingSpec(global_batch_size=16, sequence_length=65536)),
}


@functools.cache
def _target_plan(name: str) -> tuple[str, TrainingSpec, ParallelConfig]:
    model, nodes, training = TARGET_PLANS[name]
    response = plan(PlanRequest(model=ModelPreset(preset=model),
                                cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=nodes),
                                training=training, constraints=Constraints(framework="torchtitan"),
                                solver=SolverLimits(time_limit_s=60, top_k=0, num_workers=1)))
    assert response.parallel is not None
    return model, training, response.parallel


@pytest.mark.parametrize("name", sorted(CASES))
def test_loader_accepts_every_exporter_case(name: str) -> None:
    spec, training, parallel = CASES[name]
    check_torchtitan(spec.name, training, parallel)


@pytest.mark.parametrize("name", sorted(TARGET_PLANS))
def test_loader_accepts_plans_searched_for_torchtitan(name: str) -> None:
    check_torchtitan(*_target_plan(name))


def test_loader_rejects_a_key_torchtitan_does_not_know() -> None:
    with pytest.raises(ValueError, match="Invalid field names"):
        load_job_config("[parallelism]\ntensor_parallel_degre = 2\n")
