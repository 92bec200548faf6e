"""The redundant-expert placement problem, its lower bound, routes and result type.

Owns: validation of a token-count matrix [R, E] into a `PlacementProblem` (S follows from
the counts), the per-rank lower bound on redundant experts, turning an allocation
alloc[e, d] (tokens of expert e computed on rank d) into token routes (source, expert,
destination, tokens) with the most source-local routing that allocation admits, and the
`PlacementResult` every planner returns. Must not: choose an allocation (the planners do).

Vocabulary. Rank r's home experts are r*m .. r*m+m-1 with m = E/R. A redundant expert (a
replica) is an expert with tokens computed on a rank other than its home. A route is
remote when its source rank differs from its destination rank (the tokens cross the
network); a migrated token is one computed on a replica instead of the home rank.
"""

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.errors import InvalidSpecError
from models.moe import redundant_expert_traffic

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementProblem:
    """A validated placement instance (arrays are read-only)."""

    counts: IntArray
    """[R, E] tokens of source rank r routed to expert e."""
    top_k: int
    num_ranks: int
    num_experts: int
    experts_per_rank: int
    """m = E/R home experts per rank, also the bound on redundant experts per rank."""
    tokens_per_rank: int
    """S, from S*K*R = total assignments."""
    capacity: int
    """S*K: the exact load every rank receives."""
    expert_tokens: IntArray
    """[E] T_e = sum over sources."""
    home_loads: IntArray
    """[R] load of each rank's home experts (the no-redundancy rank loads)."""
    weight_bytes_per_expert: int
    grad_bytes_per_expert: int


def placement_problem(
    counts: object, *, top_k: int, weight_bytes_per_expert: int = 0,
    grad_bytes_per_expert: int = 0,
) -> PlacementProblem:
    """Validate a count matrix and derive S, the capacity and the home loads.

    Args:
        counts: [R, E] non-negative integers (nested lists or an array).
        top_k: K experts per token.
        weight_bytes_per_expert: bytes of one expert's weights (for prefetch bytes).
        grad_bytes_per_expert: bytes of one expert's gradient (for reduce bytes).

    Raises:
        InvalidSpecError: naming the field, the value and the fix.
    """
    try:
        arr = np.asarray(counts)
    except ValueError as exc:
        raise InvalidSpecError(
            "tokens must be a rectangular matrix: R rows of E counts each", field="tokens"
        ) from exc
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise InvalidSpecError(
            f"tokens has shape {arr.shape}; expected R rows of E counts each", field="tokens"
        )
    if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
        raise InvalidSpecError("tokens must hold integers", field="tokens")
    arr = arr.astype(np.int64)
    r, e = (int(x) for x in arr.shape)
    if int(arr.min()) < 0:
        src, exp = np.argwhere(arr < 0)[0]
        raise InvalidSpecError(
            f"tokens[{src}][{exp}]={int(arr[src, exp])} is negative: counts must be >= 0",
            field="tokens",
        )
    if e % r:
        raise InvalidSpecError(
            f"num_experts={e} is not divisible by the {r} ranks (rows of tokens): each rank "
            "must home E/R experts", field="tokens",
        )
    if top_k < 1 or top_k > e:
        raise InvalidSpecError(f"top_k={top_k} must lie in [1, {e}]", field="top_k")
    if weight_bytes_per_expert < 0 or grad_bytes_per_expert < 0:
        raise InvalidSpecError("expert byte sizes must be >= 0", field="expert_weight_bytes")
    rows = arr.sum(axis=1)
    if np.any(rows != rows[0]):
        bad = int(np.argmax(rows != rows[0]))
        raise InvalidSpecError(
            f"row {bad} of tokens sums to {int(rows[bad])} but row 0 sums to {int(rows[0])}: "
            "every rank holds S tokens with K choices each, so all rows must sum to S*K",
            field="tokens",
        )
    if int(rows[0]) == 0 or int(rows[0]) % top_k:
        raise InvalidSpecError(
            f"each row sums to {int(rows[0])}, which must be a positive multiple of "
            f"top_k={top_k} (S tokens x K experts)", field="tokens",
        )
    arr.setflags(write=False)
    expert_tokens = arr.sum(axis=0)
    home = expert_tokens.reshape(r, e // r).sum(axis=1)
    expert_tokens.setflags(write=False)
    home.setflags(write=False)
    return PlacementProblem(
        counts=arr, top_k=top_k, num_ranks=r, num_experts=e, experts_per_rank=e // r,
        tokens_per_rank=int(rows[0]) // top_k, capacity=int(rows[0]),
        expert_tokens=expert_tokens, home_loads=home,
        weight_bytes_per_expert=weight_bytes_per_expert,
        grad_bytes_per_expert=grad_bytes_per_expert,
    )


def redundancy_lower_bounds(problem: PlacementProblem) -> IntArray:
    """[R] fewest redundant experts each rank needs in any exactly balanced placement.

    Rank d computes S*K tokens; its home experts supply at most their load G_d, so at least
    max(0, S*K - G_d) come from foreign experts holding at most T_e tokens each. The bound
    is the fewest foreign experts, largest first, whose totals reach that deficit.
    Source: our derivation; it equals ceil(E(R-1)/R^2) on the tight construction of Kimi K3,
    arXiv:2607.24653, Appendix E.
    """
    p = problem
    deficit = np.maximum(p.capacity - p.home_loads, 0)
    bounds = np.zeros(p.num_ranks, dtype=np.int64)
    needy = np.flatnonzero(deficit)
    if needy.size == 0:
        return bounds
    order = np.argsort(-p.expert_tokens, kind="stable")
    sorted_tokens = p.expert_tokens[order]
    foreign = (order // p.experts_per_rank)[None, :] != needy[:, None]
    supply = np.where(foreign, sorted_tokens[None, :], 0)
    before = np.cumsum(supply, axis=1) - supply
    bounds[needy] = np.sum(foreign & (before < deficit[needy, None]), axis=1)
    return bounds


@dataclass(frozen=True, slots=True, kw_only=True)
class Routes:
    """Token routes as parallel columns (one row per positive (source, expert, dest))."""

    source: IntArray
    expert: IntArray
    destination: IntArray
    tokens: IntArray


def routes_from_allocation(problem: PlacementProblem, alloc: IntArray) -> Routes:
    """Split each expert's tokens over its destinations, keeping tokens local first.

    For an expert with replicas, source d sends min(C[d, e], alloc[e, d]) tokens to itself
    (they never leave the rank); the remaining supply and demand are matched in rank order
    (north-west corner). This maximises local tokens for the given allocation, since the
    local amount of each rank cannot exceed that minimum.
    """
    p = problem
    replicas = alloc != 0
    home_of = np.arange(p.num_experts) // p.experts_per_rank
    replicas[np.arange(p.num_experts), home_of] = False
    is_shared = replicas.any(axis=1)
    src_p, exp_p = np.nonzero(p.counts * ~is_shared[None, :])
    parts = [(src_p, exp_p, home_of[exp_p], p.counts[src_p, exp_p])]
    shared = np.flatnonzero(is_shared)
    if shared.size:
        supply = p.counts[:, shared].T
        demand = alloc[shared, :]
        local = np.minimum(supply, demand)
        xs, ds = np.nonzero(local)
        parts.append((ds, shared[xs], ds, local[xs, ds]))
        parts.append(_north_west(shared, supply - local, demand - local))
    cols = [np.concatenate([part[i] for part in parts]).astype(np.int64) for i in range(4)]
    return Routes(source=cols[0], expert=cols[1], destination=cols[2], tokens=cols[3])


def _north_west(
    experts: IntArray, supply: IntArray, demand: IntArray
) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """Match per-expert supply [n, R] and demand [n, R] (equal row sums) in rank order."""
    r = supply.shape[1]
    cum_s = np.cumsum(supply.ravel())
    cum_d = np.cumsum(demand.ravel())
    cuts = np.concatenate((cum_s, cum_d))
    cuts.sort()
    starts = np.concatenate(([0], cuts[:-1]))
    keep = cuts > starts
    starts, lengths = starts[keep], (cuts - starts)[keep]
    s_idx = np.searchsorted(cum_s, starts, side="right")
    d_idx = np.searchsorted(cum_d, starts, side="right")
    assert np.all(s_idx // r == d_idx // r), "supply and demand rows must balance per expert"
    return s_idx % r, experts[s_idx // r], d_idx % r, lengths


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementResult:
    """One placement and its accounting."""

    planner: str
    """'constructive', 'exact', or a baseline name."""
    problem: PlacementProblem
    allocation: IntArray
    """[E, R] tokens of expert e computed on rank d."""
    rank_loads: IntArray
    """[R] tokens each rank computes (exactly S*K for a balanced plan)."""
    redundant_experts: tuple[tuple[int, ...], ...]
    """Per rank, the foreign experts it hosts (sorted)."""
    routes: Routes
    num_redundant: int
    max_redundant_per_rank: int
    redundant_bound_per_rank: int
    """E/R (Kimi K3 Sec. 5.2.1)."""
    lower_bound_per_rank: IntArray
    """[R] `redundancy_lower_bounds`."""
    migrated_tokens: int
    """Tokens computed on a replica rather than on their expert's home rank."""
    remote_tokens: int
    """Tokens whose destination differs from their source rank (network traffic)."""
    prefetch_bytes: int
    grad_reduce_bytes: int
    wall_time_s: float

    @property
    def balanced(self) -> bool:
        """Every rank computes exactly S*K tokens."""
        return bool(np.all(self.rank_loads == self.problem.capacity))

    @property
    def bound_holds(self) -> bool:
        """The lower bound <= hosted replicas <= E/R on every rank."""
        counts = np.array([len(x) for x in self.redundant_experts], dtype=np.int64)
        return bool(np.all(counts <= self.redundant_bound_per_rank)
                    and np.all(counts >= self.lower_bound_per_rank))


def build_result(
    problem: PlacementProblem, alloc: IntArray, *, planner: str, wall_time_s: float,
    lower_bounds: IntArray | None = None,
) -> PlacementResult:
    """Account for an allocation: loads, replicas, routes, traffic and bound."""
    p = problem
    m = p.experts_per_rank
    hosted = alloc > 0
    home_of = np.arange(p.num_experts) // m
    hosted[np.arange(p.num_experts), home_of] = False
    dest, exp = np.nonzero(hosted.T)
    splits = np.searchsorted(dest, np.arange(1, p.num_ranks))
    per_rank = tuple(tuple(chunk.tolist()) for chunk in np.split(exp, splits))
    num_redundant = int(exp.size)
    routes = routes_from_allocation(p, alloc)
    remote = int(routes.tokens[routes.source != routes.destination].sum())
    traffic = redundant_expert_traffic(
        num_redundant=num_redundant, experts_per_rank=m,
        weight_bytes_per_expert=p.weight_bytes_per_expert,
        grad_bytes_per_expert=p.grad_bytes_per_expert,
    )
    return PlacementResult(
        planner=planner, problem=p, allocation=alloc, rank_loads=alloc.sum(axis=0),
        redundant_experts=per_rank, routes=routes, num_redundant=num_redundant,
        max_redundant_per_rank=max((len(x) for x in per_rank), default=0),
        redundant_bound_per_rank=m,
        lower_bound_per_rank=redundancy_lower_bounds(p) if lower_bounds is None else lower_bounds,
        migrated_tokens=int(alloc[hosted].sum()), remote_tokens=remote,
        prefetch_bytes=traffic.prefetch_bytes, grad_reduce_bytes=traffic.grad_reduce_bytes,
        wall_time_s=wall_time_s,
    )


__all__ = [
    "PlacementProblem",
    "PlacementResult",
    "Routes",
    "build_result",
    "placement_problem",
    "redundancy_lower_bounds",
    "routes_from_allocation",
]
