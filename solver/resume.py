"""Going on from a search for a smaller space, from where the search ended
(`SearchResult.continuation`) instead of a search of its own:
- `resume`: from a finished search, the best plan of the request's space less some schedules
  (and perhaps optimizer offload). The robust choice's common-plan search uses it
  (`solver.api._common_plans`).
- `continue_narrower`: from a search its time limit cut (in its visits, or in its listing,
  whose rest it lists), a plan better than its incumbent among the candidates a narrower
  framework target runs. The anytime guard's fallback search uses it (`solver.anytime`).

Owns: both, what they keep of the earlier search and what they queue again. Must not:
bound or evaluate candidates itself (the search's loop does, `solver.planner`).
"""

import dataclasses
import heapq
import time

from api_schemas.plan import PlanStatus
from api_schemas.requests import Constraints
from solver.planner import (
    NO_PLAN_DIVE_SHARE,
    SearchResult,
    _branch_and_bound,
    _enqueue,
    _problem,
    _result,
    _state_what_is_unproven,
    hardware_constraints,
    objective_value,
)
from solver.search_state import RUN_BOUND, TABLE_BOUND, Listing, SearchProblem, SearchQueue
from solver.space import MeshCandidate
from solver.targets import admits_mesh, target_constraints


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
    if state is None or result.status != PlanStatus.OPTIMAL:
        return None
    started = time.perf_counter()
    old = state.problem
    narrowed = target_constraints(hardware_constraints(constraints, old.cluster, old.training))
    problem = _problem(old.spec, old.training, old.cluster, narrowed, old.objective)
    queue = _queue(state.queue, problem,
                   again=_but_schedules(old.constraints) != _but_schedules(narrowed))
    return _went_on(problem, queue, result, started, deadline)


def continue_narrower(result: SearchResult, constraints: Constraints, *,
                      deadline: float) -> SearchResult | None:
    """The search under `constraints` (`result`'s with a narrower framework target, nothing
    else) for a plan better than `result`'s incumbent, went on from where `result`'s search
    was cut, to `deadline`; None where `result` carries no continuation (the limit fell
    while a candidate list was made, or it ran for the fewest GPUs).

    Why it may go on from there: a narrower target runs a subset of the plans of each
    candidate, and of the candidates, so every bound the cut search proved (a lower bound
    over more plans) holds for the narrower space, and every memory bound that dropped a
    candidate drops it there too. A candidate it evaluated has no narrower plan better than
    its own best, and one it dismissed has none below its incumbent at the time, so neither
    can beat the incumbent, which is this search's from the start (as `search(seed=)`).
    Left are the queued candidates the narrower target admits, kept under their bound, level
    and recorded floors, and, where the limit fell in the listing, the candidates it had not
    listed, listed now from where it stopped (`SearchQueue.listing`) under the narrower
    space's admission and bounds. The loop then runs with the narrower space's own problem
    (its framework variants and evaluation), so what it finds is a plan of that space; its
    bounds read the cut search's tables and optimistic recipe (`SearchProblem.tables`,
    `bound_training`), lower bounds over the wider space's plans that the cut search has
    filled, where tables of the narrower recipe would be computed again. What it does not
    prove: the narrower space's optimum (`result`'s incumbent need not lie in it).
    """
    state = result.continuation
    if state is None or result.status not in (PlanStatus.FEASIBLE, PlanStatus.UNKNOWN):
        return None
    started = time.perf_counter()
    old, done = state.problem, state.queue
    narrowed = target_constraints(hardware_constraints(constraints, old.cluster, old.training))
    # The cut search's bound tables and optimistic recipe: bounds over more plans, so they
    # hold here, and already filled for these candidates.
    problem = dataclasses.replace(
        _problem(old.spec, old.training, old.cluster, narrowed, old.objective),
        tables=old.tables, bound_training=old.bound_training)
    queue = SearchQueue(heap=[entry for entry in done.heap if admits_mesh(
                            problem.spec, problem.training, entry[3], problem.targets)],
                        total=done.total - done.unenumerated, pruned_memory=done.pruned_memory)
    heapq.heapify(queue.heap)
    _keep_floors(done, queue)
    if result.best is not None:
        queue.best, queue.best_value = result.best, objective_value(result.best, old.objective)
        queue.ranked.append(result.best)
    return _went_on(problem, queue, result, started, deadline, listing=done.listing)


def _went_on(problem: SearchProblem, queue: SearchQueue, result: SearchResult, started: float,
             deadline: float, *, listing: Listing | None = None) -> SearchResult:
    """The search's loop run on the queue made from `result`'s, to `deadline`, after
    listing the rest of `listing` where the earlier listing stopped."""
    dive_from = started + (deadline - started) * NO_PLAN_DIVE_SHARE
    if listing is not None:
        _enqueue(problem, queue, list(listing.sizes), deadline, dive_from=dive_from,
                 listing=listing)
    _branch_and_bound(problem, queue, [], deadline=deadline, dive_from=dive_from, watch=None,
                      progress=None)
    _state_what_is_unproven(queue, [])
    return _result(problem, queue, list(result.world_sizes), time.perf_counter() - started)


def _keep_floors(done: SearchQueue, queue: SearchQueue) -> None:
    """`queue` keeps the bounds `done` recorded per candidate (by queue order)."""
    queue.forced_zero, queue.zero3_bound = dict(done.forced_zero), dict(done.zero3_bound)
    queue.makespan, queue.zero_floors = dict(done.makespan), dict(done.zero_floors)


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
        _keep_floors(done, queue)
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


__all__ = ["continue_narrower", "resume"]
