"""Pipeline schedules: one record per schedule, closed forms, generators, a discrete-event
simulator and metrics.

Owns: everything about the order and timing of F / B / W ops across pipeline ranks, and the
registry (`schedule_traits`) that every other layer consults instead of a schedule's name.
Must not: import the solver or the service, or do I/O.

Typical use::

    program = generate_program(PipelineSchedule.ZB_H1, num_stages=4, num_micro_batches=8)
    result = simulate(program, OpDurations.uniform(forward_s=1.0, backward_input_s=1.0,
                                                   backward_weight_s=1.0))
    result.makespan_s, result.peak_in_flight
"""

from models.core.pipeline.closed_forms import (
    ClosedForm,
    closed_form,
    closed_form_bubble,
    closed_form_makespan,
    peak_in_flight,
    peak_in_flight_chunks,
    peak_in_flight_until_b,
    peak_in_flight_until_b_chunks,
    rank_peaks_in_flight_chunks,
)
from models.core.pipeline.costs import ActivationSizes, OpDurations
from models.core.pipeline.in_flight import InFlightProfile, in_flight_profile
from models.core.pipeline.metrics import SimulationResult, Timeline, TimelineEntry, simulate
from models.core.pipeline.ops import OpKind, PipelineProgram, Placement, ProgramBuilder
from models.core.pipeline.registry import (
    SCHEDULES,
    generate_program,
    schedule_traits,
    shared_program,
    validate_schedule,
)
from models.core.pipeline.simulator import (
    CompiledProgram,
    ScheduleDeadlockError,
    compile_program,
    simulate_makespan,
)
from models.core.pipeline.traits import FrameworkNames, ScheduleTraits, StagePlacement

__all__ = [
    "SCHEDULES",
    "ActivationSizes",
    "ClosedForm",
    "CompiledProgram",
    "FrameworkNames",
    "InFlightProfile",
    "OpDurations",
    "OpKind",
    "PipelineProgram",
    "Placement",
    "ProgramBuilder",
    "ScheduleDeadlockError",
    "ScheduleTraits",
    "SimulationResult",
    "StagePlacement",
    "Timeline",
    "TimelineEntry",
    "closed_form",
    "closed_form_bubble",
    "closed_form_makespan",
    "compile_program",
    "generate_program",
    "in_flight_profile",
    "peak_in_flight",
    "peak_in_flight_chunks",
    "rank_peaks_in_flight_chunks",
    "peak_in_flight_until_b",
    "peak_in_flight_until_b_chunks",
    "schedule_traits",
    "simulate",
    "shared_program",
    "simulate_makespan",
    "validate_schedule",
]
