"""The bounds a queued candidate of `solver.planner`'s search is tightened through before
its exact evaluation: the table bound with ZeRO-3's gathers where memory forces ZeRO-3, the
simulated makespan bound, the head rank's memory floor, the per-ZeRO-stage step floors,
the simulated run of the plain stage times and the makespan bound under each framework
variant's own recipe. Each only raises a lower bound or dismisses a
candidate no plan of which fits or reaches the target, so the search stays exact.

Owns: `tighten`, `add_variants_bound`, `pruned_by_head_rank`, `add_tail_floor`,
`add_run_floor`, `zero3_bound_s`
and the thresholds that decide when a floor is worth its cost. Must not: evaluate a
candidate, hold the search's loop (`solver.planner`) or define the bounds themselves
(`solver.bounds`, `solver.candidate_eval`, `models.core.step_time.bounds`).
"""

import heapq
import math

from api_schemas.parallel import ParallelConfig, RecomputeMode
from api_schemas.requests import Constraints, Objective
from api_schemas.training import TrainingSpec
from models.core.runtime_features import DEEPEP, OVERLAP_EP_COMM
from models.core.step_time import simulation_units, step_time_floors_s
from models.errors import InvalidSpecError
from solver.bounds import BoundTables
from solver.candidate_eval import (
    Rejection,
    allowed_zero_stages,
    least_stored_policy,
    plain_makespan_bound,
    plain_run_makespan,
    policy_floors_s,
    probe_options,
    storage_options,
)
from solver.policy import max_offload_share
from solver.runtime_choice import runtime_feature_set
from solver.search_state import (
    FLOOR_BOUND,
    RUN_BOUND,
    SIMULATED_BOUND,
    TABLE_BOUND,
    ZERO3_BOUND,
    SearchProblem,
    SearchQueue,
    misses_target,
    requeue,
    rescale,
)
from solver.space import MeshCandidate
from solver.targets import Variant

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


def zero3_bound_s(tables: BoundTables, c: MeshCandidate) -> float:
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
    terms = tables.memory_terms(c, max_offload)
    for zero in zeros:
        if tables.memory_bound_bytes(c, max_zero=zero, max_offload=max_offload,
                                     terms=terms) <= capacity_bytes:
            return 3 if zero == 3 else 0
    return 0


def tighten(problem: SearchProblem, queue: SearchQueue, lower: float, order: int, level: int,
             c: MeshCandidate) -> None:
    """Re-queue a candidate under its next, tighter bound: the table bound with ZeRO-3's
    gathers where memory forces ZeRO-3, then the simulated bound."""
    tables = problem.tables
    if level == TABLE_BOUND:
        # Where memory rules out ZeRO 0-2, the gathers of ZeRO-3 join the table bound.
        zero = _forced_zero_stage(tables, c, problem.zeros, problem.max_offload,
                                  problem.capacity_bytes)
        queue.forced_zero[order] = zero
        if zero == 3:
            queue.zero3_bound[order] = zero3_bound_s(tables, c)
            step_s = queue.zero3_bound[order] + tables.wait_bound_s(c)
            if misses_target(problem, queue, step_s):
                return
            gathered = rescale(step_s, c, problem.objective, problem.tokens)
            if gathered > lower:
                heapq.heappush(queue.heap, (gathered, order, ZERO3_BOUND, c))
                return
    # Before the simulation: the head's rank overflowing under every plan ends the candidate.
    if pruned_by_head_rank(problem, queue, c):
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
    if misses_target(problem, queue, step_s):
        return
    queue.makespan[order] = makespan
    tighter = rescale(step_s, c, problem.objective, problem.tokens)
    heapq.heappush(queue.heap, (max(lower, tighter), order, SIMULATED_BOUND, c))


def variants_makespan_bound(problem: SearchProblem, c: MeshCandidate, *, zero_stage: int,
                            optimistic_s: float | None = None) -> float:
    """`plain_makespan_bound` of the candidate under each distinct recipe of its framework
    variants (`SearchProblem.variants`: the runtime features each variant decides) whose
    memory may fit (`_recipe_may_fit`), the least of them; infinite where no recipe may fit;
    under the search's optimistic recipe (`SearchProblem.bound_training`) where no variant
    runs the candidate (its evaluation then rejects it) or where a recipe that may fit turns
    on the same features for the mesh (that bound is the least). `optimistic_s`: that
    optimistic bound where the caller holds it (returned as is, not computed again); a
    recipe's bound at most it ends the work at once (the least is no larger).

    Every plan the evaluation scores is one variant's plan under that variant's recipe
    (`solver.targets.evaluate_for_targets`), so the least of the bounds of the recipes that
    may fit bounds them all. It is often above the optimistic recipe's bound: that recipe
    turns on every runtime feature some target offers, while no single framework may run
    them together, and the recipes with the EP overlap allow no full recomputation, so
    they fit on fewer meshes.

    Raises:
        InvalidSpecError: as `plain_makespan_bound`.
    """
    groups: dict[TrainingSpec, list[Variant]] = {}
    for variant in problem.variants(c):
        groups.setdefault(variant.training, []).append(variant)
    if not groups:
        return _optimistic_bound(problem, c, zero_stage=zero_stage, optimistic_s=optimistic_s)
    # Two recipes alike in the features they turn on for the mesh time alike (a variant's
    # recipe and the optimistic one agree in every other field).
    optimistic = runtime_feature_set(problem.spec, problem.bound_training, c)
    recipes: list[TrainingSpec] = []
    for recipe, variants in groups.items():
        features = runtime_feature_set(problem.spec, recipe, c)
        if not _recipe_may_fit(problem, c, features, variants):
            continue
        if features == optimistic:  # the optimistic recipe's bound is the least
            return _optimistic_bound(problem, c, zero_stage=zero_stage,
                                     optimistic_s=optimistic_s)
        recipes.append(recipe)
    return _least_bound(problem, c, recipes, zero_stage=zero_stage,
                        above=-math.inf if optimistic_s is None else optimistic_s)


def _optimistic_bound(problem: SearchProblem, c: MeshCandidate, *, zero_stage: int,
                      optimistic_s: float | None) -> float:
    """`plain_makespan_bound` under the search's optimistic recipe: `optimistic_s` where the
    caller holds it."""
    if optimistic_s is not None:
        return optimistic_s
    return plain_makespan_bound(problem.spec, problem.bound_training, problem.cluster, c,
                                zero_stage=zero_stage)


def _least_bound(problem: SearchProblem, c: MeshCandidate, recipes: list[TrainingSpec], *,
                 zero_stage: int, above: float) -> float:
    """The least `plain_makespan_bound` of the candidate over `recipes` (infinite for
    none), the work ending at the first at most `above`."""
    least = math.inf
    for recipe in recipes:
        least = min(least, plain_makespan_bound(problem.spec, recipe, problem.cluster, c,
                                                zero_stage=zero_stage))
        if least <= above:
            break
    return least


MEMORY_FEATURES = frozenset({OVERLAP_EP_COMM, DEEPEP})
"""Runtime features whose frameworks' variants may store more than the others: the EP
overlap's caps allow no full recomputation. Only a recipe turning one of them on has its
memory read by `variants_makespan_bound` (a cost rule: a recipe kept is never wrong)."""


def _recipe_may_fit(problem: SearchProblem, c: MeshCandidate, features: frozenset[str],
                    variants: list[Variant]) -> bool:
    """False where every variant running one recipe (`variants`, which turn on `features`,
    `solver.runtime_choice.runtime_feature_set`) overflows on the mean over pipeline ranks
    under its own least-storing policy at its strongest ZeRO stage, the activations stored
    as the recipe stores them (`BoundTables.policy_memory_bound_bytes`, the `_policy_floors`
    test): no plan of it fits. Read only for a recipe that turns on a `MEMORY_FEATURES` feature."""
    if not features & MEMORY_FEATURES:
        return True
    recipe = variants[0].training
    for v in variants:
        zeros = allowed_zero_stages(v.constraints)
        if not zeros:
            continue
        policy = least_stored_policy(problem.spec, v.constraints, v.caps)
        try:
            parallel = c.parallel().model_copy(update=policy)
            if problem.tables.policy_memory_bound_bytes(
                    parallel, c, max_zero=max(zeros),
                    training=recipe) <= problem.capacity_bytes:
                return True
        except InvalidSpecError:
            return True  # the evaluation says why
    return False


def add_variants_bound(problem: SearchProblem, queue: SearchQueue, lower: float, order: int,
                       c: MeshCandidate) -> bool:
    """Just before a candidate's evaluation: its makespan bound taken again as the
    least over its variants' recipes that may fit (`variants_makespan_bound`). True: the
    candidate ends without an evaluation, since no recipe's plans fit (a memory prune) or
    the step floor the bound gives reaches the incumbent or misses the target (it is
    re-queued under that floor, above the incumbent, where the search's proven bound can
    read it). False: evaluate it now, also where the floor rose but stays below the
    incumbent: re-queuing it would only reorder the search, and a search cut by its time
    limit could then end with a worse incumbent (Kimi K2 at 32k tokens on 512 H100 at the
    default 10 s: 74.0 s with it evaluated now, 87.5 s re-queued). Taken last, for a
    candidate every other bound leaves in contention, since it costs a bound, and for some
    recipes a memory bound, per distinct recipe (the evaluation it may spare costs more).

    The step floors already held (`SearchQueue.zero_floors`, from the optimistic makespan)
    stay as they are: each is still a lower bound."""
    if order not in queue.makespan:
        return False
    try:
        makespan = variants_makespan_bound(problem, c, optimistic_s=queue.makespan[order],
                                           zero_stage=queue.forced_zero.get(order, 0))
    except InvalidSpecError:
        return False  # the evaluation rejects it with the reason
    if makespan == math.inf:
        queue.pruned_memory += 1  # no recipe's plans fit
        return True
    if makespan <= queue.makespan[order]:
        return False
    queue.makespan[order] = makespan
    step_s = makespan + problem.tables.wait_bound_s(c)
    if (rescale(step_s, c, problem.objective, problem.tokens) < queue.best_value
            and step_s <= problem.target_cutoff_s):
        return False  # it may still beat the incumbent: evaluate it now
    return requeue(problem, queue, step_s, lower, order, RUN_BOUND, c)


def pruned_by_head_rank(problem: SearchProblem, queue: SearchQueue, c: MeshCandidate) -> bool:
    """`_rank_memory_rules_out` over the candidate's framework variants, counted as a memory
    prune where it holds."""
    variants = problem.variants(c)
    if not _rank_memory_rules_out(problem, c, variants):
        return False
    queue.pruned_memory += 1
    return True


def _rank_memory_rules_out(problem: SearchProblem, c: MeshCandidate,
                           variants: list[Variant]) -> bool:
    """True when, under every framework variant that runs the candidate (`variants`,
    `solver.targets.candidate_variants`), the rank holding
    the output head overflows the GPU with the variant's least-storing policy at its
    strongest ZeRO stage (`solver.bounds.BoundTables.rank_memory_bound_bytes`): the
    evaluation would find no plan that fits. Variants alike in what the bound reads are
    bounded once, the most frugal first (where any may fit, it is usually that one)."""
    capacity = problem.capacity_bytes
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


def add_tail_floor(problem: SearchProblem, queue: SearchQueue, lower: float, order: int,
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
    capacity = problem.capacity_bytes
    forced = queue.forced_zero.get(order, 0)
    # Only the stages a framework running the mesh allows have plans (torchtitan's V
    # schedules, for one, only ZeRO-3: FSDP).
    allowed = {zero for v in variants for zero in allowed_zero_stages(v.constraints)}
    # Under a forced ZeRO-3 the makespan bound holds for ZeRO-3 plans only; stages the
    # memory bound rules out have no plan.
    terms = tables.memory_terms(c, problem.max_offload)
    spans = {zero: (max(makespan, queue.zero3_bound.get(order, 0.0)) if zero == 3
                    else makespan)
             for zero in problem.zeros
             if zero in allowed and (forced != 3 or zero == 3) and tables.memory_bound_bytes(
                 c, max_zero=zero, max_offload=problem.max_offload, terms=terms) <= capacity}
    if not spans or min(spans) < FLOOR_FROM_ZERO_STAGE:
        return False
    try:
        floors = _policy_floors(problem, c, _tail_floors(problem, c, spans), variants)
    except InvalidSpecError:
        return False  # the evaluation rejects it with the reason
    queue.zero_floors[order] = floors
    return requeue(problem, queue, min(floors.values()), lower, order, FLOOR_BOUND, c)


def _tail_floors(problem: SearchProblem, c: MeshCandidate,
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


def add_run_floor(problem: SearchProblem, queue: SearchQueue, lower: float, order: int,
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
    return requeue(problem, queue, step_s, lower, order, RUN_BOUND, c)


def _policy_floors(problem: SearchProblem, c: MeshCandidate, floors: dict[int, float],
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
    tables, capacity, strongest = problem.tables, problem.capacity_bytes, max(floors)

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


def _floor_parallel(problem: SearchProblem, c: MeshCandidate) -> ParallelConfig:
    """The candidate as its plans have it, without an activation policy."""
    if problem.constraints.gradient_host_shards:
        return c.parallel(gradient_host_shards=True)
    return c.parallel()


__all__ = ["FLOOR_FROM_ZERO_STAGE", "RUN_BOUND_UNITS_PER_OPTION", "add_run_floor",
           "add_tail_floor", "add_variants_bound", "pruned_by_head_rank", "tighten",
           "variants_makespan_bound", "zero3_bound_s"]
