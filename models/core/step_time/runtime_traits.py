"""The frameworks' runtime traits folded into a rank's per-micro-batch times.

Owns: what a framework's own runtime adds to every micro-batch of a rank, read from the
recipe the framework's plans carry: DeepSpeed's blocking pipeline-engine transfers
(`TrainingSpec.pipe_engine_p2p`), BF16Optimizer's fp32 gradient update
(`TrainingSpec.bf16_hp_grad_update`) and ZeRO-Offload's gradient round trip through host
memory at ZeRO-2 (`TrainingSpec.offload_grad_buffers`), each on the chunk op it delays and in
its own `StageTime` field. Must not: time layers (`models.core.step_time.stage`) or add
per-step terms (`models.core.step_time.assembly`).
"""

import dataclasses

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.core.collectives import Fabric
from models.core.collectives.fabric import host_link_bandwidth
from models.core.compute import OpTimes
from models.core.layout import StageLayout
from models.core.rank_states import optimizer_shard_params
from models.core.sharded_states import offload_grad_buffers_on
from models.core.step_time.deepspeed_pipe import boundary_occupancy_s, hp_grad_update_s
from models.core.step_time.groups import AxisGroups
from models.core.step_time.stage_record import StageTime
from models.core.traffic.weights import stage_weights


def framework_traits(stages: list[StageTime], spec: ModelSpec, training: TrainingSpec,
                     parallel: ParallelConfig, cluster: ClusterSpec, fabric: Fabric,
                     groups: AxisGroups) -> list[StageTime]:
    """`stages` (every rank's, in order) with the pipeline engine's transfers and
    BF16Optimizer's update where the recipe names them."""
    if training.pipe_engine_p2p is not None and parallel.pp > 1:
        stages = [with_boundary_transfers(st, *boundary_occupancy_s(
            spec, training, parallel, fabric, groups.mesh, st.stage)) for st in stages]
    if training.bf16_hp_grad_update:
        weights = stage_weights(spec, parallel)
        stages = [with_grad_update(st, hp_grad_update_s(
            weights[st.stage].dense_params + weights[st.stage].expert_params, cluster.gpu))
            for st in stages]
    return stages


def offload_round_trips(stages: list[StageTime], layouts: tuple[StageLayout, ...],
                        spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                        cluster: ClusterSpec, m: int) -> list[StageTime]:
    """`stages` (every rank's, in the order of `layouts`) with ZeRO-Offload's gradient round
    trip (`offload_round_trip_s`) where the recipe runs it: per-parameter host buffers
    (`TrainingSpec.offload_grad_buffers`) at ZeRO-2 with the optimizer offloaded and more
    than one of the step's `m` micro-batches."""
    if not (offload_grad_buffers_on(training, parallel) and parallel.zero_stage == 2 and m > 1):
        return stages
    return [with_offload_round_trip(st, offload_round_trip_s(
        optimizer_shard_params(spec, parallel, layout) * parallel.optimizer_offload_frac,
        training, cluster, backward_s=_backward_s(st), num_micro_batches=m))
        for st, layout in zip(stages, layouts, strict=True)]


def offload_round_trip_s(partition_params: float, training: TrainingSpec,
                         cluster: ClusterSpec, *, backward_s: float,
                         num_micro_batches: int) -> float:
    """Seconds per micro-batch that ZeRO-Offload's gradient round trip at ZeRO-2 adds to a
    rank beyond the backward it overlaps (`TrainingSpec.offload_grad_buffers`).

    Source: DeepSpeed 0.19.8 `deepspeed/runtime/zero/stage_1_and_2.py`: at stage 2
    (`partition_gradients`) each bucket is reduced during the backward
    (`reduce_ready_partitions_and_remove_grads`), and for every parameter of the rank's
    partition `async_accumulate_grad_in_cpu_via_gpu` copies its host buffer to the GPU and
    adds it when an earlier micro-batch wrote one (`micro_step_id > 0`), and copies the sum
    to the buffer when more micro-batches follow: both non-blocking copies on the reduction
    stream, beside the backward's compute.
    Legend: P = partition_params, w = parameter bytes, L = host link bandwidth, m =
    num_micro_batches, B = the rank's backward time per micro-batch; copies per micro-batch
    2 (m - 1) / m (no reload on the first, no save on the last); seconds = max(0,
    2 (m - 1) / m x P w / L - B).
    Assumes: the copies overlap the backward fully up to its length (the reduction
    stream's own collectives are priced apart), and save and reload, issued in turn on one
    stream, do not share the link's two directions.
    """
    if num_micro_batches <= 1 or partition_params <= 0:
        return 0.0
    copy_s = partition_params * training.param_dtype.num_bytes / host_link_bandwidth(cluster)
    copies = 2.0 * (num_micro_batches - 1) / num_micro_batches
    return max(0.0, copies * copy_s - backward_s)


def _backward_s(stage: StageTime) -> float:
    return sum(t.backward_input_s + t.backward_weight_s for t in stage.chunk_times)


def with_offload_round_trip(stage: StageTime, round_trip_s: float) -> StageTime:
    """`stage` with ZeRO-Offload's exposed gradient round trip per micro-batch
    (`offload_round_trip_s`) on its last chunk's backward, where the last buckets wait."""
    if not round_trip_s:
        return stage
    chunks = list(stage.chunk_times)
    chunks[-1] = chunks[-1] + OpTimes(backward_input_s=round_trip_s)
    return dataclasses.replace(stage, chunk_times=tuple(chunks),
                               offload_round_trip_s=stage.offload_round_trip_s + round_trip_s)


def with_grad_update(stage: StageTime, update_s: float) -> StageTime:
    """`stage` with an fp32 gradient update of `update_s` after each micro-batch's backward
    (`TrainingSpec.bf16_hp_grad_update`), on its last chunk's backward (the optimizer's
    `backward` runs it once the whole rank's backward is done)."""
    chunks = list(stage.chunk_times)
    chunks[-1] = chunks[-1] + OpTimes(backward_input_s=update_s)
    return dataclasses.replace(stage, chunk_times=tuple(chunks),
                               grad_update_s=stage.grad_update_s + update_s)


def with_boundary_transfers(stage: StageTime, forward_s: float, backward_s: float) -> StageTime:
    """`stage` with a blocking pipeline engine's boundary transfers per micro-batch
    (`models.core.step_time.deepspeed_pipe.boundary_occupancy_s`) on its first chunk's forward
    and its last chunk's backward (DeepSpeed's engine runs one chunk per rank), booked as
    exposed PP communication. A transfer holds both neighbours from the later one's arrival,
    as the op it is folded into starts when its input is there: in the steady state the 1F1B
    simulator then gives the held schedule's makespan exactly; warm-up and cool-down steps
    exchange one message where this books two, an excess of the order of p - 1 messages per
    step (tests/research/test_deepspeed_pipe_p2p.py; some 0.1 s of MT-NLG's 51 s)."""
    if not forward_s and not backward_s:
        return stage
    chunks = list(stage.chunk_times)
    chunks[0] = chunks[0] + OpTimes(forward_s=forward_s)
    chunks[-1] = chunks[-1] + OpTimes(backward_input_s=backward_s)
    exposed = {**stage.exposed_comm_s,
               "pp": stage.exposed_comm_s.get("pp", 0.0) + forward_s + backward_s}
    return dataclasses.replace(stage, chunk_times=tuple(chunks), exposed_comm_s=exposed)


__all__ = ["framework_traits", "offload_round_trip_s", "offload_round_trips",
           "with_boundary_transfers", "with_grad_update", "with_offload_round_trip"]
