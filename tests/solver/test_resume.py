"""A common-plan search went on from the request's finished search (`solver.resume.resume`)
finds what a search of its own finds: the same plan and step time, proven optimal; and it
declines a search that was cut by its limit."""

import dataclasses
import math

import pytest

from api_schemas import ClusterInput, Constraints, ModelPreset, Objective, SolverLimits
from api_schemas.plan import PlanStatus
from api_schemas.training import TrainingSpec
from models.catalog.resolve import resolve_cluster, resolve_model
from solver.outcomes import ScoredPlan
from solver.planner import SearchResult, search
from solver.resume import resume
from solver.robust_choice import experimental_schedules
from solver.search_state import Continuation
from solver.space import MeshCandidate

LIMITS = SolverLimits(time_limit_s=120)
"""Unused where a call passes `deadline=math.inf`: the searches run to their proof."""

CASES = {
    # Llama 3.1 70B on 64 H100 (the planner benchmark's problem): its optimum offloads the
    # optimizer, which the subspace no longer allows; the meshes whose best plan offloads are
    # queued again under that plan's value.
    "optimizer offload": ("llama-3.1-70b", "h100-sxm5-80gb", 8,
                          TrainingSpec(global_batch_size=512, sequence_length=8192),
                          Constraints(), False),
    # The same without offload, the subspace also forbidding the schedule of the optimum:
    # every plan of the finished search on it is dropped, the dismissed candidates on other
    # schedules are visited again.
    "the optimum's schedule": ("llama-3.1-70b", "h100-sxm5-80gb", 8,
                               TrainingSpec(global_batch_size=512, sequence_length=8192),
                               Constraints(allow_optimizer_offload=False), True),
}


def _searches(case: str) -> tuple[SearchResult, SearchResult | None, SearchResult, Constraints]:
    model, gpu, nodes, training, constraints, forbid_best = CASES[case]
    spec = resolve_model(ModelPreset(preset=model)).spec
    cluster = resolve_cluster(ClusterInput(gpu=gpu, num_nodes=nodes))
    whole = search(spec, training, cluster, constraints=constraints,
                   objective=Objective.THROUGHPUT, limits=LIMITS,
                   deadline=math.inf)
    assert whole.best is not None
    schedules = experimental_schedules()
    if forbid_best:
        schedules = [*schedules, whole.best.parallel.schedule.value]
    common = constraints.model_copy(update={"forbid": {"schedule": schedules},
                                            "allow_optimizer_offload": False})
    resumed = resume(whole, common, deadline=math.inf)
    fresh = search(spec, training, cluster, constraints=common, objective=Objective.THROUGHPUT,
                   limits=LIMITS, deadline=math.inf)
    return whole, resumed, fresh, common


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_resumed_search_finds_what_its_own_search_finds(case: str) -> None:
    whole, resumed, fresh, _ = _searches(case)
    assert whole.status == PlanStatus.OPTIMAL and whole.continuation is not None
    assert resumed is not None and resumed.best is not None and fresh.best is not None
    assert resumed.status == fresh.status == PlanStatus.OPTIMAL
    assert resumed.best.parallel == fresh.best.parallel
    assert resumed.best.estimate.step_time_s == fresh.best.estimate.step_time_s
    assert resumed.best.parallel.optimizer_offload_frac == 0
    # The subspace excludes the finished search's optimum.
    assert whole.best is not None
    assert resumed.best.estimate.step_time_s > whole.best.estimate.step_time_s
    # It goes on from the finished search: far fewer evaluations than a search of its own.
    assert resumed.stats.evaluated < fresh.stats.evaluated


def test_a_search_cut_by_its_limit_is_not_resumed() -> None:
    model, gpu, nodes, training, constraints, _ = CASES["optimizer offload"]
    spec = resolve_model(ModelPreset(preset=model)).spec
    cluster = resolve_cluster(ClusterInput(gpu=gpu, num_nodes=nodes))
    # A deadline already past: the search stops in its enumeration, whatever the host.
    cut = search(spec, training, cluster, constraints=constraints,
                 objective=Objective.THROUGHPUT, limits=LIMITS, deadline=0.0)
    assert cut.status != PlanStatus.OPTIMAL and cut.continuation is None
    assert resume(cut, constraints, deadline=math.inf) is None


def _moved(whole: SearchResult, target: MeshCandidate, *, offloads: ScoredPlan | None
           ) -> SearchResult:
    """`whole` as if its search had dismissed `target` against its incumbent (`offloads`
    None) or had scored it with the plan `offloads`, instead of leaving it queued."""
    state = whole.continuation
    assert state is not None
    queue = state.queue
    left = [entry for entry in queue.heap if entry[3] == target]
    assert left, "the subspace's optimum was left queued by the finished search"
    bound, order, _, _ = min(left)
    changes: dict[str, object] = {"heap": [entry for entry in queue.heap if entry[3] != target]}
    if offloads is None:
        changes["dominated"] = [*queue.dominated, (bound, order, target)]
    else:
        changes["ranked"] = [*queue.ranked, offloads]
    moved = dataclasses.replace(queue, **changes)
    return dataclasses.replace(whole, continuation=Continuation(state.problem, moved))


@pytest.mark.parametrize("how", ["dismissed", "scored with offload"])
def test_a_candidate_the_finished_search_set_aside_is_visited_again(how: str) -> None:
    """Where the subspace's optimum had been dismissed against the finished search's
    incumbent, or scored with a plan that offloads, the resumed search evaluates it again."""
    whole, _, fresh, common = _searches("the optimum's schedule")
    assert fresh.best is not None
    best = fresh.best
    offloads = None
    if how == "scored with offload":
        offloads = dataclasses.replace(best, parallel=best.parallel.model_copy(
            update={"optimizer_offload_frac": 1.0}))
    again = resume(_moved(whole, best.candidate, offloads=offloads), common, deadline=math.inf)
    assert again is not None and again.best is not None
    assert again.best.parallel == best.parallel
    assert again.best.estimate.step_time_s == best.estimate.step_time_s
