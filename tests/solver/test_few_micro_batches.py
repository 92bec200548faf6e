"""1F1B with fewer micro-batches than pipeline stages (m < p): a capability of Megatron-LM and
DeepSpeed, not of torchtitan (torch's `Schedule1F1B` refuses it), and what the planner makes
of it for each target."""

import functools

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    ParallelConfig,
    PlanRequest,
    PlanResponse,
    SolverLimits,
    TrainingSpec,
)
from api_schemas.parallel import PipelineSchedule
from models.catalog.presets import model_preset
from models.core.frameworks import FEW_MICRO_BATCHES, blockers, frameworks, plan_features, runs_on
from solver import plan
from solver.export import torchtitan_notes
from solver.space import MeshCandidate
from solver.targets import admits_mesh

LIMITS = SolverLimits(time_limit_s=60, top_k=0, num_workers=1)


def test_only_megatron_and_deepspeed_run_1f1b_with_fewer_micro_batches_than_stages() -> None:
    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=8, sequence_length=4096)
    few = ParallelConfig(pp=4, dp=2, micro_batch_size=2)  # m = 8 / (2 x 2) = 2 < 4
    features = plan_features(spec, training, few)
    assert FEW_MICRO_BATCHES in features
    assert {fit.framework for fit in runs_on(spec, training, few)} == {"megatron-lm",
                                                                       "deepspeed"}
    assert frameworks()["megatron-lm"].features[FEW_MICRO_BATCHES].since == "core_v0.14.0"
    assert frameworks()["deepspeed"].features[FEW_MICRO_BATCHES].since == "0.19.8"
    assert any(FEW_MICRO_BATCHES in reason
               for reason in blockers(frameworks()["torchtitan"], features))
    # m = p, GPipe and one interleaved group of m < p are not this capability.
    for parallel in (ParallelConfig(pp=4, dp=2, micro_batch_size=1),
                     few.model_copy(update={"schedule": PipelineSchedule.GPIPE}),
                     few.model_copy(update={"schedule": PipelineSchedule.INTERLEAVED_1F1B,
                                            "vpp": 2})):
        assert FEW_MICRO_BATCHES not in plan_features(spec, training, parallel)
    assert "torchtitan" in {fit.framework for fit in runs_on(
        spec, training, ParallelConfig(pp=4, dp=2, micro_batch_size=1, zero_stage=3,
                                       fsdp=True))}


def test_the_search_admits_the_mesh_where_a_target_framework_runs_it() -> None:
    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=8, sequence_length=4096)
    mesh = MeshCandidate(tp=1, pp=4, dp=2, cp=1, ep=1, etp=1, vpp=1, micro_batch_size=2,
                         num_micro_batches=2, schedule=PipelineSchedule.ONE_F_ONE_B,
                         sequence_parallel=False)
    admitted = {target: admits_mesh(spec, training, mesh, Constraints(framework=target))
                for target in ("megatron-lm", "deepspeed", "torchtitan", "any", None)}
    assert admitted == {"megatron-lm": True, "deepspeed": True, "torchtitan": False,
                        "any": True, None: True}


@functools.cache
def _planned(target: str, forbid: tuple[str, ...] = ()) -> PlanResponse:
    """Llama 3.1 70B on 32 H100s at a global batch of one sequence of 4,096 tokens: DP 1,
    one micro-batch, and the model needs a pipeline (no context parallelism this short)."""
    return plan(PlanRequest(
        model=ModelPreset(preset="llama-3.1-70b"),
        cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=4),
        training=TrainingSpec(global_batch_size=1, sequence_length=4096),
        constraints=Constraints(framework=target, forbid={"schedule": list(forbid)}),
        solver=LIMITS))


def test_megatron_plans_1f1b_with_fewer_micro_batches_than_stages_when_the_batch_forces_it(
        ) -> None:
    response = _planned("megatron-lm")
    assert response.parallel is not None
    assert response.parallel.schedule == PipelineSchedule.ONE_F_ONE_B
    assert response.num_micro_batches == 1 < response.parallel.pp
    assert "megatron-lm" in {fit.framework for fit in response.runs_on}


def test_torchtitan_is_never_given_1f1b_with_fewer_micro_batches_than_stages() -> None:
    response = _planned("torchtitan")
    assert response.parallel is not None
    assert not (response.parallel.schedule == PipelineSchedule.ONE_F_ONE_B
                and response.num_micro_batches < response.parallel.pp)
    # Without the schedules torchtitan runs with fewer micro-batches than stages (GPipe, one
    # interleaved group, ZB-V), nothing is left; Megatron-LM still has its 1F1B plan.
    forbid = ("gpipe", "interleaved_1f1b", "zbv")
    assert _planned("torchtitan", forbid).parallel is None
    assert _planned("megatron-lm", forbid).parallel == _planned("megatron-lm").parallel


def test_the_torchtitan_export_of_such_a_plan_says_torch_refuses_it() -> None:
    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=8, sequence_length=4096)
    few = ParallelConfig(pp=4, dp=2, micro_batch_size=2, zero_stage=3, fsdp=True)
    assert any("2 micro-batches through 4 pipeline stages" in note
               for note in torchtitan_notes(spec, training, few))
    full = few.model_copy(update={"micro_batch_size": 1})
    assert not any("Schedule1F1B" in note for note in torchtitan_notes(spec, training, full))
