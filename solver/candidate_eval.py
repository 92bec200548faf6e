"""Scoring one mesh candidate exactly: ZeRO stage and per-stage policy chosen, then the full
cost model (memory ledger and simulated step time).

Owns: `evaluate_candidate`, the single definition of "the value of a candidate" shared by
the planner and by brute-force enumeration in the tests, the reasons a candidate fails (the
outcome records are `solver.outcomes`'), and `evaluation_floor_s`, what an evaluation can
give at least, read before its memory probes. Must not: enumerate or order candidates.

Rule: for each allowed ZeRO stage (ascending) the activation policy is the first rung of a
ladder, ordered from cheapest to most memory-saving, whose ledger fits: no recomputation;
selective recomputation of cheap modules; plus FP8 storage; plus half offloaded; full
recomputation of the first k layers of every stage (the smallest k that fits); full
recomputation (with FP8 and offload where allowed). The candidate's value is the fastest
of these per-stage plans. A plain fit ends its own stage's ladder only: a higher stage
can be faster (ZeRO-1 and above shard the optimizer step and the gradient-norm work over
the data-parallel ranks, `models.core.step_time.step_terms`), so every allowed stage is
probed and the step-time bounds decide which are simulated. The per-stage CP-SAT policy
of `solver/policy.py` then refines the chosen plan (`refine_policies`).
"""

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig, RecomputeMode
from api_schemas.requests import Constraints
from api_schemas.training import TrainingSpec
from models.core.layout import pipeline_layout
from models.core.ledger_memo import LedgerMemo
from models.core.memory import MemoryLedger, memory_ledger
from models.core.pipeline import schedule_traits
from models.core.search_memo import within_search_memo
from models.core.step_time import (
    estimate_step,
    pipeline_makespan_bound,
    simulated_makespan_bound,
    step_time_bound,
)
from models.errors import InvalidSpecError
from solver import cpsat
from solver.candidate import PlanCandidate
from solver.ladder import (
    ALL_POLICIES,
    PolicyCaps,
    Storage,
    allowed_zero_stages,
    frugal,
    least_stored_policy,
    offload_storage,
    probe_options,
    rungs,
    storage_options,
    with_policy,
)
from solver.outcomes import Dominated, Rejection, ScoredPlan, Unfit
from solver.policy import choose_stage_policies, policy_options
from solver.space import MeshCandidate


@within_search_memo
def evaluate_candidate(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                       candidate: MeshCandidate, constraints: Constraints, *,
                       step_cutoff_s: float = math.inf,
                       zero3_bound_s: float = 0.0,
                       zero_floors_s: Mapping[int, float] | None = None,
                       caps: PolicyCaps | None = None,
                       memo: LedgerMemo | None = None) -> ScoredPlan | Rejection | Dominated:
    """The best plan of one mesh candidate under the rule in the module docstring.

    Each ZeRO stage's fitting plan is simulated in the order of its step-time bound
    (`models.core.step_time.step_time_bound`: the pipeline makespan bound with the plan's own
    policy plus its exact per-step tail), stopping once
    the next bound exceeds the fastest simulated step or reaches `step_cutoff_s` (a step
    time the caller already has): the value is exact whenever it is below the cutoff, and
    `Dominated` says that no plan of the candidate gets below it. `zero3_bound_s`, a lower
    bound of any ZeRO-3 plan's step time (`solver.bounds.BoundTables.zero3_time_bound_s`),
    spares the ZeRO-3 ladder when it already reaches the cutoff; so does `zero_floors_s`
    (per ZeRO stage, a lower bound of the step time of any of its plans: the planner's
    makespan bound plus `models.core.step_time.step_tail_floor_s`) for any stage, whose ladder
    is then skipped with that floor as its bound. `caps` limits the
    activation policies to what a framework target expresses (`solver/targets.py`). `memo`:
    rank-ledger pieces shared with other candidates of the same model and recipe
    (`models.core.ledger_memo.LedgerMemo`, whose keys hold every field a piece reads; a search
    passes one for all its candidates), the value being the same with or without it.

    The evaluation's shared pieces (probe configurations, work tables, frugal bounds) live
    on one `solver.candidate.PlanCandidate` made here (`evaluate_plan_candidate`)."""
    cand = PlanCandidate.of(spec, training, cluster, candidate, constraints, caps, memo)
    return evaluate_plan_candidate(cand, step_cutoff_s=step_cutoff_s,
                                   zero3_bound_s=zero3_bound_s, zero_floors_s=zero_floors_s)


@within_search_memo
def evaluate_plan_candidate(cand: PlanCandidate, *, step_cutoff_s: float = math.inf,
                            zero3_bound_s: float = 0.0,
                            zero_floors_s: Mapping[int, float] | None = None
                            ) -> ScoredPlan | Rejection | Dominated:
    """`evaluate_candidate` of a candidate already made (`PlanCandidate.of` of its inputs):
    the same value, reusing what the object derived before (a work table that
    `evaluation_floor_s` built)."""
    found = evaluate_unsettled(cand, step_cutoff_s=step_cutoff_s, zero3_bound_s=zero3_bound_s,
                               zero_floors_s=zero_floors_s)
    return found.rejection() if isinstance(found, Unfit) else found


@within_search_memo
def evaluate_unsettled(cand: PlanCandidate, *, step_cutoff_s: float = math.inf,
                       zero3_bound_s: float = 0.0,
                       zero_floors_s: Mapping[int, float] | None = None
                       ) -> ScoredPlan | Rejection | Dominated | Unfit:
    """`evaluate_plan_candidate` with a memory rejection left `Unfit` (its ledger not yet
    read): for a caller that reports it only if no other variant fits."""
    zeros = allowed_zero_stages(cand.constraints)
    if not zeros:
        return Rejection(candidate=cand.mesh, reason="no ZeRO stage is allowed")
    floors = zero_floors_s or {}
    try:
        probes = _probe(cand, zeros, step_cutoff_s, zero3_bound_s, floors)
        return _best_plan(cand, probes, zeros, step_cutoff_s, floors)
    except InvalidSpecError as exc:
        return Rejection(candidate=cand.mesh, reason=exc.detail)


def evaluation_floor_s(cand: PlanCandidate, *, step_cutoff_s: float, zero3_bound_s: float,
                       zero_floors_s: Mapping[int, float] | None) -> float:
    """Read only where it reaches `step_cutoff_s`: then `evaluate_plan_candidate` under the
    same arguments simulates no plan (it returns `Dominated` or `Rejection`), and a
    `Dominated` it returns has a bound at least this. Costs at most the work tables, no
    memory probe.

    Per allowed ZeRO stage, the least bound `_probe` and `_best_plan` can give it: a stage
    skipped by the ZeRO-3 bound or its floor, that bound; a probed one, its floor and
    `PlanCandidate.plain_bound_s` (a policy only adds recomputation, so every `_Bounded`
    ladder and every fit's cheap bound is at least it). A pinned policy is bounded by its
    own `step_time_bound` only, so a probed stage of one gives no floor (minus infinity),
    nor does a work table that is not valid (the evaluation then says why)."""
    floors = zero_floors_s or {}
    zeros = allowed_zero_stages(cand.constraints)
    least = math.inf if zeros else -math.inf
    for zero in zeros:
        if zero == 3 and zero3_bound_s >= step_cutoff_s:
            stage_s = zero3_bound_s
        elif floors.get(zero, 0.0) >= step_cutoff_s:
            stage_s = floors.get(zero, 0.0)
        elif cand.pinned:
            return -math.inf
        else:
            try:
                stage_s = max(floors.get(zero, 0.0), cand.plain_bound_s(zero))
            except InvalidSpecError:
                return -math.inf
        least = min(least, stage_s)
    return least


@dataclass(frozen=True, slots=True, kw_only=True)
class _Bounded:
    """A ZeRO stage whose plan (not a plain fit) is proven no faster than `bound_s`, found
    before its policy was (`_first_fit`)."""

    bound_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class _Fit:
    """A fitting plan of one ZeRO stage (its full ledger is built only if it is scored)."""

    parallel: ParallelConfig
    plain: bool
    rung: int | None = None
    """The ladder rung that fits first (None: no rung fits, the fit is the most frugal
    policy or full recomputation of the first k layers)."""


@dataclass(slots=True)
class _Probes:
    """What an evaluation's probes found: the fitting plans in the order found, the last
    configuration that fits nowhere, and the bounds of the stages left unprobed."""

    fits: list[_Fit] = field(default_factory=list)
    unfit: ParallelConfig | None = None
    skipped: list[float] = field(default_factory=list)

    def add(self, result: "_Fit | _Bounded | ParallelConfig") -> None:
        if isinstance(result, _Bounded):
            self.skipped.append(result.bound_s)
        elif isinstance(result, _Fit):
            self.fits.append(result)
        else:
            self.unfit = result


def _probe(cand: PlanCandidate, zeros: list[int], cutoff_s: float, zero3_bound_s: float,
           floors: Mapping[int, float]) -> _Probes:
    """Climb each allowed ZeRO stage's ladder (ascending) until a plain fit ends it; a
    stage whose floor reaches the cutoff is skipped with its floor as bound."""
    probes = _Probes()
    for zero in zeros:
        if zero == 3 and zero3_bound_s >= cutoff_s:
            probes.skipped.append(zero3_bound_s)
            continue
        floor = floors.get(zero, 0.0)
        if floor >= cutoff_s:
            probes.skipped.append(floor)
            continue
        _probe_stage(cand, zero, floor, cutoff_s, probes)
    return probes


def _probe_stage(cand: PlanCandidate, zero: int, floor_s: float, cutoff_s: float,
                 probes: _Probes) -> None:
    """Probe one ZeRO stage under each storage option (and with remote offload where the
    plan needs more than the cheapest rung) until a plain fit ends the stage's ladder."""
    plan_bound = (None if cand.pinned or cutoff_s == math.inf
                  else _plan_bound(cand, floor_s, zero))
    remote = cand.constraints.allow_remote_offload and cand.mesh.pp > 1
    for storage in storage_options(zero, cand.constraints, cand.mesh.pp):
        found = _probe_storage(cand, storage, remote, cutoff_s, plan_bound, probes)
        plain_fit = isinstance(found, _Fit) and found.plain
        offloaded = None if plain_fit else offload_storage(storage, cand.constraints)
        if offloaded is not None:
            _probe_storage(cand, offloaded, remote, cutoff_s, plan_bound, probes)
        if plain_fit and not storage.host_gradients:
            return  # a plain fit ends this stage's ladder


def _probe_storage(cand: PlanCandidate, storage: Storage, remote: bool, cutoff_s: float,
                   plan_bound: Callable[[int], float] | None,
                   probes: _Probes) -> _Fit | _Bounded | ParallelConfig:
    """Probe one storage (`_first_fit`), and where `remote` (the search may choose remote
    offload on this pipeline) and it needs more than the cheapest rung, the same storage
    with remote activation offload: with it the front ranks may fit a cheaper policy.
    Returns the storage's own result."""
    found = _first_fit(cand, storage, cutoff_s=cutoff_s, plan_bound=plan_bound)
    probes.add(found)
    if remote and not (isinstance(found, _Fit) and found.plain):
        probes.add(_first_fit(cand, dataclasses.replace(storage, remote=True),
                              cutoff_s=cutoff_s, plan_bound=plan_bound,
                              known_fit=found.rung if isinstance(found, _Fit) else None))
    return found


def _best_plan(cand: PlanCandidate, probes: _Probes, zeros: list[int], cutoff_s: float,
               floors: Mapping[int, float]) -> ScoredPlan | Unfit | Dominated:
    """The fastest fitting plan, simulated in the order of the plans' step-time bounds
    until the next bound passes the fastest step or reaches the cutoff."""
    mesh = cand.mesh
    if not probes.fits and probes.skipped:
        return Dominated(candidate=mesh, bound_s=min(probes.skipped))
    if not probes.fits:
        assert probes.unfit is not None
        return Unfit(cand=cand, parallel=probes.unfit, max_zero=zeros[-1])
    order = sorted(_fit_bound(cand, fit, cutoff_s, floors, rank)
                   for rank, fit in enumerate(probes.fits))
    best: tuple[float, int, ScoredPlan] | None = None
    left_s = math.inf  # the least bound of a fit left unsimulated
    for bound_s, rank in order:
        if bound_s >= cutoff_s or (best is not None and bound_s > best[0]):
            left_s = bound_s
            break
        fit = probes.fits[rank]
        estimate = estimate_step(cand.spec, cand.training, fit.parallel, cand.cluster,
                                 split_pipeline_idle=False)
        key = (estimate.step_time_s, rank)
        if best is None or key < best[:2]:
            # Only a plan that leads gets its full ledger (the probes said it fits).
            best = (*key, ScoredPlan(candidate=mesh, parallel=fit.parallel, estimate=estimate,
                                     ledger=cand.ledger(fit.parallel)))
    if best is None:
        # A skipped stage's plans are bounded by its own bound, which may be the lower one.
        return Dominated(candidate=mesh, bound_s=min([order[0][0], *probes.skipped]))
    if best[0] >= cutoff_s and (probes.skipped or left_s < best[0]):
        # A plan at or above the cutoff beside skipped stages or fits left unsimulated at
        # the cutoff (an optimizer-offload fit whose cheap bound passed, next to a faster
        # plan bounded at the cutoff): none gets below the cutoff, and those may beat it.
        return Dominated(candidate=mesh, bound_s=min([best[0], left_s, *probes.skipped]))
    return best[2]


def policy_floors_s(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                    candidate: MeshCandidate, constraints: Constraints, zeros: Iterable[int],
                    caps: PolicyCaps | None, may_fit: Callable[[ParallelConfig], bool]
                    ) -> dict[int, float]:
    """Per ZeRO stage in `zeros`, a lower bound of the step time of every plan of the
    candidate under `evaluate_candidate`'s rule, for a candidate none of whose plans with
    the plain activation policy (the first rung of the ladder) fits. `may_fit(parallel)` is
    False only where no plan with `parallel`'s policy fits at any of these stages (a memory
    lower bound; the frugal policies differ only in their policy).

    Every other plan is a later rung or the most frugal policy with full recomputation of
    the first k layers, which `_first_fit` bounds by `_plan_bound` at k (holding for more
    fully recomputed first layers too), and the rungs by `_plan_bound` at 0. Where no later
    rung `may_fit`, the bound is `_plan_bound` at the smallest k whose most frugal policy
    `may_fit` (found by bisection: a policy with more fully recomputed layers stores less),
    or at the largest k where none does; for caps without full recomputation of the first
    k layers (torchtitan's), the bound of the most frugal policy itself, the only plan
    `_first_fit` has left; otherwise at 0. Meaningless for a pinned policy (no ladder).

    Raises:
        InvalidSpecError: as `models.core.step_time.work_table` or the memory bound.
    """
    cand = PlanCandidate.of(spec, training, cluster, candidate, constraints, caps)
    later_rungs = [cand.config(0, rung)
                   for rung in rungs(spec, constraints, False, cand.caps)[1:]]
    # A later rung that may fit, or a ladder without full layers, keeps the bound `_first_fit`
    # stops at after the plain rung (k = 0). The rungs need not store more than the frugal
    # policy at k = 0: where the target's full-layer recomputation leaves the other layers
    # without selective recomputation (Megatron-LM), the selective rung stores less.
    if not any(may_fit(rung) for rung in later_rungs):
        if not cand.caps.full_layers:
            # No rung fits: `_first_fit` falls back to the most frugal policy itself.
            return {zero: cand.bound_s(cand.frugal(zero)) for zero in zeros}
        least = cand.frugal(0, 0)
        if may_fit(least):
            # No full layer is needed: the other policies' bound is the frugal one's at k = 0.
            return {zero: cand.frugal_bound_s(zero, 0) for zero in zeros}
        low, high = 1, max(len(layout) for layout in _stage_layer_counts(spec, least))
        while low < high:
            mid = (low + high) // 2
            if may_fit(cand.frugal(0, mid)):
                high = mid
            else:
                low = mid + 1
        return {zero: cand.frugal_bound_s(zero, low) for zero in zeros}
    return {zero: cand.frugal_bound_s(zero, 0) for zero in zeros}


def _plan_bound(cand: PlanCandidate, floor_s: float, zero: int) -> Callable[[int], float]:
    """A lower bound of the step time of a plan at one ZeRO stage under the most frugal
    policy with full recomputation of the first k layers, by k: the stage's floor, and the
    busiest rank's work plus the policy's recomputation, counted so that it holds for more
    fully recomputed first layers too (`models.core.step_time.policy_work_bound_s`)."""

    def bound(full_layers: int) -> float:
        return max(floor_s, cand.frugal_bound_s(zero, full_layers))

    return bound


def _fit_bound(cand: PlanCandidate, fit: _Fit, cutoff_s: float, floors: Mapping[int, float],
               rank: int) -> tuple[float, int]:
    """A lower bound of a fitting plan's step time, with its rank among the fits: first the
    cheap ones (its ZeRO stage's floor, and the busiest rank's work without a policy plus
    the recomputation the plan's policy adds, `models.core.step_time.policy_work_bound_s`);
    where they stay below `cutoff_s`, the plan's own `step_time_bound`."""
    cheap = floors.get(fit.parallel.zero_stage, 0.0)
    if not cand.pinned and cheap < cutoff_s:
        cheap = max(cheap, cand.bound_s(fit.parallel))
    if cheap >= cutoff_s:
        return cheap, rank
    return step_time_bound(cand.spec, cand.training, fit.parallel, cand.cluster), rank


def least_memory_candidate(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                           candidate: MeshCandidate, constraints: Constraints, *,
                           caps: PolicyCaps | None = None) -> ScoredPlan | Rejection:
    """The candidate's least-memory plan (the `min_memory` objective): the highest allowed
    ZeRO stage with the most memory-saving activation policy the caps allow."""
    zeros = allowed_zero_stages(constraints)
    if not zeros:
        return Rejection(candidate=candidate, reason="no ZeRO stage is allowed")
    pinned = constraints.pinned_recompute is not None
    policy = {} if pinned else frugal(spec, constraints, None, caps or ALL_POLICIES)
    storages = [Storage(zero=zeros[-1],
                        optimizer_offload=constraints.optimizer_offload_frac or 0.0)]
    if 1 in zeros:
        storages += storage_options(1, constraints, candidate.pp)[1:]
    if constraints.allow_remote_offload and candidate.pp > 1:
        storages += [dataclasses.replace(s, remote=True) for s in storages]
    storages += [o for o in (offload_storage(s, constraints) for s in storages) if o]
    try:
        options = [(with_policy(candidate, storage, policy, constraints), rank)
                   for rank, storage in enumerate(storages)]
        ledgers = [(memory_ledger(spec, training, parallel, cluster), rank, parallel)
                   for parallel, rank in options]
        ledger, _, parallel = min(ledgers, key=lambda x: (not x[0].fits, x[0].peak_bytes, x[1]))
        if not ledger.fits:
            return Rejection.of_ledger(candidate, ledger,
                                       f"does not fit even with ZeRO-{zeros[-1]} and the most "
                                       "frugal activation policy allowed")
        return _score(spec, training, cluster, candidate, parallel, ledger)
    except InvalidSpecError as exc:
        return Rejection(candidate=candidate, reason=exc.detail)


def _first_fit(cand: PlanCandidate, storage: Storage, *, cutoff_s: float = math.inf,
               plan_bound: Callable[[int], float] | None = None,
               known_fit: int | None = None) -> _Fit | _Bounded | ParallelConfig:
    """The first ladder rung that fits under this storage, or the most frugal configuration
    tried when none does (its ledger says which stage binds). Probes only ask whether a
    configuration fits (`PlanCandidate.fits`); the full ledger is built only for a plan
    that is scored.

    With `plan_bound` (by k, a lower bound of the step time of the most frugal policy with
    full recomputation of the first k layers, and of the same policy with more first layers
    fully recomputed), the probing stops once the policies still
    possible are all bounded at `cutoff_s` or above (`_Bounded`): after a rung with
    recomputation is found not to fit, every later rung and every k of full recomputation
    of the first k layers recompute at least the smaller of full and selective on each
    layer (the frugal policy with k = 0, bounded with more layers); after k is found not to
    fit, every larger k.

    `known_fit`: the first rung at which this storage without remote activation offload
    fits, given for its remote variant: remote offload fits wherever the same plan without
    it does (it only moves bytes off ranks over the capacity), so that rung fits here too and
    only the rungs before it are probed."""
    found: tuple[int, ParallelConfig] | None = None
    if known_fit is not None:
        found = (known_fit, cand.rung(storage, known_fit))
    elif not cand.pinned:
        most = cand.frugal(storage)
        if not cand.fits(most):
            return most
    # Rungs save memory in order, so the first fitting rung is found by bisection.
    low, high = 0, len(cand.rungs) - 1 if known_fit is None else known_fit - 1
    tried: ParallelConfig | None = None
    while low <= high:
        mid = (low + high) // 2
        tried = cand.rung(storage, mid)
        if cand.fits(tried):
            found, high = (mid, tried), mid - 1
        else:
            low = mid + 1
            if (found is None and plan_bound is not None and not cand.pinned
                    and cand.caps.full_layers):
                bound = plan_bound(0)
                if bound >= cutoff_s:
                    return _Bounded(bound_s=bound)
    if found is not None:
        index, parallel = found
        return _Fit(parallel=parallel, plain=index == 0, rung=index)
    if cand.pinned:
        assert tried is not None
        return tried
    return _full_layers_fit(cand, storage, cutoff_s, plan_bound)


def _full_layers_fit(cand: PlanCandidate, storage: Storage, cutoff_s: float,
                     plan_bound: Callable[[int], float] | None) -> _Fit | _Bounded:
    """Where no rung fits: full recomputation of the first k layers of every stage, the
    smallest k that fits (k = all layers fits, as `_first_fit` checked), or the most
    frugal policy itself for caps without it."""
    most = cand.frugal(storage)
    if not cand.caps.full_layers:
        return _Fit(parallel=most, plain=False)
    low, high = 0, max(len(layout) for layout in _stage_layer_counts(cand.spec, most))
    while low < high:
        mid = (low + high) // 2
        if cand.fits(cand.frugal(storage, mid)):
            high = mid
        else:
            low = mid + 1
            if plan_bound is not None:
                bound = plan_bound(low)
                if bound >= cutoff_s:
                    return _Bounded(bound_s=bound)
    return _Fit(parallel=cand.frugal(storage, low), plain=False)


def plain_makespan_bound(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                         candidate: MeshCandidate, *, zero_stage: int = 0) -> float:
    """A lower bound of the candidate's value tighter than `solver/bounds.py`: the pipeline
    makespan bound with no recomputation, storage or offload cost (every policy choice only
    adds to op durations or to the tail after the flush) at `zero_stage`.

    ZeRO-0, 1 and 2 give the same op durations, so 0 bounds them all; pass 3 only when
    every plan of the candidate must use ZeRO-3 (the memory bound rules out the lower
    stages): its exposed per-layer parameter gathers and gradient reduce-scatters are then
    part of every op, and recomputation only lengthens the compute they hide behind."""
    return pipeline_makespan_bound(spec, training,
                                   candidate.parallel(zero_stage=zero_stage), cluster)


def plain_run_makespan(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                       candidate: MeshCandidate, *, zero_stage: int = 0) -> float:
    """`plain_makespan_bound`'s lower bound with the closed form replaced by a simulated run
    of the same stage times without P2P latency (`models.core.step_time.simulated_makespan_bound`):
    at least as tight, at the price of one simulation (memoised per shape and durations).
    `zero_stage` as in `plain_makespan_bound`."""
    return simulated_makespan_bound(spec, training, candidate.parallel(zero_stage=zero_stage),
                                    cluster)


def _stage_layer_counts(spec: ModelSpec, parallel: ParallelConfig) -> list[tuple[int, ...]]:
    return [layout.layers for layout in pipeline_layout(spec, parallel)]


def layer_split_options(spec: ModelSpec, parallel: ParallelConfig) -> list[tuple[int, ...] | None]:
    """The even split (None) and, for three or more ranks, the split with one layer fewer on
    the first and last ranks (they carry the embedding, the head and the most in-flight
    activations; Llama 3 arXiv:2407.21783 Sec. 3.3.2), the two layers going to middle ranks."""
    if (parallel.pp < 3 or parallel.layers_per_stage is not None
            or parallel.layers_per_virtual_stage is not None):
        return [None]
    even = [len(layout.layers) for layout in pipeline_layout(spec, parallel)]
    even = [n // schedule_traits(parallel.schedule).weight_copies for n in even]
    if min(even[0], even[-1]) < 2:
        return [None]
    lighter = list(even)
    lighter[0] -= 1
    lighter[-1] -= 1
    order = sorted(range(1, parallel.pp - 1), key=lambda r: (lighter[r], r))
    lighter[order[0]] += 1
    lighter[order[1 % len(order)]] += 1
    return [None, tuple(lighter)]


def refine_policies(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                    plan: ScoredPlan, constraints: Constraints,
                    config: cpsat.SolverConfig, *, deadline: float | None = None) -> ScoredPlan:
    """The integer sub-problems of a chosen mesh: the layer split (even, or lighter first
    and last ranks) and, for each, the per-stage policies from the CP-SAT subproblem. The
    result replaces the plan only if the exact ledger fits and the simulated step is faster.
    Splits not started by `deadline` (a `time.perf_counter()` value) are skipped, and each
    CP-SAT subproblem gets at most the time left before it."""
    if plan.parallel.pp == 1 or (constraints.recompute is not None
                                 and not isinstance(constraints.recompute, list)):
        return plan
    best = plan
    # The subproblem's option ledgers are each stage's own (no remote offload); where the
    # request allows it, the subproblem chooses the bytes each stage keeps elsewhere.
    for split in layer_split_options(spec, plan.parallel):
        split_config = config
        if deadline is not None:
            left_s = deadline - time.perf_counter()
            if left_s <= 0:
                break
            if left_s < config.max_time_s:
                split_config = dataclasses.replace(config, max_time_s=left_s)
        base = plan.parallel.model_copy(update={"stage_policies": None,
                                                "recompute": RecomputeMode.NONE,
                                                "fp8_activations": False,
                                                "activation_offload_frac": 0.0,
                                                "remote_activation_offload": False,
                                                "layers_per_stage": split})
        try:
            chosen = choose_stage_policies(spec, training, base, cluster,
                                           policy_options(spec, constraints), split_config,
                                           remote=constraints.allow_remote_offload)
        except InvalidSpecError:
            continue
        if chosen is None:
            continue
        ledger = memory_ledger(spec, training, chosen.parallel, cluster)
        if not ledger.fits:
            continue
        refined = _score(spec, training, cluster, plan.candidate, chosen.parallel, ledger)
        if refined.estimate.step_time_s < best.estimate.step_time_s:
            best = refined
    return best


def _score(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
           candidate: MeshCandidate, parallel: ParallelConfig,
           ledger: MemoryLedger) -> ScoredPlan:
    estimate = estimate_step(spec, training, parallel, cluster, split_pipeline_idle=False)
    return ScoredPlan(candidate=candidate, parallel=parallel, estimate=estimate, ledger=ledger)


__all__ = [
    "ALL_POLICIES",
    "Dominated",
    "PolicyCaps",
    "Rejection",
    "ScoredPlan",
    "Storage",
    "Unfit",
    "allowed_zero_stages",
    "evaluate_candidate",
    "evaluate_plan_candidate",
    "evaluate_unsettled",
    "evaluation_floor_s",
    "layer_split_options",
    "least_memory_candidate",
    "least_stored_policy",
    "plain_makespan_bound",
    "plain_run_makespan",
    "probe_options",
    "policy_floors_s",
    "refine_policies",
    "storage_options",
]
