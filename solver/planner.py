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
the queue, without their tighter bounds. At the time
limit the best plan so far is returned as feasible with the smallest unvisited bound as the
proven bound. The limit is checked in the enumeration as well: candidates not reached by
then are reported as not examined (no plan) or leave the bound unproven (a plan).
Between candidates the search checks the thread's cancellation token (`solver/cancel.py`)
and stops with `Cancelled` once nobody waits for it.
"""

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig, RecomputeMode
from api_schemas.plan import PlanStatus
from api_schemas.requests import Constraints, Objective, SolverLimits
from api_schemas.training import TrainingSpec
from models.core.ledger_memo import LedgerMemo
from models.core.step_time import simulation_units, step_time_floors_s
from models.errors import InvalidSpecError
from solver import cancel
from solver.bounds import BoundTables
from solver.candidate_eval import (
    Dominated,
    Rejection,
    ScoredPlan,
    allowed_zero_stages,
    least_stored_policy,
    plain_makespan_bound,
    plain_run_makespan,
    policy_floors_s,
    probe_options,
    storage_options,
)
from solver.policy import max_offload_share
from solver.progress import Reporter, reporter
from solver.runtime_choice import optimistic_training
from solver.space import MeshCandidate, candidate_meshes
from solver.targets import (
    TargetRequest,
    Variant,
    admits_mesh,
    candidate_variants,
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


MIN_GPUS_WEIGHT = 1e6
"""Seconds one GPU weighs in the fewest-GPUs objective (GPUs x this + step time): larger
than any step time, so fewer GPUs always win and step time breaks ties."""


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


TARGET_SLACK = 1e-9
"""Relative widening of the target's step-time cutoff: bounds prune only candidates that
miss the target by more than rounding."""

_TABLE_BOUND, _ZERO3_BOUND, _SIMULATED_BOUND, _FLOOR_BOUND, _RUN_BOUND = 0, 1, 2, 3, 4
"""How far a queued candidate's bound has been tightened: the closed-form table bound, the
table bound with forced ZeRO-3 gathers, the makespan bound (closed form at the lightest
stage), the per-ZeRO-stage step floors, the plain stage times' simulated run (then it is
evaluated)."""

FLOOR_FROM_ZERO_STAGE = 2
"""The per-step tail floor is computed for a candidate only when its memory bound rules out
every ZeRO stage below this one: under ZeRO-0 and 1 the gradients reduce once per step
behind the last backward and the floor seldom lifts the bound by more than it costs (on the
benchmark problems, fewer evaluations saved than the floors took), while ZeRO-2 reduces
every micro-batch and ZeRO-3 gathers every layer."""

RUN_BOUND_UNITS_PER_OPTION = 4_000
"""The largest first simulation (micro-batch x chunk x rank units,
`models.core.step_time.simulation_units`) the search runs for a candidate's plain run bound, per
(storage, policy) setting its evaluation may probe (`solver.candidate_eval.probe_options`:
2 for the benchmark's plain problems, 12 to 16 with every mechanism allowed); a shape
simulated before replays its recorded order and always qualifies. A first run costs about
1 us per op in the event loop; an evaluation costs more the more settings it probes. Chosen
on `benchmarks/bench_planner.py` (GPT 1T, plain and open, three calls in one process):
without a limit the plain search made 14.1 M Python calls (10.1 M in the first call, against
6.7 M with runs only for shapes already simulated), the open one 12.1 M; at 4,000 per
setting 11.9 M and 13.0 M. CPU time between 2,000 and 6,000 per setting differed by less
than its run-to-run spread on this 2-core machine."""


NO_PLAN_DIVE_SHARE = 0.5
"""Share of the time left at the start after which, while no plan is known, each candidate
is evaluated as soon as it is taken from the queue, in table-bound order, without its tighter
bounds: those bounds only order and prune, so the search stays exact, and a plan with a
proven gap is worth more than none when the limit falls. On DeepSeek-V3 at 32k tokens on 256
H100 (51,052 candidates, about 7 s to list and bound on this 2-core machine) the tighter
bounds of the first candidates had used up a 10 s limit before any evaluation."""


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


@dataclass(slots=True, kw_only=True)
class _Queue:
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
    dominated: list[MeshCandidate] = field(default_factory=list)
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
class _Problem:
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
    zeros = allowed_zero_stages(constraints)
    bound_training = optimistic_training(training, target_frameworks(constraints))
    problem = _Problem(spec=spec, training=training, cluster=cluster, constraints=constraints,
                       objective=objective, bound_training=bound_training,
                       tables=BoundTables(
                           spec, bound_training, cluster, memory_training=training,
                           host_gradients=constraints.gradient_host_shards
                           or constraints.allow_gradient_host_shards,
                           host_optimizer=bool(constraints.optimizer_offload_frac)
                           or (constraints.optimizer_offload_frac is None
                               and constraints.allow_optimizer_offload)),
                       zeros=zeros, max_offload=max_offload_share(constraints),
                       memo=LedgerMemo(spec=spec, training=training),
                       targets=TargetRequest(spec, training, constraints))
    sizes = (list(world_sizes) if world_sizes
             else objective_world_sizes(cluster, constraints, objective))
    queue = _Queue(heap=[], total=0, pruned_memory=0)
    if seed is not None:
        queue.best, queue.best_value = seed, objective_value(seed, objective)
        queue.ranked.append(seed)
    # Fewest GPUs: world sizes are enumerated one at a time, smallest first, each only once
    # the queue holds nothing that could beat its smallest value (world size x 1e6); the
    # other objectives order candidates of every size against each other, so all are queued.
    pending = list(sizes) if objective == Objective.MIN_GPUS else []
    if not pending:
        _enqueue(problem, queue, sizes, deadline)
        if watch is not None and queue.heap:
            _report(watch, queue, queue.heap[0][0])
        if progress:
            progress(f"{queue.total} candidates, {queue.pruned_memory} pruned by the memory "
                     f"bound, {len(queue.heap)} to order by the time bound")
    while queue.heap or pending:
        cancel.check()
        if pending and (not queue.heap or queue.heap[0][0] >= _size_floor(pending[0])):
            if _size_floor(pending[0]) >= queue.best_value or queue.unenumerated:
                break  # no larger size can beat the incumbent (or the clock ran out)
            world = pending.pop(0)
            _enqueue(problem, queue, [world], deadline)
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
        heapq.heappop(queue.heap)
        if queue.best is None and level < _RUN_BOUND and time.perf_counter() >= dive_from:
            # No plan yet and half the time gone: evaluate in bound order at once, past the
            # head rank's memory floor (below the simulated level it is not yet applied).
            if level >= _SIMULATED_BOUND or not _pruned_by_head_rank(problem, queue, c):
                _visit(problem, queue, order, c, progress)
                if watch is not None:
                    _report(watch, queue, lower)
            continue
        if level < _SIMULATED_BOUND:
            _tighten(problem, queue, lower, order, level, c)
            continue
        if level == _SIMULATED_BOUND and _add_tail_floor(
                problem, queue, lower, order, c,
                problem.variants(c)):
            continue
        if level < _RUN_BOUND and _add_run_floor(problem, queue, lower, order, c):
            continue
        _visit(problem, queue, order, c, progress)
        if watch is not None:
            _report(watch, queue, lower)
    if queue.unenumerated:
        # The time limit fell in the enumeration: nothing is proven about the rest.
        if queue.best is not None:
            queue.status, queue.bound = PlanStatus.FEASIBLE, None
        else:
            queue.unexamined = len(queue.heap) + queue.unenumerated + len(pending)
    if queue.unexamined:
        queue.total += len(pending)  # one stands for each world size never listed
    result = _result(problem, queue, sizes, time.perf_counter() - started)
    if watch is not None:
        watch.report(candidates=result.stats.candidates, evaluated=result.stats.evaluated,
                     incumbent=_finite(queue.best_value), bound=result.stats.best_bound,
                     final=True)
    return result


def _finite(value: float) -> float | None:
    return value if value < math.inf else None


def _report(watch: Reporter, queue: "_Queue", lower: float) -> None:
    """Tell the listener where the search stands (`lower`: the bound of the candidate just
    visited, or of the queue's head, the least of the queue's since candidates are visited in
    bound order). Called only when someone listens, so a search without a listener makes
    no call."""
    watch.report(candidates=queue.total, evaluated=queue.evaluated,
                 incumbent=_finite(queue.best_value), bound=lower)


def _size_floor(world: int) -> float:
    """The smallest fewest-GPUs objective value of any plan on `world` GPUs."""
    return world * MIN_GPUS_WEIGHT


def _enqueue(problem: _Problem, queue: _Queue, sizes: list[int], deadline: float) -> None:
    """Queue every candidate of the given world sizes that passes the memory bound and the
    throughput target's bounds, by its table time bound; at `deadline` the rest of the
    current world size is counted as not enumerated (and later world sizes are not listed).

    A world size whose peak throughput (`solver.throughput_bound.peak_tokens_per_s`) is
    below the target is skipped whole: no plan on it can reach the target."""
    tables, cluster = problem.tables, problem.cluster
    target = problem.constraints.target_tokens_per_s
    for world in sizes:
        cancel.check()
        if queue.unenumerated or time.perf_counter() >= deadline:
            if not queue.unenumerated:  # one stands for the sizes not listed
                queue.unenumerated = 1
                queue.total += 1
            break
        if target is not None:
            peak = peak_tokens_per_s(problem.spec, cluster,
                                     sequence_length=problem.training.sequence_length,
                                     gpus=world)
            if peak < target:
                queue.reach_bound = max(queue.reach_bound, peak)
                continue
        meshes = candidate_meshes(problem.spec, problem.training, world_size=world,
                                  gpus_per_node=cluster.gpus_per_node,
                                  constraints=problem.constraints, deadline=deadline)
        # Past the deadline the list may be partial: one more stands for what it left out.
        cut = 1 if time.perf_counter() >= deadline else 0
        too_large: dict[tuple[object, ...], int] = {}
        """Per mesh apart from its micro-batch: the smallest micro-batch whose memory bound
        exceeds the capacity (the bound never falls as the micro-batch grows, so every
        larger one is pruned without computing it)."""
        for index, c in enumerate(meshes):
            if time.perf_counter() >= deadline:
                queue.unenumerated = len(meshes) - index + cut
                queue.total += queue.unenumerated
                break
            if not admits_mesh(problem.spec, problem.training, c, problem.targets):
                continue  # no framework of the target runs this mesh
            queue.total += 1
            shape = _micro_batch_free_key(c)
            if c.micro_batch_size > too_large.get(shape, c.micro_batch_size):
                queue.pruned_memory += 1
                continue
            memory = tables.memory_bound_bytes(c, max_zero=max(problem.zeros, default=0),
                                               max_offload=problem.max_offload)
            if memory > cluster.capacity_bytes:
                queue.pruned_memory += 1
                too_large[shape] = min(too_large.get(shape, c.micro_batch_size),
                                       c.micro_batch_size)
                continue
            time_s = tables.time_bound_s(c) + tables.wait_bound_s(c)
            if _misses_target(problem, queue, time_s):
                continue
            bound = _rescale(time_s, c, problem.objective, problem.tokens)
            level = _TABLE_BOUND
            if problem.objective == Objective.MIN_MEMORY:
                # value = peak bytes + step time, both bounded below; tightening the time
                # part cannot reorder bytes, so candidates go straight to evaluation.
                bound += memory
                level = _SIMULATED_BOUND
            heapq.heappush(queue.heap, (bound, queue.total, level, c))
        if cut and not queue.unenumerated:
            queue.unenumerated = cut
            queue.total += cut


def _micro_batch_free_key(c: MeshCandidate) -> tuple[object, ...]:
    """Every field of a candidate but its micro-batch size and count: the candidates that
    differ only in how a replica's batch is split into micro-batches."""
    return (c.tp, c.pp, c.dp, c.cp, c.ep, c.etp, c.vpp, c.schedule, c.sequence_parallel,
            c.cp_kind, c.ulysses_degree)


def _misses_target(problem: _Problem, queue: _Queue, time_s: float) -> bool:
    """True (and counted) when `time_s`, a lower bound of every plan's step time of a
    candidate, already misses the throughput target; the bound's throughput joins the
    proven ceiling on what any plan reaches."""
    if time_s <= problem.target_cutoff_s:
        return False
    queue.pruned_target += 1
    queue.reach_bound = max(queue.reach_bound, _tokens_per_s_at(problem.tokens, time_s))
    return True


def _tokens_per_s_at(tokens: int, time_s: float) -> float:
    """Tokens per second of a step lasting `time_s` (infinite for no time)."""
    return tokens / time_s if time_s > 0 else math.inf


def _tighten(problem: _Problem, queue: _Queue, lower: float, order: int, level: int,
             c: MeshCandidate) -> None:
    """Re-queue a candidate under its next, tighter bound: the table bound with ZeRO-3's
    gathers where memory forces ZeRO-3, then the simulated bound."""
    tables = problem.tables
    if level == _TABLE_BOUND:
        # Where memory rules out ZeRO 0-2, the gathers of ZeRO-3 join the table bound.
        zero = _forced_zero_stage(tables, c, problem.zeros, problem.max_offload,
                                  problem.cluster.capacity_bytes)
        queue.forced_zero[order] = zero
        if zero == 3:
            queue.zero3_bound[order] = _zero3_bound_s(tables, c)
            step_s = queue.zero3_bound[order] + tables.wait_bound_s(c)
            if _misses_target(problem, queue, step_s):
                return
            gathered = _rescale(step_s, c, problem.objective, problem.tokens)
            if gathered > lower:
                heapq.heappush(queue.heap, (gathered, order, _ZERO3_BOUND, c))
                return
    # Before the simulation: the head's rank overflowing under every plan ends the candidate.
    if _pruned_by_head_rank(problem, queue, c):
        return
    # Second, tighter bound (one simulation, no policy search): re-queue by it.
    try:
        makespan = plain_makespan_bound(problem.spec, problem.bound_training, problem.cluster, c,
                                        zero_stage=queue.forced_zero[order])
    except InvalidSpecError as exc:
        queue.rejections.append(Rejection(candidate=c, reason=exc.detail))
        return
    # The step is at least the makespan plus the wait for the slowest GPU.
    step_s = makespan + tables.wait_bound_s(c)
    if _misses_target(problem, queue, step_s):
        return
    queue.makespan[order] = makespan
    tighter = _rescale(step_s, c, problem.objective, problem.tokens)
    heapq.heappush(queue.heap, (max(lower, tighter), order, _SIMULATED_BOUND, c))


def _pruned_by_head_rank(problem: _Problem, queue: _Queue, c: MeshCandidate) -> bool:
    """`_rank_memory_rules_out` over the candidate's framework variants, counted as a memory
    prune where it holds."""
    variants = problem.variants(c)
    if not _rank_memory_rules_out(problem, c, variants):
        return False
    queue.pruned_memory += 1
    return True


def _rank_memory_rules_out(problem: _Problem, c: MeshCandidate,
                           variants: list[Variant]) -> bool:
    """True when, under every framework variant that runs the candidate (`variants`,
    `solver.targets.candidate_variants`), the rank holding
    the output head overflows the GPU with the variant's least-storing policy at its
    strongest ZeRO stage (`solver.bounds.BoundTables.rank_memory_bound_bytes`): the
    evaluation would find no plan that fits. Variants alike in what the bound reads are
    bounded once, the most frugal first (where any may fit, it is usually that one)."""
    capacity = problem.cluster.capacity_bytes
    checks: list[tuple[tuple[bool, bool, float, int], Constraints, list[int],
                       dict[str, object]]] = []
    # Two variants are bounded once when every input of the bound is equal: the ZeRO
    # stages, the policy and the whole narrowed constraints (compared by value, field by
    # field, so no field the bound reads can be left out).
    seen: list[tuple[list[int], dict[str, object], Constraints]] = []
    for v in variants:
        zeros = allowed_zero_stages(v.constraints)
        policy = least_stored_policy(problem.spec, v.constraints, v.caps)
        inputs = (zeros, policy, v.constraints)
        if not zeros or inputs in seen:
            continue
        seen.append(inputs)
        frugality = (policy.get("recompute") == RecomputeMode.FULL,
                     bool(v.constraints.allow_fp8_activations),
                     max_offload_share(v.constraints), max(zeros))
        checks.append((frugality, v.constraints, zeros, policy))
    checks.sort(key=lambda check: check[0], reverse=True)
    return not any(problem.tables.rank_memory_bound_bytes(
        c, constraints, zeros=zeros, policy=policy, memo=problem.memo,
        limit_bytes=capacity) <= capacity for _, constraints, zeros, policy in checks)


def _add_tail_floor(problem: _Problem, queue: _Queue, lower: float, order: int,
                    c: MeshCandidate, variants: list[Variant]) -> bool:
    """Before its evaluation, bound each ZeRO stage's plans by the makespan bound plus the
    stage's per-step tail (`models.core.step_time.step_time_floors_s`, over every activation
    policy the request allows; ZeRO-3 from the larger of the makespan bound and its own), for
    the stages some framework variant of the candidate (`variants`) allows and the memory
    bound leaves (where none is below `FLOOR_FROM_ZERO_STAGE`), and re-queue the candidate
    under the smallest (True; also when the target dismisses it). False: go on to
    evaluate."""
    if problem.objective == Objective.MIN_MEMORY or order not in queue.makespan:
        return False
    tables, makespan = problem.tables, queue.makespan[order]
    forced = queue.forced_zero.get(order, 0)
    # Only the stages a framework running the mesh allows have plans (torchtitan's V
    # schedules, for one, only ZeRO-3: FSDP).
    allowed = {zero for v in variants for zero in allowed_zero_stages(v.constraints)}
    # Under a forced ZeRO-3 the makespan bound holds for ZeRO-3 plans only; stages the
    # memory bound rules out have no plan.
    spans = {zero: (max(makespan, queue.zero3_bound.get(order, 0.0)) if zero == 3
                    else makespan)
             for zero in problem.zeros
             if zero in allowed and (forced != 3 or zero == 3) and tables.memory_bound_bytes(
                 c, max_zero=zero, max_offload=problem.max_offload)
             <= problem.cluster.capacity_bytes}
    if not spans or min(spans) < FLOOR_FROM_ZERO_STAGE:
        return False
    try:
        floors = _policy_floors(problem, c, _tail_floors(problem, c, spans), variants)
    except InvalidSpecError:
        return False  # the evaluation rejects it with the reason
    queue.zero_floors[order] = floors
    return _requeue(problem, queue, min(floors.values()), lower, order, _FLOOR_BOUND, c)


def _requeue(problem: _Problem, queue: _Queue, step_s: float, lower: float, order: int,
             level: int, c: MeshCandidate) -> bool:
    """Re-queue a candidate at `level` under `step_s`, a new lower bound of its step time,
    where that is above its current bound `lower` (True; also when it misses the throughput
    target, which dismisses it). False: the bound is no tighter, go on."""
    if _misses_target(problem, queue, step_s):
        return True
    tighter = _rescale(step_s, c, problem.objective, problem.tokens)
    if tighter <= lower:
        return False
    heapq.heappush(queue.heap, (tighter, order, level, c))
    return True


def _tail_floors(problem: _Problem, c: MeshCandidate,
                 spans: dict[int, float]) -> dict[int, float]:
    """Per ZeRO stage of `spans` (a lower bound of the makespan of every plan at that
    stage), `step_time_floors_s` of the candidate; ZeRO-1's is the lower of its plans with
    and without Pipeline ZeRO-2 where the search may choose it (they end differently).

    Raises:
        InvalidSpecError: as `step_time_floors_s`.
    """
    floors = step_time_floors_s(problem.spec, problem.bound_training, _floor_parallel(problem, c),
                                problem.cluster, makespan_bounds_s=spans,
                                max_offload=problem.max_offload)
    if 1 in spans and len(storage_options(1, problem.constraints, c.pp)) > 1:
        other = step_time_floors_s(problem.spec, problem.bound_training,
                                   c.parallel(gradient_host_shards=True), problem.cluster,
                                   makespan_bounds_s={1: spans[1]},
                                   max_offload=problem.max_offload)
        floors[1] = min(floors[1], other[1])
    return floors


def _add_run_floor(problem: _Problem, queue: _Queue, lower: float, order: int,
                   c: MeshCandidate) -> bool:
    """Just before its evaluation, replace the candidate's closed-form makespan bound by the
    simulated run of its stage times without a policy (`plain_run_makespan`, at the ZeRO
    timing memory forces; only where its first simulation is at most
    `RUN_BOUND_UNITS_PER_OPTION` per setting the evaluation may probe) where that is
    larger, raise its step floors with it, and re-queue
    it under the new bound when that is above `lower` (True; also when the target
    dismisses it). False: go on to evaluate.

    The floors already held stay where they are higher (each is a lower bound; the policy
    floors of `_policy_floors` do not read the makespan)."""
    if problem.objective == Objective.MIN_MEMORY or order not in queue.makespan:
        return False
    limit = RUN_BOUND_UNITS_PER_OPTION * probe_options(problem.spec, problem.constraints,
                                                      c.pp)
    if simulation_units(problem.training, c.parallel()) > limit:
        return False  # a first simulation this large costs more than it may spare
    forced = queue.forced_zero.get(order, 0)
    try:
        run_s = plain_run_makespan(problem.spec, problem.bound_training, problem.cluster, c,
                                   zero_stage=forced)
        if run_s <= queue.makespan[order]:
            return False
        queue.makespan[order] = run_s
        step_s = run_s + problem.tables.wait_bound_s(c)
        floors = queue.zero_floors.get(order)
        if floors is not None:
            spans = {zero: (max(run_s, queue.zero3_bound.get(order, 0.0)) if zero == 3
                            else run_s) for zero in floors}
            raised = _tail_floors(problem, c, spans)
            floors = {zero: max(floor, raised[zero]) for zero, floor in floors.items()}
            queue.zero_floors[order] = floors
            step_s = max(step_s, min(floors.values()))
    except InvalidSpecError:
        return False  # the evaluation rejects it with the reason
    return _requeue(problem, queue, step_s, lower, order, _RUN_BOUND, c)


def _policy_floors(problem: _Problem, c: MeshCandidate, floors: dict[int, float],
                   variants: list[Variant]) -> dict[int, float]:
    """`floors` (per ZeRO stage, a lower bound of every plan's step time) raised, where no
    plan with the plain activation policy fits, to the smallest bound any framework
    variant's rule puts on its other policies (`solver.candidate_eval.policy_floors_s`,
    with `BoundTables.policy_memory_bound_bytes` at the strongest stage left as the memory
    test): every plan then recomputes, at least as many layers as memory demands, and the
    search orders the candidate by that before evaluating it. Unchanged for a pinned
    policy."""
    constraints = problem.constraints
    if constraints.pinned_recompute is not None:
        return floors
    tables, capacity, strongest = problem.tables, problem.cluster.capacity_bytes, max(floors)

    def may_fit(parallel: ParallelConfig) -> bool:
        return tables.policy_memory_bound_bytes(parallel, c, max_zero=strongest) <= capacity

    if may_fit(c.parallel()):
        return floors
    if not variants or any(v.constraints.recompute is not None
                           and not isinstance(v.constraints.recompute, list)
                           for v in variants):
        return floors
    raised = dict.fromkeys(floors, math.inf)
    for v in variants:
        zeros = [zero for zero in floors if zero in allowed_zero_stages(v.constraints)]
        bounds = policy_floors_s(problem.spec, problem.bound_training, problem.cluster, c,
                                 v.constraints, zeros, v.caps, may_fit)
        for zero, bound in bounds.items():
            raised[zero] = min(raised[zero], bound)
    return {zero: max(floor, raised[zero]) if raised[zero] < math.inf else floor
            for zero, floor in floors.items()}


def _floor_parallel(problem: _Problem, c: MeshCandidate) -> ParallelConfig:
    """The candidate as its plans have it, without an activation policy."""
    if problem.constraints.gradient_host_shards:
        return c.parallel(gradient_host_shards=True)
    return c.parallel()


def _visit(problem: _Problem, queue: _Queue, order: int, c: MeshCandidate,
           progress: Progress | None) -> None:
    """Evaluate a candidate exactly and keep it if it beats the incumbent and reaches the
    throughput target; ZeRO plans whose step-time bound misses either are not simulated."""
    incumbent_s = _step_cutoff_s(queue.best_value, c, problem.objective, problem.tokens)
    cutoff_s = min(incumbent_s, problem.target_cutoff_s)
    if 3 in problem.zeros and cutoff_s < math.inf and order not in queue.zero3_bound:
        queue.zero3_bound[order] = _zero3_bound_s(problem.tables, c)
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
                                    _tokens_per_s_at(problem.tokens, result.bound_s))
            queue.rejections.append(Rejection(candidate=c, reason="every plan's step-time "
                                              "bound misses the target tokens/s"))
        else:
            queue.dominated.append(c)
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


def _result(problem: _Problem, queue: _Queue, sizes: list[int], wall_s: float) -> SearchResult:
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
                        frontier=frontier, dominated=tuple(queue.dominated[:200]),
                        fastest_missed=queue.fastest_missed, reach_ceiling=ceiling)


def _rescale(time_s: float, c: MeshCandidate, objective: Objective, tokens: int) -> float:
    if objective == Objective.COST_PER_TOKEN:
        return c.world_size * time_s / tokens
    if objective == Objective.MIN_GPUS:
        return c.world_size * MIN_GPUS_WEIGHT + time_s
    return time_s


def _meets_target(plan: ScoredPlan, constraints: Constraints) -> bool:
    target = constraints.target_tokens_per_s
    return target is None or plan.estimate.tokens_per_s >= target


__all__ = ["MIN_GPUS_WEIGHT", "TARGET_SLACK", "SearchResult", "SearchStats", "objective_value",
           "objective_world_sizes", "search"]
