"""The nearest cluster size with a plan comes first among the relaxations, the fewest-GPU
answer beside it (`solver/nearest_nodes.py`)."""

import pytest
from relaxation_budgets import generous_relaxation_budgets

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    PlanRequest,
    PlanStatus,
    SolverLimits,
    TrainingSpec,
)
from api_schemas.plan import Relaxation
from solver import plan
from solver.nearest_nodes import MAX_PROBES, _order


def _node_relaxations(monkeypatch: pytest.MonkeyPatch, preset: str, gpu: str, num_nodes: int,
                      training: TrainingSpec, constraints: Constraints, time_limit_s: float
                      ) -> list[Relaxation]:
    """The `num_nodes` relaxations of an infeasible request, under generous budgets."""
    generous_relaxation_budgets(monkeypatch)
    response = plan(PlanRequest(
        model=ModelPreset(preset=preset), cluster=ClusterInput(gpu=gpu, num_nodes=num_nodes),
        training=training, constraints=constraints,
        solver=SolverLimits(time_limit_s=time_limit_s, top_k=0, num_workers=1)))
    assert response.status == PlanStatus.INFEASIBLE
    found = [r for r in response.explanation.relaxation_details if r.change == "num_nodes"]
    texts = response.explanation.relaxations
    assert [t for t in texts if t in {r.text for r in found}] == [r.text for r in found]
    return found


def test_probe_order_is_by_distance_fewer_first_and_stops_at_the_fewest() -> None:
    assert _order(641, 18) == [640, 642, 639, 643, 638, 644, 637, 645]
    assert len(_order(641, 18)) == MAX_PROBES
    assert _order(7, 5) == [6, 8, 5]  # 5 is known to have a plan: nothing past it
    assert _order(2, 1) == [1]


def test_the_nearest_count_comes_before_the_fewest(monkeypatch: pytest.MonkeyPatch) -> None:
    # Llama 3.1 8B on 7 nodes with PP1 pinned: 56 GPUs split as TP x DP need DP7 (TP8),
    # which does not divide the batch of 64; 6 nodes have no split either; 8 nodes do. The
    # fewest-GPU answer (1 node) is far slower.
    nearest, fewest = _node_relaxations(
        monkeypatch, "llama-3.1-8b", "h100-sxm5-80gb", 7,
        TrainingSpec(global_batch_size=64, sequence_length=4096), Constraints(pp=1), 120)
    assert (nearest.from_value, nearest.to_value) == (7, 8)
    assert nearest.minimal and "6 has no plan" in nearest.proof
    assert "the nearest count with a plan" in nearest.text
    assert (fewest.from_value, fewest.to_value) == (7, 1)
    assert nearest.step_time_s is not None and fewest.step_time_s is not None
    assert nearest.step_time_s < fewest.step_time_s


@pytest.mark.slow
def test_gpt_530b_on_641_nodes_is_told_640_first(monkeypatch: pytest.MonkeyPatch) -> None:
    # ZeRO limited to stage 1, a prime node count. One node fewer gives
    # an 18 s plan; the fewest-GPU answer (18 nodes) takes over 600 s per step.
    nearest, fewest = _node_relaxations(
        monkeypatch, "gpt-530b", "a100-sxm4-80gb", 641,
        TrainingSpec(global_batch_size=2560, sequence_length=2048),
        Constraints(zero_stage=[0, 1], allow_optimizer_offload=False), 300)
    assert (nearest.to_value, fewest.to_value) == (640, 18)
    assert nearest.minimal and nearest.proof == "one node from the request's count"
    assert nearest.step_time_s is not None and nearest.step_time_s < 30
    assert fewest.step_time_s is not None and fewest.step_time_s > 600
