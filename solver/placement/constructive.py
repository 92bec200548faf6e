"""Fast constructive MoonEP placement: fill each underloaded rank exactly once.

Owns: the online planner. Ranks have balances b_d = G_d - S*K (G_d = load of d's home
experts); each step takes the most underloaded rank u, fills its whole deficit q = -b_u
with tokens of experts homed on currently overloaded ranks, and never touches u again.
Routes, traffic and the bound check come from `problem.build_result`. Must not: import
OR-Tools (the exact reference is `exact.py`).

Why the E/R bound holds (Kimi K3, arXiv:2607.24653, Appendix E, as recorded in seed ledger
Sec. 6.4): any overloaded rank h keeps S*K + b_h >= S*K >= q of its own tokens, so its E/R
experts can fill u alone; each receiver is filled once, so it hosts at most E/R replicas.
A donor that gives more than its excess turns into a receiver and is filled later, once;
each step zeroes one balance and a rank turns from donor into receiver at most once, so
there are fewer than 2R steps.

Rules (`ConstructiveRule`):
- REFERENCE: the MoonEP planning reference. Pair first (most overloaded donor fills the
  most underloaded rank), then for each donor let the largest remaining quota take from its
  largest remaining expert until all quotas are met.
- COVER (default), our tie rules. If one expert of the most overloaded donor covers q,
  u takes q from a covering expert (one replica): the one with most tokens from u itself
  (they then never leave u), the tightest cover on ties. Otherwise u takes
  whole experts, largest first over all overloaded donors (a donor's second-largest only
  after every donor's largest of equal size, so the overshoot spreads), until one expert
  covers the rest; that last piece prefers a donor whose excess still covers it (no
  overshoot), the tightest such. Taking the largest pieces of the union needs no more
  pieces than the proof's single donor, so the bound still holds. On the tight
  construction this finds the optimum where filling from a single donor chains overshoots
  (E=32, R=8: 7 replicas instead of 16).
"""

import bisect
import heapq
import time
from collections.abc import Sequence
from dataclasses import replace
from enum import StrEnum

import numpy as np

from models.errors import InvalidSpecError
from solver.placement.problem import (
    IntArray,
    PlacementProblem,
    PlacementResult,
    build_result,
    placement_problem,
)

Move = tuple[int, int, int]
"""(expert, destination rank, tokens) taken from the expert's home rank."""


class ConstructiveRule(StrEnum):
    """Tie rules of the constructive planner."""

    REFERENCE = "reference"
    """MoonEP planning reference: argmax-argmin pairing, largest quota from largest expert."""
    COVER = "cover"
    """Fewest pieces per receiver, tightest cover, spread overshoot (default)."""


def pair_balances(balance: list[int]) -> list[tuple[int, int, int]]:
    """Reference pairing: (donor, receiver, quota) with argmax balance filling argmin."""
    donors = [(-b, d) for d, b in enumerate(balance) if b > 0]
    heapq.heapify(donors)
    receivers = sorted((-b, d) for d, b in enumerate(balance) if b < 0)  # (deficit, rank)
    pairs = []
    while donors:
        neg_excess, h = heapq.heappop(donors)
        deficit, u = receivers.pop()
        pairs.append((h, u, deficit))
        left = -neg_excess - deficit
        if left > 0:
            heapq.heappush(donors, (-left, h))
        elif left < 0:
            bisect.insort(receivers, (-left, h))
    assert not receivers, "balances must sum to zero"
    return pairs


def _reference_moves(problem: PlacementProblem) -> list[Move]:
    """Moves of the MoonEP planning reference."""
    m = problem.experts_per_rank
    quotas: dict[int, list[int]] = {}
    for h, u, q in pair_balances((problem.home_loads - problem.capacity).tolist()):
        quotas.setdefault(h, [0] * problem.num_ranks)[u] = q
    moves: list[Move] = []
    for h, quota in quotas.items():
        left = problem.expert_tokens[h * m:(h + 1) * m].tolist()
        while True:
            u = max(range(len(quota)), key=quota.__getitem__)
            if quota[u] <= 0:
                break
            i = max(range(m), key=left.__getitem__)
            take = min(left[i], quota[u])
            left[i] -= take
            quota[u] -= take
            moves.append((h * m + i, u, take))
    return moves


class _CoverState:
    """Balances, remaining expert loads and the donor heap of the COVER rule."""

    def __init__(self, problem: PlacementProblem, ranks: Sequence[int] | None = None) -> None:
        self.p = problem
        self.m = problem.experts_per_rank
        self.home_of = np.arange(problem.num_experts) // self.m
        self.bal = (problem.home_loads - problem.capacity).tolist()
        if ranks is not None:  # balance only this zero-sum group of ranks
            inside = set(ranks)
            self.bal = [b if d in inside else 0 for d, b in enumerate(self.bal)]
        self.rem = problem.expert_tokens.tolist()
        self.donors = [(-b, h) for h, b in enumerate(self.bal) if b > 0]
        heapq.heapify(self.donors)
        self.receivers = [(b, u) for u, b in enumerate(self.bal) if b < 0]
        heapq.heapify(self.receivers)
        self.moves: list[Move] = []

    def take(self, e: int, u: int, tokens: int) -> None:
        h = e // self.m
        self.rem[e] -= tokens
        before = self.bal[h]
        self.bal[h] = before - tokens
        self.moves.append((e, u, tokens))
        if self.bal[h] > 0:
            heapq.heappush(self.donors, (-self.bal[h], h))
        elif self.bal[h] < 0:
            heapq.heappush(self.receivers, (self.bal[h], h))

    def top_donor(self) -> int:
        while -self.donors[0][0] != self.bal[self.donors[0][1]]:
            heapq.heappop(self.donors)
        return self.donors[0][1]

    def fill(self, u: int, q: int) -> None:
        h = self.top_donor()
        own = self.p.counts[u]
        base = h * self.m
        # most tokens kept on u's own source first, then the tightest cover
        covering = [(-min(int(own[e]), q), self.rem[e], e) for e in range(base, base + self.m)
                    if self.rem[e] >= q]
        if covering:
            self.take(min(covering)[2], u, q)
        else:
            self._fill_many(u, q)
        self.bal[u] = 0

    def _fill_many(self, u: int, q: int) -> None:
        """Whole experts, largest first over all donors, then the tightest safe cover."""
        bal = np.asarray(self.bal, dtype=np.int64)
        rem = np.asarray(self.rem, dtype=np.int64)
        cand = np.flatnonzero((bal[self.home_of] > 0) & (rem > 0))
        r_c, donor = rem[cand], self.home_of[cand]
        by_donor = np.lexsort((-r_c, donor))
        sorted_donor = donor[by_donor]
        rank_in_donor = np.empty_like(by_donor)
        rank_in_donor[by_donor] = np.arange(cand.size) - np.searchsorted(sorted_donor,
                                                                          sorted_donor)
        order = np.lexsort((-bal[donor], rank_in_donor, -r_c))
        cand, r_c = cand[order], r_c[order]
        i = 0
        while q > 0:
            n_cover = int(np.searchsorted(-r_c[i:], -q, side="right"))
            if n_cover:
                window = cand[i:i + n_cover]
                slack = np.asarray([self.bal[int(e) // self.m] for e in window]) - q
                safe = np.flatnonzero(slack >= 0)
                # tightest donor excess first, then the tightest (last-listed) expert
                pick = safe[slack[safe] == slack[safe].min()][-1] if safe.size else n_cover - 1
                self.take(int(window[pick]), u, q)
                return
            e = int(cand[i])
            q -= self.rem[e]
            self.take(e, u, self.rem[e])
            i += 1

    def run(self) -> list[Move]:
        while self.receivers:
            b, u = heapq.heappop(self.receivers)
            if b != self.bal[u] or b >= 0:
                continue
            self.fill(u, -b)
        return self.moves


def constructive_allocation(
    problem: PlacementProblem, *, rule: ConstructiveRule = ConstructiveRule.COVER,
    rank_groups: Sequence[Sequence[int]] | None = None,
) -> IntArray:
    """The [E, R] allocation of the constructive planner (every rank gets exactly S*K).

    `rank_groups` (COVER only) partitions the unbalanced ranks into groups of zero total
    balance; each group is then balanced on its own, so tokens never cross groups.
    """
    p = problem
    if rule == ConstructiveRule.REFERENCE:
        moves = _reference_moves(p)
    elif rank_groups is None:
        moves = _CoverState(p).run()
    else:
        balance = p.home_loads - p.capacity
        moves = []
        for group in rank_groups:
            if int(balance[list(group)].sum()) != 0:
                raise InvalidSpecError(
                    f"rank_groups: ranks {list(group)} have total balance "
                    f"{int(balance[list(group)].sum())}; each group must sum to zero",
                    field="rank_groups",
                )
            moves.extend(_CoverState(p, group).run())
    alloc = np.zeros((p.num_experts, p.num_ranks), dtype=np.int64)
    home_of = np.arange(p.num_experts) // p.experts_per_rank
    alloc[np.arange(p.num_experts), home_of] = p.expert_tokens
    if moves:
        e, u, t = (np.asarray(col, dtype=np.int64) for col in zip(*moves, strict=True))
        np.add.at(alloc, (e, u), t)
        np.add.at(alloc, (e, home_of[e]), -t)
    return alloc


def plan_constructive(
    counts: object, *, top_k: int, weight_bytes_per_expert: int = 0,
    grad_bytes_per_expert: int = 0, rule: ConstructiveRule = ConstructiveRule.COVER,
) -> PlacementResult:
    """Plan redundant experts for one layer and micro-batch with exact balance.

    Args:
        counts: [R, E] tokens of source rank r routed to expert e (E/R home experts per
            rank, rows summing to S*K).
        top_k: K experts per token.
        weight_bytes_per_expert: bytes of one expert's weights (prefetch accounting).
        grad_bytes_per_expert: bytes of one expert's gradient (reduce accounting).
        rule: REFERENCE (MoonEP's reference) or COVER (our tie rules, default).

    Returns:
        The placement; `wall_time_s` covers validation, planning, routes and accounting.

    Raises:
        InvalidSpecError: on a malformed count matrix (see `placement_problem`).
    """
    started = time.perf_counter()
    problem = placement_problem(counts, top_k=top_k,
                                weight_bytes_per_expert=weight_bytes_per_expert,
                                grad_bytes_per_expert=grad_bytes_per_expert)
    alloc = constructive_allocation(problem, rule=rule)
    result = build_result(problem, alloc, planner=f"constructive-{rule.value}", wall_time_s=0.0)
    return replace(result, wall_time_s=time.perf_counter() - started)


__all__ = [
    "ConstructiveRule",
    "constructive_allocation",
    "pair_balances",
    "plan_constructive",
]
