"""Minimal relaxations: each is structured (what changes, from, to, the plan it gives) and
the node count is the fewest that gives a plan, proven by a completed fewest-GPU search."""

import pytest
from relaxation_budgets import generous_relaxation_budgets

from api_schemas import (
    ClusterInput,
    EvaluateRequest,
    ModelPreset,
    PlanRequest,
    PlanStatus,
    SolverLimits,
    TrainingSpec,
)
from solver import evaluate, plan

REQUEST = PlanRequest(model=ModelPreset(preset="llama-3.1-405b"),
                      cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=2),
                      training=TrainingSpec(global_batch_size=16, sequence_length=4096),
                      solver=SolverLimits(time_limit_s=60, top_k=0, num_workers=1))


def test_405b_on_16_gpus_needs_exactly_13_nodes_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The fewest-node search must finish to prove 13 minimal: generous relaxation budgets, so
    # that a loaded host does not leave it unproven. (With the default safety margin; without
    # it, memory_margin_frac=0, 12 nodes suffice.)
    generous_relaxation_budgets(monkeypatch)
    response = plan(REQUEST)
    assert response.status == PlanStatus.INFEASIBLE
    nodes = [r for r in response.explanation.relaxation_details if r.change == "num_nodes"]
    assert len(nodes) == 1
    relaxation = nodes[0]
    assert (relaxation.from_value, relaxation.to_value) == (2, 13)
    assert relaxation.minimal and "no plan on fewer than 104 GPUs" in relaxation.proof
    assert relaxation.text in response.explanation.relaxations
    assert relaxation.parallel is not None and relaxation.parallel.world_size == 104
    # The plan it gives is a plan: evaluate confirms it fits on 13 nodes.
    relaxed = REQUEST.cluster.model_copy(update={"num_nodes": 13})
    again = evaluate(EvaluateRequest(model=REQUEST.model, cluster=relaxed,
                                     training=REQUEST.training, parallel=relaxation.parallel))
    assert again.memory is not None and again.memory.fits
    assert again.time is not None and again.time.step_time_s == relaxation.step_time_s
    # One node fewer has no plan: the same fewest-GPU claim, checked directly.
    twelve = plan(REQUEST.model_copy(update={"cluster": REQUEST.cluster.model_copy(
        update={"num_nodes": 12})}))
    assert twelve.status == PlanStatus.INFEASIBLE and twelve.solver is not None
    assert twelve.solver.unexamined == 0


def test_the_narrowed_request_holds_its_declared_types() -> None:
    # The short search of a relaxation pins TP, micro-batch and schedule; the pinned request
    # must serialise without warnings (the mesh cache keys on its JSON).
    import warnings

    from api_schemas import PipelineSchedule
    from solver.relax import _narrow

    narrowed = _narrow(REQUEST).constraints
    assert narrowed.schedule is PipelineSchedule.ONE_F_ONE_B
    assert (narrowed.tp, narrowed.micro_batch_size) == (8, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        narrowed.model_dump_json()
