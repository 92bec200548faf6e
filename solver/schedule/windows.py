"""The large-instance restriction: keep the steady state, reorder warm-up and cool-down.

Owns: `steady_state_ops`. Must not: claim optimality; a restricted model only yields
feasible schedules, and the optimizer pairs them with the analytic lower bound, which holds
for the unrestricted problem.

The ops of micro-batches outside the first and last `window` micro-batches of their pipe
(the steady state) are fixed at the start times of the hint. The hint satisfies every
constraint, so the restricted model is feasible, its size no longer grows with m (fixed
intervals are folded away by presolve), and CP-SAT's search is spent where the bubbles
are: the warm-up and cool-down ops, which stay free.
"""

import logging

from solver.schedule.instance import ScheduleInstance

logger = logging.getLogger(__name__)


def steady_state_ops(inst: ScheduleInstance, *, window: int) -> list[int]:
    """Ops of the micro-batches more than `window` away from both ends of their pipe."""
    middle: set[int] = set()
    for members in inst.pipe_micro_batches:
        middle.update(members[window:len(members) - window])
    fixed = [o for o in range(inst.num_ops) if inst.micro_batch[o] in middle]
    logger.debug("windowed model: %d of %d ops fixed", len(fixed), inst.num_ops)
    return fixed


__all__ = ["steady_state_ops"]
