"""Anytime quality: a wide search never answers worse than a search over a subset of its
space would in the same time.

Owns: the seeding of a wide target's search (the released frameworks, or 'any') with the
best plan of one framework's narrower space, and what the answer says about it. The narrow
search gets `SEED_SHARE` of the time (it ends sooner when it proves its optimum); the wide
search then starts from its plan as incumbent, so its bounds prune against that plan from
the first candidate and, whatever the time limit cuts, its answer is at least as good under
the objective. A seed is a plan of the wide space (the narrow target's features are a subset
of the wide target's), so a wide search that completes still proves its optimum. Must not:
evaluate candidates itself or change the request's constraints beyond the framework.
"""

import time
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.requests import Constraints, Objective, SolverLimits
from api_schemas.training import TrainingSpec
from solver.planner import Progress, SearchResult, objective_value, search
from solver.progress import listening
from solver.targets import ANY

SEED_FRAMEWORK = "megatron-lm"
"""The narrow space a wide target is seeded from: the released framework with the widest
capability table (`models/data/frameworks.json`: every mesh axis, ZeRO stage and activation
policy the search enumerates for a dense model, with no experimental schedule), so its best
plan is also the common plan the robust choice compares an experimental optimum with."""

SEED_SHARE = 0.3
"""Share of the search's time the seeding search may use. On Llama 3.1 70B on 64 H100
with the cost objective the Megatron-LM-restricted search completes in about half the time
of the released-target search on this 2-core machine, so a third of the limit lets it
finish on problems the wide search finishes in the whole limit, and leaves the wide search
most of it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Seeded:
    """The wide search's result and the seeding search's."""

    result: SearchResult
    seed: SearchResult | None
    """The narrow search (None when the target is not wide)."""
    framework: str | None
    """The framework whose space seeded the search."""
    seed_value: float | None
    """The seed's objective value (None: the narrow search found no plan)."""
    from_seed: bool
    """Whether the answer's plan is the seed (the wide search found nothing better)."""


def is_wide(framework: str | None) -> bool:
    """Whether a target admits more than one framework's space (released or 'any')."""
    return framework is None or framework == ANY


def seeded_search(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec, *,
                  constraints: Constraints, objective: Objective, limits: SolverLimits,
                  progress: Progress | None, deadline: float) -> Seeded:
    """`solver.planner.search`, seeded with `SEED_FRAMEWORK`'s best plan when the target is
    wide (see the module docstring)."""
    if not is_wide(constraints.framework):
        result = search(spec, training, cluster, constraints=constraints, objective=objective,
                        limits=limits, progress=progress, deadline=deadline)
        return Seeded(result=result, seed=None, framework=None, seed_value=None,
                      from_seed=False)
    now = time.perf_counter()
    narrow = constraints.model_copy(update={"framework": SEED_FRAMEWORK,
                                            "framework_version": None})
    # The seed's own reports are not passed on: the wide search reports its plan as the
    # first incumbent, and one search's reports end with one final report.
    with listening(lambda _: None):
        seed = search(spec, training, cluster, constraints=narrow, objective=objective,
                      limits=limits, deadline=now + max(0.0, deadline - now) * SEED_SHARE)
    result = search(spec, training, cluster, constraints=constraints, objective=objective,
                    limits=limits, progress=progress, deadline=deadline, seed=seed.best)
    value = None if seed.best is None else objective_value(seed.best, objective)
    return Seeded(result=result, seed=seed, framework=SEED_FRAMEWORK, seed_value=value,
                  from_seed=seed.best is not None and result.best is seed.best)


__all__ = ["SEED_FRAMEWORK", "SEED_SHARE", "Seeded", "is_wide", "seeded_search"]
