"""Per-micro-batch work DeepSpeed's pipeline engine adds to a rank: its stage-boundary
transfers (`TrainingSpec.pipe_engine_p2p`), the time each one occupies a pipeline rank per
micro-batch, and BF16Optimizer's fp32 gradient update (`TrainingSpec.bf16_hp_grad_update`).

Owns: the seconds a rank's transfers of one micro-batch add to its forward and backward step
(what it sends, receives and all-gathers is `models.core.traffic.pipe_engine.boundary_steps`).
Must not: price a collective on the wire (`models.core.traffic.items.call_cost`),
simulate the pipeline, or say anything of Megatron's own schedule (whose transfer is the
latency between neighbouring ranks, `models.core.step_time.setting.p2p_latency_s`).

Source (read at DeepSpeed v0.5.0, f28432441b, and v0.6.0, a32e9b3376):
`deepspeed/runtime/pipe/schedule.py` (`TrainSchedule.steps`): a forward step runs
`RecvActivation`, `SendGrad` (of the previous micro-batch), `ForwardPass`; a backward step runs
`SendActivation` (of the previous micro-batch), `RecvGrad`, `BackwardPass`; the first stage
has no previous neighbour, the last no next one.
`deepspeed/runtime/pipe/p2p.py`: `send` and `recv` call `dist.broadcast` in the two-rank group
(v0.5.0) or `dist.send` / `dist.recv` (v0.6.0 with torch >= 1.8) with `async_op` forced to
False, so the call waits on the rank's stream for its peer; the stage computes nothing in
between, and its neighbour waits likewise.
`deepspeed/runtime/pipe/engine.py`: with TP > 1 `is_pipe_partitioned` holds; a forward output
is cut into t slices (`PartitionedTensor`) and sent as its meta tensor (`to_meta`: the rank
count, the shape, the part count, the rank and the t + 1 offsets, int64) and the rank's slice;
`_exec_forward_pass` rebuilds the received input with `PartitionedTensor.full()`, an
all-gather over the TP group. Before the backward the sender rebuilds its own output the same
way (`_exec_recv_grads` in v0.5.0, `_exec_backward_pass` in v0.6.0). The input gradient goes
back whole at v0.5.0 (`is_grad_partitioned = False`) and as a meta tensor and a slice from
v0.5.4 (`is_grad_partitioned = self.is_model_parallel`, DeepSpeed pull request #1407, merged
2021-09-29), where the receiver rebuilds it with one more all-gather.
`deepspeed/runtime/bf16_optimizer.py` at v0.6.5 (8164ea9e6d; the optimizer arrived in v0.6.2,
pull request #1801, "bf16+pipeline parallelism"): `backward` clears the bf16 gradients, runs
the backward and calls `update_hp_grads`, which for every parameter tensor runs
`hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))`; the pipeline engine's
`_exec_backward_pass` calls `clear_lp_grads` and `update_hp_grads` itself on the ranks that
are not last, the last rank reaches them through `DeepSpeedEngine.backward`. So every rank
does it once per micro-batch.
"""

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import GpuSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.catalog.kernels import memory_bound_time_s
from models.core.collectives import Collective, Fabric
from models.core.mesh import DeviceMesh, GroupKind
from models.core.traffic.context import LayerTrafficContext
from models.core.traffic.items import call_cost
from models.core.traffic.pipe_engine import BoundaryStep, boundary_bytes, boundary_steps


def boundary_step_s(step: BoundaryStep, *, full_bytes: int, mesh: DeviceMesh,
                    fabric: Fabric) -> float:
    """Seconds one step's transfers occupy the rank: the messages one after another over
    the PP link (each call waits for the previous), then the all-gathers of `full_bytes`
    over the TP group."""
    pp_place, tp_place = mesh.placement(GroupKind.PP), mesh.placement(GroupKind.TP)
    sends = sum(call_cost(Collective.P2P, pp_place, size, fabric).time_s
                for size in step.messages)
    gather = call_cost(Collective.ALL_GATHER, tp_place, full_bytes, fabric).time_s
    return sends + step.gathers * gather


def boundary_occupancy_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                         fabric: Fabric, mesh: DeviceMesh, stage: int) -> tuple[float, float]:
    """(forward, backward) seconds per micro-batch that rank `stage` spends in DeepSpeed's
    blocking boundary transfers (`boundary_steps`); (0, 0) without the setting or without
    PP."""
    p2p = training.pipe_engine_p2p
    if p2p is None or parallel.pp == 1:
        return 0.0, 0.0
    layer = LayerTrafficContext(model=spec, training=training, parallel=parallel,
                                fabric=fabric, mesh=mesh)
    full = boundary_bytes(layer)
    forward, backward = boundary_steps(p2p, full_bytes=full, tp=parallel.tp, stage=stage,
                                       pp=parallel.pp)
    return (boundary_step_s(forward, full_bytes=full, mesh=mesh, fabric=fabric),
            boundary_step_s(backward, full_bytes=full, mesh=mesh, fabric=fabric))


HP_GRAD_UPDATE_BYTES_PER_PARAM = 2 + 4 + 4 + 4 + 4
"""HBM bytes per parameter of one `update_hp_grads`: `.to(float32)` reads the bf16 gradient (2)
and writes a temporary fp32 copy (4); `add_` reads the temporary (4) and the fp32 gradient (4)
and writes the fp32 gradient (4)."""

IN_PLACE_ACCUMULATE_BYTES_PER_PARAM = 2 + 2 + 2
"""HBM bytes per parameter of the 16-bit accumulation the step time leaves inside its
calibrated kernel times: PyTorch's `AccumulateGrad` adds a micro-batch's gradient into the
existing 16-bit `.grad` in place (read 2 + 2, write 2), as does Megatron-LM 2021's local DDP
hook (`param.main_grad.add_(param.grad.data)`, megatron/model/distributed.py at 6985e58938),
which ran the A100 rows that fit the kernel constants. BF16Optimizer drops the bf16 gradient
before each backward (`clear_lp_grads`), so autograd writes it fresh and this add is not run."""


def hp_grad_update_s(params: int, gpu: GpuSpec) -> float:
    """Seconds BF16Optimizer's `update_hp_grads` adds per micro-batch on a rank of `params`
    parameters beyond the in-place 16-bit accumulation it replaces
    (`HP_GRAD_UPDATE_BYTES_PER_PARAM` - `IN_PLACE_ACCUMULATE_BYTES_PER_PARAM` = 12 bytes per
    parameter), streamed at the GPU's achievable HBM bandwidth (elementwise kernels; their
    launches, two per parameter tensor, are left out)."""
    extra = HP_GRAD_UPDATE_BYTES_PER_PARAM - IN_PLACE_ACCUMULATE_BYTES_PER_PARAM
    return memory_bound_time_s(params * extra, gpu=gpu)


__all__ = ["HP_GRAD_UPDATE_BYTES_PER_PARAM", "IN_PLACE_ACCUMULATE_BYTES_PER_PARAM",
           "boundary_occupancy_s", "boundary_step_s", "hp_grad_update_s"]
