"""A plan is one truth: its top-level policy fields agree with its per-stage policies, and
posting its own `parallel` and cluster back to evaluate reproduces its figures exactly
(fewest-GPU plans included, which use fewer GPUs than the request offers)."""

import pytest
from plan_set import PLAN_SET, solved

from api_schemas import EvaluateRequest, ParallelConfig, PlanStatus, StagePolicy
from api_schemas.parallel import FullLayers, RecomputeMode
from models.errors import InvalidSpecError
from solver import evaluate
from solver.policy_summary import contradictions, summarise_policies


@pytest.mark.parametrize("problem", sorted(PLAN_SET))
def test_evaluate_reproduces_every_plan_of_the_set(problem: str) -> None:
    request = PLAN_SET[problem]
    planned = solved(problem)
    assert planned.status in (PlanStatus.OPTIMAL, PlanStatus.FEASIBLE), planned.explanation
    assert planned.parallel is not None
    assert contradictions(planned.parallel) == []
    assert planned.runs_on, "the default target gives a plan a released framework runs"
    again = evaluate(EvaluateRequest(model=request.model, cluster=request.cluster,
                                     training=request.training, parallel=planned.parallel))
    assert again.status == PlanStatus.FEASIBLE
    assert again.world_size == planned.world_size
    assert again.time == planned.time
    assert again.throughput == planned.throughput
    assert again.memory == planned.memory
    assert again.num_micro_batches == planned.num_micro_batches


def test_a_fewest_gpu_plan_uses_fewer_gpus_than_offered_and_evaluates_as_returned() -> None:
    request = PLAN_SET["fewest-70b-of-16nodes"]
    planned = solved("fewest-70b-of-16nodes")
    assert planned.parallel is not None
    assert planned.world_size < 16 * 8
    again = evaluate(EvaluateRequest(model=request.model, cluster=request.cluster,
                                     training=request.training, parallel=planned.parallel))
    assert any(f"uses {planned.world_size} of the cluster's 128 GPUs" in note
               for note in again.explanation.notes)


def test_evaluate_names_a_partial_node_it_cannot_place() -> None:
    request = PLAN_SET["dense-70b-8nodes"]
    with pytest.raises(InvalidSpecError, match="whole number of 8-GPU nodes"):
        evaluate(EvaluateRequest(model=request.model, cluster=request.cluster,
                                 training=request.training,
                                 parallel=ParallelConfig(tp=4, pp=1, dp=3)))
    with pytest.raises(InvalidSpecError, match="but the cluster has 64 GPUs"):
        evaluate(EvaluateRequest(model=request.model, cluster=request.cluster,
                                 training=request.training,
                                 parallel=ParallelConfig(tp=8, pp=2, dp=8)))


def test_equal_stage_policies_collapse_into_the_uniform_fields() -> None:
    stage = StagePolicy(recompute="selective", fp8_activations=True, offload_frac=0.25)
    summary = summarise_policies(ParallelConfig(pp=2, stage_policies=(stage, stage)))
    assert summary.stage_policies is None
    assert summary.recompute == RecomputeMode.SELECTIVE
    assert summary.fp8_activations and summary.activation_offload_frac == 0.25
    assert summary.policy_of(1) == stage


def test_differing_stage_policies_keep_them_and_summarise_their_envelope() -> None:
    stages = (StagePolicy(recompute=FullLayers(full_layers=3), offload_frac=0.5),
              StagePolicy(recompute="selective", recompute_modules=("layernorm",)),
              StagePolicy())
    raw = ParallelConfig(pp=3, stage_policies=stages)
    assert contradictions(raw), "the default top-level fields contradict the stages"
    summary = summarise_policies(raw)
    assert summary.stage_policies == stages
    assert summary.recompute == FullLayers(full_layers=3, others="selective")
    assert set(summary.recompute_modules) == {"core_attn", "layernorm"}
    assert summary.activation_offload_frac == 0.5 and not summary.fp8_activations
    assert contradictions(summary) == []
