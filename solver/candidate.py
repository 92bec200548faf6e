"""One mesh candidate under one request, with what its exact evaluation derives once.

Owns: `PlanCandidate`, made once per evaluation of a mesh candidate under one model,
recipe, cluster, constraints and policy caps (a framework variant's). It holds the pieces
every probe of that evaluation shares: the ladder's rungs, the configurations of the
(storage, policy) settings probed, the `models.core.step_time.WorkTable` of each timing ZeRO
stage, the bounds of the most frugal policies and the rank-ledger memo. They are kept on
the object, never in a table keyed by a hand-picked tuple of its fields: two candidates
that differ in any field are two objects, so no derived piece of one can serve the other.

Must not: choose between plans or order candidates (`solver.candidate_eval`,
`solver.planner`).
"""

from dataclasses import dataclass, field

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.requests import Constraints
from api_schemas.training import TrainingSpec
from models.core.ledger_memo import LedgerMemo
from models.core.memory import MemoryLedger, fits_memory, memory_ledger
from models.core.step_time import WorkTable, work_table
from solver.ladder import ALL_POLICIES, Policy, PolicyCaps, Storage, frugal, rungs, with_policy
from solver.space import MeshCandidate


@dataclass(frozen=True, slots=True, eq=False)
class PlanCandidate:
    """A mesh candidate with its request's inputs and the pieces its evaluation derives.

    Compared and hashed by identity: a cache keyed by the object can only return what was
    derived from this very candidate. Build one with `PlanCandidate.of`."""

    spec: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    mesh: MeshCandidate
    constraints: Constraints
    caps: PolicyCaps
    memo: LedgerMemo
    """Rank-ledger pieces its probes share (and other candidates of the same recipe)."""
    pinned: bool
    """The request pins the activation policy (no ladder is climbed)."""
    rungs: tuple[Policy, ...]
    """The policies tried at each ZeRO stage, cheapest first (`solver.ladder.rungs`)."""
    _rung_configs: dict[tuple[Storage, int], ParallelConfig] = field(
        default_factory=dict, init=False, repr=False)
    _frugal_configs: dict[tuple[Storage, int | None], ParallelConfig] = field(
        default_factory=dict, init=False, repr=False)
    _tables: dict[int, WorkTable] = field(default_factory=dict, init=False, repr=False)
    _frugal_bounds: dict[tuple[int, int], float] = field(
        default_factory=dict, init=False, repr=False)
    # The derived pieces are not init fields: `dataclasses.replace` of a candidate (a new
    # object with a changed field) starts without them.

    @classmethod
    def of(cls, spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
           mesh: MeshCandidate, constraints: Constraints, caps: PolicyCaps | None = None,
           memo: LedgerMemo | None = None) -> "PlanCandidate":
        """The candidate of `mesh` under these inputs; `memo` is used where it serves the
        model and recipe (otherwise the candidate gets its own)."""
        caps = caps or ALL_POLICIES
        if memo is None or not memo.serves(spec, training):
            memo = LedgerMemo(spec=spec, training=training)
        pinned = constraints.pinned_recompute is not None
        return cls(spec=spec, training=training, cluster=cluster, mesh=mesh,
                   constraints=constraints, caps=caps, memo=memo, pinned=pinned,
                   rungs=tuple(rungs(spec, constraints, pinned, caps)))

    @staticmethod
    def _storage(zero: int | Storage) -> Storage:
        return zero if isinstance(zero, Storage) else Storage(zero=zero)

    def config(self, zero: int | Storage, policy: Policy) -> ParallelConfig:
        """The configuration at a ZeRO stage (or storage) under any policy (not kept)."""
        return with_policy(self.mesh, zero, policy, self.constraints)

    def rung(self, zero: int | Storage, index: int) -> ParallelConfig:
        """The configuration of the ladder's rung `index` at a ZeRO stage or storage."""
        storage = self._storage(zero)
        found = self._rung_configs.get((storage, index))
        if found is None:
            found = self._rung_configs[storage, index] = self.config(storage, self.rungs[index])
        return found

    def frugal(self, zero: int | Storage, full_layers: int | None = None) -> ParallelConfig:
        """The configuration of the most frugal policy the caps allow (with full
        recomputation of the first `full_layers` layers of each stage where given)."""
        storage = self._storage(zero)
        found = self._frugal_configs.get((storage, full_layers))
        if found is None:
            found = self._frugal_configs[storage, full_layers] = self.config(
                storage, frugal(self.spec, self.constraints, full_layers, self.caps))
        return found

    def fits(self, parallel: ParallelConfig) -> bool:
        """Whether a configuration of this candidate fits in memory (a probe)."""
        return fits_memory(self.spec, self.training, parallel, self.cluster, memo=self.memo)

    def ledger(self, parallel: ParallelConfig) -> MemoryLedger:
        """The full memory ledger of a configuration of this candidate."""
        return memory_ledger(self.spec, self.training, parallel, self.cluster, memo=self.memo)

    def work_table(self, zero: int) -> WorkTable:
        """The candidate's `WorkTable` at a ZeRO stage's timing (0 stands for 0-2, whose
        ops time alike; 3), built when first asked for."""
        timing = 3 if zero == 3 else 0
        table = self._tables.get(timing)
        if table is None:
            table = self._tables[timing] = work_table(
                self.spec, self.training, self.config(timing, {}), self.cluster)
        return table

    def bound_s(self, parallel: ParallelConfig, *, more_full_layers: bool = False) -> float:
        """A lower bound of the step time of a plan of the candidate: its
        `models.core.step_time.policy_work_bound_s` (a makespan bound) plus the wait for the
        slowest GPU every policy of the mesh pays beside the makespan (`WorkTable.wait_s`)."""
        table = self.work_table(parallel.zero_stage)
        return table.bound_s(parallel, more_full_layers=more_full_layers) + table.wait_s

    def plain_bound_s(self, zero: int) -> float:
        """The least `bound_s` of any configuration at ZeRO stage `zero`: the busiest rank's
        work without a policy plus the wait (a policy only adds recomputation to a rank's
        work, `WorkTable.bound_s`)."""
        table = self.work_table(zero)
        return max(table.busy_s) + table.wait_s

    def frugal_bound_s(self, zero: int, full_layers: int) -> float:
        """`bound_s(..., more_full_layers=True)` at ZeRO stage `zero` under the most frugal
        policy with full recomputation of the first `full_layers` layers (the bound reads
        only the policy and the timing stage, so the stages of one timing share it)."""
        timing = 3 if zero == 3 else 0
        found = self._frugal_bounds.get((timing, full_layers))
        if found is None:
            found = self._frugal_bounds[timing, full_layers] = self.bound_s(
                self.frugal(zero, full_layers), more_full_layers=True)
        return found


__all__ = ["PlanCandidate"]
