"""Shared vocabulary of the mesh rules: the checked context, a candidate mesh, a finding.

Owns: `MeshContext` (model, cluster shape, optional training recipe), `Candidate` (a
parallel configuration plus an axis order), `Finding` (one rule's verdict with a fix), and
the small edits fixes are made of (change a degree and rebalance dp, split layers evenly).
Must not: hold the rules themselves (`rules_shape.py`, `rules_pipeline.py`) or search for
alternatives (`repair.py`).
"""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from math import log2
from typing import Any

from pydantic import ValidationError

from api_schemas import ModelSpec, ParallelConfig, PipelineSchedule, TrainingSpec
from api_schemas.mesh import ProblemSeverity

Severity = ProblemSeverity
"""Whether a problem makes the mesh unusable ('error') or is worth a look ('warning')."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshContext:
    """What a mesh is checked against; without a model or recipe their rules are skipped."""

    model: ModelSpec | None
    num_nodes: int
    gpus_per_node: int
    training: TrainingSpec | None = None

    @property
    def world_size(self) -> int:
        """GPUs in the cluster."""
        return self.num_nodes * self.gpus_per_node

    @property
    def arch(self) -> ModelSpec:
        """The model, for rules that only run when one is given."""
        assert self.model is not None, "model rules run only with a model"
        return self.model

    @property
    def max_pp(self) -> int:
        """Largest pipeline depth worth trying: the layer count, or the cluster without a model."""
        return self.model.num_layers if self.model is not None else self.world_size


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """A parallel configuration together with its rank order."""

    parallel: ParallelConfig
    order: str


Fix = Callable[[MeshContext, Candidate], Candidate | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One rule's verdict on a candidate, with the edit that would address it."""

    rule: str
    severity: Severity
    field: str
    message: str
    values: dict[str, int | str | bool] = dataclasses.field(default_factory=dict)
    fix: Fix


def divisors(n: int) -> list[int]:
    """Positive divisors of n in increasing order."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def largest_divisor(n: int, accept: Callable[[int], bool]) -> int | None:
    """The largest divisor d of n with accept(d), or None."""
    for d in reversed(divisors(n)):
        if accept(d):
            return d
    return None


def nearest_divisor(n: int, target: int, accept: Callable[[int], bool]) -> int | None:
    """The divisor d of n with accept(d) closest to target on a log scale (ties: smaller)."""
    options = [d for d in divisors(n) if accept(d)]
    if not options:
        return None
    return min(options, key=lambda d: (abs(log2(d) - log2(target)), d))


def degree_room(ctx: "MeshContext", parallel: ParallelConfig, axis: str) -> int:
    """What one of tp/cp/pp may range over with the other two fixed and dp rebalanced:
    the cluster size divided by the other two degrees (their product if it does not divide
    the cluster, so that only the current value's divisors are offered)."""
    others = {"tp": parallel.tp, "cp": parallel.cp, "pp": parallel.pp}
    rest = 1
    for name, value in others.items():
        if name != axis:
            rest *= value
    return ctx.world_size // rest if ctx.world_size % rest == 0 else others[axis]


def with_changes(cand: Candidate, **changes: Any) -> Candidate | None:
    """The candidate with some ParallelConfig fields replaced, or None if that is invalid.

    Changing pp drops per-stage lists that no longer fit (layers_per_stage is re-split by
    the layer rules when needed; stage_policies falls back to the uniform policy).
    """
    data = cand.parallel.model_dump()
    order = changes.pop("order", cand.order)
    data.update(changes)
    if data["pp"] != cand.parallel.pp:
        if "layers_per_stage" not in changes:
            data["layers_per_stage"] = None
        data["stage_policies"] = None
    try:
        return Candidate(parallel=ParallelConfig.model_validate(data), order=order)
    except ValidationError:
        return None


def rebalanced(ctx: MeshContext, cand: Candidate, **degrees: int) -> Candidate | None:
    """Change tp/cp/pp and set dp so that tp*cp*dp*pp fills the cluster; None if it cannot."""
    p = cand.parallel
    tp, cp, pp = degrees.get("tp", p.tp), degrees.get("cp", p.cp), degrees.get("pp", p.pp)
    if ctx.world_size % (tp * cp * pp):
        return None
    dp = ctx.world_size // (tp * cp * pp)
    return with_changes(cand, tp=tp, cp=cp, pp=pp, dp=dp,
                        **{k: v for k, v in degrees.items() if k not in ("tp", "cp", "pp")})


def balanced_layers(num_layers: int, num_stages: int, multiple: int = 1) -> tuple[int, ...] | None:
    """Layers per stage as even as possible in units of `multiple`; the extra units go to
    the middle stages first (the first and last stages also hold embedding and loss).
    None when num_layers is not a multiple of `multiple` or there are too few units."""
    if num_layers % multiple or num_layers // multiple < num_stages:
        return None
    units = num_layers // multiple
    base, extra = divmod(units, num_stages)
    counts = [base] * num_stages
    middle = list(range(1, num_stages - 1)) or list(range(num_stages))
    order = middle + [s for s in range(num_stages) if s not in middle]
    for stage in order[:extra]:
        counts[stage] += 1
    return tuple(c * multiple for c in counts)


def num_micro_batches(ctx: MeshContext, parallel: ParallelConfig) -> int | None:
    """Micro-batches per step per pipeline: given, or global_batch / (mbs x dp); None if
    unknown (no training recipe) or not a whole number."""
    if parallel.num_micro_batches is not None:
        return parallel.num_micro_batches
    if ctx.training is None:
        return None
    per_step = parallel.micro_batch_size * parallel.dp
    if ctx.training.global_batch_size % per_step:
        return None
    return ctx.training.global_batch_size // per_step


def distance(a: ParallelConfig, b: ParallelConfig) -> tuple[int, float]:
    """How far apart two configurations are: fields changed, then summed |log2| ratios."""
    keys = ("tp", "cp", "dp", "pp", "ep", "etp", "vpp", "micro_batch_size")
    changed = sum(getattr(a, k) != getattr(b, k) for k in keys)
    changed += sum(getattr(a, k) != getattr(b, k) for k in (
        "schedule", "cp_kind", "ulysses_degree", "sequence_parallel", "layers_per_stage",
        "num_micro_batches"))
    spread = sum(abs(log2(getattr(a, k)) - log2(getattr(b, k))) for k in keys)
    return changed, spread


def describe_change(before: Candidate, after: Candidate) -> str:
    """Human-readable list of the fields an alternative changes, e.g. 'tp 3 -> 2, dp 8 -> 12'."""
    old, new = before.parallel.model_dump(), after.parallel.model_dump()
    parts = [f"{k} {_fmt(old[k])} -> {_fmt(new[k])}" for k in old if old[k] != new[k]]
    if before.order != after.order:
        parts.append(f"order '{before.order}' -> '{after.order}'")
    return ", ".join(parts) or "no change"


def _fmt(value: Any) -> str:
    if isinstance(value, PipelineSchedule | StrEnum):
        return f"'{value}'"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


__all__ = [
    "Candidate",
    "Finding",
    "Fix",
    "MeshContext",
    "Severity",
    "balanced_layers",
    "degree_room",
    "describe_change",
    "distance",
    "divisors",
    "largest_divisor",
    "nearest_divisor",
    "num_micro_batches",
    "rebalanced",
    "with_changes",
]
