"""The planner: branch and bound over mesh candidates, exact per candidate.

Formulation. Sets: C = legal mesh candidates (tp, pp, dp, cp, ep, etp, vpp, micro-batch,
schedule, sequence parallel; `solver/space.py`) for each world size W allowed by the
objective. For c in C the value v(c) is the step time of its best plan (ZeRO stage and
activation policy chosen by the ladder rule of `solver/candidate_eval.py`), or infinity
when nothing fits; the chosen plan is then refined by the per-stage CP-SAT model of
`solver/policy.py` (`solver/api.py`). Objective:
    throughput      min_c v(c)                           (W = the cluster)
    cost_per_token  min_c W(c) v(c) / tokens_per_step     (W <= the cluster)
    min_gpus        min_c W(c), then min v(c)  s.t. tokens/s >= target (if given)
    min_memory      min_c peak_bytes(c), then step time, where each candidate's plan is its
                    least-memory plan (highest allowed ZeRO stage, most saving policy)
Bounds. LB_t(c) <= v(c) from `solver/bounds.py` (every rank's work, the closed-form bubble
at the lightest stage, the fastest policy); LB_m(c) from the same module prunes candidates
that cannot fit under the most frugal choices allowed. Before a candidate is evaluated it is
re-queued under a second, simulated bound (`plain_makespan_bound`: the stage times with no
recomputation, ZeRO-3's gathers included when LB_m rules out ZeRO 0-2, and one micro-batch's
dependency chain), and its evaluation skips simulating any ZeRO plan whose own makespan
bound already reaches the incumbent. Search: candidates are visited in
increasing bound order; the first time the next bound is not below the incumbent, the
incumbent is proven optimal under the cost model. At the time limit the best plan so far is
returned as feasible with the smallest unvisited bound as the proven bound.
"""

import heapq
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec
from api_schemas.plan import PlanStatus
from api_schemas.requests import Constraints, Objective, SolverLimits
from api_schemas.training import TrainingSpec
from models.errors import InvalidSpecError
from solver.bounds import BoundTables
from solver.candidate_eval import (
    Dominated,
    Rejection,
    ScoredPlan,
    allowed_zero_stages,
    plain_makespan_bound,
)
from solver.space import MeshCandidate, candidate_meshes
from solver.targets import admits_mesh, evaluate_for_targets, target_constraints

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchStats:
    """How the search went."""

    candidates: int
    pruned_memory: int
    pruned_bound: int
    evaluated: int
    wall_time_s: float
    best_bound: float | None
    gap: float | None
    unexamined: int = 0
    """Candidates left unvisited because the time limit ran out before any plan was found
    (0 when the search finished or found a plan)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    """The proven-best plan (or none), ranked runners-up and the rejected candidates."""

    status: PlanStatus
    best: ScoredPlan | None
    ranked: tuple[ScoredPlan, ...]
    rejections: tuple[Rejection, ...]
    stats: SearchStats
    objective: Objective
    world_sizes: tuple[int, ...] = field(default_factory=tuple)
    frontier: tuple[MeshCandidate, ...] = field(default_factory=tuple)
    """Unevaluated candidates in bound order (for reporting more alternatives)."""


def objective_value(plan: ScoredPlan, objective: Objective) -> float:
    """The quantity minimised (lower is better)."""
    est = plan.estimate
    if objective == Objective.COST_PER_TOKEN:
        return est.world_size * est.step_time_s / est.tokens_per_step
    if objective == Objective.MIN_GPUS:
        return est.world_size * 1e6 + est.step_time_s
    if objective == Objective.MIN_MEMORY:
        return plan.ledger.peak_bytes + est.step_time_s
    return est.step_time_s


def _world_sizes(cluster: ClusterSpec, constraints: Constraints, objective: Objective) -> list[int]:
    limit = min(cluster.world_size, constraints.max_gpus or cluster.world_size)
    if objective in (Objective.THROUGHPUT, Objective.MIN_MEMORY):
        return [limit]
    step = cluster.gpus_per_node
    sizes = {step * n for n in range(1, limit // step + 1)} | {
        g for g in (1, 2, 4) if g < step and g <= limit}
    return sorted(sizes)


def _bound(tables: BoundTables, c: MeshCandidate, objective: Objective, tokens: int) -> float:
    t = tables.time_bound_s(c)
    if objective == Objective.COST_PER_TOKEN:
        return c.world_size * t / tokens
    if objective == Objective.MIN_GPUS:
        return c.world_size * 1e6 + t
    return t


def hardware_constraints(constraints: Constraints, cluster: ClusterSpec) -> Constraints:
    """The request's constraints narrowed by what the GPU can do: FP8 activation storage
    needs FP8 casting kernels (Transformer Engine's FP8 path requires compute capability
    8.9 or newer), so GPUs without an FP8 peak never get it."""
    if constraints.allow_fp8_activations and \
            DType.FP8 not in cluster.gpu.dense_peak_flop_per_s:
        return constraints.model_copy(update={"allow_fp8_activations": False})
    return constraints


_TABLE_BOUND, _ZERO3_BOUND, _SIMULATED_BOUND = 0, 1, 2
"""How far a queued candidate's bound has been tightened: the closed-form table bound, the
table bound with forced ZeRO-3 gathers, the simulated bound (then it is evaluated)."""


def _step_cutoff_s(best_value: float, c: MeshCandidate, objective: Objective,
                   tokens: int) -> float:
    """The step time at which candidate `c` would only tie the incumbent's objective value
    (infinite where the objective is not monotone in step time for a fixed candidate)."""
    if math.isinf(best_value):
        return math.inf
    if objective == Objective.THROUGHPUT:
        return best_value
    if objective == Objective.COST_PER_TOKEN:
        return best_value * tokens / c.world_size
    if objective == Objective.MIN_GPUS:
        return best_value - c.world_size * 1e6
    return math.inf


def _zero3_bound_s(tables: BoundTables, c: MeshCandidate) -> float:
    """`tables.zero3_time_bound_s(c)`, or 0 (no information) where the candidate's groups
    cannot be timed; the exact evaluation then rejects it with the reason."""
    try:
        return tables.zero3_time_bound_s(c)
    except InvalidSpecError:
        return 0.0


def _forced_zero_stage(tables: BoundTables, c: MeshCandidate, zeros: list[int],
                       max_offload: float, capacity_bytes: int) -> int:
    """3 when the memory bound rules out every allowed ZeRO stage below 3 for this candidate
    (so every plan of it pays the ZeRO-3 gathers), else 0 (stages 0-2 time alike)."""
    for zero in zeros:
        if tables.memory_bound_bytes(c, max_zero=zero, max_offload=max_offload) \
                <= capacity_bytes:
            return 3 if zero == 3 else 0
    return 0


def search(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec, *,
           constraints: Constraints, objective: Objective, limits: SolverLimits,
           progress: Progress | None = None) -> SearchResult:
    """Find the best plan under the cost model (see the module docstring)."""
    # The framework target narrows the space: only what an admitted framework runs.
    constraints = target_constraints(hardware_constraints(constraints, cluster))
    started = time.perf_counter()
    deadline = started + limits.time_limit_s
    tables = BoundTables(spec, training, cluster)
    sizes = _world_sizes(cluster, constraints, objective)
    zeros = allowed_zero_stages(constraints)
    max_offload = 0.5 if constraints.allow_offload else 0.0
    heap: list[tuple[float, int, int, MeshCandidate]] = []
    total = pruned_memory = pruned_target = 0
    for world in sizes:
        if objective == Objective.MIN_GPUS and world * cluster.gpus_per_node == 0:
            continue
        for c in candidate_meshes(spec, training, world_size=world,
                                  gpus_per_node=cluster.gpus_per_node, constraints=constraints):
            if not admits_mesh(spec, training, c, constraints):
                continue
            total += 1
            memory = tables.memory_bound_bytes(c, max_zero=max(zeros, default=0),
                                               max_offload=max_offload)
            if memory > cluster.capacity_bytes:
                pruned_memory += 1
                continue
            bound = _bound(tables, c, objective, training.tokens_per_step)
            if _below_target(tables, c, constraints, training.tokens_per_step):
                pruned_target += 1
                continue
            if objective == Objective.MIN_MEMORY:
                bound += memory  # value = peak bytes + step time; both bounded below
            heap.append((bound, total, _TABLE_BOUND, c))
    heapq.heapify(heap)
    if progress:
        progress(f"{total} candidates, {pruned_memory} pruned by the memory bound, "
                 f"{len(heap)} to order by the time bound")
    best: ScoredPlan | None = None
    best_value = math.inf
    ranked: list[ScoredPlan] = []
    rejections: list[Rejection] = []
    evaluated = 0
    status = PlanStatus.OPTIMAL
    bound = None
    refined = 0
    unexamined = 0
    forced_zero: dict[int, int] = {}
    zero3_bound: dict[int, float] = {}
    while heap:
        lower, order, level, c = heap[0]
        if lower >= best_value:
            break
        remaining_s = deadline - time.perf_counter()
        if remaining_s <= 0:
            if best is not None:
                status, bound = PlanStatus.FEASIBLE, lower
            else:
                unexamined = len(heap)
            break
        heapq.heappop(heap)
        if level == _TABLE_BOUND:
            # Where memory rules out ZeRO 0-2, the gathers of ZeRO-3 join the table bound.
            zero = _forced_zero_stage(tables, c, zeros, max_offload, cluster.capacity_bytes)
            forced_zero[order] = zero
            if zero == 3:
                zero3_bound[order] = _zero3_bound_s(tables, c)
                gathered = _rescale(zero3_bound[order], c, objective, training.tokens_per_step)
                if gathered > lower:
                    heapq.heappush(heap, (gathered, order, _ZERO3_BOUND, c))
                    continue
            level = _ZERO3_BOUND
        if level == _ZERO3_BOUND:
            # Second, tighter bound (one simulation, no policy search): re-queue by it.
            try:
                makespan = plain_makespan_bound(spec, training, cluster, c,
                                                zero_stage=forced_zero[order])
            except InvalidSpecError as exc:
                rejections.append(Rejection(candidate=c, reason=exc.detail))
                continue
            refined += 1
            tighter = _rescale(makespan, c, objective, training.tokens_per_step)
            heapq.heappush(heap, (max(lower, tighter), order, _SIMULATED_BOUND, c))
            continue
        cutoff_s = _step_cutoff_s(best_value, c, objective, training.tokens_per_step)
        if 3 in zeros and cutoff_s < math.inf and order not in zero3_bound:
            zero3_bound[order] = _zero3_bound_s(tables, c)
        result = evaluate_for_targets(spec, training, cluster, c, constraints,
                                      step_cutoff_s=cutoff_s,
                                      zero3_bound_s=zero3_bound.get(order, 0.0),
                                      least_memory=objective == Objective.MIN_MEMORY)
        evaluated += 1
        if isinstance(result, Dominated):
            continue
        if isinstance(result, Rejection):
            rejections.append(result)
            continue
        if not _meets_target(result, constraints):
            rejections.append(Rejection(candidate=c, reason="below the target tokens/s"))
            continue
        ranked.append(result)
        value = objective_value(result, objective)
        if value < best_value:
            best, best_value = result, value
            if progress:
                progress(f"incumbent {c.key}: {result.estimate.step_time_s:.3f} s/step "
                         f"({evaluated} evaluated)")
    if best is None:
        status = PlanStatus.INFEASIBLE
    if status == PlanStatus.OPTIMAL:
        bound = best_value if best is not None else None
    ranked.sort(key=lambda p: objective_value(p, objective))
    gap = None
    if best is not None and bound is not None:
        gap = max(0.0, (best_value - bound) / best_value) if best_value else 0.0
    stats = SearchStats(candidates=total, pruned_memory=pruned_memory,
                        pruned_bound=pruned_target + (
                            len(heap) - (1 if status == PlanStatus.FEASIBLE else 0)
                            if best is not None else 0),
                        evaluated=evaluated, wall_time_s=time.perf_counter() - started,
                        best_bound=bound, gap=gap, unexamined=unexamined)
    frontier = tuple(item[3] for item in heapq.nsmallest(200, heap))
    return SearchResult(status=status, best=best, ranked=tuple(ranked),
                        rejections=tuple(rejections), stats=stats, objective=objective,
                        world_sizes=tuple(sizes), frontier=frontier)


def _rescale(time_s: float, c: MeshCandidate, objective: Objective, tokens: int) -> float:
    if objective == Objective.COST_PER_TOKEN:
        return c.world_size * time_s / tokens
    if objective == Objective.MIN_GPUS:
        return c.world_size * 1e6 + time_s
    return time_s


def _below_target(tables: BoundTables, c: MeshCandidate, constraints: Constraints,
                  tokens: int) -> bool:
    """True when even the candidate's step-time lower bound misses the throughput target
    (tokens/s <= tokens per step / LB_t), so no plan of it can reach the target."""
    target = constraints.target_tokens_per_s
    return target is not None and tokens / tables.time_bound_s(c) < target


def _meets_target(plan: ScoredPlan, constraints: Constraints) -> bool:
    target = constraints.target_tokens_per_s
    return target is None or plan.estimate.tokens_per_s >= target


__all__ = ["SearchResult", "SearchStats", "objective_value", "search"]
