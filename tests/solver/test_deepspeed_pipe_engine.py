"""A plan for DeepSpeed with PP > 1 is timed as DeepSpeed's own pipeline engine runs it: the
capability table names the engine's blocking, TP-partitioned stage-boundary transfers
(`Framework.pipe_engine_p2p`; DeepSpeed v0.19.5 deepspeed/runtime/pipe/p2p.py and engine.py),
every DeepSpeed recipe with a pipeline carries them (`solver.runtime_choice.
with_pipe_engine`), no other framework's recipe does, and the plan's notes and DeepSpeed
export say so."""

import functools

import pytest

from api_schemas import (
    ClusterInput,
    ClusterSpec,
    Constraints,
    ModelPreset,
    ModelSpec,
    ParallelConfig,
    PipeEngineP2P,
    PlanRequest,
    PlanResponse,
    PlanStatus,
    SolverLimits,
    TrainingSpec,
)
from api_schemas.requests import FrameworkTarget
from models.catalog.resolve import resolve_cluster, resolve_model
from models.core.frameworks import frameworks
from models.core.runtime_features import grad_reduce_overlapped
from models.core.step_time import estimate_step
from solver import plan
from solver.candidate_eval import ScoredPlan
from solver.export import deepspeed_notes
from solver.space import MeshCandidate
from solver.targets import candidate_variants, evaluate_for_targets

TRAINING = TrainingSpec(global_batch_size=64, sequence_length=4096)
PIPELINE = ParallelConfig(tp=2, pp=2, dp=4, zero_stage=1)
"""A 16-GPU mesh DeepSpeed (PipelineModule over AutoTP) and Megatron-LM run."""
PIPELINE_SP = PIPELINE.model_copy(update={"sequence_parallel": True})
"""The same with sequence parallelism, which torchtitan needs with TP (DeepSpeed's AutoTP has
none)."""


def _setup() -> tuple[ModelSpec, ClusterSpec]:
    spec = resolve_model(ModelPreset(preset="llama-3.1-8b")).spec
    cluster = resolve_cluster(ClusterInput(gpu="h100-sxm5-80gb", num_nodes=2))
    return spec, cluster


def _candidate(parallel: ParallelConfig) -> MeshCandidate:
    m = TRAINING.global_batch_size // (parallel.micro_batch_size * parallel.dp)
    return MeshCandidate.of(parallel, m)


def _engines(framework: FrameworkTarget | None, parallel: ParallelConfig,
             training: TrainingSpec = TRAINING) -> dict[str, set[PipeEngineP2P | None]]:
    spec, _ = _setup()
    out: dict[str, set[PipeEngineP2P | None]] = {}
    for variant in candidate_variants(spec, training, _candidate(parallel),
                                      Constraints(framework=framework)):
        out.setdefault(variant.framework, set()).add(variant.training.pipe_engine_p2p)
    return out


def test_the_table_names_the_blocking_engine_for_deepspeed_only() -> None:
    tables = frameworks()
    assert tables["deepspeed"].pipe_engine_p2p == PipeEngineP2P.DEEPSPEED_PARTITIONED
    source = tables["deepspeed"].pipe_engine_source
    assert "p2p.py" in source and "engine.py" in source and "v0.19.5" in source
    assert tables["megatron-lm"].pipe_engine_p2p is None
    assert tables["torchtitan"].pipe_engine_p2p is None


def test_every_deepspeed_recipe_with_a_pipeline_carries_the_engine() -> None:
    assert _engines("deepspeed", PIPELINE) == {
        "deepspeed": {PipeEngineP2P.DEEPSPEED_PARTITIONED}}
    released = _engines(None, PIPELINE)
    assert released["deepspeed"] == {PipeEngineP2P.DEEPSPEED_PARTITIONED}
    assert released["megatron-lm"] == {None}


@pytest.mark.parametrize(("framework", "parallel"), [
    ("megatron-lm", PIPELINE), ("megatron-lm", PIPELINE_SP), ("torchtitan", PIPELINE_SP),
    ("any", PIPELINE), (None, PIPELINE_SP)])
def test_no_other_target_gets_the_engine(framework: FrameworkTarget | None,
                                         parallel: ParallelConfig) -> None:
    engines = _engines(framework, parallel)
    assert engines and all(values == {None} for values in engines.values())


def test_without_a_pipeline_deepspeed_has_no_engine_transfers() -> None:
    assert _engines("deepspeed", ParallelConfig(tp=2, pp=1, dp=8, zero_stage=1)) == {
        "deepspeed": {None}}


def test_a_request_that_fixes_the_engine_keeps_its_value() -> None:
    fixed = TRAINING.model_copy(update={"pipe_engine_p2p": PipeEngineP2P.DEEPSPEED_FULL_GRAD})
    assert _engines("deepspeed", PIPELINE, fixed) == {
        "deepspeed": {PipeEngineP2P.DEEPSPEED_FULL_GRAD}}


def _scored(framework: FrameworkTarget) -> ScoredPlan:
    spec, cluster = _setup()
    result = evaluate_for_targets(spec, TRAINING, cluster, _candidate(PIPELINE),
                                  Constraints(framework=framework))
    assert isinstance(result, ScoredPlan)
    return result


def test_a_deepspeed_candidate_is_timed_with_the_transfers() -> None:
    spec, cluster = _setup()
    scored = _scored("deepspeed")
    recipe = scored.training
    assert recipe is not None and recipe.pipe_engine_p2p == PipeEngineP2P.DEEPSPEED_PARTITIONED
    with_engine = estimate_step(spec, recipe, scored.parallel, cluster).step_time_s
    without = estimate_step(spec, recipe.model_copy(update={"pipe_engine_p2p": None}),
                            scored.parallel, cluster).step_time_s
    assert scored.estimate.step_time_s == pytest.approx(with_engine, rel=1e-9)
    assert with_engine > without
    megatron = _scored("megatron-lm")
    assert megatron.training is not None and megatron.training.pipe_engine_p2p is None


PLAN_REQUEST = PlanRequest(model=ModelPreset(preset="llama-3.1-8b"),
                           cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=2),
                           training=TrainingSpec(global_batch_size=512, sequence_length=4096),
                           solver=SolverLimits(time_limit_s=60, top_k=0, num_workers=1))


@functools.cache
def _planned(framework: FrameworkTarget) -> PlanResponse:
    return plan(PLAN_REQUEST.model_copy(update={
        "constraints": Constraints(framework=framework, pp=[2, 4])}))


def _states_engine(response: PlanResponse) -> bool:
    return any("pipe_engine_p2p='deepspeed_partitioned'" in note
               for note in response.explanation.notes)


def test_a_deepspeed_plan_states_the_engine_in_its_notes_and_export() -> None:
    response = _planned("deepspeed")
    assert response.status in (PlanStatus.OPTIMAL, PlanStatus.FEASIBLE)
    assert response.parallel is not None and response.parallel.pp > 1
    assert _states_engine(response)
    exported = response.exports.deepspeed
    assert exported is not None
    assert any("timed as DeepSpeed's PipelineEngine runs them" in n for n in exported.notes)


def test_a_megatron_plan_never_states_the_engine() -> None:
    response = _planned("megatron-lm")
    assert response.parallel is not None and response.parallel.pp > 1
    assert not _states_engine(response)


def test_the_export_says_when_a_plan_was_timed_without_the_engine() -> None:
    spec, _ = _setup()
    notes = deepspeed_notes(spec, TRAINING, PIPELINE)
    assert any("Megatron-style stage-boundary transfers" in n for n in notes)
    engine = TRAINING.model_copy(update={"pipe_engine_p2p": PipeEngineP2P.DEEPSPEED_PARTITIONED})
    stated = deepspeed_notes(spec, engine, PIPELINE)
    assert not any("Megatron-style stage-boundary" in n for n in stated)
    assert any("timed as DeepSpeed's PipelineEngine runs them" in n for n in stated)
    flat = ParallelConfig(tp=2, pp=1, dp=8, zero_stage=1)
    assert not any("stage-boundary" in n for n in deepspeed_notes(spec, TRAINING, flat))


def test_under_the_engine_the_gradient_reduction_never_overlaps_backward() -> None:
    """DeepSpeed's TrainSchedule reduces after the step's last backward (ReduceGrads before
    OptimizerStep), so `overlap_comm` hides nothing there: the engine's recipe with the
    overlap asked for is timed as without it, and the step is longer than Megatron's
    overlapped reduction of the same mesh."""
    spec, cluster = _setup()
    engine = TRAINING.model_copy(update={"pipe_engine_p2p": PipeEngineP2P.DEEPSPEED_PARTITIONED})
    asked = engine.model_copy(update={"overlap_grad_reduce": True})
    refused = engine.model_copy(update={"overlap_grad_reduce": False})
    assert not grad_reduce_overlapped(asked) and grad_reduce_overlapped(TRAINING)
    times = {name: estimate_step(spec, recipe, PIPELINE, cluster)
             for name, recipe in (("asked", asked), ("refused", refused))}
    assert times["asked"].step_time_s == times["refused"].step_time_s
    assert times["asked"].exposed_comm_s["dp"] == times["refused"].exposed_comm_s["dp"] > 0
    megatron = estimate_step(spec, TRAINING.model_copy(update={"overlap_grad_reduce": True}),
                             PIPELINE, cluster)
    assert megatron.exposed_comm_s["dp"] < times["asked"].exposed_comm_s["dp"]


def test_a_deepspeed_pipeline_plan_does_not_offer_the_overlap() -> None:
    """With PP > 1 DeepSpeed's recipes turn `overlap_grad_reduce` off (it does nothing
    there); without a pipeline it is chosen on, but for the ZeRO-1 variant that runs
    BF16_Optimizer (`bf16_hp_grad_update`), which reduces after the last backward; on
    Megatron-LM it is chosen on."""
    spec, _ = _setup()
    flat = ParallelConfig(tp=2, pp=1, dp=8, zero_stage=1)
    chosen: dict[tuple[str, int, bool], set[bool | None]] = {}
    for parallel in (PIPELINE, flat):
        for variant in candidate_variants(spec, TRAINING, _candidate(parallel),
                                          Constraints(framework=None)):
            wrapped = bool(variant.training.bf16_hp_grad_update)
            chosen.setdefault((variant.framework, parallel.pp, wrapped), set()).add(
                variant.training.overlap_grad_reduce)
    assert chosen[("deepspeed", 2, True)] == {False}
    assert chosen[("deepspeed", 1, False)] == {True}
    assert chosen[("deepspeed", 1, True)] == {False}
    assert chosen[("megatron-lm", 2, False)] == {True}
    assert ("megatron-lm", 2, True) not in chosen
    response = _planned("deepspeed")
    assert response.parallel is not None and response.parallel.pp > 1
    assert "overlap_grad_reduce" not in {use.feature for use in response.runtime_features
                                         if use.on}
