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
dependency chain); where the memory bound rules out ZeRO-0 and 1, once more under the
smallest step-time floor of the ZeRO stages left (`models.core.step_time.step_time_floors_s`:
the makespan bound plus the per-step tail at the best overlap any activation policy gives).
Last, just before its evaluation, the same stage times without a policy are run through the
pipeline simulator without P2P latency (`plain_run_makespan`; the simulator is monotone in
op durations, and policies only lengthen ops), which replaces the closed-form makespan in
both bounds where it is larger: the closed form is taken at the lightest virtual stage and
does not see uneven chunks, and schedules without an exact closed form (Chimera, the V
shapes) were bounded by the busiest rank's work alone. On the problems of
`benchmarks/bench_planner.py` it cut the evaluations from 334 to 30 (open GPT 1T), 252 to 36
(open DeepSeek-V3) and 297 to 77 (GPT 1T) with the same plans.
Before that simulation, a candidate is dropped when the rank holding the output head overflows
under every framework variant's least-storing policy (`BoundTables.rank_memory_bound_bytes`,
from that rank's own ledger pieces: the mean-rank bound of the enumeration spreads the head's
logits over the pipeline, which at long sequences hides an overflow); the step floors cover
only the ZeRO stages some variant allows.
Its evaluation skips probing any ZeRO stage whose floor reaches the incumbent, and
simulating any plan whose own step-time bound (its recomputation on the busiest rank's work,
then the makespan bound plus its exact per-step tail) already reaches it.
Throughput target (tokens/s >= T, i.e. step time <= tokens per step / T). A world size W
whose peak throughput (`solver/throughput_bound.py`) is below T is skipped whole; a
candidate is dismissed as soon as any of its step-time lower bounds (table, ZeRO-3, simulated)
exceeds tokens / T; its evaluation simulates no ZeRO plan whose own bound exceeds it. Every
dismissal is a proof that the candidate has no plan reaching T, so the search stays exact.
Fewest GPUs: world sizes are enumerated lazily in increasing order (a size is listed only
when nothing queued could beat W x 1e6), so the first size with a plan reaching the target
ends the search once its candidates are settled, and larger sizes are never enumerated; the
proof that no smaller size has one is that each of their candidates was dismissed or
evaluated. When no size has one, the largest tokens/s that any dismissal left possible is
returned as a ceiling on what the space reaches.
Search: candidates are visited in increasing bound order; the first time the next bound is
not below the incumbent, the incumbent is proven optimal under the cost model. While no plan is
known past `NO_PLAN_DIVE_SHARE` of the time limit, candidates are evaluated as they come off
the queue, without their tighter bounds (and where the listing itself lasts that long, the
head of the queue so far after each candidate listed, until one plan is known). At the time
limit the best plan so far is returned as feasible with the smallest unvisited bound as the
proven bound. The limit is checked in the enumeration as well: candidates not reached by
then are reported as not examined (no plan) or leave the bound unproven (a plan).
Between candidates the search checks the thread's cancellation token (`solver/cancel.py`)
and stops with `Cancelled` once nobody waits for it.

Owns: the search's loop, the enumeration of candidates into the queue and their exact
evaluation. The search's state (inputs, queue, bound levels) lives in `solver.search_state`
and the tightening of a queued candidate's bound in `solver.tightening`. Must not: define a
bound or a candidate's evaluation (`solver.bounds`, `solver.candidate_eval`).
"""

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec
from api_schemas.plan import PlanStatus
from api_schemas.requests import Constraints, Objective, SolverLimits
from api_schemas.training import TrainingSpec
from models.core.ledger_memo import LedgerMemo
from models.core.search_memo import within_search_memo
from solver import cancel, tightening
from solver.bounds import BoundTables
from solver.candidate_eval import (
    Dominated,
    Rejection,
    ScoredPlan,
    allowed_zero_stages,
)
from solver.policy import max_offload_share
from solver.progress import Reporter, reporter
from solver.runtime_choice import optimistic_training
from solver.search_state import (
    MIN_GPUS_WEIGHT,
    RUN_BOUND,
    SIMULATED_BOUND,
    TABLE_BOUND,
    Continuation,
    Listing,
    SearchProblem,
    SearchQueue,
    misses_target,
    rescale,
    tokens_per_s_at,
)
from solver.space import MeshCandidate, candidate_meshes
from solver.targets import (
    TargetRequest,
    admits_mesh,
    evaluate_for_targets,
    target_constraints,
    target_frameworks,
)
from solver.throughput_bound import peak_tokens_per_s

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
    dominated: tuple[MeshCandidate, ...] = field(default_factory=tuple)
    """Evaluated candidates proven no better than the incumbent without an exact step
    time, in visit (bound) order (for reporting more alternatives)."""
    fastest_missed: ScoredPlan | None = None
    """With a throughput target: the fastest exactly evaluated plan that missed it."""
    reach_ceiling: float | None = None
    """With a throughput target that the finished search proved out of reach: tokens/s no
    plan of the space exceeds (the largest of the bounds that dismissed candidates and the
    exact values of the plans that missed the target)."""
    continuation: Continuation | None = field(default=None, repr=False, compare=False)
    """A search that listed every candidate of its own world sizes, or whose listing can go
    on from where its time limit stopped it (fewest GPUs aside): its problem and final
    queue, for `solver.resume` (from a search proven optimal, or from one its time limit
    cut)."""


def objective_value(plan: ScoredPlan, objective: Objective) -> float:
    """The quantity minimised (lower is better)."""
    est = plan.estimate
    if objective == Objective.COST_PER_TOKEN:
        return est.world_size * est.step_time_s / est.tokens_per_step
    if objective == Objective.MIN_GPUS:
        return est.world_size * MIN_GPUS_WEIGHT + est.step_time_s
    if objective == Objective.MIN_MEMORY:
        return plan.ledger.peak_bytes + est.step_time_s
    return est.step_time_s


def objective_world_sizes(cluster: ClusterSpec, constraints: Constraints,
                          objective: Objective) -> list[int]:
    """The GPU counts an objective searches, ascending: the whole cluster (or `max_gpus`)
    for throughput and least memory; for fewest GPUs and cost per token, whole nodes up to
    it and the powers of two below one node."""
    limit = min(cluster.world_size, constraints.max_gpus or cluster.world_size)
    if objective in (Objective.THROUGHPUT, Objective.MIN_MEMORY):
        return [limit]
    step = cluster.gpus_per_node
    sizes = {step * n for n in range(1, limit // step + 1)} | {
        g for g in (1, 2, 4) if g < step and g <= limit}
    return sorted(sizes)


def hardware_constraints(constraints: Constraints, cluster: ClusterSpec,
                         training: TrainingSpec | None = None) -> Constraints:
    """The request's constraints narrowed by the recipe and by what the GPU can do: FP8
    activation storage, when not asked for, follows the recipe's precision (on for FP8
    training only); it needs FP8 casting kernels (Transformer Engine's FP8 path requires
    compute capability 8.9 or newer), so GPUs without an FP8 peak never get it."""
    allowed = constraints.allow_fp8_activations
    if allowed is None:
        allowed = training is not None and training.compute_dtype == DType.FP8
    if allowed and DType.FP8 not in cluster.gpu.dense_peak_flop_per_s:
        allowed = False
    if allowed != constraints.allow_fp8_activations:
        return constraints.model_copy(update={"allow_fp8_activations": allowed})
    return constraints


NO_PLAN_DIVE_SHARE = 0.5
"""Share of the time left at the start after which, while no plan is known, each candidate
is evaluated as soon as it is taken from the queue, in table-bound order, without its tighter
bounds: those bounds only order and prune, so the search stays exact, and a plan with a
proven gap is worth more than none when the limit falls. On DeepSeek-V3 at 32k tokens on 256
H100 (51,052 candidates, about 7 s to list and bound on this 2-core machine) the tighter
bounds of the first candidates had used up a 10 s limit before any evaluation. The listing
dives too (`_enqueue`): Kimi K2 at 32k tokens on 512 H100 lists 103,506 candidates in about
6 s of this machine's time, most of the 7 s a 10 s limit gives its wide search
(`solver.anytime`); on a slower minute the limit fell in the listing before any evaluation
and the answer had no plan, where now it has the best of the candidates listed so far (with
no proven bound)."""


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
        return best_value - c.world_size * MIN_GPUS_WEIGHT
    return math.inf


@within_search_memo
def search(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec, *,
           constraints: Constraints, objective: Objective, limits: SolverLimits,
           progress: Progress | None = None, deadline: float | None = None,
           world_sizes: tuple[int, ...] | None = None,
           seed: ScoredPlan | None = None) -> SearchResult:
    """Find the best plan under the cost model (see the module docstring).

    The search stops at `deadline` (a `time.perf_counter()` value; default: now plus
    `limits.time_limit_s`), in the enumeration as well as in the visits. `world_sizes`
    replaces the objective's own set of GPU counts (the fastest plan on any count is the
    throughput objective over every count). `seed`, a plan to beat (`solver.anytime`), is
    the incumbent from the start: the answer is never worse than it, and it is the answer
    when nothing of the space beats it (proven optimal only if it lies in the space).

    Raises:
        Cancelled: the thread's cancellation token was set during the search.
    """
    # The framework target narrows the space: only what an admitted framework runs.
    constraints = target_constraints(hardware_constraints(constraints, cluster, training))
    started = time.perf_counter()
    watch = reporter(objective=Objective(objective).value)
    if deadline is None:
        deadline = started + limits.time_limit_s
    dive_from = started + (deadline - started) * NO_PLAN_DIVE_SHARE
    problem = _problem(spec, training, cluster, constraints, objective)
    sizes = (list(world_sizes) if world_sizes
             else objective_world_sizes(cluster, constraints, objective))
    queue = SearchQueue(heap=[], total=0, pruned_memory=0)
    if seed is not None:
        queue.best, queue.best_value = seed, objective_value(seed, objective)
        queue.ranked.append(seed)
    # Fewest GPUs: world sizes are enumerated one at a time, smallest first, each only once
    # the queue holds nothing that could beat its smallest value (world size x 1e6); the
    # other objectives order candidates of every size against each other, so all are queued.
    pending = list(sizes) if objective == Objective.MIN_GPUS else []
    if not pending:
        _enqueue(problem, queue, sizes, deadline, dive_from=dive_from, progress=progress)
        if watch is not None and queue.heap:
            _report(watch, queue, queue.heap[0][0])
        if progress:
            progress(f"{queue.total} candidates, {queue.pruned_memory} pruned by the memory "
                     f"bound, {len(queue.heap)} to order by the time bound")
    _branch_and_bound(problem, queue, pending, deadline=deadline, dive_from=dive_from,
                      watch=watch, progress=progress)
    _state_what_is_unproven(queue, pending)
    result = _result(problem, queue, sizes, time.perf_counter() - started)
    if (not queue.unenumerated or queue.listing is not None) \
            and objective != Objective.MIN_GPUS:
        result = replace(result, continuation=Continuation(problem, queue))
    if watch is not None:
        watch.report(candidates=result.stats.candidates, evaluated=result.stats.evaluated,
                     incumbent=_finite(queue.best_value), bound=result.stats.best_bound,
                     final=True)
    return result


def _problem(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
             constraints: Constraints, objective: Objective) -> SearchProblem:
    """The fixed inputs of one search (`constraints` already narrowed by the hardware and
    the framework target) with the bound tables, the ledger memo and the target variants
    built for them."""
    zeros = allowed_zero_stages(constraints)
    bound_training = optimistic_training(training, target_frameworks(constraints))
    return SearchProblem(spec=spec, training=training, cluster=cluster, constraints=constraints,
                         objective=objective, bound_training=bound_training,
                         tables=BoundTables.of_request(spec, bound_training, cluster,
                                                       constraints, memory_training=training),
                         zeros=zeros, max_offload=max_offload_share(constraints),
                         memo=LedgerMemo(spec=spec, training=training),
                         targets=TargetRequest(spec, training, constraints))


def _branch_and_bound(problem: SearchProblem, queue: SearchQueue, pending: list[int], *,
                      deadline: float, dive_from: float, watch: Reporter | None,
                      progress: Progress | None) -> None:
    """The branch-and-bound loop: take the queue's head in bound order, tighten its bound
    level by level or visit it, until no candidate can beat the incumbent or the deadline
    falls; with fewest GPUs, list each world size of `pending` (popping it) once the queue
    holds nothing below its smallest value. Leaves in `queue` what it proved: the status and
    bound of a search cut short with a plan, the unexamined count of one without."""
    while queue.heap or pending:
        cancel.check()
        if pending and (not queue.heap or queue.heap[0][0] >= _size_floor(pending[0])):
            if _size_floor(pending[0]) >= queue.best_value or queue.unenumerated:
                break  # no larger size can beat the incumbent (or the clock ran out)
            world = pending.pop(0)
            _enqueue(problem, queue, [world], deadline, dive_from=dive_from, progress=progress)
            if progress:
                progress(f"{world} GPUs listed: {queue.total} candidates so far, "
                         f"{len(queue.heap)} queued")
            continue
        lower, order, level, c = queue.heap[0]
        if lower >= queue.best_value:
            break
        if deadline - time.perf_counter() <= 0:
            if queue.best is not None:
                queue.status, queue.bound = PlanStatus.FEASIBLE, lower
            else:
                queue.unexamined = len(queue.heap) + len(pending)
            break
        if queue.best is None and level < RUN_BOUND and time.perf_counter() >= dive_from:
            if _dive(problem, queue, progress) and watch is not None:
                _report(watch, queue, lower)
            continue
        heapq.heappop(queue.heap)
        if level < SIMULATED_BOUND:
            tightening.tighten(problem, queue, lower, order, level, c)
            continue
        if level == SIMULATED_BOUND and tightening.add_tail_floor(
                problem, queue, lower, order, c,
                problem.variants(c)):
            continue
        if level < RUN_BOUND and tightening.add_run_floor(problem, queue, lower, order, c):
            continue
        if tightening.add_variants_bound(problem, queue, lower, order, c):
            continue
        _visit(problem, queue, order, c, progress)
        if watch is not None:
            _report(watch, queue, lower)


def _dive(problem: SearchProblem, queue: SearchQueue, progress: Progress | None) -> bool:
    """No plan yet and `NO_PLAN_DIVE_SHARE` of the time gone: take the queue's head and
    evaluate it at once, without its tighter bounds, past the head rank's memory floor
    (below the simulated level it is not yet applied). Whether it was evaluated."""
    _, order, level, c = heapq.heappop(queue.heap)
    if level < SIMULATED_BOUND and tightening.pruned_by_head_rank(problem, queue, c):
        return False
    _visit(problem, queue, order, c, progress)
    return True


def _state_what_is_unproven(queue: SearchQueue, pending: list[int]) -> None:
    """After the loop: a time limit that fell in the enumeration proves nothing about the
    rest (feasible without a bound, or the unexamined count), and each world size never
    listed counts as one candidate."""
    if queue.unenumerated:
        # The time limit fell in the enumeration: nothing is proven about the rest.
        if queue.best is not None:
            queue.status, queue.bound = PlanStatus.FEASIBLE, None
        else:
            queue.unexamined = len(queue.heap) + queue.unenumerated + len(pending)
    if queue.unexamined:
        queue.total += len(pending)  # one stands for each world size never listed


def _finite(value: float) -> float | None:
    return value if value < math.inf else None


def _report(watch: Reporter, queue: SearchQueue, lower: float) -> None:
    """Tell the listener where the search stands (`lower`: the bound of the candidate just
    visited, or of the queue's head, the least of the queue's since candidates are visited in
    bound order). Called only when someone listens, so a search without a listener makes
    no call."""
    watch.report(candidates=queue.total, evaluated=queue.evaluated,
                 incumbent=_finite(queue.best_value), bound=lower)


def _size_floor(world: int) -> float:
    """The smallest fewest-GPUs objective value of any plan on `world` GPUs."""
    return world * MIN_GPUS_WEIGHT


def _enqueue(problem: SearchProblem, queue: SearchQueue, sizes: list[int], deadline: float,
             *, dive_from: float = math.inf, progress: Progress | None = None,
             listing: Listing | None = None) -> None:
    """Queue every candidate of the given world sizes that passes the memory bound and the
    throughput target's bounds, by its table time bound; at `deadline` the rest of the
    current world size is counted as not enumerated (and later world sizes are not listed),
    and where it stopped is kept (`SearchQueue.listing`). Past `dive_from` with no plan
    known, the queue's head is evaluated after each candidate (`_dive`) until one plan is
    (`NO_PLAN_DIVE_SHARE`). With `listing` (where an earlier search's listing stopped, whose
    `sizes` are given), the first size is listed from where it stopped.

    A world size whose peak throughput (`solver.throughput_bound.peak_tokens_per_s`) is
    below the target is skipped whole: no plan on it can reach the target."""
    cluster = problem.cluster
    for n, world in enumerate(sizes):
        cancel.check()
        if queue.unenumerated or time.perf_counter() >= deadline:
            if not queue.unenumerated:  # one stands for the sizes not listed
                queue.unenumerated = 1
                queue.total += 1
                if n:  # nothing listed at all leaves nothing to go on from
                    queue.listing = Listing(tuple(sizes[n:]), None, 0)
            break
        if _below_target(problem, queue, world):
            continue
        if n == 0 and listing is not None and listing.meshes is not None:
            meshes, start, cut = listing.meshes, listing.index, 0
        else:
            meshes = candidate_meshes(problem.spec, problem.training, world_size=world,
                                      gpus_per_node=cluster.gpus_per_node,
                                      constraints=problem.constraints, deadline=deadline)
            # Past the deadline the list may be partial: one more stands for what it left out.
            start, cut = 0, 1 if time.perf_counter() >= deadline else 0
        stopped = _list_meshes(problem, queue, meshes, start, deadline, dive_from, progress)
        if stopped is not None:
            queue.unenumerated = len(meshes) - stopped + cut
            queue.total += queue.unenumerated
            if not cut:
                queue.listing = Listing(tuple(sizes[n:]), meshes, stopped)
        elif cut:
            queue.unenumerated = cut
            queue.total += cut


def _list_meshes(problem: SearchProblem, queue: SearchQueue,
                 meshes: Sequence[MeshCandidate], start: int, deadline: float,
                 dive_from: float, progress: Progress | None) -> int | None:
    """`_enqueue` of one world size's candidates from `meshes[start]` on; the index where
    `deadline` fell (None: all listed)."""
    tables, capacity = problem.tables, problem.cluster.capacity_bytes
    too_large: dict[tuple[object, ...], int] = {}
    """Per mesh apart from its micro-batch: the smallest micro-batch whose memory bound
    exceeds the capacity (the bound never falls as the micro-batch grows, so every
    larger one is pruned without computing it)."""
    for index in range(start, len(meshes)):
        c = meshes[index]
        now = time.perf_counter()
        if now >= deadline:
            return index
        if queue.best is None and queue.heap and now >= dive_from:
            _dive(problem, queue, progress)
        if not admits_mesh(problem.spec, problem.training, c, problem.targets):
            continue  # no framework of the target runs this mesh
        queue.total += 1
        shape = _micro_batch_free_key(c)
        if c.micro_batch_size > too_large.get(shape, c.micro_batch_size):
            queue.pruned_memory += 1
            continue
        memory = tables.memory_bound_bytes(c, max_zero=max(problem.zeros, default=0),
                                           max_offload=problem.max_offload)
        if memory > capacity:
            queue.pruned_memory += 1
            too_large[shape] = min(too_large.get(shape, c.micro_batch_size),
                                   c.micro_batch_size)
            continue
        _push(problem, queue, c, memory)
    return None


def _below_target(problem: SearchProblem, queue: SearchQueue, world: int) -> bool:
    """Whether the peak throughput of `world` GPUs is below the throughput target (then
    kept as what the space can reach)."""
    target = problem.constraints.target_tokens_per_s
    if target is None:
        return False
    peak = peak_tokens_per_s(problem.spec, problem.cluster,
                             sequence_length=problem.training.sequence_length, gpus=world)
    if peak < target:
        queue.reach_bound = max(queue.reach_bound, peak)
        return True
    return False


def _push(problem: SearchProblem, queue: SearchQueue, c: MeshCandidate, memory: int) -> None:
    """Queue a candidate within the memory capacity by its table time bound (rescaled to
    the objective), unless the throughput target's bounds rule it out."""
    tables = problem.tables
    core = tables.core(c)
    time_s = tables.time_bound_s(c, core) + tables.wait_bound_s(c, core)
    if misses_target(problem, queue, time_s):
        return
    bound = rescale(time_s, c, problem.objective, problem.tokens)
    level = TABLE_BOUND
    if problem.objective == Objective.MIN_MEMORY:
        # value = peak bytes + step time, both bounded below; tightening the time
        # part cannot reorder bytes, so candidates go straight to evaluation.
        bound += memory
        level = SIMULATED_BOUND
    heapq.heappush(queue.heap, (bound, queue.total, level, c))


def _micro_batch_free_key(c: MeshCandidate) -> tuple[object, ...]:
    """Every field of a candidate but its micro-batch size and count: the candidates that
    differ only in how a replica's batch is split into micro-batches."""
    return (c.tp, c.pp, c.dp, c.cp, c.ep, c.etp, c.vpp, c.schedule, c.sequence_parallel,
            c.cp_kind, c.ulysses_degree)


def _visit(problem: SearchProblem, queue: SearchQueue, order: int, c: MeshCandidate,
           progress: Progress | None) -> None:
    """Evaluate a candidate exactly and keep it if it beats the incumbent and reaches the
    throughput target; ZeRO plans whose step-time bound misses either are not simulated."""
    incumbent_s = _step_cutoff_s(queue.best_value, c, problem.objective, problem.tokens)
    cutoff_s = min(incumbent_s, problem.target_cutoff_s)
    if 3 in problem.zeros and cutoff_s < math.inf and order not in queue.zero3_bound:
        queue.zero3_bound[order] = tightening.zero3_bound_s(problem.tables, c)
    result = evaluate_for_targets(problem.spec, problem.training, problem.cluster, c,
                                  problem.constraints, step_cutoff_s=cutoff_s,
                                  zero3_bound_s=queue.zero3_bound.get(order, 0.0),
                                  zero_floors_s=queue.zero_floors.get(order),
                                  least_memory=problem.objective == Objective.MIN_MEMORY,
                                  memo=problem.memo, variants=problem.variants(c))
    queue.evaluated += 1
    if isinstance(result, Dominated):
        if problem.target_cutoff_s <= incumbent_s:
            # Every plan's bound misses the target (the tighter of the two cutoffs).
            queue.reach_bound = max(queue.reach_bound,
                                    tokens_per_s_at(problem.tokens, result.bound_s))
            queue.rejections.append(Rejection(candidate=c, reason="every plan's step-time "
                                              "bound misses the target tokens/s"))
        else:
            queue.dominated.append((rescale(result.bound_s, c, problem.objective,
                                            problem.tokens), order, c))
        return
    if isinstance(result, Rejection):
        queue.rejections.append(result)
        return
    if not _meets_target(result, problem.constraints):
        queue.rejections.append(Rejection(candidate=c, reason="below the target tokens/s"))
        queue.reach_bound = max(queue.reach_bound, result.estimate.tokens_per_s)
        if (queue.fastest_missed is None or result.estimate.step_time_s
                < queue.fastest_missed.estimate.step_time_s):
            queue.fastest_missed = result
        return
    queue.ranked.append(result)
    value = objective_value(result, problem.objective)
    if value < queue.best_value:
        queue.best, queue.best_value = result, value
        if progress:
            progress(f"incumbent {c.key}: {result.estimate.step_time_s:.3f} s/step "
                     f"({queue.evaluated} evaluated)")


def _result(problem: SearchProblem, queue: SearchQueue, sizes: list[int],
            wall_s: float) -> SearchResult:
    """The search's answer: status, proven bound and gap, ranked plans and statistics."""
    best, best_value, status, bound = queue.best, queue.best_value, queue.status, queue.bound
    if best is None:
        # Infeasible only when the search finished; out of time it proves nothing.
        status = PlanStatus.UNKNOWN if queue.unexamined else PlanStatus.INFEASIBLE
    if status == PlanStatus.OPTIMAL:
        bound = best_value if best is not None else None
    ranked = sorted(queue.ranked, key=lambda p: objective_value(p, problem.objective))
    gap = None
    if best is not None and bound is not None:
        gap = max(0.0, (best_value - bound) / best_value) if best_value else 0.0
    pruned_bound = queue.pruned_target
    if best is not None:
        pruned_bound += len(queue.heap) - (1 if status == PlanStatus.FEASIBLE else 0)
    stats = SearchStats(candidates=queue.total, pruned_memory=queue.pruned_memory,
                        pruned_bound=pruned_bound, evaluated=queue.evaluated,
                        wall_time_s=wall_s, best_bound=bound, gap=gap,
                        unexamined=queue.unexamined)
    frontier = tuple(item[3] for item in heapq.nsmallest(200, queue.heap))
    ceiling = None
    if status == PlanStatus.INFEASIBLE and queue.reach_bound > 0:
        ceiling = queue.reach_bound
    return SearchResult(status=status, best=best, ranked=tuple(ranked),
                        rejections=tuple(queue.rejections), stats=stats,
                        objective=problem.objective, world_sizes=tuple(sizes),
                        frontier=frontier, dominated=tuple(c for _, _, c in queue.dominated[:200]),
                        fastest_missed=queue.fastest_missed, reach_ceiling=ceiling)


def _meets_target(plan: ScoredPlan, constraints: Constraints) -> bool:
    target = constraints.target_tokens_per_s
    return target is None or plan.estimate.tokens_per_s >= target


__all__ = ["NO_PLAN_DIVE_SHARE", "SearchResult", "SearchStats", "objective_value",
           "objective_world_sizes", "search"]
