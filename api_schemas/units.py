"""Unit-carrying annotated types shared by every request and response.

Owns: the one internal unit per dimension (bytes as integers, seconds, FLOP, bytes/s,
FLOP/s, fractions in [0, 1]). Must not: convert units or hold any logic; GiB appears only
in human-readable text produced elsewhere.
"""

from typing import Annotated

from pydantic import Field

Bytes = Annotated[int, Field(ge=0, description="A size in bytes (integer).")]
Seconds = Annotated[float, Field(ge=0.0, description="A duration in seconds.")]
Flop = Annotated[float, Field(ge=0.0, description="A count of floating-point operations.")]
FlopPerSecond = Annotated[float, Field(ge=0.0, description="A rate in FLOP per second.")]
BytesPerSecond = Annotated[float, Field(ge=0.0, description="A bandwidth in bytes per second.")]
Fraction = Annotated[float, Field(ge=0.0, le=1.0, description="A fraction in [0, 1].")]
PositiveInt = Annotated[int, Field(ge=1)]
PositiveBytes = Annotated[int, Field(ge=1, description="A non-zero size in bytes (integer).")]
PositiveBytesPerSecond = Annotated[float, Field(
    ge=1.0, description="A non-zero bandwidth in bytes per second (at least 1 B/s).")]
PositiveFlopPerSecond = Annotated[float, Field(
    ge=1.0, description="A non-zero rate in FLOP per second (at least 1 FLOP/s).")]
NonNegativeInt = Annotated[int, Field(ge=0)]

GIB = 2**30

__all__ = [
    "GIB",
    "Bytes",
    "BytesPerSecond",
    "Flop",
    "FlopPerSecond",
    "Fraction",
    "NonNegativeInt",
    "PositiveBytes",
    "PositiveBytesPerSecond",
    "PositiveFlopPerSecond",
    "PositiveInt",
    "Seconds",
]
