"""Pipeline schedules: closed forms, generators, a discrete-event simulator and metrics.

Owns: everything about the order and timing of F / B / W ops across pipeline ranks.
Must not: import the solver or the service, or do I/O.

Typical use::

    program = generate_program(PipelineSchedule.ZB_H1, num_stages=4, num_micro_batches=8)
    result = simulate(program, OpDurations.uniform(forward_s=1.0, backward_input_s=1.0,
                                                   backward_weight_s=1.0))
    result.makespan_s, result.peak_in_flight
"""

from models.pipeline.closed_forms import (
    ClosedForm,
    closed_form,
    closed_form_bubble,
    closed_form_makespan,
    peak_in_flight,
    peak_in_flight_chunks,
    peak_in_flight_until_b,
    peak_in_flight_until_b_chunks,
)
from models.pipeline.costs import ActivationSizes, OpDurations
from models.pipeline.generators import generate_program
from models.pipeline.metrics import SimulationResult, Timeline, TimelineEntry, simulate
from models.pipeline.ops import OpKind, PipelineProgram, Placement, ProgramBuilder
from models.pipeline.simulator import (
    CompiledProgram,
    ScheduleDeadlockError,
    compile_program,
    simulate_makespan,
)
from models.pipeline.validation import validate_schedule

__all__ = [
    "ActivationSizes",
    "ClosedForm",
    "CompiledProgram",
    "OpDurations",
    "OpKind",
    "PipelineProgram",
    "Placement",
    "ProgramBuilder",
    "ScheduleDeadlockError",
    "SimulationResult",
    "Timeline",
    "TimelineEntry",
    "closed_form",
    "closed_form_bubble",
    "closed_form_makespan",
    "compile_program",
    "generate_program",
    "peak_in_flight",
    "peak_in_flight_chunks",
    "peak_in_flight_until_b",
    "peak_in_flight_until_b_chunks",
    "simulate",
    "simulate_makespan",
    "validate_schedule",
]
