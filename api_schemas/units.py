"""Unit-carrying annotated types shared by every request and response.

Owns: the one internal unit per dimension (bytes as integers, seconds, FLOP, bytes/s,
FLOP/s, fractions in [0, 1]) and the documented physical ranges of inputs (bandwidths,
FLOP/s, durations, search time limits). Must not: convert units or hold logic beyond range
checks; GiB appears only in human-readable text produced elsewhere.
"""

from typing import Annotated

from pydantic import AfterValidator, Field

MAX_BANDWIDTH_BYTES_PER_S = 1e15
"""Largest bandwidth an input may give: 1 PB/s, over 100x any HBM or link shipping today."""
MAX_FLOP_PER_S = 1e18
"""Largest per-GPU FLOP/s an input may give: 1 EFLOP/s, about 50x the densest FP4 peak."""
MIN_DURATION_S = 1e-12
"""Smallest non-zero duration an input may give (1 ps); smaller ones (denormals) are refused."""
MAX_DURATION_S = 1e6
"""Largest duration an input may give (about 11.6 days)."""
MIN_TIME_LIMIT_S = 0.1
"""Shortest search time limit a request may ask for."""
MAX_REQUEST_TIME_LIMIT_S = 600.0
"""Longest search time limit a request may ask for (the server clamps it further)."""


def _zero_or_physical(value: float) -> float:
    if value != 0.0 and value < MIN_DURATION_S:
        raise ValueError(f"a duration is 0 or at least {MIN_DURATION_S:g} s (got {value!r}); "
                         "give it in seconds")
    return value


Bytes = Annotated[int, Field(ge=0, description="A size in bytes (integer).")]
Seconds = Annotated[float, Field(ge=0.0, description="A duration in seconds.")]
Flop = Annotated[float, Field(ge=0.0, description="A count of floating-point operations.")]
FlopPerSecond = Annotated[float, Field(ge=0.0, description="A rate in FLOP per second.")]
BytesPerSecond = Annotated[float, Field(ge=0.0, description="A bandwidth in bytes per second.")]
Fraction = Annotated[float, Field(ge=0.0, le=1.0, description="A fraction in [0, 1].")]
PositiveInt = Annotated[int, Field(ge=1)]
PositiveBytes = Annotated[int, Field(ge=1, description="A non-zero size in bytes (integer).")]
PositiveBytesPerSecond = Annotated[float, Field(
    ge=1.0, le=MAX_BANDWIDTH_BYTES_PER_S,
    description="A non-zero bandwidth in bytes per second (1 B/s to 1e15 B/s).")]
PositiveFlopPerSecond = Annotated[float, Field(
    ge=1.0, le=MAX_FLOP_PER_S,
    description="A non-zero rate in FLOP per second (1 to 1e18 FLOP/s).")]
DurationSeconds = Annotated[float, Field(
    ge=0.0, le=MAX_DURATION_S,
    description="An input duration in seconds: 0, or 1e-12 s to 1e6 s."),
    AfterValidator(_zero_or_physical)]
PositiveDurationSeconds = Annotated[float, Field(
    ge=MIN_DURATION_S, le=MAX_DURATION_S,
    description="A non-zero input duration in seconds: 1e-12 s to 1e6 s.")]
TimeLimitSeconds = Annotated[float, Field(
    ge=MIN_TIME_LIMIT_S, le=MAX_REQUEST_TIME_LIMIT_S,
    description="A search time limit in seconds (0.1 s to 600 s).")]
NonNegativeInt = Annotated[int, Field(ge=0)]

GIB = 2**30

__all__ = [
    "GIB",
    "MAX_BANDWIDTH_BYTES_PER_S",
    "MAX_DURATION_S",
    "MAX_FLOP_PER_S",
    "MAX_REQUEST_TIME_LIMIT_S",
    "MIN_DURATION_S",
    "MIN_TIME_LIMIT_S",
    "Bytes",
    "PositiveDurationSeconds",
    "BytesPerSecond",
    "DurationSeconds",
    "Flop",
    "FlopPerSecond",
    "Fraction",
    "NonNegativeInt",
    "PositiveBytes",
    "PositiveBytesPerSecond",
    "PositiveFlopPerSecond",
    "PositiveInt",
    "Seconds",
    "TimeLimitSeconds",
]
