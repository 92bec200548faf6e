"""Honest search bounds: each range the search limits is stated in the response, with
whether it was searched completely, so "optimal" names its space."""

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    PlanRequest,
    SolverLimits,
    TrainingSpec,
)
from solver import plan

GPT2 = PlanRequest(model=ModelPreset(preset="gpt2"),
                   cluster=ClusterInput(gpu="a100-sxm4-80gb", num_nodes=1),
                   training=TrainingSpec(global_batch_size=512, sequence_length=1024),
                   solver=SolverLimits(time_limit_s=30, top_k=0, num_workers=1))


def test_the_micro_batch_limit_is_stated_with_the_sizes_left_out() -> None:
    response = plan(GPT2)
    assert response.solver is not None
    limits = {limit.name: limit for limit in response.solver.space}
    assert not limits["micro_batch_size"].complete
    assert "64" in limits["micro_batch_size"].searched
    assert limits["num_micro_batches"].complete
    assert any("micro_batch_size" in note and "stated space" in note
               for note in response.explanation.notes)


def test_a_pinned_range_is_complete_and_can_beat_the_default_space() -> None:
    pinned = plan(GPT2.model_copy(update={"constraints": Constraints(
        micro_batch_size=[1, 2, 4, 8, 16, 32, 64])}))
    default = plan(GPT2)
    assert pinned.solver is not None and default.time is not None and pinned.time is not None
    assert {limit.name: limit for limit in pinned.solver.space}["micro_batch_size"].complete
    assert pinned.time.step_time_s <= default.time.step_time_s
