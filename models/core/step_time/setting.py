"""One configuration as the step's terms read it: the model, the recipe, the parallel layout
and the cluster, with the fabric, the mesh's groups and the micro-batch count derived from
them once.

Owns: `StepSetting`, `step_setting`, the traffic context of one rank (`step_context`) and
the stage-boundary send time (`p2p_latency_s`). Must not: time a stage, assemble a step or
bound one (`models.core.step_time.stage`, `.assembly`, `.bounds`).
"""

from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.core.collectives import Fabric, fabric_of
from models.core.rank_states import micro_batch_count
from models.core.step_time.groups import AxisGroups, axis_groups
from models.core.traffic.context import StepContext
from models.core.traffic.pipeline import boundary_latency_s
from models.core.traffic.weights import StageWeights, stage_weights


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class StepSetting:
    """A configuration with what every term of its step derives from it alike."""

    spec: ModelSpec
    training: TrainingSpec
    parallel: ParallelConfig
    cluster: ClusterSpec
    fabric: Fabric
    groups: AxisGroups
    num_micro_batches: int


def step_setting(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                 cluster: ClusterSpec) -> StepSetting:
    """The `StepSetting` of a configuration.

    Raises:
        InvalidSpecError: the batch does not divide into micro-batches.
    """
    m = micro_batch_count(training, parallel)
    return StepSetting(spec=spec, training=training, parallel=parallel, cluster=cluster,
                       fabric=fabric_of(cluster),
                       groups=axis_groups(parallel, gpus_per_node=cluster.gpus_per_node),
                       num_micro_batches=m)


def step_context(setting: StepSetting, weights: StageWeights) -> StepContext:
    """The traffic context of the rank holding `weights` (PP scatter-gather as the training
    spec states it, `TrainingSpec.pp_scatter_gather`; unstated reads as off)."""
    return StepContext(model=setting.spec, training=setting.training,
                       parallel=setting.parallel, fabric=setting.fabric,
                       mesh=setting.groups.mesh, stage=weights,
                       num_micro_batches=setting.num_micro_batches,
                       pp_scatter_gather=setting.training.pp_scatter_gather is True)


def p2p_latency_s(setting: StepSetting, weights: StageWeights | None = None) -> float:
    """Time of one stage-boundary send (`models.core.traffic.pipeline.boundary_latency_s`), the
    latency between dependent ops of neighbouring ranks in the simulator. Zero under a
    blocking pipeline engine (`TrainingSpec.pipe_engine_p2p`): there each transfer holds both
    neighbours until it ends, so it is inside their ops (`models.core.step_time.stage.
    with_boundary_transfers`) and adds no latency between them."""
    if setting.parallel.pp == 1 or setting.training.pipe_engine_p2p is not None:
        return 0.0
    ctx = step_context(setting, weights or stage_weights(setting.spec, setting.parallel)[0])
    return boundary_latency_s(ctx)
