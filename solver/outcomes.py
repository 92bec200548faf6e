"""What the evaluation of one mesh candidate gives: its best plan, a proof that it cannot beat
a cutoff, or why it has no plan.

Owns: `ScoredPlan`, `Dominated`, `Rejection` and `Unfit` (a memory rejection whose bytes are
read only where it is reported). Must not: evaluate, bound or order candidates
(`solver.candidate_eval`, `solver.planner`).
"""

from dataclasses import dataclass

from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.core.memory import MemoryLedger
from models.core.step_time import StepEstimate
from models.errors import InvalidSpecError
from solver.candidate import PlanCandidate
from solver.space import MeshCandidate


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
    """GPU bytes of the binding stage over the capacity (negative where they fit)."""
    host_over_bytes: int = 0
    """Host bytes of the fullest rank over its share of the node's host memory (0 where
    they fit)."""

    @property
    def excess_bytes(self) -> int:
        """The larger of the GPU and host excesses: how far the candidate is from a plan."""
        return max(self.over_bytes, self.host_over_bytes)

    @classmethod
    def of_ledger(cls, candidate: MeshCandidate, ledger: MemoryLedger,
                  reason: str) -> "Rejection":
        """The rejection of a configuration whose ledger does not fit (GPU or host)."""
        return cls(candidate=candidate, stage=ledger.binding_stage, reason=reason,
                   over_bytes=ledger.peak_bytes - ledger.capacity_bytes,
                   host_over_bytes=max(0, ledger.host_peak_bytes
                                       - ledger.host_capacity_per_gpu_bytes))


@dataclass(frozen=True, slots=True, kw_only=True)
class Dominated:
    """A candidate whose every fitting plan is proven no faster than the caller's cutoff
    (its exact step time was not needed)."""

    candidate: MeshCandidate
    bound_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Unfit:
    """A candidate none of whose probed configurations fits, before its `Rejection` is made:
    the rejection reads the full ledger of the last configuration tried (which stage binds,
    by how many bytes), wanted only where the rejection is reported."""

    cand: PlanCandidate
    parallel: ParallelConfig
    """The last configuration tried (the most frugal of the highest ZeRO stage probed)."""
    max_zero: int
    """The highest ZeRO stage allowed."""

    def rejection(self) -> Rejection:
        """The rejection, as the evaluation states it (a ledger the cost model refuses
        gives its reason instead)."""
        try:
            ledger = self.cand.ledger(self.parallel)
        except InvalidSpecError as exc:
            return Rejection(candidate=self.cand.mesh, reason=exc.detail)
        return Rejection.of_ledger(self.cand.mesh, ledger,
                                   f"does not fit even with ZeRO-{self.max_zero} and the most "
                                   "frugal activation policy allowed")


__all__ = ["Dominated", "Rejection", "ScoredPlan", "Unfit"]
