"""DeepSpeed's pipeline engine on the wire: what one rank of a non-interleaved DeepSpeed
pipeline sends, receives and all-gathers per micro-batch at its two stage boundaries
(`TrainingSpec.pipe_engine_p2p`), and those transfers as items of the step's traffic report.

Owns: `BoundaryStep`, `boundary_steps` and the report's items (`pipe_engine_items`). Must
not: add the transfers to a rank's step time (`models.core.step_time.deepspeed_pipe`, which
reads `boundary_steps`) or say anything of Megatron's own schedule
(`models.core.traffic.pipeline`).

Source (DeepSpeed v0.5.0, f28432441b; v0.6.0, a32e9b3376; v0.19.5, cf44300453):
`deepspeed/runtime/pipe/schedule.py` (`TrainSchedule.steps`: a forward step receives the
activation and sends the previous micro-batch's gradient, a backward step sends the previous
micro-batch's activation and receives the gradient), `pipe/p2p.py` (blocking sends and
receives, `async_op` forced False) and `pipe/engine.py` (with TP > 1 a boundary tensor travels
as its `PartitionedTensor` meta tensor and the sender's 1/t slice, rebuilt by an all-gather
over TP; the gradient whole before pull request #1407, v0.5.4, and sliced from then on).
"""

from dataclasses import dataclass

from api_schemas.training import PipeEngineP2P
from models.core.collectives import Collective
from models.core.mesh import GroupKind
from models.core.traffic.context import LayerTrafficContext, StepContext, group_placement
from models.core.traffic.items import Frequency, Phase, TrafficAxis, TrafficItem, make_item

META_ELEMENT_BYTES = 8
"""Bytes of one element of a `PartitionedTensor` meta tensor (a `torch.LongTensor`)."""

BOUNDARY_TENSOR_DIMS = 3
"""Dimensions of the stage-boundary hidden state Megatron passes, [s, b, h]."""


@dataclass(frozen=True, slots=True)
class BoundaryStep:
    """What a rank moves in one forward or one backward step of a micro-batch: P2P messages
    by size in bytes, and the all-gathers over TP that rebuild a b*s*h tensor."""

    messages: tuple[int, ...] = ()
    gathers: int = 0


def meta_bytes(tp: int) -> int:
    """Bytes of one `PartitionedTensor.to_meta()` tensor of a [s, b, h] tensor cut in `tp`:
    1 (rank count) + 3 (shape) + 2 (parts, rank) + tp + 1 (offsets) int64 elements."""
    return (1 + BOUNDARY_TENSOR_DIMS + 2 + tp + 1) * META_ELEMENT_BYTES


def boundary_steps(p2p: PipeEngineP2P, *, full_bytes: int, tp: int, stage: int,
                   pp: int) -> tuple[BoundaryStep, BoundaryStep]:
    """(forward step, backward step) transfers of pipeline rank `stage` of `pp` for one
    micro-batch whose boundary tensor holds `full_bytes` (b*s*h elements).

    Forward step (a rank with a previous neighbour): receive the activation's meta tensor and
    slice, send the previous micro-batch's input gradient, all-gather the input. Backward step
    (a rank with a next neighbour): send the activation's meta and slice, receive the
    gradient, all-gather its own output; with a partitioned gradient it comes as meta and
    slice and is all-gathered too. With TP 1 (`is_pipe_partitioned` needs model parallelism)
    both tensors travel whole and nothing is gathered."""
    if tp == 1:
        # No model parallelism: nothing is partitioned, the tensors travel whole.
        whole = BoundaryStep(messages=(full_bytes, full_bytes))
        return (whole if stage > 0 else BoundaryStep(),
                whole if stage < pp - 1 else BoundaryStep())
    sliced = (meta_bytes(tp), -(-full_bytes // tp))
    partitioned = p2p == PipeEngineP2P.DEEPSPEED_PARTITIONED
    grad = sliced if partitioned else (full_bytes,)
    forward = BoundaryStep(messages=sliced + grad, gathers=1) if stage > 0 else BoundaryStep()
    backward = (BoundaryStep(messages=sliced + grad, gathers=2 if partitioned else 1)
                if stage < pp - 1 else BoundaryStep())
    return forward, backward


BLOCKING_NOTE = ("blocking: DeepSpeed's pipeline engine holds both neighbouring stages for "
                 "each send and receive")
"""Why none of a pipeline engine's transfers overlaps compute."""


def boundary_bytes(layer: LayerTrafficContext) -> int:
    """Bytes of one whole stage-boundary tensor, b*s*h elements of the activation dtype
    (Megatron-LM 2021, arXiv:2104.04473 Sec. 3.2; s per CP rank)."""
    return layer.tokens_per_rank * layer.model.hidden_size * layer.activation_bytes


def pipe_engine_items(ctx: StepContext) -> list[TrafficItem]:
    """The transfers one rank takes part in per step under DeepSpeed's pipeline engine: its
    forward steps' and backward steps' messages (`boundary_steps`), one call per micro-batch
    each, and the all-gathers over TP that rebuild the sliced tensors; none overlaps compute
    (`BLOCKING_NOTE`). Their times per micro-batch are what the step time adds to the rank's
    forward and backward (`models.core.step_time.deepspeed_pipe.boundary_occupancy_s`)."""
    p2p = ctx.training.pipe_engine_p2p
    p = ctx.parallel
    if p2p is None or p.pp == 1:
        return []
    full = boundary_bytes(ctx.layer)
    m = ctx.num_micro_batches
    steps = boundary_steps(p2p, full_bytes=full, tp=p.tp, stage=ctx.stage.stage, pp=p.pp)
    pp_place, tp_place = (group_placement(ctx.mesh, GroupKind.PP),
                          group_placement(ctx.mesh, GroupKind.TP))
    items = []
    for phase, step in zip((Phase.FORWARD, Phase.BACKWARD), steps, strict=True):
        for index, size in enumerate(step.messages):
            items.append(make_item(
                axis=TrafficAxis.PP, name=f"pp.{phase.value}.pipe_engine.p2p.{index}",
                collective=Collective.P2P, phase=phase, frequency=Frequency.PER_MICRO_BATCH,
                stage=ctx.stage.stage, message_bytes=size, calls_per_step=m,
                placement=pp_place, fabric=ctx.fabric, overlap_frac=0.0,
                overlap_note=BLOCKING_NOTE))
        if step.gathers:
            items.append(make_item(
                axis=TrafficAxis.PP, name=f"pp.{phase.value}.pipe_engine.all_gather",
                collective=Collective.ALL_GATHER, phase=phase,
                frequency=Frequency.PER_MICRO_BATCH, stage=ctx.stage.stage,
                message_bytes=full, calls_per_step=m * step.gathers, placement=tp_place,
                fabric=ctx.fabric, overlap_frac=0.0,
                overlap_note="rebuilds a sliced boundary tensor; " + BLOCKING_NOTE))
    return items


__all__ = ["BLOCKING_NOTE", "BOUNDARY_TENSOR_DIMS", "META_ELEMENT_BYTES", "BoundaryStep",
           "boundary_bytes", "boundary_steps", "meta_bytes", "pipe_engine_items"]
