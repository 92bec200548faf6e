"""Per-stage activation policy under the memory cap: a small CP-SAT model per candidate.

Owns: choosing, for every pipeline stage, one storage option (recompute none or selective,
FP8 storage or not, an offload share) and how many of its layers are fully recomputed, and,
where the request allows it, how many stored bytes it keeps in (or holds for) other
pipeline ranks (remote offload), so that every stage fits and the slowest stage is as fast
as possible. Must not: choose the
mesh (see `solver/planner.py`).

Formulation (s = stage, o = option):
    x[s,o] in {0,1}      stage s uses option o;           sum_o x[s,o] = 1            (C1)
    n[s] in [0, L_s]     layers of s fully recomputed
    N[s,o] = n[s] x[s,o] (linearised)                                                   (C2)
    z[s,o] in {0,1}      N[s,o] > 0 (a layer is rebuilt: its working set is held)       (C3)
    sum_o M0[s,o] x[s,o] - d[s,o] N[s,o] + ws[s,o] z[s,o] - S[s] + H[s] <= capacity     (C4)
    T >= sum_o T0[s,o] x[s,o] + r[s,o] N[s,o] + E[s] + h_s S[s] + h'_s H[s]             (C5)
    with remote activation offload allowed (else S = H = E = 0):
    S[s], H[s] >= 0      bytes stage s keeps in / holds for other pipeline ranks
    sum_s S[s] = sum_s H[s]                                                             (C6)
    S[s] <= sum_o A0[s,o] x[s,o] - a[s,o] N[s,o]   (its stored layer activations)      (C7)
    E[s] >= l_s S[s] + l'_s H[s] - W_s,  E[s] >= 0  (link time beyond the window)       (C8)
    minimise  K T + sum_s (stage times)     (K large: the bottleneck first)
M0, T0 come from the exact ledger and stage timing with the option applied uniformly and no
layer fully recomputed; d (bytes saved per fully recomputed layer), ws (the rebuilt layer's
working set) and r (time per fully recomputed layer) from the same functions with one and two
layers recomputed. The solution is re-checked with the exact ledger and repaired (one more
recomputed layer on a stage that still overflows) if rounding or layer kinds disagree.
Remote offload's per-byte rates l, l' (link), h, h' (HBM) and window W per micro-batch
crossing come from `models.core.step_time.remote_offload.remote_offload_rates` on the plain
option (A0 and a from the same ledgers as M0 and d); the chosen configuration carries the
flag when some S[s] > 0, and its exact ledger balances only the bytes over the capacity.

Each constraint family is added by its own function (`_add_full_layer_product` C2,
`_add_rebuild_flag` C3, `_add_one_option` C1, `_add_memory_cap` C4, `_add_stage_time` C5,
`_new_remote` C6, `_add_movable_bound` C7, `_remote_time_terms` C8); `_add_stage` calls them
stage by stage in a fixed order, so the same inputs build the same model.
"""

import math
from dataclasses import dataclass
from typing import Literal

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import (
    FullLayers,
    ParallelConfig,
    RecomputeMode,
    RecomputeModule,
    StagePolicy,
)
from api_schemas.requests import Constraints
from api_schemas.training import TrainingSpec
from models.core.collectives import fabric_of
from models.core.layer_kinds import kind_recompute_modules
from models.core.layout import pipeline_layout
from models.core.ledger_memo import LedgerMemo
from models.core.memory import MemoryLedger, memory_ledger
from models.core.rank_activations import stored_activation_bytes
from models.core.rank_states import micro_batch_count
from models.core.step_time import StageTime, axis_groups, stage_time
from models.core.step_time.remote_offload import RemoteOffloadRates, remote_offload_rates
from models.core.step_time.setting import step_setting
from solver import cpsat
from solver.scaling import (
    MAX_COEFFICIENT,
    MEMORY_QUANTUM_BYTES,
    TIME_QUANTUM_S,
    capacity_bytes,
    cost_bytes,
    cost_time,
    saved_bytes,
    seconds,
)

BOTTLENECK_WEIGHT = 1000
"""K: one microsecond of the slowest stage outweighs a millisecond summed over the others."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyOption:
    """A uniform storage option before full-layer recomputation is added."""

    recompute: RecomputeMode
    modules: tuple[RecomputeModule, ...]
    fp8: bool
    offload_frac: float

    def policy(self, full_layers: int = 0) -> StagePolicy:
        """The stage policy with `full_layers` fully recomputed layers."""
        recompute: RecomputeMode | FullLayers = self.recompute
        if full_layers:
            others: Literal["none", "selective"] = (
                "selective" if self.recompute == RecomputeMode.SELECTIVE else "none")
            recompute = FullLayers(full_layers=full_layers, others=others)
        return StagePolicy(recompute=recompute, recompute_modules=self.modules or
                           (RecomputeModule.CORE_ATTN,), fp8_activations=self.fp8,
                           offload_frac=self.offload_frac)


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyResult:
    """Chosen per-stage policies and how the choice was proven."""

    parallel: ParallelConfig
    status: cpsat.SolveStatus
    bottleneck_s: float | None


def broad_selective_modules(spec: ModelSpec) -> tuple[RecomputeModule, ...]:
    """Cheap-to-rebuild modules (Kimi K2 Sec. 2.4 / DeepSeek-V3 Sec. 3.3): norms, the
    attention core, MLA up-projections and the expert activation."""
    modules = [RecomputeModule.CORE_ATTN, RecomputeModule.LAYERNORM]
    modules += kind_recompute_modules(spec, cheap_only=True)
    return tuple(modules)


ACTIVATION_OFFLOAD_SHARE = 0.5
"""The share of a stage's stored activations moved to host memory when offload is allowed:
the one offload setting the search, its bounds and its fixes try. A chosen setting, not a
calibrated one: Kimi K2 (arXiv:2507.20534 Sec. 2.4) offloads activations to the CPU without
printing the share, and `models/evidence/published.py` records that run with this value."""


def max_offload_share(constraints: Constraints) -> float:
    """The largest activation offload share a request allows (0 without offload)."""
    return ACTIVATION_OFFLOAD_SHARE if constraints.allow_offload else 0.0


def policy_options(spec: ModelSpec, constraints: Constraints) -> list[PolicyOption]:
    """The storage options the subproblem chooses from, under the request's permissions."""
    bases = [(RecomputeMode.NONE, ()), (RecomputeMode.SELECTIVE, broad_selective_modules(spec))]
    fp8s = [False, True] if constraints.allow_fp8_activations else [False]
    offloads = sorted({0.0, max_offload_share(constraints)})
    return [PolicyOption(recompute=mode, modules=modules, fp8=fp8, offload_frac=off)
            for mode, modules in bases for fp8 in fp8s for off in offloads]


def _uniform(parallel: ParallelConfig, option: PolicyOption, full: int) -> ParallelConfig:
    return parallel.model_copy(update={"stage_policies": (option.policy(full),) * parallel.pp})


def _stage_busy(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                cluster: ClusterSpec) -> list[float]:
    return [sum(t.total_s for t in st.chunk_times)
            for st in _stage_times(spec, training, parallel, cluster)]


def _stage_times(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                 cluster: ClusterSpec) -> list[StageTime]:
    m = micro_batch_count(training, parallel)
    fabric = fabric_of(cluster)
    groups = axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    return [stage_time(spec, training, parallel, cluster, layout, num_micro_batches=m,
                       fabric=fabric, groups=groups)
            for layout in pipeline_layout(spec, parallel)]


def _remote_rates(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  cluster: ClusterSpec, ledger: MemoryLedger) -> RemoteOffloadRates:
    """Remote offload's per-byte costs on the plain option's stage times (C6-C8); the ranks
    over the capacity without a policy are the ones that may send."""
    return remote_offload_rates(step_setting(spec, training, parallel, cluster),
                                [s.in_flight_chunks for s in ledger.stages],
                                _stage_times(spec, training, parallel, cluster),
                                senders=[s.total_bytes > ledger.capacity_bytes
                                         for s in ledger.stages])


@dataclass(frozen=True, slots=True)
class _OptionData:
    """One option's exact ledgers (0, 1 and 2 layers fully recomputed on every stage) and
    stage busy times (0 and 1): the coefficients M0, d, ws, A0, a, T0 and r."""

    ledgers: tuple[MemoryLedger, ...]
    busy: tuple[list[float], ...]


@dataclass(frozen=True, slots=True)
class _OptionVars:
    """One (stage, option) cell: x[s,o], N[s,o] and z[s,o]."""

    use: cpsat.IntVar
    full: cpsat.IntVar
    rebuilds: cpsat.IntVar


@dataclass(slots=True)
class _Remote:
    """Remote offload's variables S[s], H[s] and its per-byte rates (C6-C8)."""

    rates: RemoteOffloadRates
    sent: list[cpsat.IntVar]
    held: list[cpsat.IntVar]


def _option_data(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                 cluster: ClusterSpec, options: list[PolicyOption],
                 memo: LedgerMemo) -> list[_OptionData]:
    """The coefficients' sources for every option."""
    data = []
    for option in options:
        ledgers = tuple(memory_ledger(spec, training, _uniform(parallel, option, k), cluster,
                                      memo=memo)
                        for k in (0, 1, 2))
        busy = tuple(_stage_busy(spec, training, _uniform(parallel, option, k), cluster)
                     for k in (0, 1))
        data.append(_OptionData(ledgers=ledgers, busy=busy))
    return data


def _add_full_layer_product(model: cpsat.CpModel, cell: _OptionVars, n_s: cpsat.IntVar,
                            count: int) -> None:
    """C2: N[s,o] = n[s] x[s,o], linearised with the stage's layer count as the big M."""
    model.add(cell.full <= count * cell.use)
    model.add(cell.full <= n_s)
    model.add(cell.full >= n_s - count * (1 - cell.use))


def _add_rebuild_flag(model: cpsat.CpModel, cell: _OptionVars, count: int) -> None:
    """C3: z[s,o] is set when the option is used with a layer fully recomputed."""
    model.add(cell.full <= count * cell.rebuilds)
    model.add(cell.rebuilds <= cell.use)


def _new_cell(model: cpsat.CpModel, s: int, o: int, n_s: cpsat.IntVar,
              count: int) -> _OptionVars:
    """x[s,o], N[s,o] and z[s,o] with their links (C2, C3)."""
    cell = _OptionVars(use=model.new_bool_var(f"use[{s},{o}]"),
                       full=model.new_int_var(0, count, f"full[{s},{o}]"),
                       rebuilds=model.new_bool_var(f"rebuilds[{s},{o}]"))
    _add_full_layer_product(model, cell, n_s, count)
    _add_rebuild_flag(model, cell, count)
    return cell


def _memory_terms(data: _OptionData, cell: _OptionVars, s: int,
                  count: int) -> list[cpsat.LinearExpr]:
    """C4's terms for one option: M0 x - d N + ws z."""
    m0, m1, m2 = (ledger.stages[s].total_bytes for ledger in data.ledgers)
    saved = max(0, m1 - m2) if count >= 2 else max(0, m0 - m1)
    working = max(0, m1 - m0 + saved)
    return [cost_bytes(m0) * cell.use, -saved_bytes(saved) * cell.full,
            cost_bytes(working) * cell.rebuilds]


def _movable_term(data: _OptionData, cell: _OptionVars, s: int) -> cpsat.LinearExpr:
    """C7's bound for one option: the stored layer activations A0 x - a N."""
    s0, s1 = (stored_activation_bytes(ledger.stages[s].components)
              for ledger in data.ledgers[:2])
    return saved_bytes(s0) * cell.use - cost_bytes(max(0, s0 - s1)) * cell.full


def _time_terms(data: _OptionData, cell: _OptionVars, s: int) -> list[cpsat.LinearExpr]:
    """C5's terms for one option: T0 x + r N."""
    t0, t1 = data.busy[0][s], data.busy[1][s]
    return [cost_time(t0) * cell.use, cost_time(max(0.0, t1 - t0)) * cell.full]


def _add_one_option(model: cpsat.CpModel, cells: list[_OptionVars]) -> None:
    """C1: every stage uses exactly one option."""
    model.add_exactly_one(cell.use for cell in cells)


def _add_memory_cap(model: cpsat.CpModel, terms: list[cpsat.LinearExpr], cap: int) -> None:
    """C4: the stage's bytes (less those sent, plus those held) fit the capacity."""
    model.add(sum(terms) <= cap)


def _new_remote(model: cpsat.CpModel, rates: RemoteOffloadRates, stages: int,
                cap: int) -> _Remote:
    """S[s] and H[s] for every stage, with C6: every byte sent is held somewhere."""
    sent = [model.new_int_var(0, cap, f"sent[{s}]") for s in range(stages)]
    held = [model.new_int_var(0, cap, f"held[{s}]") for s in range(stages)]
    model.add(sum(sent) == sum(held))
    return _Remote(rates=rates, sent=sent, held=held)


def _add_movable_bound(model: cpsat.CpModel, remote: _Remote, s: int,
                       movable: list[cpsat.LinearExpr]) -> None:
    """C7: a stage sends no more than its stored layer activations."""
    model.add(remote.sent[s] <= sum(movable))


def _remote_time_terms(model: cpsat.CpModel, remote: _Remote,
                       s: int) -> list[cpsat.LinearExpr]:
    """C8: the link time beyond the window E[s], and the HBM time of the moved bytes."""
    rates, sent, held = remote.rates, remote.sent[s], remote.held[s]
    exposed = model.new_int_var(0, MAX_COEFFICIENT, f"remote_exposed[{s}]")
    link = (_per_quantum(rates.send_link_s[s]) * sent
            + _per_quantum(rates.receive_link_s[s]) * held)
    model.add(exposed >= link - int(rates.window_s[s] / TIME_QUANTUM_S))
    return [exposed, _per_quantum(rates.hbm_send_s[s]) * sent,
            _per_quantum(rates.hbm_receive_s[s]) * held]


def _add_stage_time(model: cpsat.CpModel, stage_time_var: cpsat.IntVar,
                    terms: list[cpsat.LinearExpr], bottleneck: cpsat.IntVar) -> None:
    """C5: the stage's time, and the bottleneck at least every stage's time."""
    model.add(stage_time_var == sum(terms))
    model.add(bottleneck >= stage_time_var)


def _add_stage(model: cpsat.CpModel, s: int, count: int, data: list[_OptionData],
               cap: int, remote: _Remote | None,
               bottleneck: cpsat.IntVar) -> tuple[list[_OptionVars], cpsat.IntVar]:
    """One stage's variables and constraints (C1-C5, and C4's and C5's remote terms, C7,
    C8 with remote offload)."""
    n_s = model.new_int_var(0, count, f"full_layers[{s}]")
    cells: list[_OptionVars] = []
    mem_terms: list[cpsat.LinearExpr] = []
    time_terms: list[cpsat.LinearExpr] = []
    movable: list[cpsat.LinearExpr] = []
    for o, option_data in enumerate(data):
        cell = _new_cell(model, s, o, n_s, count)
        cells.append(cell)
        mem_terms += _memory_terms(option_data, cell, s, count)
        if remote is not None:
            movable.append(_movable_term(option_data, cell, s))
        time_terms += _time_terms(option_data, cell, s)
    _add_one_option(model, cells)
    if remote is not None:
        mem_terms += [-remote.sent[s], remote.held[s]]
    _add_memory_cap(model, mem_terms, cap)
    stage_time_var = model.new_int_var(0, MAX_COEFFICIENT, f"stage_time[{s}]")
    if remote is not None:
        _add_movable_bound(model, remote, s, movable)
        time_terms += _remote_time_terms(model, remote, s)
    _add_stage_time(model, stage_time_var, time_terms, bottleneck)
    model.add_hint(cells[0].use, 1)
    return cells, stage_time_var


def choose_stage_policies(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                          cluster: ClusterSpec, options: list[PolicyOption],
                          config: cpsat.SolverConfig, *, remote: bool = False
                          ) -> PolicyResult | None:
    """Per-stage policies that fit every stage with the fastest bottleneck, or None when no
    combination fits (C1-C5 above; with `remote`, remote activation offload too, C6-C8).
    `parallel` carries no remote offload: the option ledgers are each stage's own."""
    layers = [len(layout.layers) for layout in pipeline_layout(spec, parallel)]
    # The options' ledgers share their ranks' states (one mesh) and many activations.
    memo = LedgerMemo(spec=spec, training=training)
    data = _option_data(spec, training, parallel, cluster, options, memo)
    model = cpsat.CpModel()
    cap = capacity_bytes(cluster.capacity_bytes)
    bottleneck = model.new_int_var(0, MAX_COEFFICIENT, "bottleneck")
    offload = None
    if remote and len(layers) > 1:
        rates = _remote_rates(spec, training, _uniform(parallel, options[0], 0), cluster,
                              data[0].ledgers[0])
        offload = _new_remote(model, rates, len(layers), cap)
    stages = [_add_stage(model, s, count, data, cap, offload, bottleneck)
              for s, count in enumerate(layers)]
    model.minimize(BOTTLENECK_WEIGHT * bottleneck + sum(t for _, t in stages))
    outcome = cpsat.solve(model, config)
    if not outcome.has_solution:
        return None
    solver = outcome.solver
    policies = []
    for cells, _ in stages:
        o = next(o for o, cell in enumerate(cells) if solver.value(cell.use))
        policies.append(options[o].policy(int(solver.value(cells[o].full))))
    moved = offload is not None and any(solver.value(v) > 0 for v in offload.sent)
    chosen = parallel.model_copy(update={"stage_policies": tuple(policies),
                                         "remote_activation_offload": moved})
    repaired = _repair(spec, training, chosen, cluster, layers, memo)
    if repaired is None:
        return None
    return PolicyResult(parallel=repaired, status=outcome.status,
                        bottleneck_s=seconds(solver.value(bottleneck)))


def _per_quantum(seconds_per_byte: float) -> int:
    """Time quanta per memory quantum, rounded up (a cost is never understated)."""
    return math.ceil(seconds_per_byte * MEMORY_QUANTUM_BYTES / TIME_QUANTUM_S)


def _repair(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
            cluster: ClusterSpec, layers: list[int],
            memo: LedgerMemo | None = None) -> ParallelConfig | None:
    """Add fully recomputed layers on stages the exact ledger still finds over capacity."""
    for _ in range(sum(layers) + 1):
        ledger = memory_ledger(spec, training, parallel, cluster, memo=memo)
        over = [s.stage for s in ledger.stages if s.total_bytes > ledger.capacity_bytes]
        if not over:
            return parallel
        policies = list(parallel.stage_policies or ())
        changed = False
        for s in over:
            policy = policies[s]
            current = policy.recompute.full_layers if isinstance(policy.recompute, FullLayers) \
                else (layers[s] if policy.recompute == RecomputeMode.FULL else 0)
            if current >= layers[s]:
                continue
            others = policy.recompute.others if isinstance(policy.recompute, FullLayers) else (
                "selective" if policy.recompute == RecomputeMode.SELECTIVE else "none")
            policies[s] = policy.model_copy(update={"recompute": FullLayers(
                full_layers=current + 1, others=others)})
            changed = True
        if not changed:
            return None
        parallel = parallel.model_copy(update={"stage_policies": tuple(policies)})
    return None


__all__ = [
    "ACTIVATION_OFFLOAD_SHARE",
    "BOTTLENECK_WEIGHT",
    "PolicyOption",
    "PolicyResult",
    "broad_selective_modules",
    "choose_stage_policies",
    "max_offload_share",
    "policy_options",
]
