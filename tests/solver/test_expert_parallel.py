"""Expert parallelism in the open: beside an MoE plan with EP = 1, the best EP > 1 plan and
the terms that separate them."""

import math
import time

from api_schemas import Constraints, Objective, SolverLimits, TrainingSpec
from models.catalog.presets import cluster_preset, model_preset
from solver.expert_parallel import best_with_expert_parallelism, compare
from solver.planner import hardware_constraints, search
from solver.targets import target_constraints

SPEC = model_preset("olmoe-1b-7b-0924")
CLUSTER = cluster_preset("h100-sxm5-80gb", num_nodes=1)
TRAINING = TrainingSpec(global_batch_size=256, sequence_length=4096)
LIMITS = SolverLimits(time_limit_s=60, top_k=0, num_workers=1)


def _constraints(**pins: object) -> Constraints:
    return target_constraints(hardware_constraints(Constraints(**pins), CLUSTER, TRAINING))


def test_the_best_ep_plan_is_found_and_set_beside_an_ep1_plan() -> None:
    only_ep1 = _constraints(ep=1)
    first = search(SPEC, TRAINING, CLUSTER, constraints=only_ep1,
                   objective=Objective.THROUGHPUT, limits=LIMITS)
    assert first.best is not None and first.best.parallel.ep == 1
    open_ = _constraints()
    other = best_with_expert_parallelism(SPEC, TRAINING, CLUSTER, open_, Objective.THROUGHPUT,
                                         LIMITS, first, deadline=time.perf_counter() + 60)
    assert other is not None and other.parallel.ep > 1
    # It is the open search's best when that best has EP > 1.
    unrestricted = search(SPEC, TRAINING, CLUSTER, constraints=open_,
                          objective=Objective.THROUGHPUT, limits=LIMITS)
    assert unrestricted.best is not None
    if unrestricted.best.parallel.ep > 1:
        assert math.isclose(other.estimate.step_time_s, unrestricted.best.estimate.step_time_s)
    side = compare(SPEC, TRAINING, CLUSTER, first.best, other)
    assert side.best_ep is not None and side.best_ep_parallel is not None
    assert side.chosen.ep == 1 and side.best_ep.ep == other.parallel.ep
    assert side.best_ep.step_time_s == other.estimate.step_time_s
    assert side.best_ep.peak_bytes == other.ledger.peak_bytes
    # Same micro-batch shape: each local expert sees ep times the tokens.
    if side.best_ep_parallel.micro_batch_size == first.best.parallel.micro_batch_size and (
            side.best_ep_parallel.tp == first.best.parallel.tp):
        assert math.isclose(side.best_ep.tokens_per_expert,
                            side.chosen.tokens_per_expert * side.best_ep.ep)
    assert side.chosen.exposed_expert_all_to_all_s == 0.0
    for words in ("tokens per local expert", "grouped-GEMM efficiency", "all-to-all",
                  "gathered under ZeRO-3", "peak memory"):
        assert words in side.summary


def test_with_no_time_left_the_first_search_plans_are_compared() -> None:
    first = search(SPEC, TRAINING, CLUSTER, constraints=_constraints(),
                   objective=Objective.THROUGHPUT, limits=LIMITS)
    with_ep = [p for p in first.ranked if p.parallel.ep > 1]
    found = best_with_expert_parallelism(SPEC, TRAINING, CLUSTER, _constraints(),
                                         Objective.THROUGHPUT, LIMITS, first,
                                         deadline=time.perf_counter())
    if with_ep:
        assert found is not None and found.parallel.ep > 1
    else:
        assert found is None
    assert first.best is not None
    alone = compare(SPEC, TRAINING, CLUSTER, first.best, None)
    assert alone.best_ep is None and alone.summary.startswith("EP = 1: no plan with EP > 1")


def test_a_plan_with_ep1_answers_with_the_best_ep_plan_beside_it() -> None:
    """OLMoE on 8 H100 with the NCCL all-to-all and no overlaps fixed: EP 1 wins, and the
    answer shows the best EP > 1 plan with the terms that separate them."""
    from api_schemas import ClusterInput, ModelPreset, PlanRequest
    from solver import plan

    fixed = TRAINING.model_copy(update={"moe_dispatcher": "alltoall", "overlap_ep_comm": False,
                                        "overlap_tp_comm": False})
    response = plan(PlanRequest(model=ModelPreset(preset="olmoe-1b-7b-0924"),
                                cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=1),
                                training=fixed, solver=LIMITS))
    assert response.parallel is not None and response.parallel.ep == 1
    side = response.expert_parallel
    assert side is not None and side.best_ep is not None and side.best_ep_parallel is not None
    assert side.best_ep.ep == side.best_ep_parallel.ep > 1
    assert response.time is not None
    assert side.chosen.step_time_s == response.time.step_time_s
    assert side.best_ep.step_time_s >= side.chosen.step_time_s
    assert side.best_ep.exposed_expert_all_to_all_s > side.chosen.exposed_expert_all_to_all_s
    assert side.summary.startswith("EP = 1 chosen: the best EP ")
