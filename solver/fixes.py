"""The smallest changes to one configuration that make it fit, or make it faster.

Owns: the single-step neighbours of a configuration (one more ZeRO stage, a recompute or
storage policy, offload, half the micro-batch, twice the PP or TP at half the DP, another
schedule, sequence parallelism) scored with the full cost model. Must not: search globally.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import (
    FullLayers,
    ParallelConfig,
    PipelineSchedule,
    RecomputeMode,
    RecomputeModule,
)
from api_schemas.training import TrainingSpec
from models.core.layer_kinds import has_routed_experts
from models.core.memory import memory_ledger
from models.core.pipeline import StagePlacement, schedule_traits
from models.core.step_time import estimate_step
from models.errors import InvalidSpecError
from solver.candidate_eval import ScoredPlan
from solver.explain import gib
from solver.policy import ACTIVATION_OFFLOAD_SHARE, broad_selective_modules

MAX_FIXES = 5
"""Fixes reported per evaluation."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fix:
    """One neighbouring configuration and what it changes."""

    text: str
    parallel: ParallelConfig
    fits: bool
    step_time_s: float
    peak_bytes: int


def _neighbours(spec: ModelSpec, p: ParallelConfig) -> Iterator[tuple[str, dict[str, Any]]]:
    for zero in range(p.zero_stage + 1, 4):
        yield f"ZeRO-{zero}", {"zero_stage": zero}
    yield ("selective recompute of cheap modules",
           {"recompute": RecomputeMode.SELECTIVE,
            "recompute_modules": broad_selective_modules(spec), "stage_policies": None})
    per_stage = max(1, spec.num_layers // p.pp)
    for k in sorted({max(1, per_stage // 4), max(1, per_stage // 2), per_stage}):
        yield (f"full recompute of {k} layers per stage",
               {"recompute": FullLayers(full_layers=k), "stage_policies": None})
    if has_routed_experts(spec):
        yield ("selective recompute of cheap modules and the MoE down-projections (Kimi K2)",
               {"recompute": RecomputeMode.SELECTIVE, "stage_policies": None,
                "recompute_modules": (*broad_selective_modules(spec),
                                      RecomputeModule.MOE_DOWN_PROJ)})
    yield "FP8 activation storage", {"fp8_activations": True, "stage_policies": None}
    yield (f"offload {ACTIVATION_OFFLOAD_SHARE:.0%} of the activations",
           {"activation_offload_frac": ACTIVATION_OFFLOAD_SHARE, "stage_policies": None})
    if p.micro_batch_size % 2 == 0:
        half = p.micro_batch_size // 2
        yield f"micro-batch {half}", {"micro_batch_size": half}
    yield f"micro-batch {p.micro_batch_size * 2}", {"micro_batch_size": p.micro_batch_size * 2}
    if p.dp % 2 == 0:
        yield (f"PP{p.pp * 2} with DP{p.dp // 2}",
               {"pp": p.pp * 2, "dp": p.dp // 2, "stage_policies": None, "layers_per_stage": None,
                "schedule": p.schedule if p.pp > 1 else PipelineSchedule.ONE_F_ONE_B})
        yield (f"TP{p.tp * 2} with DP{p.dp // 2}",
               {"tp": p.tp * 2, "dp": p.dp // 2, "sequence_parallel": True})
    if p.pp > 1:
        for schedule in (PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.ZB_H1):
            if schedule != p.schedule:
                yield f"{schedule} schedule", {"schedule": schedule, "vpp": 1,
                                                "layers_per_stage": None}
        if schedule_traits(p.schedule).placement != StagePlacement.LOOPED:
            yield "interleaved 1F1B with 2 chunks", {
                "schedule": PipelineSchedule.INTERLEAVED_1F1B, "vpp": 2, "layers_per_stage": None}
    if p.tp > 1 and not p.sequence_parallel:
        yield "sequence parallelism", {"sequence_parallel": True}


def suggest_fixes(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                  current: ScoredPlan) -> list[Fix]:
    """Neighbours that fit (when `current` does not), or that fit and are faster (when it
    does), best first."""
    fits_now = current.ledger.fits
    base = current.estimate.step_time_s
    out: list[Fix] = []
    for label, change in _neighbours(spec, current.parallel):
        try:
            candidate = ParallelConfig.model_validate(
                {**current.parallel.model_dump(), **change})
            ledger = memory_ledger(spec, training, candidate, cluster)
            if not ledger.fits:
                continue
            est = estimate_step(spec, training, candidate, cluster)
        except (InvalidSpecError, ValueError):
            continue
        if fits_now and est.step_time_s >= base:
            continue
        delta = est.step_time_s / base - 1.0
        out.append(Fix(text=f"{label}: fits at {gib(ledger.peak_bytes)}, "
                            f"{est.step_time_s:.2f} s per step ({delta:+.1%})",
                       parallel=candidate, fits=True, step_time_s=est.step_time_s,
                       peak_bytes=ledger.peak_bytes))
    out.sort(key=lambda f: f.step_time_s)
    return out[:MAX_FIXES]


__all__ = ["MAX_FIXES", "Fix", "suggest_fixes"]
