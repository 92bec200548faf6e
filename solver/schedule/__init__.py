"""The pipeline-schedule optimizer: minimum makespan under a per-rank memory limit (CP-SAT).

Owns: `optimize_schedule` and `ScheduleOptimum`; the formulation is in `formulation.py`,
the integer time scale in `quantize.py`. Must not: do I/O or import `service`.
"""

from solver.schedule.optimizer import ScheduleOptimum, optimize_schedule

__all__ = ["ScheduleOptimum", "optimize_schedule"]
