"""The only module that imports OR-Tools: CP-SAT model creation, parameters and statuses.

Owns: `SolverConfig` (time limit, workers, seed, gap, logging), the mapping of CP-SAT
statuses to `SolveStatus`, and `solve()`, which runs a model under a config and returns the
statistics every caller reports, stopped early when the thread's cancellation token is set
(`solver/cancel.py`). Must not: build any domain model; formulations live in the modules that
own their problem and receive `CpModel` from here.
"""

import logging
import math
import time
from dataclasses import dataclass
from enum import StrEnum

from ortools.sat.python import cp_model

from solver import cancel

logger = logging.getLogger(__name__)

CpModel = cp_model.CpModel
IntVar = cp_model.IntVar
IntervalVar = cp_model.IntervalVar
LinearExpr = cp_model.LinearExpr
CpSolver = cp_model.CpSolver


class SolveStatus(StrEnum):
    """Outcome of a solve, independent of the OR-Tools enum values."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    UNKNOWN = "unknown"
    INVALID = "invalid"


_STATUS = {
    cp_model.OPTIMAL: SolveStatus.OPTIMAL,
    cp_model.FEASIBLE: SolveStatus.FEASIBLE,
    cp_model.INFEASIBLE: SolveStatus.INFEASIBLE,
    cp_model.UNKNOWN: SolveStatus.UNKNOWN,
    cp_model.MODEL_INVALID: SolveStatus.INVALID,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SolverConfig:
    """Parameters passed to CP-SAT; nothing is hard-coded elsewhere."""

    max_time_s: float = 10.0
    deterministic_time_limit: float | None = None
    """CP-SAT's own work measure (`max_deterministic_time`, roughly seconds of one core on a
    reference machine); with one worker, a solve bounded by it ends the same way however
    loaded the machine is. None: only the wall-clock limit applies."""
    num_workers: int = 2
    random_seed: int = 0
    relative_gap_limit: float = 0.0
    log_search_progress: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SolveOutcome:
    """Status and statistics of one CP-SAT run, plus the solver to read values from."""

    status: SolveStatus
    objective: float | None
    best_bound: float | None
    wall_time_s: float
    solver: cp_model.CpSolver

    @property
    def has_solution(self) -> bool:
        """True when a feasible assignment is available."""
        return self.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)

    @property
    def gap(self) -> float | None:
        """Relative gap |objective - bound| / max(1, |objective|); 0 when proven optimal."""
        if self.objective is None or self.best_bound is None:
            return None
        if self.status == SolveStatus.OPTIMAL:
            return 0.0
        return abs(self.objective - self.best_bound) / max(1.0, abs(self.objective))


def solve(model: cp_model.CpModel, config: SolverConfig) -> SolveOutcome:
    """Solve `model` under `config` and return its status and statistics.

    The search log, when requested, goes to this module's logger.

    Raises:
        Cancelled: this thread's cancellation token was set before or during the run (the
            run is stopped at once through CP-SAT's `stop_search`).
    """
    cancel.check()
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = max(0.001, float(config.max_time_s))
    if config.deterministic_time_limit is not None:
        params.max_deterministic_time = max(0.001, float(config.deterministic_time_limit))
    params.num_workers = max(1, int(config.num_workers))
    params.random_seed = int(config.random_seed)
    params.relative_gap_limit = float(config.relative_gap_limit)
    params.log_search_progress = bool(config.log_search_progress)
    if config.log_search_progress:
        params.log_to_stdout = False  # the log goes to the logger only, once
        solver.log_callback = logger.info
    started = time.perf_counter()
    with cancel.stopping(solver.stop_search):
        raw_status = solver.solve(model)
    cancel.check()
    wall = time.perf_counter() - started
    status = _STATUS.get(raw_status, SolveStatus.UNKNOWN)
    has_objective = model.has_objective() and status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)
    objective = solver.objective_value if has_objective else None
    bound = solver.best_objective_bound if has_objective else None
    if bound is not None and not math.isfinite(bound):
        bound = None
    return SolveOutcome(status=status, objective=objective, best_bound=bound,
                        wall_time_s=wall, solver=solver)


__all__ = [
    "CpModel",
    "CpSolver",
    "IntVar",
    "IntervalVar",
    "LinearExpr",
    "SolveOutcome",
    "SolveStatus",
    "SolverConfig",
    "solve",
]
