"""Going on from a finished search for a smaller space: the best plan of the request's space
less some schedules (and perhaps optimizer offload), from where the request's own search
ended (`SearchResult.continuation`) instead of a search of its own. The robust choice's
common-plan search uses it (`solver.api._common_plans`).

Owns: `resume`, what it keeps of the finished search and what it queues again. Must not:
bound or evaluate candidates itself (the search's loop does, `solver.planner`).
"""

import heapq
import time

from api_schemas.requests import Constraints
from solver.planner import (
    NO_PLAN_DIVE_SHARE,
    SearchResult,
    _branch_and_bound,
    _problem,
    _result,
    _state_what_is_unproven,
    hardware_constraints,
    objective_value,
)
from solver.search_state import RUN_BOUND, TABLE_BOUND, SearchProblem, SearchQueue
from solver.space import MeshCandidate
from solver.targets import target_constraints


def resume(result: SearchResult, constraints: Constraints, *,
           deadline: float) -> SearchResult | None:
    """The search under `constraints` (`result`'s with more schedules forbidden and perhaps
    optimizer offload no longer allowed, nothing else), went on from `result`'s finished
    search to `deadline` rather than run anew; None where `result` carries no continuation.

    Why it is the same search: the finished search's bounds hold for every plan of its space,
    so of the smaller one, and what it dropped (no fit, the target missed, no framework) is
    dropped there too. Its plans on allowed schedules, without offload where offload is no
    longer allowed, are the incumbent (the first best in ranked order); a mesh whose plan
    offloads is queued again, to be bounded from its table bound; the candidates it
    dismissed against its incumbent (`SearchQueue.dominated`) are queued again under their
    proven bound; the queued ones keep bound and order. The loop then runs with the smaller
    space's own problem (bounds, framework variants, evaluation). Where more than schedules
    differ (offload no longer allowed), memory is tighter: every candidate kept is first
    tested against the smaller space's memory bound and bounded again from its table bound,
    so that it is pruned where a search of its own would prune it.
    """
    state = result.continuation
    if state is None:
        return None
    started = time.perf_counter()
    old = state.problem
    narrowed = target_constraints(hardware_constraints(constraints, old.cluster, old.training))
    problem = _problem(old.spec, old.training, old.cluster, narrowed, old.objective)
    queue = _queue(state.queue, problem,
                   again=_but_schedules(old.constraints) != _but_schedules(narrowed))
    dive_from = started + (deadline - started) * NO_PLAN_DIVE_SHARE
    _branch_and_bound(problem, queue, [], deadline=deadline, dive_from=dive_from, watch=None,
                      progress=None)
    _state_what_is_unproven(queue, [])
    return _result(problem, queue, list(result.world_sizes), time.perf_counter() - started)


def _queue(done: SearchQueue, problem: SearchProblem, *, again: bool) -> SearchQueue:
    """The smaller space's queue from the finished search's (`done`), `resume`'s rules;
    `again`: more than schedules differ, so every candidate is bounded again."""
    forbidden = {str(value) for value in problem.constraints.forbid.get("schedule", [])}
    tables, zero, capacity = problem.tables, max(problem.zeros, default=0), problem.capacity_bytes

    def kept(c: MeshCandidate) -> bool:
        return c.schedule.value not in forbidden and not (again and tables.memory_bound_bytes(
            c, max_zero=zero, max_offload=problem.max_offload) > capacity)

    queue = SearchQueue(heap=[(b, o, TABLE_BOUND if again else level, c)
                              for b, o, level, c in done.heap if kept(c)],
                        total=done.total, pruned_memory=done.pruned_memory)
    if not again:
        queue.forced_zero, queue.zero3_bound = dict(done.forced_zero), dict(done.zero3_bound)
        queue.makespan, queue.zero_floors = dict(done.makespan), dict(done.zero_floors)
    level = TABLE_BOUND if again else RUN_BOUND
    queue.heap.extend((b, o, level, c) for b, o, c in done.dominated if kept(c))
    # Offloading plans are set aside only where offload is no longer allowed (`again`): no
    # bound is kept by queue order then, so new orders past the finished search's do. They
    # are queued under 0 and bounded from their table bound on their first pop: a plan's
    # value bounds its mesh only where the plan is the mesh's best in this space, which the
    # narrower search's seed need not be.
    fresh = iter(range(done.total, done.total + len(done.ranked)))
    for plan in done.ranked:
        if not kept(plan.candidate):
            continue
        if problem.constraints.allow_optimizer_offload or not plan.parallel.optimizer_offload_frac:
            queue.ranked.append(plan)
            value = objective_value(plan, problem.objective)
            if value < queue.best_value:
                queue.best, queue.best_value = plan, value
        else:
            queue.heap.append((0.0, next(fresh), TABLE_BOUND, plan.candidate))
    heapq.heapify(queue.heap)
    return queue


def _but_schedules(constraints: Constraints) -> Constraints:
    """`constraints` without their forbidden schedules."""
    forbid = {name: values for name, values in constraints.forbid.items() if name != "schedule"}
    return constraints.model_copy(update={"forbid": forbid})


__all__ = ["resume"]
