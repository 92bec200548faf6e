"""Pipeline-parallel traffic: activations and their gradients between adjacent stages.

Owns: the P2P sends of one stage per step (forward activations, backward gradients) for
1F1B-style, interleaved, V-shaped and DualPipe placements, Megatron 2021's scatter/gather
optimisation, and the tied-embedding gradient all-reduce between the first and last stage
(DeepSpeed's pipeline engine has its own transfers, `models.core.traffic.pipe_engine`).
Must not: simulate the schedule (the pipeline simulator owns the timeline and the bubble).
"""


from api_schemas.dtypes import DType
from api_schemas.training import TrainingSpec
from models.core.collectives import Collective
from models.core.mesh import AxisPlacement, GroupKind
from models.core.pipeline import StagePlacement, schedule_traits
from models.core.traffic.context import StepContext, group_placement
from models.core.traffic.items import (
    Frequency,
    Phase,
    TrafficAxis,
    TrafficItem,
    call_cost,
    make_item,
)
from models.core.traffic.pipe_engine import boundary_bytes, pipe_engine_items
from models.core.traffic.weights import word_embedding_ranks


def pp_message_bytes(ctx: StepContext) -> int:
    """Bytes of one activation (or gradient) crossing a stage boundary.

    Source: Megatron-LM 2021 (arXiv:2104.04473) Sec. 3.2: b*s*h per micro-batch between
    consecutive stages; Sec. 4.1: with the scatter/gather optimisation each of the t TP
    ranks sends b*s*h/t and the receivers all-gather over NVLink; with sequence parallelism
    the boundary tensor is already sequence-sharded, b*s*h/t (Korthikanti et al. 2022,
    arXiv:2205.05198, Sec. 4.2.2).
    Legend: b = micro_batch_size, s = sequence_length / cp, h = hidden_size, t = tp.
    """
    full = boundary_bytes(ctx.layer)
    sharded = ctx.parallel.sequence_parallel or ctx.pp_scatter_gather
    return -(-full // ctx.parallel.tp) if sharded else full


def scatter_gather_active(ctx: StepContext) -> bool:
    """Whether the stage boundary runs Megatron-LM's scatter/gather: the recipe asks for it
    (`TrainingSpec.pp_scatter_gather`), TP > 1, and no sequence parallelism (whose boundary
    tensor is already sharded).

    Source: Megatron-LM 80389ef6e2 (2022, the sequence-parallel release)
    `megatron/p2p_communication.py: _communicate` splits and gathers only when
    `args.scatter_gather_tensors_in_pipeline and not args.sequence_parallel`; at 6985e58938
    (2021) whenever `scatter_gather_tensors_in_pipeline` (on unless
    `--no-scatter-gather-tensors-in-pipeline`, `megatron/arguments.py`).
    """
    p = ctx.parallel
    return ctx.pp_scatter_gather and p.tp > 1 and not p.sequence_parallel


def boundary_latency_s(ctx: StepContext) -> float:
    """Time from a stage's end of a micro-batch chunk to the neighbour's start on it: one P2P
    of `pp_message_bytes` and, under scatter/gather, the receiver's all-gather of the t
    chunks over its TP group (NVLink within a node).

    Source: Megatron-LM 2021 (arXiv:2104.04473) Sec. 4.1: each TP rank sends b*s*h/t over
    its own InfiniBand card, the receiving ranks all-gather the pieces over NVLink; the
    implementation (`megatron/p2p_communication.py: _communicate` at 6985e58938 and
    80389ef6e2) waits for the sends (`torch.cuda.synchronize()`) before the all-gather
    (`mpu.gather_split_1d_tensor`, `torch.distributed.all_gather` over the TP group), so the
    two add up.
    """
    message = pp_message_bytes(ctx)
    time = call_cost(Collective.P2P, group_placement(ctx.mesh, GroupKind.PP), message,
                     ctx.fabric).time_s
    if scatter_gather_active(ctx):
        time += call_cost(Collective.ALL_GATHER, group_placement(ctx.mesh, GroupKind.TP),
                          message * ctx.parallel.tp, ctx.fabric).time_s
    return time


def sends_per_step(ctx: StepContext) -> tuple[int, int]:
    """(forward sends, backward sends) of this stage's rank in one step.

    A rank sends one activation per micro-batch for each of its model chunks that is not the
    model's last, and one gradient for each chunk that is not the first.
    Source: Megatron-LM 2021 Sec. 2.2.2 (interleaving multiplies P2P by v); V-shaped
    schedules (ZB-V, arXiv:2401.10241 Sec. 6; DualPipeV) keep the two chunks of the last
    rank adjacent; DualPipe (arXiv:2412.19437 Sec. 3.2.1) feeds half of the micro-batches
    from each end through its two mirrored pipelines.
    """
    p, m = ctx.parallel, ctx.num_micro_batches
    s, last = ctx.stage.stage, ctx.parallel.pp - 1
    placement = schedule_traits(p.schedule).placement
    if placement == StagePlacement.BIDIRECTIONAL:
        half = m // 2
        return (half * (s != last) + (m - half) * (s != 0),
                half * (s != 0) + (m - half) * (s != last))
    if placement == StagePlacement.V_SHAPE:
        # chunk 0 runs stage 0 -> last, chunk 1 runs last -> 0; the turn is local.
        forward = m * (s != last) + m * (s != 0)
        return forward, forward
    chunks = p.vpp
    return m * (chunks - (s == last)), m * (chunks - (s == 0))


def pp_items(ctx: StepContext) -> list[TrafficItem]:
    """P2P sends of one stage per step, the scatter/gather all-gathers, the tied embedding;
    under DeepSpeed's pipeline engine (`TrainingSpec.pipe_engine_p2p`) its blocking transfers
    instead (`models.core.traffic.pipe_engine.pipe_engine_items`).

    Assumes: schedules that interleave or split backward overlap P2P with compute in the
    steady state (Megatron --overlap-p2p-comm); warm-up and cool-down transfers, about p - 1
    of the m * chunks per direction, stay exposed; GPipe and 1F1B send blocking.
    """
    p = ctx.parallel
    if p.pp == 1:
        return []
    if ctx.training.pipe_engine_p2p is not None:
        # DeepSpeed's pipeline engine: its own blocking transfers (`pipe_engine_items`).
        return pipe_engine_items(ctx) + _tied_embedding(ctx)
    place = group_placement(ctx.mesh, GroupKind.PP)
    message = pp_message_bytes(ctx)
    forward, backward = sends_per_step(ctx)
    traits = schedule_traits(p.schedule)
    chunk_sends = max(1, ctx.num_micro_batches * traits.num_chunks(p.vpp))
    overlap = 0.0
    if traits.placement == StagePlacement.LOOPED or traits.split_backward:
        overlap = max(0.0, 1.0 - (p.pp - 1) / chunk_sends)
    note = ("steady-state sends overlap compute; warm-up/cool-down ones do not"
            if overlap else "blocking sends between compute steps")
    items = [
        make_item(axis=TrafficAxis.PP, name=f"pp.{phase.value}.p2p", collective=Collective.P2P,
                  phase=phase, frequency=Frequency.PER_MICRO_BATCH, stage=ctx.stage.stage,
                  message_bytes=message, calls_per_step=calls, placement=place,
                  fabric=ctx.fabric, overlap_frac=overlap, overlap_note=note)
        for phase, calls in ((Phase.FORWARD, forward), (Phase.BACKWARD, backward)) if calls
    ]
    if scatter_gather_active(ctx):
        receives = forward + backward
        items.append(make_item(
            axis=TrafficAxis.PP, name="pp.scatter_gather.all_gather",
            collective=Collective.ALL_GATHER, phase=Phase.FORWARD,
            frequency=Frequency.PER_MICRO_BATCH, stage=ctx.stage.stage,
            message_bytes=message * p.tp, calls_per_step=receives,
            placement=group_placement(ctx.mesh, GroupKind.TP), fabric=ctx.fabric, overlap_frac=0.0,
            overlap_note="rebuilds the full tensor after each receive"))
    items.extend(_tied_embedding(ctx))
    return items


def tied_grad_bytes(training: TrainingSpec) -> int:
    """Bytes per element of the tied embedding gradient the step all-reduces between the
    stages holding a copy: the gradient as the runtime keeps it (`grad_dtype`), except under
    DeepSpeed's BF16Optimizer, whose copy is fp32.

    Source: Megatron-LM reduces its main gradient. DeepSpeed's pipeline engine
    (`deepspeed/runtime/pipe/engine.py` `_exec_reduce_tied_grads`) all-reduces
    `weight._hp_grad`, BF16Optimizer's fp32 gradient, when that optimizer runs (v0.6.5
    8164ea9e6d, v0.19.5 cf44300453; `TrainingSpec.bf16_hp_grad_update`) and `weight.grad`
    otherwise (v0.5.0 f28432441b and v0.6.1 ebbcfd5273 through
    `PipelineModule.allreduce_tied_weight_gradients`), the gradient its ZeRO stage 0/1
    optimizer keeps, 16-bit under fp16 (a row's `grad_dtype`)."""
    if training.pipe_engine_p2p is not None and training.bf16_hp_grad_update:
        return int(DType.FP32.num_bytes)
    return int(training.grad_dtype.num_bytes)


def _tied_embedding(ctx: StepContext) -> list[TrafficItem]:
    """All-reduce of the tied word-embedding gradient between the ranks holding a copy.

    Source: Megatron-LM (arXiv:2104.04473, implementation `_allreduce_word_embedding_grads`):
    with pp > 1 the last stage keeps a copy of a tied embedding and the two copies'
    gradients are summed once per step over the embedding group. The copies are where
    `models.core.layout` puts embeddings and heads: first and last rank (also for DualPipe's two
    directions); V-shaped placements keep both on rank 0 and need no exchange.
    Under DeepSpeed's pipeline engine (`TrainingSpec.pipe_engine_p2p`) the tied copies are
    DeepSpeed's TiedLayerSpec ones and the gradient travels in the dtype the engine holds it
    in (`tied_grad_bytes`).
    Legend: message = ceil(V / t) * h gradient elements.
    """
    p, model = ctx.parallel, ctx.model
    if not model.tie_word_embeddings:
        return []
    ranks = word_embedding_ranks(model, p)
    if len(ranks) < 2 or ctx.stage.stage not in ranks:
        return []
    grad_bytes = tied_grad_bytes(ctx.training)
    message = -(-model.vocab_size // p.tp) * model.hidden_size * grad_bytes
    pp_place = group_placement(ctx.mesh, GroupKind.PP)
    intra = pp_place.all_intra_node
    group = len(ranks)
    place = AxisPlacement(kind=GroupKind.PP, group_size=group, num_groups=pp_place.num_groups,
                          all_intra_node=intra, max_nodes_spanned=1 if intra else group,
                          ranks_per_node=group if intra else 1)
    return [make_item(
        axis=TrafficAxis.PP, name="pp.embedding_grad.all_reduce",
        collective=Collective.ALL_REDUCE, phase=Phase.OPTIMIZER, frequency=Frequency.PER_STEP,
        stage=ctx.stage.stage, message_bytes=message, calls_per_step=1, placement=place,
        fabric=ctx.fabric, overlap_frac=0.0,
        overlap_note="after the last backward, before the optimizer step")]


__all__ = ["pp_items", "pp_message_bytes", "sends_per_step", "tied_grad_bytes"]
