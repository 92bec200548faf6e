"""The benchmark set of plans (`plan_set.PLAN_SET`: dense, MoE, long context, fewest GPUs,
published presets), exported and handed to each framework's own validation at a pinned
release (`framework_checks.py`, `torchtitan_loader.py`):

- Megatron-LM arguments: megatron-core 0.16.1's config classes, process groups on a fake
  process group of the plan's world size, and its num-microbatches calculator;
- torchtitan TOML: torchtitan 0.2.2's `ConfigManager`, and where torch is installed its
  `ParallelDims`, model registry, model arguments and float8 MoE limits
  (`framework_checks.torchtitan_check`);
- DeepSpeed JSON: DeepSpeed 0.19.8's `DeepSpeedConfig` with its own mpu for the mesh,
  its pipeline engine's ZeRO check and its AutoEP start-up checks.

For each problem the default plan (any released framework) and the plan searched for each
framework target are checked. An export a framework accepts must read back the plan's
degrees, schedule, micro-batch and recompute setting; a framework that rejects an export
must be missing from the plan's `runs_on`, and a plan searched for a target must be
accepted by it.

Needs torch, megatron-core, DeepSpeed and torchtitan at the pinned releases, which
`.ci/run` installs in `.venv-frameworks`; elsewhere each framework's tests skip with the
reason.
"""

import functools
from typing import Any

import pytest
from framework_checks import (
    DEEPSPEED,
    MEGATRON_CORE,
    TORCH,
    DeepSpeedUnsupported,
    deepspeed_check,
    megatron_check,
    missing,
    torchtitan_check,
)
from plan_set import PLAN_SET, solved
from torchtitan_loader import PINNED as TORCHTITAN
from torchtitan_loader import check_torchtitan
from torchtitan_loader import installed as torchtitan_installed

from api_schemas import Constraints, ModelSpec, PlanRequest, PlanResponse, TrainingSpec
from api_schemas.parallel import FullLayers, ParallelConfig, RecomputeMode
from models.catalog.presets import model_preset
from models.core.frameworks import runs_on
from models.core.pipeline import schedule_traits
from solver import plan
from solver.export import deepspeed_config, megatron_export
from solver.export.common import batch_shape, rank_layer_counts, unified_policy

pytestmark = pytest.mark.slow

FRAMEWORKS = ("megatron-lm", "torchtitan", "deepspeed")

_MISSING: dict[str, str | None] = {
    "megatron-lm": missing(("torch", TORCH), ("megatron-core", MEGATRON_CORE)),
    "deepspeed": missing(("torch", TORCH), ("deepspeed", DEEPSPEED)),
    "torchtitan": None if torchtitan_installed() == TORCHTITAN else (
        f"needs torchtitan {TORCHTITAN} (found {torchtitan_installed()}) and tyro; .ci/run "
        "installs them"),
}


def _needs(framework: str) -> None:
    reason = _MISSING[framework]
    if reason is not None:
        pytest.skip(f"{framework}: {reason}")


@functools.cache
def _target_plan(problem: str, framework: str) -> PlanResponse:
    """The problem's plan searched for one framework target."""
    request = PLAN_SET[problem]
    constraints = request.constraints.model_copy(update={"framework": framework})
    return plan(request.model_copy(update={"constraints": Constraints.model_validate(
        constraints.model_dump())}))


def _plan(problem: str, target: str) -> PlanResponse:
    return solved(problem) if target == "default" else _target_plan(problem, target)


def _planned(problem: str, response: PlanResponse
             ) -> tuple[ParallelConfig, PlanRequest, ModelSpec]:
    """The plan's configuration, the problem's request and its model."""
    assert response.parallel is not None
    request = PLAN_SET[problem]
    return response.parallel, request, model_preset(request.model.preset)


def _check_megatron(problem: str, response: PlanResponse) -> None:
    parallel, request, spec = _planned(problem, response)
    export = megatron_export(spec, request.training, parallel)
    result = megatron_check(list(export.args), response.world_size)
    assert (result.tp, result.pp, result.cp, result.dp) == (
        parallel.tp, parallel.pp, parallel.cp, parallel.dp)
    if spec.moe is not None:
        assert (result.ep, result.etp) == (parallel.ep, parallel.etp)
    traits = schedule_traits(parallel.schedule)
    chunks = traits.num_chunks(parallel.vpp) if traits.exports.megatron_native else 1
    assert result.vpp == (chunks if parallel.pp > 1 else 1), "schedule: virtual stages"
    shape = batch_shape(request.training, parallel)
    assert (result.micro_batch_size, result.num_micro_batches) == (
        shape.micro_batch_size, shape.num_micro_batches)
    _assert_megatron_recompute(result.config, parallel)
    if (parallel.tp > 1 or parallel.cp > 1) and parallel.zero_stage < 2:
        # Megatron-LM's validate_args (not on a registry) asserts this for TP/CP overlap.
        assert export.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"


def _assert_megatron_recompute(config: Any, parallel: ParallelConfig) -> None:
    recompute = unified_policy(parallel, framework="Megatron-LM").policy.recompute
    if isinstance(recompute, FullLayers) and recompute.full_layers == 0:
        recompute = RecomputeMode(recompute.others)
    if isinstance(recompute, FullLayers):
        assert (config.recompute_granularity, config.recompute_method) == ("full", "block")
        assert config.recompute_num_layers >= 1
    elif recompute == RecomputeMode.FULL:
        assert (config.recompute_granularity, config.recompute_method,
                config.recompute_num_layers) == ("full", "uniform", 1)
    elif recompute == RecomputeMode.SELECTIVE:
        assert config.recompute_granularity in ("selective", None)
    else:
        assert config.recompute_granularity is None


def _check_deepspeed(problem: str, response: PlanResponse) -> None:
    parallel, request, spec = _planned(problem, response)
    config = deepspeed_config(spec, request.training, parallel)
    result = deepspeed_check(config, response.world_size, pp=parallel.pp, tp=parallel.tp,
                             cp=parallel.cp)
    parsed = result.config
    shape = batch_shape(request.training, parallel)
    assert result.dp == parallel.dp
    assert (parsed.train_batch_size, parsed.train_micro_batch_size_per_gpu,
            parsed.gradient_accumulation_steps) == (
        shape.global_batch_size, shape.micro_batch_size, shape.num_micro_batches)
    assert int(parsed.zero_optimization_stage) == parallel.zero_stage
    assert parsed.tensor_parallel_config.autotp_size == (parallel.tp if parallel.tp > 1 else 0)
    if spec.moe is not None and parallel.ep > 1:
        assert parsed.expert_parallel_config.enabled
        assert parsed.expert_parallel_config.autoep_size == parallel.ep
        assert parsed.expert_parallel_config.score_func == spec.moe.router_score_function
    if parallel.pp > 1:
        assert schedule_traits(parallel.schedule).exports.deepspeed_native, \
            "DeepSpeed's PipelineEngine runs 1F1B only"
    recompute = unified_policy(parallel, framework="DeepSpeed").policy.recompute
    most = max(rank_layer_counts(spec, parallel))
    expected = (min(recompute.full_layers, most) if isinstance(recompute, FullLayers)
                else most if recompute == RecomputeMode.FULL else None)
    checkpoints = parsed.activation_checkpointing_config.number_checkpoints
    assert checkpoints == (expected or None)


def _check_torchtitan(problem: str, response: PlanResponse) -> None:
    assert response.parallel is not None
    request = PLAN_SET[problem]
    if missing(("torch", TORCH)) is None:  # torchtitan's own checks beyond its loader
        torchtitan_check(model_preset(request.model.preset), request.training,
                         response.parallel)
    else:
        check_torchtitan(request.model.preset, request.training, response.parallel)


CHECKS = {"megatron-lm": _check_megatron, "deepspeed": _check_deepspeed,
          "torchtitan": _check_torchtitan}


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("problem", sorted(PLAN_SET))
def test_the_default_plan_is_accepted_where_it_says_it_runs(problem: str,
                                                            framework: str) -> None:
    _needs(framework)
    response = solved(problem)
    if response.parallel is None:
        pytest.skip(f"no plan within the limit ({response.status}); "
                    "test_plan_roundtrip checks that one exists")
    runs_on = {fit.framework for fit in response.runs_on}
    try:
        CHECKS[framework](problem, response)
    except (AssertionError, ValueError, TypeError, RuntimeError):
        # DeepSpeedUnsupported (a ValueError) too: the table forbids those meshes
        if framework in runs_on:
            raise


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("problem", sorted(PLAN_SET))
def test_a_plan_searched_for_a_framework_is_accepted_by_it(problem: str,
                                                           framework: str) -> None:
    _needs(framework)
    response = _target_plan(problem, framework)
    if response.parallel is None:
        pytest.skip(f"no {framework} plan for {problem}: {response.status}")
    assert framework in {fit.framework for fit in response.runs_on}
    CHECKS[framework](problem, response)


@pytest.mark.parametrize(("pp", "listed"), [(1, True), (2, False)])
def test_deepspeed_folds_autoep_with_autotp_only_without_a_pipeline(pp: int,
                                                                    listed: bool) -> None:
    """DeepSpeed 0.19.8 folds AutoEP with AutoTP at pp = 1 and rejects it beyond; the
    capability table (`ep_with_tp` since 0.19.8, forbidden with pp) agrees."""
    _needs("deepspeed")
    spec = model_preset("mixtral-8x7b")
    training = TrainingSpec(global_batch_size=512, sequence_length=4096)
    parallel = ParallelConfig(tp=2, pp=pp, dp=16 // pp, ep=8, sequence_parallel=False,
                              zero_stage=1)  # AutoTP has no sequence-parallel norms
    fits = {fit.framework: fit.version for fit in runs_on(spec, training, parallel)}
    assert ("deepspeed" in fits) == listed
    config = deepspeed_config(spec, training, parallel)
    if listed:
        assert fits["deepspeed"] == "0.19.8"
        assert deepspeed_check(config, 32, pp=pp, tp=2, cp=1).dp == 16
    else:
        with pytest.raises(ValueError, match="tensor model parallelism from mpu"):
            deepspeed_check(config, 32, pp=pp, tp=2, cp=1)


def test_deepspeed_counts_only_data_parallel_ranks_in_the_batch() -> None:
    """With the pipeline grid as mpu, DeepSpeed's batch arithmetic uses dp, not every rank;
    without it, the same config fails DeepSpeed's batch assertion."""
    _needs("deepspeed")
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
              "gradient_accumulation_steps": 8, "zero_optimization": {"stage": 1}}
    assert deepspeed_check(config, 16, pp=4, tp=1, cp=1).dp == 4
    with pytest.raises(AssertionError, match="train_batch_size"):
        deepspeed_check(config, 16, pp=1, tp=1, cp=1)
    with pytest.raises(AssertionError, match="ZeRO-2 and ZeRO-3"):
        deepspeed_check({**config, "zero_optimization": {"stage": 2}}, 16, pp=4, tp=1, cp=1)
    with pytest.raises(DeepSpeedUnsupported):
        deepspeed_check(config, 16, pp=2, tp=1, cp=2)


def test_deepspeed_holds_fp32_gradients_over_bf16_weights_only_in_a_wrapper() -> None:
    """The engine's optimizer check refuses ZeRO stage 0 with bf16 weights and fp32
    gradient accumulation and accepts ZeRO-1 (BF16Optimizer) and stage 0 with bf16
    gradients: the capability table's rule for `precision:fp32_grads_over_16bit`."""
    _needs("deepspeed")
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
              "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 0}}
    fp32 = {**config, "data_types": {"grad_accum_dtype": "fp32"}}
    with pytest.raises(NotImplementedError, match=r"unsupported mix of model_dtype="
                       r"torch\.bfloat16 and grad_accum_dtype=torch\.float32"):
        deepspeed_check(fp32, 16, pp=4, tp=1, cp=1)
    assert deepspeed_check(config, 16, pp=4, tp=1, cp=1).dp == 4
    zero1 = {**fp32, "zero_optimization": {"stage": 1}}
    assert deepspeed_check(zero1, 16, pp=4, tp=1, cp=1).dp == 4


@pytest.mark.parametrize(("zero_stage", "wrapper"), [(1, "bf16"), (2, "zero_optimization")])
def test_deepspeed_takes_the_optimizer_wrapper_the_plan_is_priced_for(
        zero_stage: int, wrapper: str) -> None:
    """A DeepSpeed plan with bf16 weights and fp32 gradient accumulation is priced with
    BF16_Optimizer's gradients and fp32 add at ZeRO stage 1 only (`bf16_hp_grad_update`,
    `Framework.bf16_optimizer_stage`); DeepSpeed's own optimizer check on its export takes
    that wrapper at stage 1 and its ZeRO optimizer at stage 2."""
    _needs("deepspeed")
    constraints = Constraints(framework="deepspeed", zero_stage=zero_stage, pp=1, tp=1,
                              allow_optimizer_offload=False)
    response = plan(PlanRequest(
        model={"preset": "llama-3.1-8b"}, cluster={"gpu": "h100-sxm5-80gb", "num_nodes": 2},
        training=TrainingSpec(global_batch_size=256, sequence_length=8192),
        constraints=constraints, solver={"time_limit_s": 60}))
    assert response.exports is not None and response.time is not None
    result = deepspeed_check(response.exports.deepspeed.config, response.world_size, pp=1,
                             tp=1, cp=1)
    assert result.optimizer_wrapper == wrapper
    priced = "bf16 gradient update" in response.time.overheads_s
    assert priced == (wrapper == "bf16")


def test_deepspeed_reduces_gradients_after_the_last_backward_of_every_stage() -> None:
    """DeepSpeed 0.19.8's TrainSchedule (the pipeline engine's 1F1B) issues ReduceGrads once,
    in the step's last instruction group, after every BackwardPass of the stage: no bucket
    can overlap a backward, which `grad_reduce_overlapped` prices for recipes that carry the
    engine."""
    _needs("deepspeed")
    from deepspeed.runtime.pipe import schedule

    stages, micro_batches = 4, 8
    for stage_id in range(stages):
        steps = [[type(cmd).__name__ for cmd in cmds] for cmds in schedule.TrainSchedule(
            micro_batches=micro_batches, stages=stages, stage_id=stage_id).steps()]
        flat = [name for cmds in steps for name in cmds]
        assert flat.count("ReduceGrads") == 1 and "ReduceGrads" in steps[-1]
        assert flat.count("BackwardPass") == micro_batches
        last_backward = max(i for i, name in enumerate(flat) if name == "BackwardPass")
        assert last_backward < flat.index("ReduceGrads") < flat.index("OptimizerStep")


def test_megatron_core_rejects_what_megatron_lm_rejects() -> None:
    """The check is not vacuous: degrees the world size does not divide, heads TP does not
    divide, and a recompute method without granularity are refused by megatron-core."""
    _needs("megatron-lm")
    base = ["--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "16",
            "--micro-batch-size", "1", "--global-batch-size", "32", "--bf16"]
    assert megatron_check(base + ["--tensor-model-parallel-size", "2"], 16).dp == 8
    with pytest.raises((RuntimeError, AssertionError, ValueError)):
        megatron_check(base + ["--tensor-model-parallel-size", "3"], 16)
    with pytest.raises((AssertionError, ValueError)):
        megatron_check(base[:4] + ["--num-attention-heads", "12"] + base[6:]
                       + ["--tensor-model-parallel-size", "8"], 16)
    with pytest.raises((AssertionError, ValueError)):
        megatron_check(base + ["--recompute-granularity", "full"], 16)
    with pytest.raises(AssertionError, match="flags no check reads"):
        megatron_check(base + ["--tensor-model-paralel-size", "2"], 16)
