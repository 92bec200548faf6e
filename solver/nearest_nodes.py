"""The nearest cluster size with a plan: the node-count relaxation that changes an
infeasible request the least.

Owns: probing whole-node counts by their distance from the request's (one fewer, one more,
two fewer, ...; fewer first at equal distance, since those run on the cluster the user has),
each with the request's own search on that many nodes, up to the fewest-node answer
(`solver.relax`), which is known to have a plan. A count the cluster size binds through
divisibility (a prime node count, a data-parallel degree that does not divide the batch)
usually has a plan one node away, where the fewest-GPU answer may be far smaller and much
slower. The answer is proven the nearest when every closer count's search completed without
a plan. Must not: change the request it was given.
"""

import time
from collections.abc import Callable

from api_schemas.plan import Relaxation
from api_schemas.requests import PlanRequest, SolverLimits
from api_schemas.units import MIN_TIME_LIMIT_S
from models.catalog.resolve import resolve_cluster, resolve_model
from solver.explain import describe_parallel
from solver.planner import SearchResult, search

MAX_PROBES = 8
"""Most node counts tried (four on each side): each is a full search on a cluster of the
request's size, and a request more than a few nodes from any count with a plan is bound by
memory, which the fewest-node answer covers."""


def _probe(request: PlanRequest, nodes: int, budget_s: float) -> SearchResult:
    cluster = request.cluster.model_copy(update={"num_nodes": nodes})
    limits = SolverLimits(time_limit_s=budget_s, top_k=0, num_workers=request.solver.num_workers)
    return search(resolve_model(request.model).spec, request.training,
                  resolve_cluster(cluster), constraints=request.constraints,
                  objective=request.objective, limits=limits,
                  deadline=time.perf_counter() + budget_s)


def _order(nodes: int, fewest: int) -> list[int]:
    """Counts by distance from `nodes`, fewer first at equal distance, none below `fewest`
    (no smaller count has a plan) and none past the first count known to have one."""
    out: list[int] = []
    for d in range(1, nodes):
        below, above = nodes - d, nodes + d
        if below >= fewest:
            out.append(below)
        if below == fewest or len(out) >= MAX_PROBES:
            break
        out.append(above)
    return out[:MAX_PROBES]


def nearest_nodes(request: PlanRequest, fewest: int | None,
                  budget: Callable[[], float]) -> Relaxation | None | str:
    """The node count nearest the request's with a plan (see the module docstring), given
    the fewest whole nodes with a plan (`fewest`; None when unknown); None when it is the
    fewest count itself (that relaxation already says it) or none is found within
    `MAX_PROBES`, a string when the time ran out first. `budget()` gives each probe's time."""
    nodes = request.cluster.num_nodes
    if fewest is None or fewest >= nodes:
        return None
    complete = True
    tried: list[int] = []
    for count in _order(nodes, fewest):
        seconds = budget()
        if seconds < MIN_TIME_LIMIT_S:
            return "the nearest node count"
        result = _probe(request, count, seconds)
        if result.best is None:
            complete = complete and result.stats.unexamined == 0
            tried.append(count)
            continue
        if count == fewest:
            return None
        best = result.best
        counts = (f"counts {', '.join(map(str, tried))} have" if len(tried) > 1
                  else f"count {tried[0]} has" if tried else "")
        proof = (f"the nearer {counts} no plan (searches completed)" if tried and complete else
                 "one node from the request's count" if not tried else
                 "a nearer count's search hit its time limit; it may have a plan")
        return Relaxation(change="num_nodes", from_value=nodes, to_value=count,
                          parallel=best.parallel, step_time_s=best.estimate.step_time_s,
                          minimal=complete, proof=proof,
                          text=f"{count} nodes instead of {nodes} (the nearest count with a "
                               f"plan): {describe_parallel(best.parallel)} at "
                               f"{best.estimate.step_time_s:.2f} s per step")
    return None


__all__ = ["MAX_PROBES", "nearest_nodes"]
