"""What one pipeline schedule is, as a record: the traits every layer reads instead of
branching on the schedule's name.

Owns: `ScheduleTraits` (placement of virtual stages, chunks per rank, weight copies, split
backward, overlapped F&B pairs, the generator, the parameter rules, the closed forms where
exact, the names each framework exporter uses), `StagePlacement`, `FrameworkNames` and
`require`, the helper every parameter rule raises through. Must not: list the schedules
(that is `registry.py`) or build op lists (each record points at its generator).

Placement (reference Sec. 1.1): linear, stage s on rank s; looped, chunk c of rank d is
stage c p + d (Megatron-LM arXiv:2104.04473 Sec. 2.2.2); V shape, rank d holds stages d and
2p-1-d (Zero Bubble arXiv:2401.10241 Sec. 6); bidirectional, two pipes of p stages in
opposite directions, rank r holding stage r of one and stage p-1-r of the other, with a
second copy of the weights (Chimera arXiv:2107.06925; DeepSeek-V3 arXiv:2412.19437
Sec. 3.2.1).
"""

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import NoReturn

from api_schemas.parallel import PipelineSchedule
from models.core.pipeline.ops import PipelineProgram
from models.errors import InvalidSpecError


class StagePlacement(StrEnum):
    """Where the virtual stages of a schedule run."""

    LINEAR = "linear"
    LOOPED = "looped"
    V_SHAPE = "v"
    BIDIRECTIONAL = "bidirectional"


Generator = Callable[[int, int, int, int | None], PipelineProgram]
"""(p, m, v, N) -> the per-rank op lists; parameters already validated."""
Rule = Callable[[int, int, int, int | None], None]
"""(p, m, v, N) -> None, or InvalidSpecError naming the field and the fix."""
PeakForm = Callable[[int, int, int, int, int | None], int]
"""(p, m, v, rank d, N) -> peak micro-batch x chunk activations held (closed form)."""
BubbleForm = Callable[[int, int, float, float, float, float], tuple[float, float] | None]
"""(p, m, F, B, W, F&B) -> (global idle, span bubble) per rank, or None where not exact."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameworkNames:
    """How the framework exporters name (or cannot run) the schedule."""

    megatron_native: bool
    """Megatron-LM core_v0.14.0 runs it with `--pipeline-model-parallel-size` (and
    `--num-layers-per-virtual-pipeline-stage` when looped)."""
    megatron_note: str
    """Why and how the export falls back to non-interleaved 1F1B (empty when native)."""
    torchtitan: str
    """torchtitan `pipeline_parallel_schedule` key (torch `get_schedule_class`)."""
    torchtitan_note: str
    """A comment on that key (placement, version needed, nearest class)."""
    torchtitan_fallback: str
    """Why the exported key is not the planned schedule (empty when torch runs it)."""
    deepspeed_native: bool
    """DeepSpeed's PipelineEngine (its 1F1B train schedule) runs it as planned."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleTraits:
    """One schedule's facts; every consumer reads these instead of comparing names."""

    schedule: PipelineSchedule
    placement: StagePlacement
    fixed_chunks: int | None
    """Chunks per rank the schedule places (the API's `num_chunks`); None: the request's
    `vpp`, at least 2 (looped). Bidirectional schedules count 1: their second stage per
    rank is a copy of another rank's weights (`weight_copies`)."""
    weight_copies: int
    """Copies of the model's weights across the pipeline (2 for bidirectional)."""
    split_backward: bool
    """B (input gradient) and W (weight gradient) run as separate ops."""
    overlapped_pairs: bool
    """An F and a B of different micro-batches run as one overlapped unit, which hides the
    expert all-to-all of one behind the other's compute (DualPipe's F&B)."""
    takes_group_size: bool
    """Accepts an interleaving micro-batch group size N."""
    generator: Generator
    rule: Rule
    peak_form: PeakForm | None
    """Exact peak until W, or None (then the simulated order is counted)."""
    peak_until_b_form: PeakForm | None
    """Exact peak until B where W is deferred past B; None: equal to the peak until W."""
    bubble_form: BubbleForm | None
    """Exact (idle, span bubble) with uniform costs and zero latency, or None."""
    exports: FrameworkNames
    source: str
    forwards_before_backwards: bool = False
    """Every stage runs all its forwards before its first backward (GPipe's flush), so the
    head's chunk holds every micro-batch's activations at once. Elsewhere the last virtual
    stage may start a micro-batch's backward right after its forward, and a lower bound
    counts one micro-batch in flight there (`solver.bounds`)."""

    @property
    def num_pipes(self) -> int:
        """Directions micro-batches flow in (2 for bidirectional placements)."""
        return 2 if self.placement == StagePlacement.BIDIRECTIONAL else 1

    def num_chunks(self, vpp: int) -> int:
        """The `num_chunks` of the simulator for a configuration's `vpp`."""
        return self.fixed_chunks if self.fixed_chunks is not None else vpp

    def layout_chunks(self, vpp: int) -> int:
        """Model chunks whose weights one rank holds (bidirectional: one per direction)."""
        return self.num_chunks(vpp) * self.weight_copies

    def num_virtual_stages(self, num_ranks: int, vpp: int) -> int:
        """Virtual stages of one pipe in layer order: p, p v (looped) or 2p (V shape)."""
        return num_ranks * self.num_chunks(vpp)

    def rank_of_stage(self, num_ranks: int, stage: int) -> int:
        """Rank that runs virtual stage `stage` of the first pipe."""
        p = num_ranks
        if self.placement == StagePlacement.V_SHAPE:
            return stage if stage < p else 2 * p - 1 - stage
        return stage % p

    def micro_batches_per_chunk(self, num_micro_batches: int) -> int:
        """Micro-batches that cross one chunk of a rank per step (half per pipe when
        bidirectional)."""
        return num_micro_batches // self.num_pipes


def require(ok: bool, field: str, value: int, fix: str) -> None:
    """Raise InvalidSpecError naming `field`, its value and the fix unless `ok`."""
    if not ok:
        refuse(field, value, fix)


def refuse(field: str, value: int, fix: str) -> NoReturn:
    """Raise InvalidSpecError naming `field`, its value and the fix (`require` of a rule
    already found broken: the hot rules test first, so a kept rule makes no call and builds
    no message)."""
    raise InvalidSpecError(f"{field}={value} is not allowed: {fix}", field=field)


def no_rule(_p: int, _m: int, _v: int, _n: int | None) -> None:
    """A schedule without parameter rules beyond the common ones."""


__all__ = [
    "BubbleForm",
    "FrameworkNames",
    "Generator",
    "PeakForm",
    "Rule",
    "ScheduleTraits",
    "StagePlacement",
    "no_rule",
    "refuse",
    "require",
]
