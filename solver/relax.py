"""Relaxations of an infeasible planning request: the smallest changes that make a plan
exist, each found by search and, where the search completed, proven minimal under the model.

Owns: three relaxations and their proofs. Nodes: the nearest count with a plan first
(`solver.nearest_nodes`), then a fewest-GPU search (objective min_gpus)
on a cluster large enough to hold the model states fully sharded; when it completes, no
smaller whole-node count has a plan. Sequence length: bisection over multiples of
`SEQUENCE_STEP` below the request's; the shortest change is the longest sequence that has a
plan, given that a shorter sequence never needs more memory under the model. Pins: the
request with one pin released (each that gives a plan), else without its pins and forbidden
values; and, for a request that leaves no mesh at all, the single change that binds
(framework 'any', or one pin released; found by `solver.binding_pins`). Must not: change
the request it was given.
"""

import math
import time
from dataclasses import dataclass

from api_schemas.parallel import PipelineSchedule
from api_schemas.plan import Relaxation, RelaxedValue
from api_schemas.requests import Constraints, Objective, PlanRequest, SolverLimits
from api_schemas.units import MIN_TIME_LIMIT_S
from models.catalog.resolve import resolve_cluster, resolve_model
from models.core.frameworks import RELEASED, frameworks
from models.core.params import count_parameters
from models.core.precision import state_bytes_per_param
from solver.binding_pins import MESH_PINS, Binding
from solver.explain import describe_parallel
from solver.nearest_nodes import nearest_nodes
from solver.planner import SearchResult, search

RELAXATION_TIME_LIMIT_S = 2.0
"""Search time allowed for each relaxation search (each bisection probe included)."""
NODE_SEARCH_TIME_LIMIT_S = 6.0
"""Search time allowed for the fewest-node search (it spans every whole-node count), or half
the request's time limit when that is longer."""
NODE_SEARCH_MIN_S = 1.0
"""Least time worth starting the fewest-node search with: enumerating the candidates of every
node count is not interruptible, so with less left it is reported as not tried."""
SEQUENCE_STEP = 256
"""Granularity of the sequence-length bisection."""
MAX_RELAXATION_GPUS = 2**17
"""Largest cluster the fewest-node relaxation searches: 131,072 GPUs, eight times the
16,384 H100s of the largest run the Llama 3 paper reports (arXiv:2407.21783, Sec. 3.3) and
twice the service's default world-size bound. The search lists every whole-node count up to
its ceiling, so an unbounded ceiling (model states over a near-zero GPU capacity) grows the
list, and the process, without limit; when the states need more GPUs than this, the
relaxation reports that no whole-node count up to it can hold them."""


def gpus_for_states(request: PlanRequest) -> int:
    """Fewest GPUs that can hold the model states fully sharded (ZeRO-3): model states
    (`models.core.precision.state_bytes_per_param` per parameter) over one GPU's capacity, a
    lower bound on the GPUs any plan needs (ZeRO, arXiv:1910.02054, Sec. 5.3: stage 3
    divides all model states by the data-parallel degree)."""
    spec = resolve_model(request.model).spec
    cluster = resolve_cluster(request.cluster)
    counts = count_parameters(spec)
    states = (counts.total + counts.mtp_total) * state_bytes_per_param(request.training).total
    return math.ceil(states / max(cluster.capacity_bytes, 1))


def nodes_for_states(request: PlanRequest) -> int:
    """Fewest nodes whose GPUs can hold the model states fully sharded (`gpus_for_states`),
    rounded up to a power of two."""
    per_node = resolve_cluster(request.cluster).gpus_per_node
    nodes = max(1, math.ceil(gpus_for_states(request) / per_node))
    return 1 << (nodes - 1).bit_length()


@dataclass(frozen=True, slots=True)
class Relaxations:
    """What the relaxation search found."""

    found: list[str]
    """Each relaxation that yields a plan, with that plan's layout and step time."""
    not_tried: list[str]
    """Relaxations skipped because the request's time limit had passed."""
    details: list[Relaxation]
    """The same relaxations, structured."""


class _Clock:
    """Per-search budgets that never run past the request's deadline."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline

    def budget(self, most_s: float = RELAXATION_TIME_LIMIT_S) -> float:
        if self.deadline is None:
            return most_s
        return min(most_s, self.deadline - time.perf_counter())


def _search(request: PlanRequest, budget_s: float, *,
            objective: Objective | None = None) -> SearchResult:
    spec = resolve_model(request.model).spec
    limits = SolverLimits(time_limit_s=budget_s, top_k=0, num_workers=request.solver.num_workers)
    return search(spec, request.training, resolve_cluster(request.cluster),
                  constraints=request.constraints, objective=objective or request.objective,
                  limits=limits)


def _complete(result: SearchResult) -> bool:
    return result.stats.unexamined == 0 and result.status.value != "feasible"


def _fewest_nodes(request: PlanRequest, clock: _Clock) -> Relaxation | None | str:
    """The fewest whole nodes with a plan (a string when not tried in time); None when
    none exists up to `MAX_RELAXATION_GPUS` (proven when the states alone need more)."""
    nodes = request.cluster.num_nodes
    per_node = resolve_cluster(request.cluster).gpus_per_node
    most_nodes = max(nodes, MAX_RELAXATION_GPUS // per_node)
    if gpus_for_states(request) > most_nodes * per_node:
        return None  # proven: the states alone need more GPUs than any searched count
    ceiling = min(max(2 * nodes, 2 * nodes_for_states(request)), most_nodes)
    wide = request.model_copy(update={"cluster": request.cluster.model_copy(
        update={"num_nodes": ceiling})})
    budget = clock.budget(max(NODE_SEARCH_TIME_LIMIT_S, request.solver.time_limit_s / 2))
    if budget >= NODE_SEARCH_MIN_S:
        result = _search(wide, budget, objective=Objective.MIN_GPUS)
        if result.best is not None:
            return _nodes_relaxation(request, result, ceiling,
                                     proven=result.status.value == "optimal")
        if not result.stats.unexamined:
            return None  # proven: no plan on any whole-node count up to the ceiling
    # Too little time for the fewest-GPU search, or it ran out: any plan on the ceiling,
    # unproven (the least-memory search finds one with the fewest evaluations).
    fallback = clock.budget()
    if fallback < MIN_TIME_LIMIT_S:
        return "more nodes"
    result = _search(_narrow(wide), fallback, objective=Objective.MIN_MEMORY)
    if result.best is None:  # the narrowed search proves nothing about the full space
        return "more nodes (the search ran out of time)" if result.stats.unexamined else None
    return _nodes_relaxation(request, result, ceiling, proven=False)


def _narrow(request: PlanRequest) -> PlanRequest:
    """The request pinned to a few memory-frugal meshes (the widest TP within a node,
    micro-batch 1, 1F1B), so that a short search reaches an evaluation."""
    spec = resolve_model(request.model).spec
    per_node = resolve_cluster(request.cluster).gpus_per_node
    heads, kv = spec.num_attention_heads, spec.kv_heads
    tps = [t for t in range(per_node, 0, -1)
           if heads % t == 0 and (kv % t == 0 or t % kv == 0)]
    pins = {"tp": tps[0] if tps else 1, "micro_batch_size": 1,
            "schedule": PipelineSchedule.ONE_F_ONE_B}
    # Validated rather than copied, so that the pinned fields hold their declared types.
    narrowed = type(request.constraints).model_validate(
        {**request.constraints.model_dump(), **pins})
    return request.model_copy(update={"constraints": narrowed})


def _nodes_relaxation(request: PlanRequest, result: SearchResult, ceiling: int, *,
                      proven: bool) -> Relaxation:
    assert result.best is not None
    nodes = request.cluster.num_nodes
    per_node = resolve_cluster(request.cluster).gpus_per_node
    world = result.best.estimate.world_size
    fewest = max(1, math.ceil(world / per_node))
    proof = (f"fewest-GPU search over every whole-node count up to {ceiling} nodes completed: "
             f"no plan on fewer than {world} GPUs" if proven else
             "the fewest-GPU search hit its time limit; a smaller count may exist")
    text = (f"{fewest} nodes instead of {nodes}: {describe_parallel(result.best.parallel)} at "
            f"{result.best.estimate.step_time_s:.2f} s per step")
    return Relaxation(change="num_nodes", from_value=nodes, to_value=fewest,
                      parallel=result.best.parallel,
                      step_time_s=result.best.estimate.step_time_s, minimal=proven,
                      proof=proof, text=text)


def _longest_sequence(request: PlanRequest, clock: _Clock) -> Relaxation | None | str:
    """The longest sequence below the request's with a plan, by bisection."""
    current = request.training.sequence_length
    low, high = 1, (current - 1) // SEQUENCE_STEP  # multiples of SEQUENCE_STEP
    if high < low:
        return None

    def probe(k: int) -> SearchResult | None:
        budget = clock.budget()
        if budget < MIN_TIME_LIMIT_S:
            return None
        shorter = request.model_copy(update={"training": request.training.model_copy(
            update={"sequence_length": k * SEQUENCE_STEP})})
        return _search(shorter, budget)

    found: tuple[int, SearchResult] | None = None
    complete = True
    first = probe(low)
    if first is None:
        return "shorter sequence"
    if first.best is None:
        return None
    found = (low, first)
    while low < high:
        mid = (low + high + 1) // 2
        result = probe(mid)
        if result is None:
            complete = False
            break
        if result.best is not None:
            found, low = (mid, result), mid
        else:
            complete = complete and _complete(result)
            high = mid - 1
    length = found[0] * SEQUENCE_STEP
    best = found[1].best
    assert best is not None
    proof = (f"bisection over multiples of {SEQUENCE_STEP}: {length} has a plan and "
             f"{length + SEQUENCE_STEP} has none (a shorter sequence never needs more memory "
             "under the model)" if complete and length + SEQUENCE_STEP < current else
             "bisection stopped at the time limit; a longer sequence may work"
             if not complete else "the next longer step is the request's own length")
    text = (f"sequence length {length}: {describe_parallel(best.parallel)} at "
            f"{best.estimate.step_time_s:.2f} s per step")
    return Relaxation(change="sequence_length", from_value=current, to_value=length,
                      parallel=best.parallel, step_time_s=best.estimate.step_time_s,
                      minimal=complete, proof=proof, text=text)


def _single_pins(request: PlanRequest, clock: _Clock) -> list[Relaxation] | str:
    """Each single mesh pin whose release alone gives a plan (with two or more pins; with
    one, dropping the pins is that change). A string when time ran out before any."""
    c = request.constraints
    given = c.model_dump(mode="json", exclude_defaults=True)
    pinned = {field: given[field] for field in MESH_PINS if field in given}
    out: list[Relaxation] = []
    if len(pinned) < 2:
        return out
    for field, value in pinned.items():
        budget = clock.budget()
        if budget < MIN_TIME_LIMIT_S:
            return out or "release one pin"
        result = _search(request.model_copy(update={"constraints": c.model_copy(
            update={field: None})}), budget)
        if result.best is None:
            continue
        out.append(Relaxation(
            change="constraints", from_value={field: value}, to_value={},
            parallel=result.best.parallel, step_time_s=result.best.estimate.step_time_s,
            minimal=False, proof="one pin released, the others kept: no smaller set of pins "
            "to release exists when the request as given has no plan",
            text=f"release the pin {field}={value}: {describe_parallel(result.best.parallel)} "
                 f"at {result.best.estimate.step_time_s:.2f} s per step"))
    return out


def _without_pins(request: PlanRequest, clock: _Clock) -> Relaxation | None | str:
    c = request.constraints
    open_constraints = Constraints(allow_fp8_activations=True, allow_offload=True,
                                   max_gpus=c.max_gpus, target_tokens_per_s=c.target_tokens_per_s,
                                   gpu_hour_price=c.gpu_hour_price, framework=c.framework,
                                   framework_version=c.framework_version)
    if c == open_constraints:
        return None
    budget = clock.budget()
    if budget < MIN_TIME_LIMIT_S:
        return "drop the pins"
    result = _search(request.model_copy(update={"constraints": open_constraints}), budget)
    if result.best is None:
        return None
    pins = {k: v for k, v in c.model_dump(exclude_defaults=True).items()
            if k not in ("max_gpus", "target_tokens_per_s", "gpu_hour_price", "framework",
                         "framework_version")}
    text = ("drop the pins and forbidden values (ZeRO-3, FP8 storage and offload allowed): "
            f"{describe_parallel(result.best.parallel)} at "
            f"{result.best.estimate.step_time_s:.2f} s per step")
    return Relaxation(change="constraints", from_value=pins, to_value={},
                      parallel=result.best.parallel,
                      step_time_s=result.best.estimate.step_time_s, minimal=False,
                      proof="one change tried: every pin removed at once", text=text)


def _optimizer_offload_framework(request: PlanRequest, clock: _Clock
                                 ) -> Relaxation | None | str:
    """For a request whose named framework target has no optimizer offload (torchtitan)
    while the request lets the search use it: the plan under the first released framework
    that offers it (`models/data/frameworks.json`: Megatron-LM --optimizer-cpu-offload,
    DeepSpeed ZeRO-Offload), when that gives one. One change tried, not proven minimal."""
    c = request.constraints
    if (c.framework in (None, "any") or c.optimizer_offload_frac is not None
            or not c.allow_optimizer_offload):
        return None
    tables = frameworks()
    target = tables.get(str(c.framework))
    if target is None or "optimizer_offload" in target.features:
        return None
    for fid in RELEASED:
        other = tables[fid]
        if "optimizer_offload" not in other.features:
            continue
        budget = clock.budget()
        if budget < MIN_TIME_LIMIT_S:
            return f"framework {fid} (optimizer offload)"
        result = _search(request.model_copy(update={"constraints": c.model_copy(
            update={"framework": fid, "framework_version": None})}), budget)
        best = result.best
        if best is None or best.parallel.optimizer_offload_frac <= 0:
            continue
        how = other.features["optimizer_offload"].how.split(" (")[0]
        return Relaxation(
            change="framework", from_value=str(c.framework), to_value=fid,
            parallel=best.parallel, step_time_s=best.estimate.step_time_s, minimal=False,
            proof="one change tried: the first released framework that offers optimizer "
            "offload",
            text=f"framework {fid} instead of {c.framework}, which has no optimizer offload "
                 f"({target.name} {target.reference_release}): with {how} "
                 f"{describe_parallel(best.parallel)} at {best.estimate.step_time_s:.2f} s "
                 "per step")
    return None


def binding_relaxations(request: PlanRequest, binding: Binding, *,
                        deadline: float | None = None) -> list[Relaxation]:
    """For a request that leaves no mesh: the plan with framework 'any' when the framework
    target binds, and the plan with each single binding pin released (`solver.binding_pins`),
    each a one-field change and so the smallest (the request as given has no mesh at all)."""
    clock = _Clock(deadline)
    c = request.constraints
    changes: list[tuple[str, RelaxedValue, RelaxedValue, str, Constraints]] = []
    if binding.framework_meshes:
        target = c.framework or "released"
        changes.append(("framework", target, "any", f"framework 'any' instead of {target}",
                        c.model_copy(update={"framework": "any", "framework_version": None})))
    for field, value in binding.pins.items():
        changes.append(("constraints", {field: value}, {}, f"release the pin {field}={value}",
                        c.model_copy(update={field: None})))
    out = []
    for change, before, after, what, constraints in changes:
        # The change that binds is the answer's main advice: up to a quarter of the limit.
        budget = clock.budget(max(RELAXATION_TIME_LIMIT_S, request.solver.time_limit_s / 4))
        if budget < MIN_TIME_LIMIT_S:
            break
        result = _search(request.model_copy(update={"constraints": constraints}), budget)
        if result.best is None:
            continue
        out.append(Relaxation(
            change=change, from_value=before, to_value=after, parallel=result.best.parallel,
            step_time_s=result.best.estimate.step_time_s, minimal=True,
            proof="the request as given leaves no mesh; this one change leaves meshes and a "
            "plan",
            text=f"{what}: {describe_parallel(result.best.parallel)} at "
                 f"{result.best.estimate.step_time_s:.2f} s per step"))
    return out


def relaxations(request: PlanRequest, *, deadline: float | None = None,
                single_pins: bool = True) -> Relaxations:
    """The nearest node count with a plan (`solver.nearest_nodes`) and the smallest, each
    single pin whose release gives a plan (or, when none does, the request without pins),
    and the longest shorter sequence, each with its plan (see the module docstring). Each
    search gets at most `RELAXATION_TIME_LIMIT_S` (the nearest node count's a quarter of the
    request's limit when that is longer) and none starts after `deadline` (a
    `time.perf_counter()` value). `single_pins=False` skips the single-pin releases (the
    caller found them already, `binding_relaxations`)."""
    clock = _Clock(deadline)
    found: list[Relaxation] = []
    not_tried: list[str] = []
    outcome = _fewest_nodes(request, clock)
    fewest = outcome.to_value if isinstance(outcome, Relaxation) else None
    # The nearest count with a plan changes the request least: it comes first, the
    # fewest-GPU answer beside it (`solver.nearest_nodes`).
    nearest = nearest_nodes(request, fewest if isinstance(fewest, int) else None,
                            lambda: clock.budget(max(RELAXATION_TIME_LIMIT_S,
                                                     request.solver.time_limit_s / 4)))
    for each in (nearest, outcome):
        if isinstance(each, str):
            not_tried.append(each)
        elif each is not None:
            found.append(each)
    released = _single_pins(request, clock) if single_pins else []
    if isinstance(released, str):
        not_tried.append(released)
    else:
        found += released
    finders = (() if released else (_without_pins,)) + (_optimizer_offload_framework,
                                                       _longest_sequence)
    for finder in finders:
        outcome = finder(request, clock)
        if isinstance(outcome, str):
            not_tried.append(outcome)
        elif outcome is not None:
            found.append(outcome)
    return Relaxations(found=[r.text for r in found], not_tried=not_tried, details=found)


__all__ = [
    "MAX_RELAXATION_GPUS",
    "NODE_SEARCH_MIN_S",
    "NODE_SEARCH_TIME_LIMIT_S",
    "RELAXATION_TIME_LIMIT_S",
    "SEQUENCE_STEP",
    "Relaxations",
    "binding_relaxations",
    "gpus_for_states",
    "nodes_for_states",
    "relaxations",
]
