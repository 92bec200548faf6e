"""What throughput a request can reach when its tokens/s target is proven out of reach.

Owns: `highest_reachable`, which turns a finished search that found no plan reaching the
target into the fastest plan of the same space (the throughput objective over the GPU
counts the request's objective searches, within the request's deadline) with a ceiling no
plan exceeds, and `target_relaxation`, the structured change 'lower the target to what the
fastest plan reaches'. Must not: search anything but that one fastest-plan search, or word
anything beyond the relaxation's own text.
"""

import math
import time
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.plan import PlanStatus, Relaxation
from api_schemas.requests import Constraints, Objective, SolverLimits
from api_schemas.training import TrainingSpec
from api_schemas.units import MAX_REQUEST_TIME_LIMIT_S, MIN_TIME_LIMIT_S
from solver.candidate_eval import ScoredPlan
from solver.explain import describe_parallel
from solver.planner import SearchResult, objective_world_sizes, search

CEILING_TOLERANCE = 1e-9
"""Relative slack within which the fastest plan's tokens/s counts as equal to the ceiling
(the two come from the same cost model by different arithmetic)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reach:
    """The fastest plan of the space and what is proven about it."""

    fastest: ScoredPlan | None
    """The fastest plan found on any allowed GPU count (None: none within the time)."""
    ceiling: float
    """Tokens/s no plan of the space exceeds (proven)."""

    @property
    def tokens_per_s(self) -> float | None:
        """What the fastest plan found reaches."""
        return self.fastest.estimate.tokens_per_s if self.fastest is not None else None

    @property
    def proven(self) -> bool:
        """Whether the fastest plan found is proven the fastest of the space."""
        reached = self.tokens_per_s
        return reached is not None and reached >= self.ceiling * (1.0 - CEILING_TOLERANCE)


def highest_reachable(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                      constraints: Constraints, result: SearchResult, *,
                      num_workers: int, deadline: float) -> Reach | None:
    """The fastest plan on any GPU count the request's objective searches, when `result`
    (a finished search with a throughput target) proved that no plan reaches the target;
    None otherwise, and for the least-memory objective (whose plans are not the fastest of
    their candidates, so the fastest plan's throughput is no target it would meet).

    The fastest plan is searched with the throughput objective over the same GPU counts
    and the request's other constraints, stopping at `deadline` (a `time.perf_counter()`
    value). The ceiling is the smaller of the target search's (`SearchResult.reach_ceiling`)
    and, when that search stopped at the deadline, tokens per step over its proven
    step-time bound; when it finished, its plan is the fastest and the ceiling its value."""
    if (result.reach_ceiling is None or constraints.target_tokens_per_s is None
            or result.objective == Objective.MIN_MEMORY):
        return None
    ceiling = result.reach_ceiling
    fastest = result.fastest_missed
    remaining_s = min(deadline - time.perf_counter(), MAX_REQUEST_TIME_LIMIT_S)
    if remaining_s < MIN_TIME_LIMIT_S:
        return Reach(fastest=fastest, ceiling=max(ceiling, _tokens_per_s(fastest)))
    open_constraints = constraints.model_copy(update={"target_tokens_per_s": None})
    limits = SolverLimits(time_limit_s=remaining_s, top_k=0, num_workers=num_workers)
    found = search(spec, training, cluster, constraints=open_constraints,
                   objective=Objective.THROUGHPUT, limits=limits, deadline=deadline,
                   world_sizes=tuple(objective_world_sizes(cluster, open_constraints,
                                                           result.objective)))
    if found.best is not None:
        if fastest is None or (found.best.estimate.step_time_s
                               < fastest.estimate.step_time_s):
            fastest = found.best
        bound = found.stats.best_bound
        if found.status == PlanStatus.OPTIMAL:
            ceiling = min(ceiling, found.best.estimate.tokens_per_s)
        elif bound is not None and bound > 0:
            ceiling = min(ceiling, training.tokens_per_step / bound)
    return Reach(fastest=fastest, ceiling=max(ceiling, _tokens_per_s(fastest)))  # rounding


def _tokens_per_s(plan: ScoredPlan | None) -> float:
    return plan.estimate.tokens_per_s if plan is not None else 0.0


def target_relaxation(target: float, reach: Reach) -> Relaxation | None:
    """'Lower the target to what the fastest plan reaches', with that plan; minimal when
    that plan is proven the fastest of the space. None when no plan was found."""
    plan, reached = reach.fastest, reach.tokens_per_s
    if plan is None or reached is None:
        return None
    # Round down so that the relaxed target is met by the plan it names.
    to_value = math.floor(reached)
    proof = ("the fastest plan on every GPU count searched was found to completion: no plan "
             f"exceeds {reached:,.0f} tokens/s" if reach.proven else
             f"the fastest-plan search hit its time limit; no plan exceeds "
             f"{reach.ceiling:,.0f} tokens/s, so a higher target may be reachable")
    text = (f"target {to_value:,} tokens/s instead of {target:,.0f}: "
            f"{describe_parallel(plan.parallel)} on {plan.estimate.world_size} GPUs at "
            f"{plan.estimate.step_time_s:.2f} s per step")
    return Relaxation(change="target_tokens_per_s", from_value=target, to_value=to_value,
                      parallel=plan.parallel, step_time_s=plan.estimate.step_time_s,
                      minimal=reach.proven, proof=proof, text=text)


__all__ = ["CEILING_TOLERANCE", "Reach", "highest_reachable", "target_relaxation"]
