"""A DeepSpeed plan with bf16 weights and fp32 gradient accumulation at ZeRO stage 1 is priced
as DeepSpeed 0.19.8 runs it, through BF16_Optimizer (`Framework.bf16_optimizer_stage`;
deepspeed/runtime/engine.py `_do_optimizer_sanity_check`, deepspeed/runtime/bf16_optimizer.py):
the 16-bit `.grad` of every parameter stays allocated beside the full fp32 gradient buffer,
each micro-batch's gradients are added into that buffer after its backward, and the reduction
runs after the last backward. The framework's other stages, and every other framework, keep
the recipe as given."""

import functools

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    ParallelConfig,
    PlanRequest,
    PlanResponse,
    PlanStatus,
    SolverLimits,
    TrainingSpec,
)
from models.catalog.resolve import resolve_model
from models.core.frameworks import frameworks
from solver import plan
from solver.space import MeshCandidate
from solver.targets import candidate_variants, split_at_wrapper_stage

TRAINING = TrainingSpec(global_batch_size=256, sequence_length=8192)
CLUSTER = ClusterInput(gpu="h100-sxm5-80gb", num_nodes=2)
BF16_GRADS = "bf16 gradients beside the fp32 accumulation"


@functools.cache
def _plan(framework: str, zero_stage: int) -> PlanResponse:
    """Llama 3.1 8B on 16 H100 without a pipeline, the ZeRO stage pinned, no offload."""
    constraints = Constraints(framework=framework, zero_stage=zero_stage, pp=1, tp=1,
                              allow_optimizer_offload=False)
    answer = plan(PlanRequest(model=ModelPreset(preset="llama-3.1-8b"), cluster=CLUSTER,
                              training=TRAINING, constraints=constraints,
                              solver=SolverLimits(time_limit_s=60)))
    assert answer.status == PlanStatus.OPTIMAL
    return answer


def _gradient_lines(answer: PlanResponse) -> dict[str, int]:
    assert answer.memory is not None
    return {c.name: c.bytes for c in answer.memory.stages[0].components
            if c.kind == "gradients"}


def test_deepspeed_table_names_bf16_optimizer_at_stage_1_only() -> None:
    tables = frameworks()
    assert tables["deepspeed"].bf16_optimizer_stage == 1
    assert "_do_optimizer_sanity_check" in tables["deepspeed"].bf16_optimizer_source
    assert tables["megatron-lm"].bf16_optimizer_stage is None
    assert tables["torchtitan"].bf16_optimizer_stage is None


def test_the_split_keeps_every_stage_and_offload_choice() -> None:
    """Stage 1 without offload goes to the wrapper's variant; stage 1 with the optimizer
    offloaded (DeepSpeed's ZeRO optimizer) and the other stages keep the recipe."""
    constraints = Constraints(forbid={"zero_stage": [0]})
    wrapped, others = split_at_wrapper_stage(constraints, 1, overlap_pinned=False)
    assert wrapped is not None
    assert wrapped.forbid["zero_stage"] == [0, 2, 3]
    assert not wrapped.allow_optimizer_offload
    assert [(o.forbid["zero_stage"], o.optimizer_offload_frac) for o in others] == [
        ([0, 2, 3], 1.0), ([0, 1], None)]
    pinned = Constraints(optimizer_offload_frac=0.5)
    assert split_at_wrapper_stage(pinned, 1, overlap_pinned=False) == (None, (pinned,))
    wrapped, _ = split_at_wrapper_stage(constraints, 1, overlap_pinned=True)
    assert wrapped is None


def test_only_deepspeeds_stage_1_variant_carries_the_wrapper() -> None:
    spec = resolve_model(ModelPreset(preset="llama-3.1-8b")).spec
    candidate = MeshCandidate.of(ParallelConfig(tp=1, pp=1, dp=16), 16)
    seen = set()
    for variant in candidate_variants(spec, TRAINING, candidate, Constraints()):
        zeros = {z for z in (0, 1, 2, 3)
                 if z not in variant.constraints.forbid.get("zero_stage", [])}
        wrapped = bool(variant.training.bf16_hp_grad_update)
        seen.add((variant.framework, wrapped))
        if wrapped:
            assert (variant.framework, zeros) == ("deepspeed", {1})
            assert variant.training.overlap_grad_reduce is False
            assert not variant.constraints.allow_optimizer_offload
    assert ("deepspeed", True) in seen and ("deepspeed", False) in seen
    assert ("megatron-lm", True) not in seen


def test_a_zero_1_deepspeed_plan_holds_both_gradients_and_pays_the_fp32_add() -> None:
    """The ledger line is the rank's parameters at 2 bytes beside their fp32 gradients at 4
    (bf16_optimizer.py: the fp32 buffer over every bf16 parameter, the `.grad` zeroed in
    place); the step books the fp32 add and reduces without overlap."""
    deepspeed, megatron = _plan("deepspeed", 1), _plan("megatron-lm", 1)
    lines = _gradient_lines(deepspeed)
    fp32 = sum(b for name, b in lines.items() if name != BF16_GRADS)
    assert lines[BF16_GRADS] == fp32 // 2
    assert BF16_GRADS not in _gradient_lines(megatron)
    assert deepspeed.time is not None and megatron.time is not None
    assert deepspeed.time.overheads_s["bf16 gradient update"] > 0
    assert "bf16 gradient update" not in megatron.time.overheads_s
    overlap = {u.feature: u for u in deepspeed.runtime_features}["overlap_grad_reduce"]
    assert not overlap.on and "BF16_Optimizer" in overlap.why_not
    assert deepspeed.exports is not None
    config = deepspeed.exports.deepspeed.config
    assert config["zero_optimization"]["overlap_comm"] is False
    assert config["data_types"] == {"grad_accum_dtype": "fp32"}
    assert any("BF16_Optimizer" in note for note in deepspeed.explanation.notes)


def test_zero_2_deepspeed_plans_run_the_zero_optimizer() -> None:
    answer = _plan("deepspeed", 2)
    assert BF16_GRADS not in _gradient_lines(answer)
    assert answer.time is not None
    assert "bf16 gradient update" not in answer.time.overheads_s
