"""The library entry points: `plan(request)` and `evaluate(request)` -> `PlanResponse`.

Owns: resolving the request, running the search or scoring one configuration, refining,
explaining and gathering the parts of the public response (`solver.plan_response` assembles
it). Must not: do I/O (the service stores plans).
"""

import dataclasses
import time
from collections.abc import Callable

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.plan import (
    Alternative,
    CostEstimate,
    ExpertParallelComparison,
    Explanation,
    PlanResponse,
    PlanStatus,
    SolverStats,
)
from api_schemas.requests import Constraints, EvaluateRequest, Objective, PlanRequest
from api_schemas.training import TrainingSpec
from models.catalog.resolve import resolve_cluster, resolve_model
from models.core.layer_kinds import has_routed_experts
from models.core.memory import memory_ledger
from models.core.mesh import validate_mesh
from models.core.search_memo import within_search_memo
from models.core.step_time import estimate_step
from models.errors import InvalidSpecError
from models.evidence.memory_evidence import ledger_evidence
from solver import cancel, cpsat
from solver.alternatives import plan_alternatives, range_of
from solver.anytime import Seeded, seeded_search
from solver.binding_pins import Binding, binding_texts, find_binding
from solver.candidate_eval import ScoredPlan, refine_policies
from solver.chosen_mechanisms import OPTIMIZER_OFFLOAD, features_why_off, offload_fixed_by
from solver.collector import collector_paused
from solver.expert_parallel import best_with_expert_parallelism, compare
from solver.explain import (
    binding_constraints,
    describe_parallel,
    gib,
    limit_text,
    summary,
    why_rejected,
)
from solver.fixes import suggest_fixes
from solver.mechanisms import mechanism_notes
from solver.plan_notes import (
    chosen_plan_notes,
    cost_model_notes,
    cp_layer_notes,
    plausibility,
)
from solver.plan_response import ReportParts, plan_response, throughput, time_breakdown
from solver.planner import SearchResult, hardware_constraints, objective_value, search
from solver.reach import Reach, highest_reachable, target_relaxation
from solver.relax import binding_relaxations, relaxations
from solver.resume import resume
from solver.robust_choice import (
    Pick,
    experimental_features,
    experimental_offload,
    experimental_schedules,
    pick,
)
from solver.runtime_choice import decided_for, with_rules
from solver.search_space import search_limits, space_note
from solver.space import MeshCandidate
from solver.targets import (
    allows_per_stage_policies,
    evaluate_for_targets,
    refine_layer_split,
    target_blockers,
    target_constraints,
)

Progress = Callable[[str], None]


@within_search_memo
def plan(request: PlanRequest, *, progress: Progress | None = None) -> PlanResponse:
    """Search the best plan for a request (see `solver/planner.py`).

    Returns a `PlanResponse` whose status is optimal, feasible (time limit), infeasible
    (with the binding constraints and the smallest relaxations that make a plan exist) or
    unknown (the time limit ended the search before any plan or proof). The cyclic garbage
    collector is paused for the call (`solver.collector`).

    Raises:
        InvalidSpecError: unknown presets or unreadable inputs.
        Cancelled: the thread's cancellation token was set (`solver/cancel.py`).
    """
    deadline = time.perf_counter() + request.solver.time_limit_s
    with collector_paused():
        return _plan(request, progress, deadline)


def _search_deadline(request: PlanRequest, deadline: float) -> float:
    """When a search of the request must stop: it leaves a share of the limit for what
    follows it (refinement, runners-up, the chosen mechanisms' notes, exports), so that the
    answer comes within the limit."""
    return deadline - min(POST_SEARCH_RESERVE_MAX_S,
                          POST_SEARCH_RESERVE_SHARE * request.solver.time_limit_s)


def _plan(request: PlanRequest, progress: Progress | None, deadline: float) -> PlanResponse:
    # `constraints.runtime_features` fix the recipe fields they rule on (the same as fixing
    # them in the recipe).
    request = request.model_copy(update={"training": with_rules(
        request.training, request.constraints.runtime_features)})
    resolved = resolve_model(request.model)
    spec, cluster = resolved.spec, resolve_cluster(request.cluster)
    constraints = target_constraints(hardware_constraints(request.constraints, cluster,
                                                          request.training))
    # A wide target's search starts from one framework's best plan (`solver.anytime`).
    seeded = seeded_search(spec, request.training, cluster, constraints=constraints,
                           objective=request.objective, limits=request.solver,
                           progress=progress, deadline=_search_deadline(request, deadline))
    result = seeded.result
    notes = cost_model_notes(resolved.notes, cluster)
    limits = search_limits(spec, request.training, cluster, constraints, request.objective)
    notes.append(space_note(limits, result.status, result.stats.gap))
    stats = _stats(result).model_copy(update={
        "space": limits, "seed_framework": seeded.framework,
        "seed_objective": seeded.seed_value, "incumbent_from_seed": seeded.from_seed,
        "incumbent": None if result.best is None else objective_value(result.best,
                                                                       request.objective)})
    cancel.check()
    if result.best is None:
        return _infeasible(request, result, stats, notes, spec, cluster, deadline,
                           constraints=constraints)
    return _answer(request, spec, cluster, constraints, seeded, stats, notes, deadline)


def _answer(request: PlanRequest, spec: ModelSpec, cluster: ClusterSpec,
            constraints: Constraints, seeded: Seeded, stats: SolverStats, notes: list[str],
            deadline: float) -> PlanResponse:
    """The response for a search that found a plan: refined, re-timed, checked against the
    robust choice, set beside its runners-up and EP alternative, explained and priced."""
    result = seeded.result
    assert result.best is not None
    # The recipe the winner was scored under: the request's with the runtime features the
    # search decided (`solver.runtime_choice`).
    training = result.best.training or request.training
    remaining_s = deadline - time.perf_counter()
    config = cpsat.SolverConfig(max_time_s=max(MIN_SUBPROBLEM_S, min(2.0, remaining_s)),
                                num_workers=request.solver.num_workers,
                                random_seed=request.solver.random_seed)
    best = _refined(request.objective, spec, training, cluster, result.best, constraints,
                    config, deadline)
    if best is not result.best:
        notes.append("per-stage policies refined by the CP-SAT subproblem: "
                     f"{result.best.estimate.step_time_s:.3f} -> {best.estimate.step_time_s:.3f} s")
    # The search times plans without splitting pipeline idle time from P2P latency; the
    # chosen plan's breakdown gets the split (same step time).
    best = dataclasses.replace(best, estimate=estimate_step(spec, training,
                                                            best.parallel, cluster))
    runners_up = _runners_up(request, constraints, result, spec, cluster, best, deadline)
    # Robust choice (`solver.robust_choice`): an experimental optimum must win by more than
    # the error band; ties within the pairwise band go to memory margin, then mechanisms.
    scored = [*result.ranked, *runners_up,
              *_common_candidates(request, constraints, spec, cluster, best,
                                  seeded.seed.best if seeded.seed is not None else None,
                                  _search_deadline(request, deadline), searched=result)]
    robust = pick(best, scored, spec, request.training, cluster, objective=request.objective,
                  proven=result.status == PlanStatus.OPTIMAL)
    optimum = best
    if robust.shown is not best:
        training = robust.shown.training or request.training
        best = dataclasses.replace(robust.shown, estimate=estimate_step(
            spec, training, robust.shown.parallel, cluster))
        runners_up = [optimum, *(p for p in runners_up if p is not robust.shown)][
            : max(1, request.solver.top_k)]
    alternatives = plan_alternatives(best, runners_up, result, cluster, request,
                                     optimum=optimum, spec=spec)
    text, cost = _summary_text(request, spec, cluster, best, robust, notes)
    notes += chosen_plan_notes(request, spec, training, cluster, best, constraints, config,
                                deadline)
    explanation = Explanation(summary=text, binding_constraints=binding_constraints(best.ledger),
                              notes=notes)
    with_recipe = dataclasses.replace(best, training=training)
    expert = _expert_comparison(request, spec, training, cluster, constraints, result,
                                with_recipe, deadline)
    parts = ReportParts(status=result.status, alternatives=alternatives, explanation=explanation,
                        stats=stats, target=request.constraints.framework or "released",
                        why_off=features_why_off(spec, request.training, cluster, with_recipe,
                                                 constraints, deadline=deadline),
                        offload_fixed_by=offload_fixed_by(request.constraints))
    response = plan_response(best, parts, spec=spec, training=training, cluster=cluster,
                             request_training=request.training)
    extra = {"robust_choice": robust.report, "expert_parallel": expert, "cost": cost}
    return response.model_copy(update={k: v for k, v in extra.items() if v is not None})


def _expert_comparison(request: PlanRequest, spec: ModelSpec, training: TrainingSpec,
                       cluster: ClusterSpec, constraints: Constraints, result: SearchResult,
                       chosen: ScoredPlan, deadline: float) -> ExpertParallelComparison | None:
    """For an MoE plan with EP = 1 where the constraints leave EP open: the best plan with
    EP > 1 beside it (`solver.expert_parallel`); None otherwise."""
    if not (has_routed_experts(spec) and chosen.parallel.ep == 1
            and constraints.ep not in (1, [1])):
        return None
    other = best_with_expert_parallelism(
        spec, request.training, cluster, constraints, request.objective, request.solver,
        result, deadline=deadline - EP_RESPONSE_MARGIN_S)
    return compare(spec, training, cluster, chosen, other)


def _refined(objective: Objective, spec: ModelSpec, training: TrainingSpec,
             cluster: ClusterSpec, found: ScoredPlan, constraints: Constraints,
             config: cpsat.SolverConfig, deadline: float) -> ScoredPlan:
    """The search's plan refined by the CP-SAT subproblem: per-stage policies where the
    target allows them (kept only if a target framework runs the result), else the layer
    split; unrefined under the least-memory objective (refinement trades memory for
    speed)."""
    if objective == Objective.MIN_MEMORY:
        return found
    if allows_per_stage_policies(constraints):
        best = refine_policies(spec, training, cluster, found, constraints, config,
                               deadline=deadline)
        return found if target_blockers(spec, training, best.parallel, constraints) else best
    return refine_layer_split(spec, training, cluster, found, constraints, deadline=deadline)


def _summary_text(request: PlanRequest, spec: ModelSpec, cluster: ClusterSpec,
                  best: ScoredPlan, robust: Pick, notes: list[str]
                  ) -> tuple[str, CostEstimate | None]:
    """(the explanation's summary, the cost at the request's GPU-hour price): the plan's
    summary, the robust choice's report (or, where the optimum is shown, that report joins
    `notes`), the cost per million tokens and, for the fewest-GPUs objective, the count."""
    text = summary(spec, cluster, best)
    if robust.report.picked != "optimum":
        text += f" {robust.report.text[0].upper()}{robust.report.text[1:]}."
    else:
        notes.append(robust.report.text)
    price = request.constraints.gpu_hour_price
    cost = None
    if price is not None:
        cost = cost_estimate(price, world_size=best.estimate.world_size,
                             tokens_per_s=best.estimate.tokens_per_s,
                             step_time_s=best.estimate.step_time_s)
        text += (f" Cost: {cost.cost_per_million_tokens:.4f} per million tokens at {price} per "
                 "GPU-hour.")
    if request.objective == Objective.MIN_GPUS:
        reach = " and reach the target" if request.constraints.target_tokens_per_s else ""
        text += f" Fewest GPUs that fit{reach}: {best.estimate.world_size}."
    return text, cost


def cost_estimate(price: float, *, world_size: int, tokens_per_s: float,
                  step_time_s: float) -> CostEstimate:
    """Cost per token and per step at `price` per GPU-hour: every GPU of the plan is billed
    for the whole step."""
    per_token = price * world_size / 3600.0 / tokens_per_s
    return CostEstimate(gpu_hour_price=price, cost_per_token=per_token,
                        cost_per_million_tokens=per_token * 1e6,
                        cost_per_step=price * world_size * step_time_s / 3600.0)


def _stats(result: SearchResult) -> SolverStats:
    s = result.stats
    return SolverStats(wall_time_s=s.wall_time_s, candidates=s.candidates,
                       pruned=s.pruned_memory + s.pruned_bound, evaluated=s.evaluated,
                       gap=s.gap, best_bound=s.best_bound,
                       status="time_limit" if s.unexamined else result.status.value,
                       unexamined=s.unexamined)


POST_SEARCH_RESERVE_SHARE = 0.08
"""Share of the time limit the search leaves for the work after it (at most
`POST_SEARCH_RESERVE_MAX_S`): a search that ends at its own deadline still answers within
the limit. Chosen from `benchmarks/bench_planner.py`: without it, a first call of the open
GPT 1T problem answered at 10.74 s under a 10 s limit on a loaded machine."""
POST_SEARCH_RESERVE_MAX_S = 1.0
"""Most seconds the search leaves for the work after it."""
ALTERNATIVE_BUDGET_S = 2.0
"""Most extra time spent evaluating runners-up when the search proved optimality early
(never past the request's time limit)."""
REACH_SHARE = 0.5
"""Share of the time left after a search that proved a throughput target out of reach that
the fastest-plan search may use (the other relaxations get the rest)."""
EP_RESPONSE_MARGIN_S = 0.25
"""Time the EP > 1 comparison search leaves before the request's limit for building the
answer."""
MIN_SUBPROBLEM_S = 0.05
"""Floor on a CP-SAT subproblem started just before the request's time limit."""


def _shape(c: MeshCandidate) -> tuple[object, ...]:
    # Alternatives differ in mesh shape or schedule, not only in chunks or micro-batch.
    return (c.tp, c.pp, c.cp, c.ep, c.schedule)


def _runners_up(request: PlanRequest, constraints: Constraints, result: SearchResult,
                spec: ModelSpec, cluster: ClusterSpec, best: ScoredPlan,
                deadline: float) -> list[ScoredPlan]:
    """The best plan of each other shape among the evaluated candidates; when they are
    fewer than `top_k` and the search was proven, the missing number is looked for (at most
    `ALTERNATIVE_BUDGET_S`, never past `deadline`, in bound order) among the candidates the
    search dismissed by their bound without an exact step time and, as many again, in the
    unevaluated frontier; the best `top_k` of all are kept."""
    chosen: dict[tuple[object, ...], ScoredPlan] = {}
    for other in result.ranked:
        key = _shape(other.candidate)
        if key != _shape(best.candidate) and key not in chosen:
            chosen[key] = other
    stop = min(deadline, time.perf_counter() + ALTERNATIVE_BUDGET_S)
    # A search its limit cut leaves only the answer's reserve (`POST_SEARCH_RESERVE_SHARE`),
    # which one evaluation of a large space's candidate can outlast: none is made.
    missing = request.solver.top_k - len(chosen) if result.status == PlanStatus.OPTIMAL else 0
    for source in (result.dominated, result.frontier):
        found = 0
        for candidate in source:
            if found >= missing or time.perf_counter() >= stop:
                break
            cancel.check()
            key = _shape(candidate)
            if key == _shape(best.candidate) or key in chosen:
                continue
            scored = evaluate_for_targets(
                spec, request.training, cluster, candidate, constraints,
                least_memory=request.objective == Objective.MIN_MEMORY)
            if isinstance(scored, ScoredPlan):
                chosen[key] = scored
                found += 1
    ranked = sorted(chosen.values(), key=lambda p: objective_value(p, request.objective))
    return ranked[: request.solver.top_k]


def _common_candidates(request: PlanRequest, constraints: Constraints, spec: ModelSpec,
                       cluster: ClusterSpec, best: ScoredPlan, seed: ScoredPlan | None,
                       deadline: float, *, searched: SearchResult) -> list[ScoredPlan]:
    """The common plans the robust choice compares an experimental optimum with: the
    seed's plan where it uses no experimental mechanism, else the best common plan searched
    for (`_common_plans`). Where the optimum offloads its optimizer, always searched for: a
    mesh's evaluation keeps its best plan only, so a mesh whose best offloads hides its best
    GPU-resident plan. `searched` is the request's search, which the common-plan search
    goes on from where it can (`_common_plans`)."""
    experimental = experimental_features(spec, request.training, best)
    if not experimental:
        return []
    if seed is not None and OPTIMIZER_OFFLOAD not in experimental \
            and not experimental_features(spec, request.training, seed):
        return [seed]
    return _common_plans(request, constraints, spec, cluster, deadline, searched=searched)


def _common_plans(request: PlanRequest, constraints: Constraints, spec: ModelSpec,
                  cluster: ClusterSpec, deadline: float, *,
                  searched: SearchResult | None = None) -> list[ScoredPlan]:
    """The best plan without an experimental schedule or optimizer offload where the
    frameworks mark it experimental (`solver.robust_choice`), for the robust choice when the
    optimum uses one and the search scored no common plan near it. Searched for until
    `deadline` (the main search's own), not for a fixed share of it: the answer it gives the
    robust choice must not depend on how busy the host is, only on the request's time
    limit, as the main search's does. Where `searched` (the request's search, under
    `constraints`) was proven optimal, the search goes on from it (`solver.resume`)
    instead of listing and bounding the candidates again."""
    budget = deadline - time.perf_counter()
    forbidden = experimental_schedules()
    offload = experimental_offload() and constraints.allow_optimizer_offload
    if budget < MIN_SUBPROBLEM_S or not (forbidden or offload):
        return []
    forbid = dict(constraints.forbid)
    forbid["schedule"] = sorted({*map(str, forbid.get("schedule", [])), *forbidden})
    common = constraints.model_copy(update={"forbid": forbid,
                                            "allow_optimizer_offload": not offload})
    if searched is not None:
        resumed = resume(searched, common, deadline=deadline)
        if resumed is not None:
            return [] if resumed.best is None else [resumed.best]
    result = search(spec, request.training, cluster, constraints=common,
                    objective=request.objective, limits=request.solver,
                    deadline=deadline)
    return [] if result.best is None else [result.best]



def _infeasible(request: PlanRequest, result: SearchResult, stats: SolverStats,
                notes: list[str], spec: ModelSpec, cluster: ClusterSpec,
                deadline: float, *, constraints: Constraints) -> PlanResponse:
    model_name = spec.name
    rejected = [r for r in result.rejections if r.stage is not None]
    closest = min(rejected, key=lambda r: r.excess_bytes, default=None)
    binding = []
    what_binds: Binding | None = None
    # Half the time left finds the fastest plan; the other relaxations keep the rest.
    now = time.perf_counter()
    reach = highest_reachable(spec, request.training, cluster, constraints, result,
                              num_workers=request.solver.num_workers,
                              deadline=now + max(0.0, deadline - now) * REACH_SHARE)
    target_change = None
    if reach is not None:
        target = request.constraints.target_tokens_per_s or 0.0
        binding.append(_reach_text(target, reach))
        target_change = target_relaxation(target, reach)
    if result.stats.unexamined:
        binding.append(f"no plan found within the time limit of {request.solver.time_limit_s} s "
                       f"({result.stats.unexamined} of {result.stats.candidates} candidates not "
                       "examined; raise solver.time_limit_s to finish the search)")
    if closest is not None:
        binding.append(f"the closest configuration, {why_rejected(closest)}")
    elif result.stats.candidates == 0:
        what_binds = find_binding(spec, request.training, cluster, request.constraints,
                                  deadline=deadline)
        named = binding_texts(what_binds, request.constraints)
        binding += named or ["no mesh satisfies the divisibility rules and pins for this "
                             "cluster and batch (heads, layers, experts, global batch)"]
    elif not result.stats.unexamined:
        binding.append(f"all {result.stats.candidates} candidates exceed the memory bound "
                       "under the most frugal choices allowed")
    # The change that binds is searched first: it is the answer's main advice.
    bound = ([] if what_binds is None
             else binding_relaxations(request, what_binds, deadline=deadline))
    found = relaxations(request, deadline=deadline, single_pins=what_binds is None)
    if bound:
        found = dataclasses.replace(found, found=[r.text for r in bound] + found.found,
                                    details=[*bound, *found.details])
    if target_change is not None:
        found = dataclasses.replace(found, found=[target_change.text, *found.found],
                                    details=[target_change, *found.details])
    relax = found.found
    if found.not_tried:
        notes.append("relaxations not tried within the time limit: "
                     + "; ".join(found.not_tried))
    verdict = ("no plan was found within the time limit" if result.stats.unexamined
               else "no plan meets the request")
    text = (f"For {model_name} on {cluster.world_size} x "
            f"{cluster.gpu.name}, {verdict}: " + binding[0] + ". "
            + ("Smallest changes that give a plan: " + "; ".join(relax) + "."
               if relax else "No single relaxation tried gives a plan."))
    return PlanResponse(status=result.status, model_name=model_name, gpu=cluster.gpu.id,
                        explanation=Explanation(summary=text, binding_constraints=binding,
                                                notes=notes, relaxations=relax,
                                                relaxation_details=found.details),
                        solver=stats,
                        framework_target=request.constraints.framework or "released")


def _reach_text(target: float, reach: Reach) -> str:
    """What the space reaches, for an answer whose throughput target is out of reach."""
    plan, reached = reach.fastest, reach.tokens_per_s
    if plan is None or reached is None:
        return (f"no plan reaches the target of {target:,.0f} tokens/s; no plan exceeds "
                f"{reach.ceiling:,.0f} tokens/s under the model (the fastest-plan search found "
                "none within the time limit)")
    where = f"{describe_parallel(plan.parallel)} on {plan.estimate.world_size} GPUs"
    if reach.proven:
        return (f"no plan reaches the target of {target:,.0f} tokens/s; the fastest plan "
                f"reaches {reached:,.0f} tokens/s ({where}), proven the fastest under the "
                "model")
    return (f"no plan reaches the target of {target:,.0f} tokens/s; the fastest plan found "
            f"reaches {reached:,.0f} tokens/s ({where}), and no plan exceeds "
            f"{reach.ceiling:,.0f} tokens/s under the model")


def _stores_fp8(parallel: ParallelConfig) -> bool:
    if parallel.fp8_activations:
        return True
    return any(policy.fp8_activations for policy in parallel.stage_policies or ())


def used_nodes(world_size: int, cluster: ClusterSpec) -> tuple[int, int]:
    """(nodes, GPUs per node) a configuration of `world_size` GPUs occupies on `cluster`:
    whole nodes, or part of one node (a fewest-GPUs plan may use fewer GPUs than offered,
    and the planner scores it on the offered cluster, so evaluate does the same).

    Raises:
        InvalidSpecError: more GPUs than the cluster has, or a count above one node that
            does not fill whole nodes.
    """
    per_node = cluster.gpus_per_node
    if world_size > cluster.world_size:
        raise InvalidSpecError(
            f"tp x cp x dp x pp = {world_size} but the cluster has {cluster.world_size} GPUs "
            f"({cluster.num_nodes} nodes x {per_node}); change dp (or a degree) so the "
            "product fits", field="parallel.dp")
    if world_size < per_node:
        if per_node % world_size:
            raise InvalidSpecError(
                f"tp x cp x dp x pp = {world_size} does not divide the {per_node} GPUs of a "
                "node; use a divisor of the node or whole nodes", field="parallel.dp")
        return 1, world_size
    if world_size % per_node:
        raise InvalidSpecError(
            f"tp x cp x dp x pp = {world_size} is not a whole number of {per_node}-GPU nodes; "
            "change dp (or a degree) so the product fills whole nodes", field="parallel.dp")
    return world_size // per_node, per_node


@within_search_memo
def evaluate(request: EvaluateRequest) -> PlanResponse:
    """Score one configuration: fits or not, per-stage memory, time breakdown, bottleneck and
    the smallest changes that make it fit or faster.

    Raises:
        InvalidSpecError: a mesh rule is broken (the message names it and a valid
            alternative) or the configuration cannot be sized.
    """
    resolved = resolve_model(request.model)
    spec, cluster = resolved.spec, resolve_cluster(request.cluster)
    parallel = request.parallel
    nodes, per_node = used_nodes(parallel.world_size, cluster)
    warnings = validate_mesh(parallel, model=spec, num_nodes=nodes, gpus_per_node=per_node,
                             training=request.training)
    started = time.perf_counter()
    # Runtime features the request leaves unset are decided as the search would for this
    # configuration (`solver.runtime_choice.decided_for`).
    training = decided_for(spec, request.training, parallel, cluster)
    ledger = memory_ledger(spec, training, parallel, cluster)
    est = estimate_step(spec, training, parallel, cluster)
    scored = ScoredPlan(candidate=MeshCandidate.of(parallel, est.num_micro_batches),
                        parallel=parallel, estimate=est, ledger=ledger, training=training)
    fixes = suggest_fixes(spec, training, cluster, scored)
    notes = cost_model_notes(resolved.notes, cluster) + [w.message for w in warnings]
    if parallel.world_size < cluster.world_size:
        notes.append(f"uses {parallel.world_size} of the cluster's {cluster.world_size} GPUs "
                     f"({nodes} node(s)); the others stay idle")
    if _stores_fp8(parallel) and DType.FP8 not in cluster.gpu.dense_peak_flop_per_s:
        notes.append(f"FP8 activation storage on {cluster.gpu.name}, which has no FP8 "
                     "kernels: the memory is modelled as asked, but Transformer Engine's FP8 "
                     "path needs compute capability 8.9 or newer")
    notes.append(plausibility(spec, training, cluster, est))
    notes += ledger_evidence(training, parallel, is_moe=has_routed_experts(spec))
    notes += cp_layer_notes(spec, parallel)
    notes += mechanism_notes(spec, training, parallel, cluster, est, ledger)
    verdict = (f"fits: peak {gib(ledger.peak_bytes)} of {limit_text(ledger)}"
               if ledger.fits else
               f"does NOT fit: stage {ledger.binding_stage} needs {gib(ledger.peak_bytes)} of "
               f"{limit_text(ledger)}")
    text = (f"{describe_parallel(parallel)} for {spec.name} on {cluster.world_size} x "
            f"{cluster.gpu.name} {verdict}. Predicted {est.step_time_s:.2f} s per step, "
            f"{est.tokens_per_s:,.0f} tokens/s, MFU {est.mfu:.1%}; largest time term: "
            f"{est.bottleneck}.")
    explanation = Explanation(summary=text, binding_constraints=binding_constraints(ledger),
                              notes=notes, relaxations=[f.text for f in fixes])
    stats = SolverStats(wall_time_s=time.perf_counter() - started, candidates=1, evaluated=1,
                        status="evaluated")
    alternatives = [Alternative(parallel=f.parallel, world_size=f.parallel.world_size,
                                step_time_s=f.step_time_s, peak_bytes=f.peak_bytes, fits=f.fits,
                                why_not=f.text,
                                predicted_range=range_of(cluster, moe=has_routed_experts(spec),
                                                         world_size=f.parallel.world_size,
                                                         step_time_s=f.step_time_s))
                    for f in fixes]
    parts = ReportParts(status=PlanStatus.FEASIBLE if ledger.fits else PlanStatus.INFEASIBLE,
                        alternatives=alternatives, explanation=explanation, stats=stats,
                        target="any")
    return plan_response(scored, parts, spec=spec, training=training, cluster=cluster,
                         request_training=request.training)


__all__ = ["cost_estimate", "evaluate", "plan", "plausibility", "range_of", "throughput",
           "time_breakdown", "used_nodes"]
