"""The communication of one training step, assembled from the per-axis rules.

Owns: `step_traffic`, which checks the mesh, builds the process groups, picks the pipeline
stage, counts micro-batches and returns every TP, CP, EP, PP and DP item of that stage with
its time and overlap; and `axis_collectives`, a static summary of which collectives each
axis runs and how often (no sizes), for mesh reports. Must not: decide how much overlap is
realised (the step-time model).
"""

import logging
from dataclasses import dataclass

from api_schemas import (
    ClusterSpec,
    ContextParallelKind,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
)
from models.core.collectives import Collective, fabric_of
from models.core.mesh import DEFAULT_ORDER, build_mesh, validate_mesh
from models.core.mesh.candidates import Candidate, MeshContext
from models.core.mesh.rules import errors
from models.core.rank_states import micro_batch_count
from models.core.traffic.context import StepContext
from models.core.traffic.data import dp_items
from models.core.traffic.items import Frequency, StepTraffic, TrafficAxis
from models.core.traffic.pipeline import pp_items
from models.core.traffic.tensor import cp_items, ep_items, tp_items
from models.core.traffic.weights import stage_weights
from models.errors import InvalidSpecError

logger = logging.getLogger(__name__)


def step_traffic(model: ModelSpec, *, training: TrainingSpec, parallel: ParallelConfig,
                 cluster: ClusterSpec, order: str = DEFAULT_ORDER, stage: int | None = None,
                 pp_scatter_gather: bool = False) -> StepTraffic:
    """Every TP, CP, EP, PP and DP communication of one pipeline stage in one training step.

    Args:
        model: The LLM architecture.
        training: Batch, sequence and formats.
        parallel: Degrees, schedule, ZeRO stage, sequence parallelism, recompute.
        cluster: Nodes, GPUs per node and the links.
        order: Megatron rank order of the mesh axes.
        stage: Pipeline stage to report; default the stage with the most layers (the first
            such stage, which carries the embedding when the split is even).
        pp_scatter_gather: Megatron 2021's scatter/gather of stage-boundary tensors over TP
            (only meaningful without sequence parallelism); also on when the recipe states it
            (`TrainingSpec.pp_scatter_gather`), as the step time reads it.

    Returns:
        The stage's items with calls per step, time per call and per step, overlap.

    Raises:
        InvalidSpecError: the mesh breaks a rule (the message gives a valid alternative) or
            `stage` is out of range.
    """
    ctx = MeshContext(model=model, num_nodes=cluster.num_nodes,
                      gpus_per_node=cluster.gpus_per_node, training=training)
    if errors(ctx, Candidate(parallel=parallel, order=order)):
        validate_mesh(parallel, model=model, num_nodes=cluster.num_nodes,
                      gpus_per_node=cluster.gpus_per_node, training=training, order=order)
    stages = stage_weights(model, parallel)
    if stage is None:
        stage = max(range(len(stages)), key=lambda s: (stages[s].num_layers, -s))
    if not 0 <= stage < parallel.pp:
        raise InvalidSpecError(f"stage={stage} is outside 0..{parallel.pp - 1} (pp={parallel.pp})",
                               field="stage")
    m = micro_batch_count(training, parallel)
    step = StepContext(
        model=model, training=training, parallel=parallel, fabric=fabric_of(cluster),
        mesh=build_mesh(parallel, num_nodes=cluster.num_nodes,
                        gpus_per_node=cluster.gpus_per_node, order=order),
        stage=stages[stage], num_micro_batches=m,
        pp_scatter_gather=pp_scatter_gather or training.pp_scatter_gather is True)
    items = (tp_items(step) + cp_items(step) + ep_items(step) + pp_items(step)
             + dp_items(step))
    logger.debug("stage %d: %d traffic items", stage, len(items))
    return StepTraffic(stage=stage, num_micro_batches=m, num_layers=stages[stage].num_layers,
                       items=tuple(items))


@dataclass(frozen=True, slots=True, kw_only=True)
class AxisCollective:
    """Which collective an axis runs and how often (sizes need the model and recipe)."""

    axis: TrafficAxis
    collective: Collective
    frequency: Frequency
    purpose: str


def axis_collectives(parallel: ParallelConfig) -> tuple[AxisCollective, ...]:
    """The collectives of each active axis of a configuration, with their frequency."""
    p = parallel
    rows: list[AxisCollective] = []
    per_layer, per_mb, per_step = (Frequency.PER_LAYER_PER_MICRO_BATCH,
                                   Frequency.PER_MICRO_BATCH, Frequency.PER_STEP)
    if p.tp > 1:
        if p.sequence_parallel:
            rows += [AxisCollective(axis=TrafficAxis.TP, collective=c, frequency=per_layer,
                                    purpose="sequence-parallel activations (x2 per block)")
                     for c in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER)]
        else:
            rows.append(AxisCollective(axis=TrafficAxis.TP, collective=Collective.ALL_REDUCE,
                                       frequency=per_layer, purpose="partial sums (x4 per layer)"))
    if p.cp > 1:
        if p.cp_kind in (ContextParallelKind.ULYSSES, ContextParallelKind.USP):
            rows.append(AxisCollective(axis=TrafficAxis.CP, collective=Collective.ALL_TO_ALL,
                                       frequency=per_layer, purpose="Ulysses Q/K/V and O"))
        if p.cp_kind in (ContextParallelKind.RING, ContextParallelKind.USP):
            rows.append(AxisCollective(axis=TrafficAxis.CP, collective=Collective.P2P,
                                       frequency=per_layer, purpose="ring K/V blocks"))
        if p.cp_kind == ContextParallelKind.ALL_GATHER:
            rows += [AxisCollective(axis=TrafficAxis.CP, collective=Collective.ALL_GATHER,
                                    frequency=per_layer, purpose="whole-sequence K/V"),
                     AxisCollective(axis=TrafficAxis.CP, collective=Collective.REDUCE_SCATTER,
                                    frequency=per_layer, purpose="K/V gradients")]
    if p.pp > 1:
        rows.append(AxisCollective(axis=TrafficAxis.PP, collective=Collective.P2P,
                                   frequency=per_mb, purpose="activations and their gradients"))
    if p.dp * p.cp > 1:
        rows += _dp_rows(p, per_layer, per_mb, per_step)
    if p.ep > 1:
        rows.append(AxisCollective(
            axis=TrafficAxis.EP, collective=Collective.ALL_TO_ALL, frequency=per_layer,
            purpose="MoE dispatch and combine, per MoE layer"))
    if p.tp * p.cp * p.dp > p.etp * p.ep:
        rows.append(AxisCollective(axis=TrafficAxis.EDP, collective=Collective.REDUCE_SCATTER
                                   if p.zero_stage else Collective.ALL_REDUCE,
                                   frequency=per_step, purpose="expert gradients (MoE models)"))
    return tuple(rows)


def _dp_rows(p: ParallelConfig, per_layer: Frequency, per_mb: Frequency, per_step: Frequency
             ) -> list[AxisCollective]:
    dp = TrafficAxis.DP
    if p.zero_stage == 0:
        return [AxisCollective(axis=dp, collective=Collective.ALL_REDUCE, frequency=per_step,
                               purpose="gradients")]
    if p.zero_stage == 3:
        return [AxisCollective(axis=dp, collective=Collective.ALL_GATHER, frequency=per_layer,
                               purpose="parameters, forward and backward"),
                AxisCollective(axis=dp, collective=Collective.REDUCE_SCATTER,
                               frequency=per_layer, purpose="gradients")]
    return [AxisCollective(axis=dp, collective=Collective.REDUCE_SCATTER,
                           frequency=per_mb if p.zero_stage == 2 else per_step,
                           purpose="gradients"),
            AxisCollective(axis=dp, collective=Collective.ALL_GATHER, frequency=per_step,
                           purpose="updated parameters")]


__all__ = ["AxisCollective", "axis_collectives", "step_traffic"]
