"""Search over the cost model: candidate space, CP-SAT formulations, explanations,
the pipeline-schedule optimizer, MoE expert placement and exporters.

Must not: do I/O or import `service`.
"""

from typing import Any

from solver.lazy_names import lazy_name

_ENTRY_POINTS = {"evaluate": "solver.api", "plan": "solver.api",
                 "export_all": "solver.export", "memory_report": "solver.memory_lab"}


def __getattr__(name: str) -> Any:
    """The entry points, imported on first use: importing a light module of this package
    (`solver.cancel`, `solver.throughput_bound`) does not load OR-Tools."""
    return lazy_name(__name__, _ENTRY_POINTS, name)


__all__ = ["evaluate", "export_all", "memory_report", "plan"]
