"""What every exporter needs to know about a plan before it speaks a framework's language.

Owns: the batch shape of one optimizer step (micro-batch, micro-batches, data-parallel
replicas, global batch) checked for the exact divisibility that training frameworks assert;
the one activation policy a framework with a single global policy must receive when the plan
gives each pipeline rank its own; per-rank layer counts for schedules a framework can only run
as plain 1F1B. Must not: know any framework's flag or key names (those live in `megatron`,
`torchtitan` and `deepspeed`).
"""

import logging
import math
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import (
    FullLayers,
    ParallelConfig,
    RecomputeMode,
    StagePolicy,
)
from api_schemas.training import TrainingSpec
from models.core.layout import pipeline_layout, virtual_stage_sizes
from models.core.pipeline import schedule_traits
from models.errors import InvalidSpecError

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchShape:
    """One optimizer step as every framework counts it: global = mbs x m x dp."""

    micro_batch_size: int
    """Sequences per micro-batch on one data-parallel replica."""
    num_micro_batches: int
    """Micro-batches per step per pipeline (gradient-accumulation steps without PP)."""
    dp: int
    """Data-parallel replicas (the batch axis; context parallelism splits sequences)."""
    global_batch_size: int
    """Sequences per optimizer step."""


def batch_shape(training: TrainingSpec, parallel: ParallelConfig) -> BatchShape:
    """The step's batch shape, with global = micro x micro-batches x dp exactly.

    Raises:
        InvalidSpecError: the global batch is not a whole number of micro-batches per
            replica, or `parallel.num_micro_batches` contradicts the global batch.
    """
    mbs, dp, gbs = parallel.micro_batch_size, parallel.dp, training.global_batch_size
    per_round = mbs * dp
    if parallel.num_micro_batches is not None:
        m = parallel.num_micro_batches
        if m * per_round != gbs:
            fix = (f"set num_micro_batches={gbs // per_round}" if gbs % per_round == 0
                   else f"set training.global_batch_size={m * per_round}")
            raise InvalidSpecError(
                f"parallel.num_micro_batches={m} x micro_batch_size={mbs} x dp={dp} = "
                f"{m * per_round} sequences, but training.global_batch_size={gbs}; frameworks "
                f"need them equal: {fix}", field="parallel.num_micro_batches")
    elif gbs % per_round:
        raise InvalidSpecError(
            f"training.global_batch_size={gbs} is not a multiple of micro_batch_size={mbs} x "
            f"dp={dp} = {per_round}; Megatron, torchtitan and DeepSpeed all need a whole number "
            f"of micro-batches: use a global batch of {math.ceil(gbs / per_round) * per_round}",
            field="training.global_batch_size")
    else:
        m = gbs // per_round
    return BatchShape(micro_batch_size=mbs, num_micro_batches=m, dp=dp, global_batch_size=gbs)


def _recompute_weight(policy: StagePolicy) -> tuple[float, int, int]:
    """Orders policies by how much they recompute: full layers, then selective modules."""
    recompute = policy.recompute
    if isinstance(recompute, FullLayers):
        full: float = recompute.full_layers
        selective = int(recompute.others == RecomputeMode.SELECTIVE.value)
    else:
        full = math.inf if recompute == RecomputeMode.FULL else 0.0
        selective = int(recompute == RecomputeMode.SELECTIVE)
    return full, selective, len(policy.recompute_modules) if selective else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class UnifiedPolicy:
    """The single activation policy handed to a framework that has only one."""

    policy: StagePolicy
    source_stage: int | None
    """The pipeline rank whose policy was taken when ranks differ; None when all agree."""
    notes: tuple[str, ...]


def unified_policy(parallel: ParallelConfig, *, framework: str) -> UnifiedPolicy:
    """One activation policy for every pipeline rank.

    When the plan gives ranks different policies, the rank that recomputes the most is
    taken (so no rank stores more than planned) and a note says so.
    """
    policies = [parallel.policy_of(stage) for stage in range(parallel.pp)]
    first = policies[0]
    if all(policy == first for policy in policies):
        return UnifiedPolicy(policy=first, source_stage=None, notes=())
    strongest = max(range(parallel.pp), key=lambda stage: _recompute_weight(policies[stage]))
    described = "; ".join(f"rank {stage}: {_describe(policy)}"
                          for stage, policy in enumerate(policies))
    note = (f"per-stage activation policies differ ({described}); {framework} applies one "
            f"policy to every pipeline rank, so rank {strongest}'s policy (the one that "
            "recomputes the most) is exported and the other ranks recompute more than "
            f"planned; per-rank policies need a {framework} extension")
    logger.debug("export: %s", note)
    return UnifiedPolicy(policy=policies[strongest], source_stage=strongest, notes=(note,))


def _describe(policy: StagePolicy) -> str:
    recompute = policy.recompute
    if isinstance(recompute, FullLayers):
        text = f"full on {recompute.full_layers} layers, {recompute.others} on the rest"
    else:
        text = str(recompute.value)
    if policy.fp8_activations:
        text += ", fp8 activations"
    if policy.offload_frac:
        text += f", offload {policy.offload_frac:g}"
    return text


def rank_layer_counts(spec: ModelSpec, parallel: ParallelConfig) -> list[int]:
    """Transformer layers each pipeline rank runs in its own forward direction.

    For bidirectional schedules only the forward-direction copy is counted (the mirrored
    copy duplicates weights of another rank's stage); V shapes count both chunks of a rank.
    """
    if schedule_traits(parallel.schedule).num_pipes == 2:
        return virtual_stage_sizes(spec, parallel)
    return [len(stage.layers) for stage in pipeline_layout(spec, parallel)]


__all__ = [
    "BatchShape",
    "UnifiedPolicy",
    "batch_shape",
    "rank_layer_counts",
    "unified_policy",
]
