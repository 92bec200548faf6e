"""The state of one search of `solver.planner`: its fixed inputs (`SearchProblem`), the
queue of candidates by bound with what the search has learnt so far (`SearchQueue`), how far
a queued bound has been tightened (`TABLE_BOUND` to `RUN_BOUND`), and a step-time bound as
the objective's value (`rescale`), with the throughput target's test of it.

Owns: those records and the queue operations on them (`misses_target`, `requeue`). Must
not: enumerate, bound or evaluate candidates (`solver.planner`, `solver.tightening`,
`solver.candidate_eval`).
"""

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.plan import PlanStatus
from api_schemas.requests import Constraints, Objective
from api_schemas.training import TrainingSpec
from models.core.ledger_memo import LedgerMemo
from solver.bounds import BoundTables
from solver.candidate_eval import Rejection, ScoredPlan
from solver.space import MeshCandidate
from solver.targets import TargetRequest, Variant, candidate_variants

MIN_GPUS_WEIGHT = 1e6
"""Seconds one GPU weighs in the fewest-GPUs objective (GPUs x this + step time): larger
than any step time, so fewer GPUs always win and step time breaks ties."""


TARGET_SLACK = 1e-9
"""Relative widening of the target's step-time cutoff: bounds prune only candidates that
miss the target by more than rounding."""

TABLE_BOUND, ZERO3_BOUND, SIMULATED_BOUND, FLOOR_BOUND, RUN_BOUND = 0, 1, 2, 3, 4
"""How far a queued candidate's bound has been tightened: the closed-form table bound, the
table bound with forced ZeRO-3 gathers, the makespan bound (closed form at the lightest
stage), the per-ZeRO-stage step floors, the plain stage times' simulated run (then it is
evaluated)."""


@dataclass(frozen=True, slots=True)
class Listing:
    """Where a search's listing stopped at its time limit: the world sizes left, the first of
    them with its complete candidate list (`solver.space.candidate_meshes`) listed up to
    `index` (`meshes` None: none of it listed). What a narrower search that goes on from the
    cut one lists (`solver.resume.continue_narrower`)."""

    sizes: tuple[int, ...]
    meshes: Sequence[MeshCandidate] | None
    index: int


@dataclass(slots=True, kw_only=True)
class SearchQueue:
    """The candidates still to visit, by bound, and what the search has learnt so far."""

    heap: list[tuple[float, int, int, MeshCandidate]]
    total: int
    pruned_memory: int
    pruned_target: int = 0
    """Candidates whose step-time bound already misses the throughput target."""
    best: ScoredPlan | None = None
    best_value: float = math.inf
    ranked: list[ScoredPlan] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    evaluated: int = 0
    status: PlanStatus = PlanStatus.OPTIMAL
    bound: float | None = None
    unexamined: int = 0
    unenumerated: int = 0
    """Candidates the enumeration did not reach before the time limit."""
    listing: Listing | None = None
    """Where the enumeration stopped at the time limit, where it can go on from there (not
    where the limit fell while a candidate list was made)."""
    dominated: list[tuple[float, int, MeshCandidate]] = field(default_factory=list)
    """The candidates an evaluation proved no better than the incumbent of its time, in
    visit order, each with that proven bound as the objective's value and its queue order:
    what a search of a subspace, whose incumbent may be worse, visits again
    (`solver.resume`)."""
    forced_zero: dict[int, int] = field(default_factory=dict)
    zero3_bound: dict[int, float] = field(default_factory=dict)
    makespan: dict[int, float] = field(default_factory=dict)
    """The simulated makespan bound of each candidate that reached it."""
    zero_floors: dict[int, dict[int, float]] = field(default_factory=dict)
    """Per candidate, per allowed ZeRO stage: a lower bound of every plan's step time."""
    reach_bound: float = 0.0
    """Largest tokens/s any plan missing the target could reach, from the bounds that
    dismissed candidates and the exact values of plans that missed it."""
    fastest_missed: ScoredPlan | None = None
    """The fastest exactly evaluated plan that missed the target."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchProblem:
    """One search's fixed inputs."""

    spec: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    constraints: Constraints
    objective: Objective
    tables: BoundTables
    zeros: list[int]
    max_offload: float
    memo: LedgerMemo
    """Rank-ledger pieces every candidate's memory probes share (one model and recipe)."""
    targets: TargetRequest
    """The constraints with what the framework checks derive from them (ZeRO stages,
    narrowed constraints per framework view), shared by every candidate of the search."""
    bound_training: TrainingSpec
    """The recipe the time bounds read: every runtime feature the request leaves to the
    search and a target offers, on (`solver.runtime_choice.optimistic_training`), so the
    bounds stay below the plans of every runtime choice."""
    _variants: dict[MeshCandidate, list[Variant]] = field(default_factory=dict, init=False)
    """`variants` by candidate (every field of it: a candidate is its whole value)."""
    capacity_bytes: int = field(init=False)
    """The cluster's `ClusterSpec.capacity_bytes`, read once for the search's memory bounds."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity_bytes", self.cluster.capacity_bytes)

    def variants(self, c: MeshCandidate) -> list[Variant]:
        """The candidate's framework variants (`solver.targets.candidate_variants`), made
        once per candidate of the search."""
        found = self._variants.get(c)
        if found is None:
            found = self._variants[c] = candidate_variants(self.spec, self.training, c,
                                                           self.targets)
        return found

    @property
    def tokens(self) -> int:
        """Tokens per step (the cost-per-token objective divides by it)."""
        return self.training.tokens_per_step

    @property
    def target_cutoff_s(self) -> float:
        """The step time a plan must not exceed to reach the throughput target (tokens per
        step / target), widened by `TARGET_SLACK` so that rounding never prunes a plan that
        meets it; infinite without a target."""
        target = self.constraints.target_tokens_per_s
        if target is None:
            return math.inf
        return self.tokens / target * (1.0 + TARGET_SLACK)


@dataclass(frozen=True, slots=True)
class Continuation:
    """The problem and final queue of a search proven optimal or cut by its time limit
    (after its listing, or in it where the listing can go on, `SearchQueue.listing`): what a
    search of a subspace of its candidates goes on from (`solver.resume`) instead of listing
    and bounding them again."""

    problem: SearchProblem
    queue: SearchQueue


def misses_target(problem: SearchProblem, queue: SearchQueue, time_s: float) -> bool:
    """True (and counted) when `time_s`, a lower bound of every plan's step time of a
    candidate, already misses the throughput target; the bound's throughput joins the
    proven ceiling on what any plan reaches."""
    if time_s <= problem.target_cutoff_s:
        return False
    queue.pruned_target += 1
    queue.reach_bound = max(queue.reach_bound, tokens_per_s_at(problem.tokens, time_s))
    return True


def tokens_per_s_at(tokens: int, time_s: float) -> float:
    """Tokens per second of a step lasting `time_s` (infinite for no time)."""
    return tokens / time_s if time_s > 0 else math.inf


def requeue(problem: SearchProblem, queue: SearchQueue, step_s: float, lower: float, order: int,
             level: int, c: MeshCandidate) -> bool:
    """Re-queue a candidate at `level` under `step_s`, a new lower bound of its step time,
    where that is above its current bound `lower` (True; also when it misses the throughput
    target, which dismisses it). False: the bound is no tighter, go on."""
    if misses_target(problem, queue, step_s):
        return True
    tighter = rescale(step_s, c, problem.objective, problem.tokens)
    if tighter <= lower:
        return False
    heapq.heappush(queue.heap, (tighter, order, level, c))
    return True


def rescale(time_s: float, c: MeshCandidate, objective: Objective, tokens: int) -> float:
    if objective == Objective.COST_PER_TOKEN:
        return c.world_size * time_s / tokens
    if objective == Objective.MIN_GPUS:
        return c.world_size * MIN_GPUS_WEIGHT + time_s
    return time_s


__all__ = ["FLOOR_BOUND", "MIN_GPUS_WEIGHT", "RUN_BOUND", "SIMULATED_BOUND", "TABLE_BOUND",
           "TARGET_SLACK", "ZERO3_BOUND", "Continuation", "Listing", "SearchProblem", "SearchQueue",
           "misses_target", "requeue", "rescale", "tokens_per_s_at"]
