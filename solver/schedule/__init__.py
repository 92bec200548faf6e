"""The pipeline-schedule optimizer: minimum makespan under a per-rank memory limit (CP-SAT).

Owns: `optimize_schedule`, `ScheduleOptimum` and `optimize_request` (the API entry point);
the formulation is in `formulation.py`, the integer time scale in `solver/scaling.py`.
Must not: do I/O or import `service`.
"""

from solver.schedule.optimizer import ScheduleOptimum, optimize_schedule
from solver.schedule.requests import optimize_request

__all__ = ["ScheduleOptimum", "optimize_request", "optimize_schedule"]
