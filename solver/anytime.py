"""Anytime quality: a wide search never answers worse than a search over a subset of its
space would in the same time.

Owns: how a wide target's search (the released frameworks, or 'any') is guarded against the
time limit, and what the answer says about it. Under the objectives that search every
node count (`SEED_FIRST`), `SEED_FRAMEWORK`'s narrower space is searched first with
`SEED_SHARE` of the time and its best plan seeds the wide search as incumbent (a plan of the
wide space, so a wide search that completes still proves its optimum). Otherwise the wide
search runs first with `1 - SEED_SHARE` of the time. When it completes, its answer is the
optimum of a space that holds every narrower one, so no narrower search can beat it and
nothing more is done. When
the limit cuts it, the rest of the time goes to `SEED_FRAMEWORK`'s narrower space, seeded
with the wide search's incumbent: it only spends time on plans that would improve the
answer, and the answer is the better of the two. The narrower search goes on from the wide
search's queue (`solver.resume.continue_narrower`: the wide bounds hold for the narrower
space, and where the limit fell in the wide listing it lists the rest) instead of listing
and bounding its own candidates again, which on the largest spaces took most of its share;
where the wide search left nothing to go on from (the limit fell while its first candidate
list was made), it is a search of its own (`solver.planner.search(seed=)`), its bounds
pruning against that plan from the first candidate. The wide search's proven bound still bounds
the wide space, so the gap is reported against the better plan. Running the narrow search
first for every objective cost 46% more CPU over the plan set of tests/solver/plan_set.py
(7.2 -> 10.5 s) for the same answers. Must not: evaluate candidates itself or change the
request's constraints beyond the framework.
"""

import dataclasses
import time
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.plan import PlanStatus
from api_schemas.requests import Constraints, Objective, SolverLimits
from api_schemas.training import TrainingSpec
from solver.candidate_eval import ScoredPlan
from solver.planner import Progress, SearchResult, objective_value, search
from solver.progress import listening
from solver.resume import continue_narrower
from solver.targets import ANY

SEED_FRAMEWORK = "megatron-lm"
"""The narrower space searched when a wide search is cut: the released framework with the
widest capability table (`models/data/frameworks.json`: every mesh axis, ZeRO stage and activation
policy the search enumerates for a dense model, with no experimental schedule), so its best
plan is also the common plan the robust choice compares an experimental optimum with."""

SEED_SHARE = 0.3
"""Share of the search's time kept for the narrower search when the wide one is cut. On
Llama 3.1 70B on 64 H100 with the cost objective the Megatron-LM-restricted search completes
in about half the time of the released-target search on this 2-core machine; the wide
search keeps most of the limit, which is what it needs when it completes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Seeded:
    """The answer's search result and the narrower search's, when one ran."""

    result: SearchResult
    """The wide search's result, with the narrower search's plan as best when it is better."""
    seed: SearchResult | None
    """The narrower search (None when the target is not wide or the wide search completed)."""
    framework: str | None
    """The framework whose space was searched after the wide search was cut."""
    seed_value: float | None
    """The narrower search's best objective value (None: it found no plan)."""
    from_seed: bool
    """Whether the answer's plan came from the narrower search."""


SEED_FIRST = (Objective.COST_PER_TOKEN, Objective.MIN_GPUS)
"""Objectives whose wide search starts from the narrower space's best plan rather than
falling back to it: they search every whole-node count, a space large enough that the limit
often cuts the wide search, and there the seed's pruning pays for the narrower search. Llama
3.1 70B on 64 H100, cost per token, 'any', 10 s: seeded first, the wide search completed
(optimal, $0.4918 per million tokens at $2 per GPU-hour); run first with 70% of the limit it
was cut, and the fallback answered Megatron-LM's $0.4933, unproven. The single-size
objectives (throughput, least memory) complete within the limit on the plan set, where
seeding them first cost 46% more CPU."""


def is_wide(framework: str | None) -> bool:
    """Whether a target admits more than one framework's space (released or 'any')."""
    return framework is None or framework == ANY


def _complete(result: SearchResult) -> bool:
    return result.status in (PlanStatus.OPTIMAL, PlanStatus.INFEASIBLE)


def seeded_search(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec, *,
                  constraints: Constraints, objective: Objective, limits: SolverLimits,
                  progress: Progress | None, deadline: float) -> Seeded:
    """`solver.planner.search`, with the narrower search after a wide search the limit cut
    (see the module docstring)."""
    if not is_wide(constraints.framework):
        result = search(spec, training, cluster, constraints=constraints, objective=objective,
                        limits=limits, progress=progress, deadline=deadline)
        return Seeded(result=result, seed=None, framework=None, seed_value=None,
                      from_seed=False)
    now = time.perf_counter()
    narrow_constraints = constraints.model_copy(update={"framework": SEED_FRAMEWORK,
                                                        "framework_version": None})
    if objective in SEED_FIRST:
        with listening(lambda _: None):  # the wide search reports the seed as incumbent
            first = search(spec, training, cluster, constraints=narrow_constraints,
                           objective=objective, limits=limits,
                           deadline=now + max(0.0, deadline - now) * SEED_SHARE)
        result = search(spec, training, cluster, constraints=constraints, objective=objective,
                        limits=limits, progress=progress, deadline=deadline, seed=first.best)
        value = None if first.best is None else objective_value(first.best, objective)
        return Seeded(result=result, seed=first, framework=SEED_FRAMEWORK, seed_value=value,
                      from_seed=first.best is not None and result.best is first.best)
    wide = search(spec, training, cluster, constraints=constraints, objective=objective,
                  limits=limits, progress=progress,
                  deadline=now + max(0.0, deadline - now) * (1.0 - SEED_SHARE))
    if _complete(wide):
        return Seeded(result=wide, seed=None, framework=None, seed_value=None,
                      from_seed=False)
    # Its reports are not passed on: the wide search's final report was the last one.
    with listening(lambda _: None):
        narrow = continue_narrower(wide, narrow_constraints, deadline=deadline)
        if narrow is None:  # the wide search left nothing to go on from
            narrow = search(spec, training, cluster, constraints=narrow_constraints,
                            objective=objective, limits=limits, deadline=deadline,
                            seed=wide.best)
    found = narrow.best if narrow.best is not wide.best else None
    value = None if found is None else objective_value(found, objective)
    if found is None or value is None:
        return Seeded(result=wide, seed=narrow, framework=SEED_FRAMEWORK, seed_value=None,
                      from_seed=False)
    return Seeded(result=_with_best(wide, found, value), seed=narrow,
                  framework=SEED_FRAMEWORK, seed_value=value, from_seed=True)


def _with_best(wide: SearchResult, best: ScoredPlan, value: float) -> SearchResult:
    """The wide result with a better plan of its space as best: unproven, its gap against
    the wide search's proven bound."""
    bound = wide.stats.best_bound
    gap = None if bound is None else max(0.0, (value - bound) / value) if value else 0.0
    ranked = tuple(sorted((best, *wide.ranked), key=lambda p: objective_value(p, wide.objective)))
    return dataclasses.replace(wide, best=best, ranked=ranked, status=PlanStatus.FEASIBLE,
                               stats=dataclasses.replace(wide.stats, gap=gap))


__all__ = ["SEED_FIRST", "SEED_FRAMEWORK", "SEED_SHARE", "Seeded", "is_wide", "seeded_search"]
