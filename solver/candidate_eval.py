"""Scoring one mesh candidate exactly: ZeRO stage and per-stage policy chosen, then the full
cost model (memory ledger and simulated step time).

Owns: `evaluate_candidate`, the single definition of "the value of a candidate" shared by
the planner and by brute-force enumeration in the tests, and the reasons a candidate fails.
Must not: enumerate or order candidates.

Rule: for each allowed ZeRO stage (ascending) the activation policy is the first rung of a
ladder, ordered from cheapest to most memory-saving, whose ledger fits: no recomputation;
selective recomputation of cheap modules; plus FP8 storage; plus half offloaded; full
recomputation of the first k layers of every stage (the smallest k that fits); full
recomputation (with FP8 and offload where allowed). The candidate's value is the fastest
of these per-stage plans. A plain fit at some stage ends the ladder for higher stages,
which can only add collectives. The per-stage CP-SAT policy of `solver/policy.py` then
refines the chosen plan (`refine_policies`).
"""

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import FullLayers, ParallelConfig, RecomputeMode, RecomputeModule
from api_schemas.requests import Constraints
from api_schemas.training import TrainingSpec
from models.errors import InvalidSpecError
from models.layout import pipeline_layout
from models.memory import LedgerMemo, MemoryLedger, fits_memory, memory_ledger
from models.pipeline import schedule_traits
from models.step_time import (
    StepEstimate,
    WorkTable,
    estimate_step,
    pipeline_makespan_bound,
    simulated_makespan_bound,
    step_time_bound,
    work_table,
)
from solver import cpsat
from solver.policy import (
    ACTIVATION_OFFLOAD_SHARE,
    broad_selective_modules,
    choose_stage_policies,
    max_offload_share,
    policy_options,
)
from solver.space import MeshCandidate, permitted


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoredPlan:
    """A fully specified configuration with its cost-model value."""

    candidate: MeshCandidate
    parallel: ParallelConfig
    estimate: StepEstimate
    ledger: MemoryLedger
    training: TrainingSpec | None = None
    """The recipe it was scored under, with the runtime features the search decided
    (`solver.runtime_choice`); None: the request's own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejection:
    """Why a candidate has no plan: the stage and bytes over capacity, or a rule."""

    candidate: MeshCandidate
    reason: str
    stage: int | None = None
    over_bytes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Dominated:
    """A candidate whose every fitting plan is proven no faster than the caller's cutoff
    (its exact step time was not needed)."""

    candidate: MeshCandidate
    bound_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyCaps:
    """The uniform activation policies a framework target can express (None where a caller
    passes no caps: every policy the cost model knows)."""

    selective: bool = True
    """Selective recomputation of the attention core."""
    broad_modules: bool = True
    """Selective recomputation of the broad module set (norms, MLA up-projections, expert
    activations)."""
    full: bool = True
    """Full recomputation of every layer."""
    full_layers: bool = True
    """Full recomputation of the first k layers of each stage."""
    full_layers_selective: bool = True
    """... with selective recomputation on the other layers."""
    per_stage: bool = True
    """Different policies on different pipeline ranks."""
    selective_modules: tuple[RecomputeModule, ...] | None = None
    """The modules the framework's selective recomputation rebuilds, when it has one fixed
    set (torchtitan's per-op policy: `op_sac`); None = the cost model's broad set."""


ALL_POLICIES = PolicyCaps()
"""No restriction (target 'any')."""


def allowed_zero_stages(constraints: Constraints) -> list[int]:
    """ZeRO stages the request permits, ascending."""
    return [z for z in (0, 1, 2, 3) if permitted("zero_stage", z, constraints)]


@dataclass(frozen=True, slots=True)
class Storage:
    """Where a plan keeps what its activation policy does not decide: the ZeRO stage,
    Pipeline ZeRO-2 (gradient shards in host memory) and remote activation offload (stored
    activations in other pipeline ranks' spare memory)."""

    zero: int
    host_gradients: bool = False
    remote: bool = False
    optimizer_offload: float = 0.0
    """Share of the rank's optimizer states in host memory (`optimizer_offload_frac`)."""


def storage_options(zero: int, constraints: Constraints, pp: int) -> list[Storage]:
    """The settings tried at one ZeRO stage before remote offload, cheapest first: the
    request's (Pipeline ZeRO-2 when pinned), then Pipeline ZeRO-2 where the request allows
    the search to choose it (with ZeRO-1, as Kimi K3 pairs them, and a pipeline)."""
    pinned = constraints.gradient_host_shards
    moved = constraints.optimizer_offload_frac or 0.0
    out = [Storage(zero=zero, host_gradients=pinned, optimizer_offload=moved)]
    if not pinned and constraints.allow_gradient_host_shards and zero == 1 and pp > 1:
        out.append(Storage(zero=zero, host_gradients=True, optimizer_offload=moved))
    return out


def offload_storage(storage: Storage, constraints: Constraints) -> Storage | None:
    """`storage` with the whole optimizer shard in host memory where the search may choose
    it (`constraints.allow_optimizer_offload`, not pinned, a ZeRO optimizer to offload);
    None otherwise. Tried only where `storage` has no plain fit: where the cheapest policy
    fits, moving the optimizer only adds the CPU step
    (`models.step_time.assembly.host_optimizer_s`)."""
    if (constraints.optimizer_offload_frac is not None or not constraints.allow_optimizer_offload
            or storage.zero < 1 or storage.optimizer_offload > 0):
        return None
    return dataclasses.replace(storage, optimizer_offload=1.0)


def probe_options(spec: ModelSpec, constraints: Constraints, pp: int) -> int:
    """How many (storage, activation policy) settings an evaluation may probe at one ZeRO
    stage of a candidate with `pp` pipeline ranks: the ladder's rungs times the storages
    (`storage_options`), twice where remote offload may be added. A measure of what an
    evaluation costs, for callers weighing other work against it."""
    remote = 2 if constraints.allow_remote_offload and pp > 1 else 1
    return len(_ladder(spec, constraints)) * len(storage_options(1, constraints, pp)) * remote


def _with_policy(candidate: MeshCandidate, zero: int | Storage, policy: dict[str, object],
                 constraints: Constraints) -> ParallelConfig:
    storage = zero if isinstance(zero, Storage) else Storage(zero=zero)
    fields: dict[str, object] = {"zero_stage": storage.zero, **policy}
    if constraints.gradient_host_shards or storage.host_gradients:
        fields["gradient_host_shards"] = True
    if storage.remote:
        fields["remote_activation_offload"] = True
    if storage.optimizer_offload:
        fields["optimizer_offload_frac"] = storage.optimizer_offload
    if constraints.pinned_recompute is not None:
        fields["recompute"] = constraints.pinned_recompute
    return candidate.parallel(**fields)


def _selective(spec: ModelSpec, caps: PolicyCaps) -> dict[str, object]:
    if caps.selective and caps.selective_modules:
        return {"recompute": RecomputeMode.SELECTIVE,
                "recompute_modules": caps.selective_modules}
    if caps.selective and caps.broad_modules:
        return {"recompute": RecomputeMode.SELECTIVE,
                "recompute_modules": broad_selective_modules(spec)}
    if caps.selective:
        return {"recompute": RecomputeMode.SELECTIVE}
    return {}


def _ladder(spec: ModelSpec, constraints: Constraints,
            caps: PolicyCaps = ALL_POLICIES) -> list[dict[str, object]]:
    """Uniform policies from cheapest to most memory-saving (see the module docstring)."""
    selective = _selective(spec, caps)
    rungs: list[dict[str, object]] = [{}]
    if selective:
        rungs.append(selective)
    if constraints.allow_fp8_activations:
        rungs.append({**selective, "fp8_activations": True})
    if constraints.allow_offload:
        rungs.append({**selective, "fp8_activations": bool(constraints.allow_fp8_activations),
                      "activation_offload_frac": ACTIVATION_OFFLOAD_SHARE})
    return rungs


def _frugal(spec: ModelSpec, constraints: Constraints, full_layers: int | None,
            caps: PolicyCaps = ALL_POLICIES) -> dict[str, object]:
    """The most memory-saving policy the caps allow (`full_layers` = k: full recomputation
    of the first k layers of each stage instead of all)."""
    selective = _selective(spec, caps)
    saving: dict[str, object] = {
        "fp8_activations": bool(constraints.allow_fp8_activations),
        "activation_offload_frac": max_offload_share(constraints)}
    if full_layers is not None:
        others: Literal["none", "selective"] = (
            "selective" if caps.full_layers_selective and selective else "none")
        return {**selective, "recompute": FullLayers(full_layers=full_layers, others=others),
                **saving}
    if caps.full:
        return {**selective, "recompute": RecomputeMode.FULL, **saving}
    return {**selective, **saving}


def least_stored_policy(spec: ModelSpec, constraints: Constraints,
                        caps: PolicyCaps | None = None) -> dict[str, object]:
    """The activation policy fields of the plans under `caps` that store the fewest bytes:
    full recomputation where the caps allow it whole or for the first k layers (k as large
    as a rank's layers stores the same), or a pinned policy (full recomputation stores no
    more than any), else `_frugal`'s; with FP8 storage and the largest offload share the
    request allows. A memory bound taken under it holds for every plan the evaluation
    probes under these caps."""
    caps = caps or ALL_POLICIES
    if constraints.pinned_recompute is not None or caps.full or caps.full_layers:
        return {"recompute": RecomputeMode.FULL,
                "fp8_activations": bool(constraints.allow_fp8_activations),
                "activation_offload_frac": max_offload_share(constraints)}
    return _frugal(spec, constraints, None, caps)


def _fits(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
          parallel: ParallelConfig, memo: LedgerMemo | None = None) -> MemoryLedger:
    return memory_ledger(spec, training, parallel, cluster, memo=memo)


def evaluate_candidate(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                       candidate: MeshCandidate, constraints: Constraints, *,
                       step_cutoff_s: float = math.inf,
                       zero3_bound_s: float = 0.0,
                       zero_floors_s: Mapping[int, float] | None = None,
                       caps: PolicyCaps | None = None,
                       memo: LedgerMemo | None = None) -> ScoredPlan | Rejection | Dominated:
    """The best plan of one mesh candidate under the rule in the module docstring.

    Each ZeRO stage's fitting plan is simulated in the order of its step-time bound
    (`models.step_time.step_time_bound`: the pipeline makespan bound with the plan's own
    policy plus its exact per-step tail), stopping once
    the next bound exceeds the fastest simulated step or reaches `step_cutoff_s` (a step
    time the caller already has): the value is exact whenever it is below the cutoff, and
    `Dominated` says that no plan of the candidate gets below it. `zero3_bound_s`, a lower
    bound of any ZeRO-3 plan's step time (`solver.bounds.BoundTables.zero3_time_bound_s`),
    spares the ZeRO-3 ladder when it already reaches the cutoff; so does `zero_floors_s`
    (per ZeRO stage, a lower bound of the step time of any of its plans: the planner's
    makespan bound plus `models.step_time.step_tail_floor_s`) for any stage, whose ladder
    is then replaced by one probe of its first rung (a plain fit there still ends the
    ladder, so the stages considered stay those of the rule). `caps` limits the
    activation policies to what a framework target expresses (`solver/targets.py`). `memo`:
    rank-ledger pieces shared with other candidates of the same model and recipe
    (`models.memory.LedgerMemo`, whose keys hold every field a piece reads; a search
    passes one for all its candidates), the value being the same with or without it."""
    zeros = allowed_zero_stages(constraints)
    caps = caps or ALL_POLICIES
    if not zeros:
        return Rejection(candidate=candidate, reason="no ZeRO stage is allowed")
    fits: list[_Fit] = []
    unfit: ParallelConfig | None = None
    pinned = constraints.pinned_recompute is not None
    # The probes of every ZeRO stage and rung share their ranks' states and activations.
    if memo is None or not memo.serves(spec, training):
        memo = LedgerMemo(spec=spec, training=training)
    work = _WorkTables(spec, training, cluster, candidate, constraints)
    try:
        skipped: list[float] = []
        for zero in zeros:
            if zero == 3 and zero3_bound_s >= step_cutoff_s:
                skipped.append(zero3_bound_s)
                continue
            floor = zero_floors_s.get(zero, 0.0) if zero_floors_s else 0.0
            if floor >= step_cutoff_s:
                skipped.append(floor)
                plain = _with_policy(candidate, zero, _rungs(spec, constraints, pinned, caps)[0],
                                     constraints)
                if fits_memory(spec, training, plain, cluster, memo=memo):
                    break  # a plain fit ends the ladder
                continue
            policy_bound = (None if pinned or step_cutoff_s == math.inf
                            else _plan_bound(work, floor, zero, caps))
            ends = False
            for storage in storage_options(zero, constraints, candidate.pp):
                found = _first_fit(spec, training, cluster, candidate, storage, constraints,
                                   pinned, caps, memo, cutoff_s=step_cutoff_s,
                                   plan_bound=policy_bound)
                plain_fit = isinstance(found, _Fit) and found.plain
                results = [found]
                if not plain_fit and constraints.allow_remote_offload and candidate.pp > 1:
                    # Remote offload is tried only where the plan needs more than the
                    # cheapest rung: with it the front ranks may fit a cheaper policy.
                    results.append(_first_fit(
                        spec, training, cluster, candidate,
                        dataclasses.replace(storage, remote=True), constraints, pinned, caps,
                        memo, cutoff_s=step_cutoff_s, plan_bound=policy_bound,
                        known_fit=found.rung if isinstance(found, _Fit) else None))
                offloaded = None if plain_fit else offload_storage(storage, constraints)
                if offloaded is not None:
                    results.append(_first_fit(
                        spec, training, cluster, candidate, offloaded, constraints, pinned,
                        caps, memo, cutoff_s=step_cutoff_s, plan_bound=policy_bound))
                for result in results:
                    if isinstance(result, _Bounded):
                        skipped.append(result.bound_s)
                    elif isinstance(result, _Fit):
                        fits.append(result)
                    else:
                        unfit = result
                if plain_fit and not storage.host_gradients:
                    ends = True  # a plain fit ends the ladder
                    break
            if ends:
                break
        if not fits and skipped:
            return Dominated(candidate=candidate, bound_s=min(skipped))
        if not fits:
            assert unfit is not None
            ledger = _fits(spec, training, cluster, unfit, memo)
            return Rejection(candidate=candidate, stage=ledger.binding_stage,
                             over_bytes=ledger.peak_bytes - ledger.capacity_bytes,
                             reason=f"does not fit even with ZeRO-{zeros[-1]} and the most "
                                    "frugal activation policy allowed")
        order = sorted(_fit_bound(spec, training, cluster, work, fit, step_cutoff_s,
                                  zero_floors_s, pinned, rank)
                       for rank, fit in enumerate(fits))
        best: tuple[float, int, ScoredPlan] | None = None
        for bound_s, rank in order:
            if bound_s >= step_cutoff_s or (best is not None and bound_s > best[0]):
                break
            fit = fits[rank]
            estimate = estimate_step(spec, training, fit.parallel, cluster,
                                     split_pipeline_idle=False)
            key = (estimate.step_time_s, rank)
            if best is None or key < best[:2]:
                # Only a plan that leads gets its full ledger (the probes said it fits).
                best = (*key, ScoredPlan(candidate=candidate, parallel=fit.parallel,
                                         estimate=estimate,
                                         ledger=_fits(spec, training, cluster, fit.parallel,
                                                      memo)))
    except InvalidSpecError as exc:
        return Rejection(candidate=candidate, reason=exc.detail)
    if best is None:
        # A skipped stage's plans are bounded by its own bound, which may be the lower one.
        bound = min([order[0][0], *skipped])
        return Dominated(candidate=candidate, bound_s=bound)
    if skipped and best[0] >= step_cutoff_s:
        # A plan at or above the cutoff beside skipped ones (an optimizer-offload fit next
        # to a bounded ladder): none gets below the cutoff, and the skipped may beat it.
        return Dominated(candidate=candidate, bound_s=min([best[0], *skipped]))
    return best[2]


class _WorkTables:
    """The `models.step_time.WorkTable` of one candidate per timing ZeRO stage (0 stands for
    0-2, whose ops time alike; 3), built when first asked for, and the bounds of the most
    frugal policies asked for (they read only the policy and the timing stage, so the ZeRO
    stages of one timing share them)."""

    def __init__(self, spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                 candidate: MeshCandidate, constraints: Constraints) -> None:
        self._args = (spec, training, cluster, candidate, constraints)
        self._tables: dict[int, WorkTable] = {}
        self._frugal: dict[tuple[int, int], float] = {}

    def bound_s(self, parallel: ParallelConfig, *, more_full_layers: bool = False) -> float:
        """A lower bound of the step time of a plan of the candidate: its
        `models.step_time.policy_work_bound_s` (a makespan bound) plus the wait for the
        slowest GPU every policy of the mesh pays beside the makespan (`WorkTable.wait_s`)."""
        timing = 3 if parallel.zero_stage == 3 else 0
        if timing not in self._tables:
            spec, training, cluster, candidate, constraints = self._args
            self._tables[timing] = work_table(
                spec, training, _with_policy(candidate, timing, {}, constraints), cluster)
        table = self._tables[timing]
        return table.bound_s(parallel, more_full_layers=more_full_layers) + table.wait_s

    def frugal_bound_s(self, zero: int, full_layers: int, caps: PolicyCaps) -> float:
        """`bound_s(..., more_full_layers=True)` of the candidate at ZeRO stage `zero` under
        the most frugal policy with full recomputation of the first `full_layers` layers
        (`_frugal`; the caps are one evaluation's, fixed)."""
        key = (3 if zero == 3 else 0, full_layers)
        found = self._frugal.get(key)
        if found is None:
            spec, _, _, candidate, constraints = self._args
            found = self._frugal[key] = self.bound_s(
                _with_policy(candidate, zero, _frugal(spec, constraints, full_layers, caps),
                             constraints), more_full_layers=True)
        return found


def policy_floors_s(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                    candidate: MeshCandidate, constraints: Constraints, zeros: Iterable[int],
                    caps: PolicyCaps | None, may_fit: Callable[[ParallelConfig], bool]
                    ) -> dict[int, float]:
    """Per ZeRO stage in `zeros`, a lower bound of the step time of every plan of the
    candidate under `evaluate_candidate`'s rule, for a candidate none of whose plans with
    the plain activation policy (the first rung of `_ladder`) fits. `may_fit(parallel)` is
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
        InvalidSpecError: as `models.step_time.work_table` or the memory bound.
    """
    caps = caps or ALL_POLICIES
    work = _WorkTables(spec, training, cluster, candidate, constraints)
    later_rungs = [_with_policy(candidate, 0, rung, constraints)
                   for rung in _rungs(spec, constraints, False, caps)[1:]]
    # A later rung that may fit, or a ladder without full layers, keeps the bound `_first_fit`
    # stops at after the plain rung (k = 0). The rungs need not store more than the frugal
    # policy at k = 0: where the target's full-layer recomputation leaves the other layers
    # without selective recomputation (Megatron-LM), the selective rung stores less.
    if not any(may_fit(rung) for rung in later_rungs):
        if not caps.full_layers:
            # No rung fits: `_first_fit` falls back to the most frugal policy itself.
            return {zero: work.bound_s(_with_policy(candidate, zero,
                                                    _frugal(spec, constraints, None, caps),
                                                    constraints)) for zero in zeros}

        def frugal(k: int) -> ParallelConfig:
            return _with_policy(candidate, 0, _frugal(spec, constraints, k, caps), constraints)

        least = frugal(0)
        if may_fit(least):
            # No full layer is needed: the other policies' bound is the frugal one's at k = 0.
            return {zero: work.frugal_bound_s(zero, 0, caps) for zero in zeros}
        low, high = 1, max(len(layout) for layout in _stage_layer_counts(spec, least))
        while low < high:
            mid = (low + high) // 2
            if may_fit(frugal(mid)):
                high = mid
            else:
                low = mid + 1
        return {zero: work.frugal_bound_s(zero, low, caps) for zero in zeros}
    return {zero: work.frugal_bound_s(zero, 0, caps) for zero in zeros}


def _plan_bound(work: _WorkTables, floor_s: float, zero: int,
                caps: PolicyCaps) -> Callable[[int], float]:
    """A lower bound of the step time of a plan at one ZeRO stage under the most frugal
    policy with full recomputation of the first k layers, by k: the stage's floor, and the
    busiest rank's work plus the policy's recomputation, counted so that it holds for more
    fully recomputed first layers too (`models.step_time.policy_work_bound_s`)."""

    def bound(full_layers: int) -> float:
        return max(floor_s, work.frugal_bound_s(zero, full_layers, caps))

    return bound


def _fit_bound(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
               work: _WorkTables, fit: "_Fit", cutoff_s: float,
               zero_floors_s: Mapping[int, float] | None, pinned: bool,
               rank: int) -> tuple[float, int]:
    """A lower bound of a fitting plan's step time, with its rank among the fits: first the
    cheap ones (its ZeRO stage's floor, and the busiest rank's work without a policy plus
    the recomputation the plan's policy adds, `models.step_time.policy_work_bound_s`);
    where they stay below `cutoff_s`, the plan's own `step_time_bound`."""
    zero = fit.parallel.zero_stage
    cheap = zero_floors_s.get(zero, 0.0) if zero_floors_s else 0.0
    if not pinned and cheap < cutoff_s:
        cheap = max(cheap, work.bound_s(fit.parallel))
    if cheap >= cutoff_s:
        return cheap, rank
    return step_time_bound(spec, training, fit.parallel, cluster), rank


def least_memory_candidate(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                           candidate: MeshCandidate, constraints: Constraints, *,
                           caps: PolicyCaps | None = None) -> ScoredPlan | Rejection:
    """The candidate's least-memory plan (the `min_memory` objective): the highest allowed
    ZeRO stage with the most memory-saving activation policy the caps allow."""
    zeros = allowed_zero_stages(constraints)
    if not zeros:
        return Rejection(candidate=candidate, reason="no ZeRO stage is allowed")
    pinned = constraints.pinned_recompute is not None
    policy = {} if pinned else _frugal(spec, constraints, None, caps or ALL_POLICIES)
    storages = [Storage(zero=zeros[-1],
                        optimizer_offload=constraints.optimizer_offload_frac or 0.0)]
    if 1 in zeros:
        storages += storage_options(1, constraints, candidate.pp)[1:]
    if constraints.allow_remote_offload and candidate.pp > 1:
        storages += [dataclasses.replace(s, remote=True) for s in storages]
    storages += [o for o in (offload_storage(s, constraints) for s in storages) if o]
    try:
        options = [(_with_policy(candidate, storage, policy, constraints), rank)
                   for rank, storage in enumerate(storages)]
        ledgers = [(_fits(spec, training, cluster, parallel), rank, parallel)
                   for parallel, rank in options]
        ledger, _, parallel = min(ledgers, key=lambda x: (not x[0].fits, x[0].peak_bytes, x[1]))
        if not ledger.fits:
            return Rejection(candidate=candidate, stage=ledger.binding_stage,
                             over_bytes=ledger.peak_bytes - ledger.capacity_bytes,
                             reason=f"does not fit even with ZeRO-{zeros[-1]} and the most "
                                    "frugal activation policy allowed")
        return _score(spec, training, cluster, candidate, parallel, ledger)
    except InvalidSpecError as exc:
        return Rejection(candidate=candidate, reason=exc.detail)


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


def _rungs(spec: ModelSpec, constraints: Constraints, pinned: bool,
           caps: PolicyCaps) -> list[dict[str, object]]:
    """The policies tried at one ZeRO stage, cheapest first (a pinned policy: itself)."""
    if pinned and caps.selective_modules and constraints.recompute == RecomputeMode.SELECTIVE:
        return [{"recompute_modules": caps.selective_modules}]
    return [{}] if pinned else _ladder(spec, constraints, caps)


def _first_fit(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
               candidate: MeshCandidate, zero: Storage, constraints: Constraints, pinned: bool,
               caps: PolicyCaps = ALL_POLICIES, memo: LedgerMemo | None = None, *,
               cutoff_s: float = math.inf,
               plan_bound: Callable[[int], float] | None = None,
               known_fit: int | None = None
               ) -> _Fit | _Bounded | ParallelConfig:
    """The first ladder rung that fits at this ZeRO stage, or the most frugal configuration
    tried when none does (its ledger says which stage binds). Probes only ask whether a
    configuration fits (`fits_memory`); the full ledger is built only for a plan that is
    scored.

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
    rungs = _rungs(spec, constraints, pinned, caps)
    found: tuple[int, ParallelConfig] | None = None
    if known_fit is not None:
        found = (known_fit, _with_policy(candidate, zero, rungs[known_fit], constraints))
    elif not pinned:
        frugal = _with_policy(candidate, zero, _frugal(spec, constraints, None, caps),
                              constraints)
        if not fits_memory(spec, training, frugal, cluster, memo=memo):
            return frugal
    # Rungs save memory in order, so the first fitting rung is found by bisection.
    low, high = 0, len(rungs) - 1 if known_fit is None else known_fit - 1
    tried: ParallelConfig | None = None
    while low <= high:
        mid = (low + high) // 2
        tried = _with_policy(candidate, zero, rungs[mid], constraints)
        if fits_memory(spec, training, tried, cluster, memo=memo):
            found, high = (mid, tried), mid - 1
        else:
            low = mid + 1
            if found is None and plan_bound is not None and not pinned and caps.full_layers:
                bound = plan_bound(0)
                if bound >= cutoff_s:
                    return _Bounded(bound_s=bound)
    if found is not None:
        index, parallel = found
        return _Fit(parallel=parallel, plain=index == 0, rung=index)
    if pinned:
        assert tried is not None
        return tried
    most = _with_policy(candidate, zero, _frugal(spec, constraints, None, caps), constraints)
    if not caps.full_layers:
        return _Fit(parallel=most, plain=False)
    # Full recomputation of the first k layers of every stage: the smallest k that fits
    # (k = all layers fits, as checked above).
    low, high = 0, max(len(layout) for layout in _stage_layer_counts(spec, most))
    while low < high:
        mid = (low + high) // 2
        trial = _with_policy(candidate, zero, _frugal(spec, constraints, mid, caps),
                             constraints)
        if fits_memory(spec, training, trial, cluster, memo=memo):
            high = mid
        else:
            low = mid + 1
            if plan_bound is not None:
                bound = plan_bound(low)
                if bound >= cutoff_s:
                    return _Bounded(bound_s=bound)
    chosen = _with_policy(candidate, zero, _frugal(spec, constraints, low, caps), constraints)
    return _Fit(parallel=chosen, plain=False)


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
    of the same stage times without P2P latency (`models.step_time.simulated_makespan_bound`):
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
    "allowed_zero_stages",
    "evaluate_candidate",
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
