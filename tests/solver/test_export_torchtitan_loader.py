"""torchtitan's own job-config loader (v0.2.2, `ConfigManager.parse_args`) accepts every
torchtitan export of the exporter cases and of plans searched for the torchtitan target,
and reads back the plan's degrees, schedule, micro-batch and recompute mode.

Needs torchtitan 0.2.2 and tyro, which `.ci/run` installs; elsewhere the module is skipped
with that reason.
"""

import functools

import pytest
from test_export_cases import CASES
from torchtitan_loader import PINNED, installed, load_job_config

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    ParallelConfig,
    PlanRequest,
    SolverLimits,
    TrainingSpec,
)
from api_schemas.parallel import RecomputeMode
from models.catalog import model_preset
from solver import plan
from solver.export import TORCHTITAN_SCHEDULES, torchtitan_toml

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
                                solver=SolverLimits(time_limit_s=6, top_k=0, num_workers=1)))
    assert response.parallel is not None
    return model, training, response.parallel


def _check(spec_name: str, training: TrainingSpec, parallel: ParallelConfig) -> None:
    spec = model_preset(spec_name)
    config = load_job_config(torchtitan_toml(spec, training, parallel))
    p = config.parallelism
    assert (p.tensor_parallel_degree, p.pipeline_parallel_degree,
            p.context_parallel_degree) == (parallel.tp, parallel.pp, parallel.cp)
    assert p.data_parallel_replicate_degree * p.data_parallel_shard_degree == parallel.dp
    if spec.moe is not None:
        assert p.expert_parallel_degree == parallel.ep
    if parallel.pp > 1:
        schedule = parallel.schedule
        if schedule == "interleaved_1f1b" and parallel.vpp == 1:
            schedule = "1f1b"
        assert p.pipeline_parallel_schedule == TORCHTITAN_SCHEDULES[schedule]
        assert p.pipeline_parallel_microbatch_size == parallel.micro_batch_size
    assert config.training.global_batch_size in (-1, training.global_batch_size)
    recompute = parallel.policy_of(0).recompute
    if recompute in (RecomputeMode.NONE, RecomputeMode.SELECTIVE, RecomputeMode.FULL):
        assert config.activation_checkpoint.mode == str(recompute.value)


@pytest.mark.parametrize("name", sorted(CASES))
def test_loader_accepts_every_exporter_case(name: str) -> None:
    spec, training, parallel = CASES[name]
    _check(spec.name, training, parallel)


@pytest.mark.parametrize("name", sorted(TARGET_PLANS))
def test_loader_accepts_plans_searched_for_torchtitan(name: str) -> None:
    _check(*_target_plan(name))


def test_loader_rejects_a_key_torchtitan_does_not_know() -> None:
    with pytest.raises(ValueError, match="Invalid field names"):
        load_job_config("[parallelism]\ntensor_parallel_degre = 2\n")
