"""The analytic cost model of LLM training: pure functions from specs to numbers.

Owns: parameters, FLOPs, memory, communication, pipeline schedules, MoE routing costs,
context parallelism, the device mesh, the hardware and architecture catalog, and Hugging Face
config ingestion. Must not: do I/O beyond reading its own packaged data files, read the
environment or the clock, or import `solver` or `service`.
"""

from models.errors import InfeasibleError, InvalidSpecError, PlannerError

__all__ = ["InfeasibleError", "InvalidSpecError", "PlannerError"]
