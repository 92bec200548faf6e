"""Minimal relaxations: each is structured (what changes, from, to, the plan it gives) and
the node count is the fewest that gives a plan, proven by a completed fewest-GPU search."""

import pytest
from relaxation_budgets import generous_relaxation_budgets

from api_schemas import (
    ClusterInput,
    Constraints,
    EvaluateRequest,
    ModelPreset,
    PlanRequest,
    PlanStatus,
    SolverLimits,
    TrainingSpec,
)
from api_schemas.hardware import ClusterSpec
from solver import evaluate, plan

REQUEST = PlanRequest(model=ModelPreset(preset="llama-3.1-405b"),
                      cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=2),
                      training=TrainingSpec(global_batch_size=16, sequence_length=4096),
                      # The optimizer states on the GPU (host memory would hold them on
                      # fewer nodes).
                      constraints=Constraints(allow_optimizer_offload=False),
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


class _SearchedCluster(Exception):
    """Raised by a stand-in search with the cluster size it was asked to search."""

    def __init__(self, world_size: int) -> None:
        super().__init__(world_size)
        self.world_size = world_size


def test_the_fewest_node_search_never_spans_more_than_its_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Near-zero GPU memory puts the ZeRO-3 state bound at ~1e12 GPUs; the fewest-GPU search
    # listed every whole-node count up to twice that and the process grew to tens of GB.
    # Now the relaxation proves at once that no count up to the cap holds the states.
    from solver import relax

    def no_search(*args: object, **kwargs: object) -> None:
        raise AssertionError("searched although the states cannot fit")

    monkeypatch.setattr(relax, "search", no_search)
    tiny = REQUEST.model_copy(update={"cluster": REQUEST.cluster.model_copy(
        update={"gpu_memory_bytes": 1, "memory_headroom_frac": 0.0})})
    states_bytes = relax.gpus_for_states(tiny)  # over a capacity of one byte
    assert states_bytes > 10**12
    assert relax._fewest_nodes(tiny, relax._Clock(None)) is None

    # States that fit below the cap, but whose doubled ceiling would pass it: the search
    # spans at most the cap's whole nodes.
    def record(spec: object, training: object, cluster: ClusterSpec, **kwargs: object) -> None:
        raise _SearchedCluster(cluster.world_size)

    monkeypatch.setattr(relax, "search", record)
    per_gpu = states_bytes // 100_000  # the states over ~100,000 GPUs
    near = REQUEST.model_copy(update={"cluster": REQUEST.cluster.model_copy(
        update={"gpu_memory_bytes": per_gpu, "memory_headroom_frac": 0.0})})
    needed = relax.gpus_for_states(near)
    assert relax.MAX_RELAXATION_GPUS // 2 < needed <= relax.MAX_RELAXATION_GPUS
    with pytest.raises(_SearchedCluster) as searched:
        relax._fewest_nodes(near, relax._Clock(None))
    assert searched.value.world_size == relax.MAX_RELAXATION_GPUS
