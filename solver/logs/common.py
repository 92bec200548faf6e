"""What every training-log parser shares: a timed step, the warm-up rule, the median step
time, the architecture check against the request's model, and refusals naming the field.

Owns: `TimedStep`, `LogRefused`, `steady_steps` (which logged steps time the run) and
`check_architecture`. Must not: know any framework's line format (`megatron.py`,
`torchtitan.py`).
"""

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from models.errors import InvalidSpecError

WARMUP_ITERATIONS = 2
"""Iterations always treated as warm-up: the first steps run the allocator's growth, NCCL
communicator set-up, kernel autotuning and any compilation, so their times are not the
steady state (Megatron-LM prints the first iteration on its own line to show this
initialisation overhead: megatron/training/training.py, training_log). The first logged line
is dropped too when it covers them (it averages from iteration 1)."""

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
"""Terminal colour codes (torchtitan colours its step lines)."""


class LogRefused(InvalidSpecError):
    """A training log that lacks what a calibration run needs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TimedStep:
    """One logged timing line."""

    iteration: int
    step_time_s: float
    tflops_per_gpu: float | None = None
    peak_memory_bytes: int | None = None


def steady_steps(steps: Sequence[TimedStep], *, skip_steps: int | None, where: str,
                 hint: str = "") -> tuple[list[TimedStep], list[TimedStep]]:
    """(used, dropped as warm-up): drop the first logged line and every line at or before
    `skip_steps` (default `WARMUP_ITERATIONS`).

    Raises:
        LogRefused: no timing line (`hint` says where the framework prints them), the same
            step logged twice (a restarted run), or none left after the warm-up.
    """
    if not steps:
        raise LogRefused(f"{where}: the log has no per-step timing lines{hint}", field=where)
    iterations = [s.iteration for s in steps]
    if len(set(iterations)) != len(iterations):
        raise LogRefused(f"{where}: some steps are logged more than once (a restarted run?): "
                         "give the log of one uninterrupted run", field=where)
    limit = WARMUP_ITERATIONS if skip_steps is None else skip_steps
    ordered = sorted(steps, key=lambda s: s.iteration)
    dropped = [s for k, s in enumerate(ordered) if k == 0 or s.iteration <= limit]
    used = [s for k, s in enumerate(ordered) if not (k == 0 or s.iteration <= limit)]
    if not used:
        raise LogRefused(
            f"{where}: every timing line ({len(ordered)}, up to iteration "
            f"{ordered[-1].iteration}) falls in the warm-up (the first logged line and "
            f"iterations up to {limit}); give a log that runs past the warm-up, or lower "
            "skip_steps", field=where)
    return used, dropped


def single_run(text: str, marker: re.Pattern[str], *, where: str) -> None:
    """Refuse a log that printed its configuration (`marker`) more than once (several runs,
    or a restart whose configuration may differ)."""
    count = len(marker.findall(text))
    if count > 1:
        raise LogRefused(f"{where}: the log prints its configuration {count} times (several "
                         "runs or a restart): give the log of one run", field=where)


def median_step_time(steps: Sequence[TimedStep]) -> float:
    """Median step time of the used lines (robust to a checkpoint or evaluation spike)."""
    return float(statistics.median(s.step_time_s for s in steps))


def check_architecture(spec: ModelSpec, printed: Mapping[str, int | None], *, where: str
                       ) -> None:
    """Refuse a log whose printed architecture differs from the request's model.

    `printed` maps ModelSpec field names to what the log printed (None: not printed).
    """
    for name, value in printed.items():
        if value is None:
            continue
        expected = getattr(spec, name)
        if expected != value:
            raise LogRefused(
                f"{where}: the log's {name} is {value} but the model '{spec.name}' has "
                f"{expected}: the log is of another model; give the model that ran",
                field=where)


__all__ = ["ANSI_ESCAPE", "WARMUP_ITERATIONS", "LogRefused", "TimedStep",
           "check_architecture", "median_step_time", "single_run", "steady_steps"]
