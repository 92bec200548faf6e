"""Search over the cost model: candidate space, CP-SAT formulations, explanations,
the pipeline-schedule optimizer, MoE expert placement and exporters.

Must not: do I/O or import `service`.
"""

from solver.evaluate import memory_report
from solver.export import export_all

__all__ = ["export_all", "memory_report"]
