"""Expert parallelism decided in the open: for an MoE plan without expert parallelism, the
best plan with EP > 1 beside it.

Owns: the EP > 1 search (the request's search with EP = 1 forbidden, within the time the
request has left; the search's own evaluated EP > 1 plans when that ends first) and the
comparison of the two plans' expert-side terms (`models.core.expert_terms`, the exposed
expert communication and the memory). Must not: change the chosen plan or compute a term
itself.
"""

import time

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.plan import ExpertParallelComparison, ExpertParallelFigures
from api_schemas.requests import Constraints, Objective, SolverLimits
from api_schemas.training import TrainingSpec
from models.core.expert_terms import expert_terms
from solver.candidate_eval import ScoredPlan
from solver.explain import gib
from solver.planner import SearchResult, objective_value, search
from solver.policy_summary import summarise_policies

MIN_EP_SEARCH_S = 0.2
"""Least time worth a second search; with less left, the first search's own EP > 1 plans
are compared."""


def figures(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
            plan: ScoredPlan) -> ExpertParallelFigures:
    """One plan's expert-side figures."""
    recipe = plan.training or training
    terms = expert_terms(spec, recipe, plan.parallel, cluster)
    assert terms is not None, "figures of an MoE plan"
    est = plan.estimate
    return ExpertParallelFigures(
        ep=plan.parallel.ep, step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s,
        peak_bytes=plan.ledger.peak_bytes, local_experts=terms.local_experts,
        tokens_per_expert=terms.tokens_per_expert,
        grouped_gemm_efficiency=terms.grouped_gemm_efficiency,
        zero3_expert_gather_bytes_per_pass=terms.zero3_expert_gather_bytes_per_pass,
        zero3_expert_gather_bytes_per_step=terms.zero3_expert_gather_bytes_per_step,
        exposed_expert_all_to_all_s=est.exposed_comm_s.get("ep", 0.0),
        exposed_expert_gradient_s=est.exposed_comm_s.get("edp", 0.0))


def best_with_expert_parallelism(spec: ModelSpec, training: TrainingSpec,
                                 cluster: ClusterSpec, constraints: Constraints,
                                 objective: Objective, limits: SolverLimits,
                                 result: SearchResult, *, deadline: float
                                 ) -> ScoredPlan | None:
    """The best plan with EP > 1: a search with EP = 1 forbidden until `deadline`, or, with
    too little time left or no answer from it, the best EP > 1 plan the first search
    evaluated."""
    found: ScoredPlan | None = None
    if deadline - time.perf_counter() >= MIN_EP_SEARCH_S:
        forbid = dict(constraints.forbid)
        forbid["ep"] = sorted({*map(int, forbid.get("ep", [])), 1})
        narrowed = constraints.model_copy(update={"forbid": forbid})
        other = search(spec, training, cluster, constraints=narrowed, objective=objective,
                       limits=limits.model_copy(update={"top_k": 0}), deadline=deadline)
        found = other.best
    evaluated = [p for p in result.ranked if p.parallel.ep > 1]
    if found is not None:
        evaluated.append(found)
    return min(evaluated, key=lambda p: objective_value(p, objective), default=None)


def compare(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
            chosen: ScoredPlan, other: ScoredPlan | None) -> ExpertParallelComparison:
    """The two plans side by side, with a sentence naming what separates them."""
    mine = figures(spec, training, cluster, chosen)
    if other is None:
        return ExpertParallelComparison(
            chosen=mine, summary="EP = 1: no plan with EP > 1 fits this cluster and recipe, "
            "or the time limit ended before one was found")
    theirs = figures(spec, training, cluster, other)
    slower = theirs.step_time_s / mine.step_time_s - 1.0
    parts = [f"the best EP {theirs.ep} plan takes {theirs.step_time_s:.3f} s per step "
             f"({slower:+.1%}) against {mine.step_time_s:.3f} s",
             f"tokens per local expert {mine.tokens_per_expert:,.0f} vs "
             f"{theirs.tokens_per_expert:,.0f} (grouped-GEMM efficiency "
             f"{mine.grouped_gemm_efficiency:.0%} vs {theirs.grouped_gemm_efficiency:.0%})",
             f"exposed expert all-to-all {mine.exposed_expert_all_to_all_s:.3f} s vs "
             f"{theirs.exposed_expert_all_to_all_s:.3f} s per step",
             f"expert weights gathered under ZeRO-3 "
             f"{gib(mine.zero3_expert_gather_bytes_per_step)} vs "
             f"{gib(theirs.zero3_expert_gather_bytes_per_step)} per step per GPU "
             f"(exposed expert-DP time {mine.exposed_expert_gradient_s:.3f} s vs "
             f"{theirs.exposed_expert_gradient_s:.3f} s)",
             f"peak memory {gib(mine.peak_bytes)} vs {gib(theirs.peak_bytes)}"]
    return ExpertParallelComparison(
        chosen=mine, best_ep=theirs, best_ep_parallel=summarise_policies(other.parallel),
        summary="EP = 1 chosen: " + "; ".join(parts))


__all__ = ["MIN_EP_SEARCH_S", "best_with_expert_parallelism", "compare", "figures"]
