"""Search over the cost model: candidate space, CP-SAT formulations, explanations,
the pipeline-schedule optimizer, MoE expert placement and exporters.

Must not: do I/O or import `service`.
"""

from solver.api import evaluate, plan
from solver.export import export_all
from solver.memory_lab import memory_report

__all__ = ["evaluate", "export_all", "memory_report", "plan"]
