"""Pipeline schedules: closed forms, generators, a discrete-event simulator and metrics.

Owns: everything about the order and timing of F / B / W ops across pipeline ranks.
Must not: import the solver or the service, or do I/O.
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
from models.pipeline.validation import validate_schedule

__all__ = [
    "ClosedForm",
    "closed_form",
    "closed_form_bubble",
    "closed_form_makespan",
    "peak_in_flight",
    "peak_in_flight_chunks",
    "peak_in_flight_until_b",
    "peak_in_flight_until_b_chunks",
    "validate_schedule",
]
