"""Which memory and time mechanisms a plan leans on, each said in one note with what turning
it off would do.

Owns: the counterfactuals of a scored configuration for the mechanisms that trade time or
host memory for GPU memory (Pipeline ZeRO-2 gradient shards, optimizer offload, remote
activation offload to other pipeline ranks, activation offload, FP8 activation storage,
FP8-only weights, Muon in place of AdamW, the vision encoder's placement): the peak GPU
memory of the same configuration without each one, and the step-time term it costs. Must
not: search, or change the configuration it explains.
"""

from collections.abc import Callable

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig, StagePolicy
from api_schemas.training import (
    Fp8WeightStorage,
    OptimizerKind,
    TrainingSpec,
    VisionPlacement,
)
from models.core.memory import MemoryLedger, memory_ledger
from models.core.sharded_states import offload_grad_buffers_on
from models.core.step_time import StepEstimate
from models.core.step_time.assembly import VISION_ENCODER
from models.core.step_time.remote_offload import REMOTE_ACTIVATIONS
from models.core.step_time.step_terms import HOST_GRADIENTS, OFFLOAD_ROUND_TRIP
from models.errors import InvalidSpecError
from solver.explain import gib

Variant = tuple[TrainingSpec, ParallelConfig]


def _policies(parallel: ParallelConfig, change: Callable[[StagePolicy], StagePolicy]
              ) -> ParallelConfig:
    policies = tuple(change(parallel.policy_of(r)) for r in range(parallel.pp))
    return parallel.model_copy(update={"stage_policies": policies})


def _uses_policy(parallel: ParallelConfig, test: Callable[[StagePolicy], bool]) -> bool:
    return any(test(parallel.policy_of(r)) for r in range(parallel.pp))


def _without(training: TrainingSpec, parallel: ParallelConfig
             ) -> list[tuple[str, Variant, str]]:
    """(mechanism, the configuration without it, the time term it costs) for each one the
    configuration uses."""
    out: list[tuple[str, Variant, str]] = []
    if parallel.gradient_host_shards:
        out.append(("Pipeline ZeRO-2 (gradient shards in host memory)",
                    (training, parallel.model_copy(update={"gradient_host_shards": False})),
                    HOST_GRADIENTS))
    if parallel.optimizer_offload_frac > 0:
        out.append((f"optimizer offload ({parallel.optimizer_offload_frac:.0%})",
                    (training, parallel.model_copy(update={"optimizer_offload_frac": 0.0})),
                    "CPU optimizer (offloaded states)"))
    if parallel.remote_activation_offload:
        out.append(("remote activation offload (stored activations in other pipeline ranks' "
                    "spare memory)",
                    (training, parallel.model_copy(update={"remote_activation_offload": False})),
                    REMOTE_ACTIVATIONS))
    if _uses_policy(parallel, lambda p: p.offload_frac > 0):
        out.append(("activation offload to host memory",
                    (training, _policies(parallel, lambda p: p.model_copy(
                        update={"offload_frac": 0.0}))), "offload"))
    if _uses_policy(parallel, lambda p: p.fp8_activations):
        out.append(("FP8 activation storage",
                    (training, _policies(parallel, lambda p: p.model_copy(
                        update={"fp8_activations": False}))), "fp8 activation casts"))
    if training.fp8_weight_storage == Fp8WeightStorage.FP8_ONLY:
        out.append(("FP8-only weights (16-bit copy in the optimizer only)",
                    (training.model_copy(
                        update={"fp8_weight_storage": Fp8WeightStorage.ON_THE_FLY}),
                     parallel), ""))
    if training.optimizer == OptimizerKind.MUON:
        out.append(("Muon (one moment, in place of AdamW's two)",
                    (training.model_copy(update={"optimizer": OptimizerKind.ADAMW}), parallel),
                    "Muon Newton-Schulz"))
    vision = training.vision
    if vision is not None and vision.placement != VisionPlacement.STAGE0:
        out.append((f"vision encoder placement '{vision.placement.value}'",
                    (training.model_copy(update={"vision": vision.model_copy(
                        update={"placement": VisionPlacement.STAGE0})}), parallel),
                    VISION_ENCODER))
    return out


BF16_OPTIMIZER_NOTE = (
    "bf16 weights with fp32 gradient accumulation through DeepSpeed's BF16_Optimizer "
    "(bf16_hp_grad_update): each micro-batch's bf16 gradients are added into an fp32 buffer "
    "after its backward (the step's 'bf16 gradient update'), both gradients stay allocated "
    "(the ledger's 'bf16 gradients beside the fp32 accumulation'), and the reduction runs "
    "after the last backward (models/core/step_time/deepspeed_pipe.py, "
    "models/core/sharded_states.py)")
"""The plan note of DeepSpeed's bf16 optimizer wrapper (`Framework.bf16_optimizer_stage`)."""


OFFLOAD_GRAD_BUFFERS_NOTE = (
    "gradients through DeepSpeed's ZeRO-Offload buffers (offload_grad_buffers): with the "
    "optimizer in host memory each parameter of the rank's partition has a 16-bit host buffer "
    "its gradient accumulates through between micro-batches (the host ledger's 'per-parameter "
    "gradient buffers'), saved after and reloaded before each micro-batch at ZeRO-2 "
    "(models/core/sharded_states.py, models/core/step_time/runtime_traits.py)")
"""The plan note of DeepSpeed's ZeRO-Offload gradient path (`Framework.offload_grad_buffers`)."""


def mechanism_notes(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                    cluster: ClusterSpec, estimate: StepEstimate, ledger: MemoryLedger
                    ) -> list[str]:
    """One note per mechanism the configuration uses: the peak GPU memory without it (and
    whether the configuration would still fit) and the step time it costs here."""
    notes = []
    for name, (t, p), term in _without(training, parallel):
        try:
            other = memory_ledger(spec, t, p, cluster)
        except InvalidSpecError:
            continue
        verdict = "would not fit" if not other.fits else "would still fit"
        cost = estimate.breakdown_s.get(term, 0.0) if term else 0.0
        timing = f"; it costs {cost:.3f} s per step ('{term}')" if cost > 0 else ""
        made = " - it is what makes this plan fit" if ledger.fits and not other.fits else ""
        notes.append(f"{name}: peak {gib(ledger.peak_bytes)} with it, "
                     f"{gib(other.peak_bytes)} on stage {other.binding_stage} without "
                     f"({verdict}){timing}{made}")
    if training.pipe_engine_p2p is not None and parallel.pp > 1:
        notes.append(f"stage-boundary transfers as DeepSpeed's pipeline engine runs them "
                     f"(pipe_engine_p2p='{training.pipe_engine_p2p.value}'): each blocking "
                     "send and receive holds both neighbouring stages, and with TP > 1 the "
                     "1/t slices are rebuilt by an all-gather over TP; the step time includes "
                     "them (models/core/step_time/deepspeed_pipe.py)")
    if training.bf16_hp_grad_update:
        notes.append(BF16_OPTIMIZER_NOTE)
    if offload_grad_buffers_on(training, parallel):
        notes.append(OFFLOAD_GRAD_BUFFERS_NOTE + (
            f"; the copies cost {estimate.overheads_s.get(OFFLOAD_ROUND_TRIP, 0.0):.3f} s per "
            "step beyond the backward they overlap" if parallel.zero_stage == 2 else ""))
    if training.vision is not None:
        first = ledger.stages[0]
        encoder = sum(c.bytes for c in first.components if c.name.startswith("vision encoder"))
        notes.append(f"vision encoder ('{training.vision.placement.value}'): "
                     f"{gib(encoder)} of stage 0's {gib(first.total_bytes)}; adds "
                     f"{estimate.overheads_s.get(VISION_ENCODER, 0.0):.3f} s per step")
    return notes


__all__ = ["mechanism_notes"]
