"""Fast constructive MoonEP placement: fill each underloaded rank exactly once.

Owns: the online planner. Ranks have balances b_d = G_d - S*K (G_d = load of d's home
experts); each step takes the most underloaded rank u, fills its whole deficit q = -b_u
with tokens of experts homed on currently overloaded ranks, and never touches u again.
Routes, traffic and the bound check come from `results.layer_accounts`, told that every plan
is balanced by construction (its rank loads are then the capacity and its lower bounds follow
from its replica counts); all layers of a model can be planned in one call
(`plan_constructive_layers`). Each entry point runs as a search
(`models.core.search_memo.within_search_memo`), so the placement's index arrays are built
once and kept on the process's memo, not once per ask. Must not: import OR-Tools (the exact
reference is `exact.py`).

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
from enum import StrEnum
from itertools import chain
from typing import Any

import numpy as np

from models.core.search_memo import within_search_memo
from models.errors import InvalidSpecError
from solver.placement.problem import (
    IntArray,
    LayerBatch,
    PlacementProblem,
    layers_array,
    matrix_array,
    single_layer,
    validated_layers,
)
from solver.placement.results import PlacementResult, layer_accounts
from solver.placement.routes import shape_index

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


SMALL_CANDIDATES = 32
"""Most candidate experts (donors x E/R) that `_CoverState._fill_many` sorts and scans in
plain Python; numpy sorts more (`_fill_from_arrays`). Measured on a 2-core x86 host (best
of timeit batches, states of the tight construction with some donors kept): at E/R = 4,
8 / 16 / 32 / 64 / 128 / 252 candidates took 5 / 9 / 17 / 33 / 67 / 136 us in Python and
16 / 17 / 17 / 19 / 21 / 27 us with numpy; at E/R = 24, 48 / 96 / 192 took 16 / 34 / 74 us
and 18 / 20 / 24 us."""


UNSAFE = np.iinfo(np.int64).max
"""Slack given to a cover whose donor it would turn into a receiver."""


class _CoverState:
    """Balances, remaining expert loads and the donor heap of the COVER rule.

    Per-step state lives in Python lists and heaps (a step touches a handful of entries);
    moves are kept as three parallel columns (expert, destination rank, tokens). A heap
    entry is one int: receiver u with balance b < 0 is b*R + u, donor h with excess x > 0
    is h - x*R; their order is that of the pairs (b, u) and (-x, h) (0 <= u, h < R), and
    an int compares several times quicker than a tuple. An entry whose balance no longer
    matches is stale and skipped.
    """

    def __init__(self, problem: PlacementProblem, ranks: Sequence[int] | None = None) -> None:
        self.p = problem
        self.m = problem.experts_per_rank
        self.bal: list[int] = (problem.home_loads - problem.capacity).tolist()
        if ranks is not None:  # balance only this zero-sum group of ranks
            inside = set(ranks)
            self.bal = [b if d in inside else 0 for d, b in enumerate(self.bal)]
        self.rem: list[int] = problem.expert_tokens.tolist()
        r = self.r = problem.num_ranks
        donors: list[int] = []
        receivers: list[int] = []
        for d, b in enumerate(self.bal):  # one loop: quicker than two comprehensions
            if b > 0:
                donors.append(d - b * r)
            elif b < 0:
                receivers.append(b * r + d)
        heapq.heapify(donors)
        heapq.heapify(receivers)
        self.donors, self.receivers = donors, receivers
        self.moved_expert: list[int] = []
        self.moved_to: list[int] = []
        self.moved_tokens: list[int] = []

    def take(self, e: int, u: int, tokens: int) -> None:
        h = e // self.m
        self.rem[e] -= tokens
        left = self.bal[h] - tokens
        self.bal[h] = left
        self.moved_expert.append(e)
        self.moved_to.append(u)
        self.moved_tokens.append(tokens)
        if left > 0:
            heapq.heappush(self.donors, h - left * self.r)
        elif left < 0:
            heapq.heappush(self.receivers, left * self.r + h)

    def _candidates(self) -> tuple[list[int], list[int]] | None:
        """The experts with tokens left on ranks with excess, in the order `_fill_many`
        takes them, and their tokens negated (ascending), sorted in plain Python while the
        donors hold at most `SMALL_CANDIDATES` experts (numpy's per-call cost would
        dominate); None above that (`_candidate_arrays` sorts them with numpy).

        Order: tokens (largest first), then the expert's place among its donor's experts
        by tokens (so a donor's second-largest comes after every donor's largest of equal
        size), then the donor's excess (largest first), then the expert index.
        """
        bal, rem, m = self.bal, self.rem, self.m
        donors = [h for h, excess in enumerate(bal) if excess > 0]
        if len(donors) * m > SMALL_CANDIDATES:
            return None
        keyed: list[tuple[int, int, int, int]] = []
        for h in donors:
            mine = sorted([(-rem[e], e) for e in range(h * m, h * m + m) if rem[e] > 0])
            keyed += [(neg, place, -bal[h], e) for place, (neg, e) in enumerate(mine)]
        keyed.sort()
        return [k[3] for k in keyed], [k[0] for k in keyed]

    def _candidate_arrays(self, bal_arr: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        """`_candidates` sorted with numpy, given the balances as an array: the experts,
        their tokens (descending) and their donors, as arrays.

        An expert's place among its donor's experts is its rank in the donor's row of
        [R, E/R] remaining loads (largest first, lower index on ties): the donor's spent
        experts (0 tokens, not candidates) rank after every candidate, so they leave the
        candidates' places as they are."""
        rem_arr = np.fromiter(self.rem, np.int64, len(self.rem))  # quicker than asarray
        negated = -rem_arr
        place = negated.reshape(self.r, self.m).argsort(axis=1, kind="stable").argsort(axis=1)
        cand = np.flatnonzero((bal_arr > 0).repeat(self.m) & (rem_arr > 0))
        donor = cand // self.m
        order = np.lexsort((-bal_arr[donor], place.reshape(-1)[cand], negated[cand]))
        return cand[order], rem_arr[cand[order]], donor[order]

    def _fill_many(self, u: int, q: int) -> None:
        """Whole experts in `_candidates` order until one covers the rest; that last piece
        comes from the tightest safe cover (least donor excess left, >= 0; the last-listed,
        fewest tokens, on ties), else from the last-listed cover. In plain Python while the
        donors hold at most `SMALL_CANDIDATES` experts, with numpy above
        (`_fill_from_arrays`); both take the same pieces."""
        bal, rem, m = self.bal, self.rem, self.m
        listed = self._candidates()
        if listed is None:
            self._fill_from_arrays(u, q)
            return
        ordered, negated = listed
        i = 0
        while q > 0:
            end = bisect.bisect_right(negated, -q, lo=i)  # candidates i .. end-1 cover q
            if end > i:
                pick, least = ordered[end - 1], -1
                for e in ordered[i:end]:
                    slack = bal[e // m] - q
                    if slack >= 0 and (least < 0 or slack <= least):
                        pick, least = e, slack
                self.take(pick, u, q)
                return
            e = ordered[i]
            q -= rem[e]
            self.take(e, u, rem[e])
            i += 1

    def _fill_from_arrays(self, u: int, q: int) -> None:
        """`_fill_many` on the arrays of `_candidate_arrays`, without a Python loop over the
        candidates (the tight construction lists every foreign expert as a cover). Candidate
        i covers the rest once the whole pieces before it leave less than its tokens, i.e.
        it is the first whose running total of tokens reaches q; the covers are the
        candidates from it with tokens >= the rest (the tokens descend)."""
        bal_arr = np.asarray(self.bal, dtype=np.int64)
        experts, tokens, donor = self._candidate_arrays(bal_arr)
        i = int(tokens.cumsum().searchsorted(q))  # the first running total >= q
        for e, whole, h in zip(experts[:i].tolist(), tokens[:i].tolist(), donor[:i].tolist(),
                               strict=True):
            self.take(e, u, whole)
            bal_arr[h] -= whole  # the array follows `bal`
            q -= whole
        # candidates i .. end-1 cover q: those with tokens >= q (ascending when reversed)
        end = tokens.size - int(tokens[::-1].searchsorted(q))
        slack = bal_arr[donor[i:end]] - q  # donor excess left after the whole pieces
        slack[slack < 0] = UNSAFE  # an unsafe cover ranks after every safe one
        # the last-listed of the least slack: the last-listed cover when none is safe
        self.take(int(experts[end - 1 - int(slack[::-1].argmin())]), u, q)

    def run(self) -> "_CoverState":
        """Fill the most underloaded rank u with its deficit q until no rank is underloaded.

        If an expert of the most overloaded donor covers q, u takes q from the covering
        expert with most tokens of u's own source (they then stay on u), the tightest cover
        on ties; otherwise `_fill_many`. The loop is written out with local names: it is
        the planner's only per-step Python work.
        """
        receivers, donors, bal, rem, m, r = (self.receivers, self.donors, self.bal, self.rem,
                                             self.m, self.r)
        counts = self.p.counts.reshape(-1).data  # a memoryview: plain ints, read in place
        row = self.p.num_experts
        heappop, heappush, heapreplace = heapq.heappop, heapq.heappush, heapq.heapreplace
        moved_expert, moved_to, moved_tokens = self.moved_expert, self.moved_to, self.moved_tokens
        while receivers:
            key = heappop(receivers)
            u = key % r
            q = -bal[u]
            if key != u - q * r:  # stale: u's balance changed since
                continue
            key = donors[0]
            h = key % r
            while key != h - bal[h] * r:
                heappop(donors)
                key = donors[0]
                h = key % r
            # the covering expert with most own tokens (up to q), then the least left
            best_e, best_own, best_left, at = -1, -1, 0, u * row
            for e in range(h * m, h * m + m):
                left = rem[e]
                if left >= q:
                    own = counts[at + e]
                    if own > q:
                        own = q
                    if own > best_own or (own == best_own and left < best_left):
                        best_e, best_own, best_left = e, own, left
            if best_e < 0:
                self._fill_many(u, q)
            else:
                rem[best_e] -= q
                excess = bal[h] - q
                bal[h] = excess
                moved_expert.append(best_e)
                moved_to.append(u)
                moved_tokens.append(q)
                # h's entry is the heap's top: replace or drop it rather than leave it stale
                if excess > 0:
                    heapreplace(donors, h - excess * r)
                else:
                    heappop(donors)
                    if excess < 0:
                        heappush(receivers, excess * r + h)
            bal[u] = 0
        return self


LAYERS_PER_CHUNK = 16
"""Layers whose validation, allocation, routes and bounds go through numpy together. Larger
chunks save per-call overhead until their temporaries (R x E counts and routes per layer)
outgrow the CPU caches and the allocator's reuse: at E=256, R=64 over 58 layers (wall time
per layer, best of 21 rounds interleaved with the previous release, on a 2-core machine
whose speed varied), chunks of 2, 4, 8, 16 and 32 layers took 294, 271, 241, 218-235 and
237 us (uniform routing); one chunk of all 58 took 225 us uniform but 562 us on the tight
construction, whose temporaries were then new memory on every call (3,964 page faults)."""

Moves = tuple[list[int], list[int], list[int]]
"""Moved tokens as columns: expert, destination rank, tokens (taken from the home rank)."""


def _batch_buffers(layers: int, r: int, e: int) -> tuple[IntArray, IntArray]:
    """Uninitialised arrays for what a batch's results keep, in one allocation: the int64
    copy of the counts [L, R, E] and the allocations [L, E, R] (each C-contiguous).

    One buffer per call rather than two arrays per chunk of layers: the results keep this
    memory, and glibc, once such a buffer is freed, raises its mmap and trim thresholds
    above it, so later calls reuse the memory instead of faulting new pages in (76-89
    page faults per layer before, 0 after, in the benchmark's loop at E=256, R=64).
    """
    buffer = np.empty(2 * layers * r * e, dtype=np.int64)
    counts: IntArray = buffer[:layers * r * e].reshape(layers, r, e)
    alloc: IntArray = buffer[layers * r * e:].reshape(layers, e, r)
    return counts, alloc


def _allocate(batch: LayerBatch, moves: Sequence[Moves], alloc: IntArray) -> None:
    """Write the allocations of the batch's moves into the C-contiguous [L, E, R] `alloc`:
    every expert on its home rank, less the moved tokens, which go to their destinations."""
    layers, r, e = batch.counts.shape
    index = shape_index(r, e)
    alloc[...] = 0
    home = batch.expert_tokens.copy()
    if layers == 1:
        moved = len(moves[0][0])  # fromiter is twice as quick as np.array on the columns
        expert, to, tokens = np.fromiter(chain.from_iterable(moves[0]), np.int64,
                                         3 * moved).reshape(3, moved)
    else:
        expert, to, tokens = (np.fromiter(chain.from_iterable(x[i] for x in moves), np.int64)
                              for i in range(3))
        expert += np.repeat(np.arange(0, layers * e, e), [len(x[0]) for x in moves])
    # flat indices: one-dimensional ufunc.at is numpy's fast path
    np.subtract.at(home.reshape(-1), expert, tokens)
    # A C-contiguous array reshapes to a view, so the writes land in `alloc` (numpy >= 1.26
    # has no reshape(copy=False) to say so).
    assert alloc.flags.c_contiguous, "allocations are written through a flat view"
    np.add.at(alloc.reshape(-1), expert * r + to, tokens)
    alloc.reshape(layers, e * r)[:, index.allocation_home] = home


def _allocations(batch: LayerBatch, moves: Sequence[Moves]) -> IntArray:
    """[L, E, R] allocations of the batch's moves in a new array."""
    layers, r, e = batch.counts.shape
    alloc = np.empty((layers, e, r), dtype=np.int64)
    _allocate(batch, moves, alloc)
    return alloc


def _plan_layers(arr: Any, *, field: str, top_k: int, weight_bytes_per_expert: int,
                 grad_bytes_per_expert: int, rule: ConstructiveRule) -> list[dict[str, Any]]:
    """The result fields of every layer of [L, R, E] `arr` (a `layers_array`, or a
    `matrix_array` with field `tokens`), validated, planned and accounted chunk by chunk of
    `LAYERS_PER_CHUNK` layers (a chunk's arrays stay in the CPU caches from its validation
    to its routes) into the buffers of `_batch_buffers`."""
    layers, r, e = arr.shape
    counts, alloc = _batch_buffers(layers, r, e)
    accounts: list[dict[str, Any]] = []
    for start in range(0, layers, LAYERS_PER_CHUNK):
        stop = start + LAYERS_PER_CHUNK
        chunk = validated_layers(arr[start:stop], top_k=top_k,
                                 weight_bytes_per_expert=weight_bytes_per_expert,
                                 grad_bytes_per_expert=grad_bytes_per_expert,
                                 first_layer=start, field=field, out=counts[start:stop])
        _allocate(chunk, [_moves(p, rule) for p in chunk.problems], alloc[start:stop])
        accounts += layer_accounts(chunk, alloc[start:stop], balanced=True)
    return accounts


def _moves(problem: PlacementProblem, rule: ConstructiveRule,
           rank_groups: Sequence[Sequence[int]] | None = None) -> Moves:
    """The moves of the constructive planner on one layer."""
    p = problem
    if rule == ConstructiveRule.REFERENCE:
        moves = _reference_moves(p)
        return [x[0] for x in moves], [x[1] for x in moves], [x[2] for x in moves]
    if rank_groups is None:
        state = _CoverState(p).run()
        return state.moved_expert, state.moved_to, state.moved_tokens
    balance = p.home_loads - p.capacity
    expert: list[int] = []
    to: list[int] = []
    tokens: list[int] = []
    for group in rank_groups:
        if int(balance[list(group)].sum()) != 0:
            raise InvalidSpecError(
                f"rank_groups: ranks {list(group)} have total balance "
                f"{int(balance[list(group)].sum())}; each group must sum to zero",
                field="rank_groups",
            )
        state = _CoverState(p, group).run()
        expert += state.moved_expert
        to += state.moved_to
        tokens += state.moved_tokens
    return expert, to, tokens


@within_search_memo
def constructive_allocation(
    problem: PlacementProblem, *, rule: ConstructiveRule = ConstructiveRule.COVER,
    rank_groups: Sequence[Sequence[int]] | None = None,
) -> IntArray:
    """The [E, R] allocation of the constructive planner (every rank gets exactly S*K).

    `rank_groups` (COVER only) partitions the unbalanced ranks into groups of zero total
    balance; each group is then balanced on its own, so tokens never cross groups.
    """
    moves = _moves(problem, rule, rank_groups)
    alloc: IntArray = _allocations(single_layer(problem), [moves])[0]
    return alloc


@within_search_memo
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
    fields = _plan_layers(matrix_array(counts), field="tokens", top_k=top_k,
                          weight_bytes_per_expert=weight_bytes_per_expert,
                          grad_bytes_per_expert=grad_bytes_per_expert, rule=rule)[0]
    return PlacementResult(planner=f"constructive-{rule.value}",
                           wall_time_s=time.perf_counter() - started, **fields)


@within_search_memo
def plan_constructive_layers(
    counts: object, *, top_k: int, weight_bytes_per_expert: int = 0,
    grad_bytes_per_expert: int = 0, rule: ConstructiveRule = ConstructiveRule.COVER,
) -> list[PlacementResult]:
    """Plan every MoE layer of a model (or micro-batch) in one call.

    Each layer is planned exactly as `plan_constructive` plans it alone (same moves, routes
    and accounting). Validation, allocation, routes and bounds run once per chunk of
    `LAYERS_PER_CHUNK` layers (a chunk's arrays stay in the CPU caches from its validation
    to its routes). A malformed layer raises before any result is returned.

    Args:
        counts: [L, R, E] tokens per layer, source rank and expert (one shape for all layers;
            within a layer every row sums to that layer's S*K).
        top_k, weight_bytes_per_expert, grad_bytes_per_expert, rule: as `plan_constructive`.

    Returns:
        One placement per layer; each `wall_time_s` is the whole call's wall time over L.

    Raises:
        InvalidSpecError: on malformed counts (see `placement_layers`, field `layers`).
    """
    started = time.perf_counter()
    accounts = _plan_layers(layers_array(counts), field="layers", top_k=top_k,
                            weight_bytes_per_expert=weight_bytes_per_expert,
                            grad_bytes_per_expert=grad_bytes_per_expert, rule=rule)
    planner = f"constructive-{rule.value}"
    per_layer = (time.perf_counter() - started) / len(accounts)
    return [PlacementResult(planner=planner, wall_time_s=per_layer, **x) for x in accounts]


__all__ = [
    "ConstructiveRule",
    "constructive_allocation",
    "pair_balances",
    "plan_constructive",
    "plan_constructive_layers",
]
