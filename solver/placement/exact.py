"""Exact CP-SAT reference for redundant-expert placement (offline, small instances).

Owns: the CP-SAT model of exactly balanced placement and its lexicographic solve: first the
fewest redundant experts (in total, or on the busiest rank), then the fewest remote tokens.
Must not: import OR-Tools directly (only through `solver.cpsat`), or be called per layer
online (the constructive planner is the online path).

Formulation (m = E/R, home(e) = e // m, cap = S*K, T_e = sum_r C[r, e]):
  variables  a[e,d] in [0, min(T_e, cap)]  tokens of e computed on rank d != home(e)
             y[e,d] in {0, 1}               e is hosted on d (a replica)
             l[e,d] in [0, C[d,e]]          tokens of e from source d computed on d (local)
  home load  h_e = T_e - sum_d a[e,d] >= 0
  C1 balance       sum_{e: home(e)=d} h_e + sum_{e: home(e)!=d} a[e,d] = cap     for all d
  C2 linking       a[e,d] <= min(T_e, cap) y[e,d],  y[e,d] <= a[e,d]
  C3 slots         sum_{e: home(e)!=d} y[e,d] <= m                                for all d
  C4 lower bound   sum_e y[e,d] >= L_d  (`redundancy_lower_bounds`, a valid cut)
  C5 incumbent     primary objective <= that of the constructive plan (never worse)
  C7 components    sum y >= n_nz - c_max (`transfer_lower_bound`, a valid cut)
  C6 locality      l[e,d] <= a[e,d] (or h_e when d = home(e))
  phase 1  minimise sum y (TOTAL) or max_d sum_e y[e,d] (MAX_PER_RANK, then sum y)
  phase 2  with phase 1 fixed, maximise sum l, i.e. minimise remote tokens = S*K*R - sum l
Routes of the optimum are built by `routes_from_allocation`, whose local-first matching
attains sum l for the allocation.
"""

import logging
import time
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from solver.cpsat import CpModel, IntVar, LinearExpr, SolveOutcome, SolverConfig, SolveStatus, solve
from solver.placement.constructive import constructive_allocation
from solver.placement.problem import (
    IntArray,
    PlacementProblem,
    placement_problem,
    redundancy_lower_bounds,
)
from solver.placement.results import PlacementResult, build_result

logger = logging.getLogger(__name__)


class ExactObjective(StrEnum):
    """Primary objective of the exact planner."""

    TOTAL = "total"
    """Fewest redundant experts over all ranks (fewest prefetches)."""
    MAX_PER_RANK = "max_per_rank"
    """Fewest redundant experts on the busiest rank, then fewest in total."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExactPlacement:
    """The exact planner's placement and its proof status."""

    placement: PlacementResult
    status: SolveStatus
    """Status of the primary phase (OPTIMAL: its objective is proven). The tie-breaks
    (total count under MAX_PER_RANK, remote tokens) are best effort within the limit."""
    objective: int
    """Primary objective of the returned plan."""
    best_bound: int
    """Proven lower bound of the primary objective."""
    traffic_status: SolveStatus
    """Status of the remote-token phase."""
    used_fallback: bool
    """True when CP-SAT found nothing and the constructive plan is returned."""


MAX_RANKS_FOR_COMPONENT_BOUND = 16
"""Largest number of unbalanced ranks for which the O(2^n n) zero-sum partition DP runs."""


def zero_sum_groups(balances: list[int]) -> list[list[int]]:
    """Split indices of `balances` (summing to 0) into the most zero-sum groups.

    Order the items group by group: a group closes each time the running sum returns to
    zero, so the most groups is the most zero prefix sums over all orders, a DP over
    subsets (O(2^n n)); the order of the best DP path gives the groups.
    """
    n = len(balances)
    total = [0] * (1 << n)
    best = [0] * (1 << n)
    last = [0] * (1 << n)
    for mask in range(1, 1 << n):
        low = (mask & -mask).bit_length() - 1
        total[mask] = total[mask & (mask - 1)] + balances[low]
        value, item = max((best[mask ^ (1 << i)], i) for i in range(n) if mask >> i & 1)
        best[mask], last[mask] = value + (total[mask] == 0), item
    order, mask = [], (1 << n) - 1
    while mask:
        order.append(last[mask])
        mask ^= 1 << last[mask]
    groups, current, running = [], [], 0
    for i in reversed(order):
        current.append(i)
        running += balances[i]
        if running == 0:
            groups.append(current)
            current = []
    assert not current and len(groups) == best[(1 << n) - 1]
    return groups


def max_zero_sum_parts(balances: list[int]) -> int:
    """Most parts a partition of `balances` (summing to 0) into zero-sum subsets can have."""
    return len(zero_sum_groups(balances)) if balances else 0


def _unbalanced(problem: PlacementProblem) -> tuple[list[int], list[int]]:
    balance = (problem.home_loads - problem.capacity).tolist()
    ranks = [d for d, b in enumerate(balance) if b != 0]
    return ranks, [balance[d] for d in ranks]


def transfer_lower_bound(problem: PlacementProblem) -> int | None:
    """Fewest replicas in total: n_nz - c_max, or None when there are too many ranks.

    Each replica (e, d) links rank home(e) to rank d. In a balanced placement every
    connected group of linked ranks has zero total balance and a group of c ranks needs
    at least c - 1 links, so replicas >= n_nz - (most zero-sum groups the n_nz unbalanced
    ranks can be split into). Source: our derivation (fixed-charge transport argument).
    """
    ranks, balances = _unbalanced(problem)
    if len(ranks) > MAX_RANKS_FOR_COMPONENT_BOUND:
        return None
    return len(ranks) - max_zero_sum_parts(balances)


def grouped_incumbent(problem: PlacementProblem) -> IntArray:
    """The better of the constructive plan and the constructive plan per zero-sum group."""
    plain = constructive_allocation(problem)
    ranks, balances = _unbalanced(problem)
    if not ranks or len(ranks) > MAX_RANKS_FOR_COMPONENT_BOUND:
        return plain
    groups = [[ranks[i] for i in g] for g in zero_sum_groups(balances)]
    grouped = constructive_allocation(problem, rank_groups=groups)
    return grouped if _replicas(grouped).sum() < _replicas(plain).sum() else plain


def _replicas(alloc: IntArray) -> npt.NDArray[np.bool_]:
    """[E, R] True where expert e has tokens on a rank other than its home."""
    hosted = alloc > 0
    e, r = alloc.shape
    hosted[np.arange(e), np.arange(e) // (e // r)] = False
    return hosted


@dataclass(frozen=True, slots=True, kw_only=True)
class _Vars:
    """Variable containers of the placement model."""

    moved: dict[tuple[int, int], IntVar]
    hosted: dict[tuple[int, int], IntVar]
    local: dict[tuple[int, int], IntVar]
    busiest: IntVar


def build_cp_model(
    problem: PlacementProblem, *, incumbent: IntArray, objective: ExactObjective
) -> tuple[CpModel, _Vars]:
    """CP-SAT model of C1-C6 (objectives are set by `plan_exact`)."""
    p = problem
    m, cap = p.experts_per_rank, p.capacity
    model = CpModel()
    moved: dict[tuple[int, int], IntVar] = {}
    hosted: dict[tuple[int, int], IntVar] = {}
    local: dict[tuple[int, int], IntVar] = {}
    for e in np.flatnonzero(p.expert_tokens).tolist():
        ub = min(int(p.expert_tokens[e]), cap)
        for d in range(p.num_ranks):
            if d == e // m:
                continue
            moved[e, d] = model.new_int_var(0, ub, f"a[{e},{d}]")
            hosted[e, d] = model.new_bool_var(f"y[{e},{d}]")
            model.add(moved[e, d] <= ub * hosted[e, d])  # C2
            model.add(hosted[e, d] <= moved[e, d])
    home_load = {}
    for e in range(p.num_experts):
        out = [moved[e, d] for d in range(p.num_ranks) if (e, d) in moved]
        home_load[e] = int(p.expert_tokens[e]) - LinearExpr.sum(out)
        if out:
            model.add(LinearExpr.sum(out) <= int(p.expert_tokens[e]))
    bounds = redundancy_lower_bounds(p)
    per_rank = []
    for d in range(p.num_ranks):
        homes = [home_load[e] for e in range(d * m, (d + 1) * m)]
        guests = [moved[e, dd] for (e, dd) in moved if dd == d]
        model.add(LinearExpr.sum(homes + guests) == cap)  # C1
        ys = [hosted[e, dd] for (e, dd) in hosted if dd == d]
        per_rank.append(LinearExpr.sum(ys))
        model.add(per_rank[-1] <= m)  # C3
        model.add(per_rank[-1] >= int(bounds[d]))  # C4
    busiest = model.new_int_var(0, m, "busiest")
    for expr in per_rank:
        model.add(busiest >= expr)
    replica = _replicas(incumbent)
    total = LinearExpr.sum(list(hosted.values()))
    links = transfer_lower_bound(p)
    if links is not None:
        model.add(total >= links)  # C7
    if objective == ExactObjective.TOTAL:
        model.add(total <= int(replica.sum()))  # C5
    else:
        model.add(busiest <= int(replica.sum(axis=0).max()))
    for d, e in zip(*(idx.tolist() for idx in np.nonzero(p.counts)), strict=True):
        served = home_load[e] if d == e // m else moved.get((e, d))
        if served is None:
            continue
        local[e, d] = model.new_int_var(0, int(p.counts[d, e]), f"l[{e},{d}]")
        model.add(local[e, d] <= served)  # C6
    return model, _Vars(moved=moved, hosted=hosted, local=local, busiest=busiest)


def _hint(model: CpModel, v: _Vars, alloc: IntArray, counts: IntArray) -> None:
    """Hint a complete feasible assignment (the incumbent allocation)."""
    model.clear_hints()  # type: ignore[no-untyped-call]
    for (e, d), var in v.moved.items():
        model.add_hint(var, int(alloc[e, d]))
        model.add_hint(v.hosted[e, d], int(alloc[e, d] > 0))
    for (e, d), var in v.local.items():
        model.add_hint(var, int(min(counts[d, e], alloc[e, d])))
    model.add_hint(v.busiest, int(_replicas(alloc).sum(axis=0).max()))


def _allocation(problem: PlacementProblem, v: _Vars, outcome: SolveOutcome) -> IntArray:
    p = problem
    alloc = np.zeros((p.num_experts, p.num_ranks), dtype=np.int64)
    for (e, d), var in v.moved.items():
        alloc[e, d] = outcome.solver.value(var)
    home = np.arange(p.num_experts) // p.experts_per_rank
    alloc[np.arange(p.num_experts), home] = p.expert_tokens - alloc.sum(axis=1)
    return alloc


def _phases(v: _Vars, objective: ExactObjective) -> list[LinearExpr]:
    total = LinearExpr.sum(list(v.hosted.values()))
    if objective == ExactObjective.TOTAL:
        return [total]
    return [LinearExpr.sum([v.busiest]), total]


def _fewest_remote(p: PlacementProblem, model: CpModel, v: _Vars, alloc: IntArray,
                   cfg: SolverConfig) -> tuple[IntArray, SolveStatus]:
    """Phase 2: the most local tokens under the bounds phase 1 added (its status, and the
    new allocation when it found one)."""
    _hint(model, v, alloc, p.counts)
    model.maximize(LinearExpr.sum(list(v.local.values())))
    outcome = solve(model, cfg)
    if outcome.has_solution:
        alloc = _allocation(p, v, outcome)
    return alloc, outcome.status


def plan_exact(
    counts: object, *, top_k: int, weight_bytes_per_expert: int = 0,
    grad_bytes_per_expert: int = 0, objective: ExactObjective = ExactObjective.TOTAL,
    minimize_remote: bool = True, config: SolverConfig | None = None,
) -> ExactPlacement:
    """Provably fewest redundant experts, then fewest remote tokens, under exact balance.

    Args:
        counts: [R, E] token counts (as for `plan_constructive`).
        top_k: K experts per token.
        weight_bytes_per_expert: bytes of one expert's weights.
        grad_bytes_per_expert: bytes of one expert's gradient.
        objective: TOTAL or MAX_PER_RANK redundancy first.
        minimize_remote: run phase 2 (fewest remote tokens); otherwise keep phase 1's plan.
        config: CP-SAT limits; each phase gets `max_time_s`.

    Returns:
        The plan with the status of each phase. The constructive plan (or, when better, the
        constructive plan run per zero-sum group of ranks) is the hint and an upper bound
        (C5), so the result never uses more redundant experts than the constructive plan.

    Raises:
        InvalidSpecError: on a malformed count matrix.
    """
    started = time.perf_counter()
    cfg = config or SolverConfig()
    p = placement_problem(counts, top_k=top_k, weight_bytes_per_expert=weight_bytes_per_expert,
                          grad_bytes_per_expert=grad_bytes_per_expert)
    incumbent = grouped_incumbent(p)
    model, v = build_cp_model(p, incumbent=incumbent, objective=objective)
    alloc, status, primary, bound = incumbent, SolveStatus.UNKNOWN, None, 0
    for phase, expr in enumerate(_phases(v, objective)):
        _hint(model, v, alloc, p.counts)
        model.minimize(expr)
        outcome = solve(model, cfg)
        if not outcome.has_solution:
            break
        alloc = _allocation(p, v, outcome)
        value = round(outcome.objective or 0)
        if phase == 0:
            status, primary, bound = outcome.status, value, round(outcome.best_bound or 0)
        model.add(expr <= value)
    traffic = SolveStatus.UNKNOWN
    used_fallback = primary is None
    if minimize_remote and not used_fallback:
        alloc, traffic = _fewest_remote(p, model, v, alloc, cfg)
    result = build_result(p, alloc, planner="exact", wall_time_s=0.0)
    if primary is None:
        primary = (result.num_redundant if objective == ExactObjective.TOTAL
                   else result.max_redundant_per_rank)
    logger.debug("exact placement: status=%s objective=%s bound=%s", status, primary, bound)
    return ExactPlacement(
        placement=replace(result, wall_time_s=time.perf_counter() - started), status=status,
        objective=primary, best_bound=bound, traffic_status=traffic,
        used_fallback=used_fallback,
    )


__all__ = [
    "ExactObjective",
    "ExactPlacement",
    "build_cp_model",
    "grouped_incumbent",
    "max_zero_sum_parts",
    "plan_exact",
    "transfer_lower_bound",
    "zero_sum_groups",
]
