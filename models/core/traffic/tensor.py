"""Per-stage step totals of tensor- and context-parallel traffic.

Owns: turning the per-layer TP, CP and expert calls of `traffic.layer` into step items (calls
per step from the stage's layers, micro-batches and recomputed layers), plus the
vocab-parallel embedding and head collectives. Must not: define what a layer sends (that is
`layer.py`) or pipeline and gradient traffic.
"""


from models.core.collectives import Collective
from models.core.mesh import AxisPlacement, GroupKind
from models.core.traffic.context import StepContext, group_placement
from models.core.traffic.items import Frequency, Phase, TrafficAxis, TrafficItem, make_item
from models.core.traffic.layer import (
    LayerCall,
    cp_calls,
    expert_calls,
    has_tp_mlp,
    state_passing_calls,
    tp_block_calls,
)

_TP_NOTE = "not overlapped by default (Megatron --tp-comm-overlap can hide part of it)"


def step_items(ctx: StepContext, calls: list[LayerCall], *, layers: int) -> list[TrafficItem]:
    """Step items of per-layer calls issued by `layers` of the stage's layers: forward and
    backward calls every pass, recompute calls on the recomputed layers only."""
    passes = ctx.passes(layers)
    recomputed = ctx.passes(min(ctx.recomputed_layers, layers))
    items = []
    for call in calls:
        runs = recomputed if call.phase == Phase.RECOMPUTE else passes
        if runs * call.count == 0:
            continue
        items.append(make_item(
            axis=call.axis, name=call.name, collective=call.collective, phase=call.phase,
            frequency=Frequency.PER_LAYER_PER_MICRO_BATCH, stage=ctx.stage.stage,
            message_bytes=call.message_bytes, calls_per_step=runs * call.count,
            placement=call.placement, fabric=ctx.fabric, overlap_frac=call.overlap_frac,
            overlap_note=call.overlap_note))
    return items


def tp_items(ctx: StepContext) -> list[TrafficItem]:
    """TP collectives of one stage per step (`layer.tp_block_calls` per block and layer).

    Deviation: in MoE layers only the attention half and the shared experts are counted here;
    routed-expert communication belongs to the expert-parallel calls.
    """
    if ctx.parallel.tp == 1:
        return []
    lctx = ctx.layer
    mlp_layers = sum(ctx.stage.num_moe_layers if moe else
                     ctx.stage.num_layers - ctx.stage.num_moe_layers
                     for moe in (False, True) if has_tp_mlp(lctx, moe))
    items = step_items(ctx, tp_block_calls(lctx, "attention"), layers=ctx.stage.num_layers)
    items += step_items(ctx, tp_block_calls(lctx, "mlp"), layers=mlp_layers)
    items.extend(_vocab_items(ctx, group_placement(ctx.mesh, GroupKind.TP),
                              ctx.tokens_per_rank * ctx.model.hidden_size * ctx.activation_bytes))
    return items


def _vocab_items(ctx: StepContext, place: AxisPlacement, message: int) -> list[TrafficItem]:
    """Vocab-parallel embedding and output head on the ranks that hold them, per micro-batch.

    Source: Megatron-LM (Shoeybi et al. 2019, arXiv:1909.08053, Sec. 3): the embedding's
    partial lookups are all-reduced (reduce-scattered with SP) in forward; the head's input
    gradient is all-reduced (its input all-gathered with SP) around the parallel GEMM.
    """
    sp, held = ctx.parallel.sequence_parallel, ctx.stage
    embeddings, heads = ctx.passes(held.num_embeddings), ctx.passes(held.num_heads)
    items = []
    if held.num_embeddings:
        items.append(_tp(ctx, place, "tp.embedding.forward",
                         Collective.REDUCE_SCATTER if sp else Collective.ALL_REDUCE,
                         Phase.FORWARD, message, embeddings))
    if held.num_heads:
        if sp:
            items.append(_tp(ctx, place, "tp.head.forward", Collective.ALL_GATHER,
                             Phase.FORWARD, message, heads))
        items.append(_tp(ctx, place, "tp.head.backward",
                         Collective.REDUCE_SCATTER if sp else Collective.ALL_REDUCE,
                         Phase.BACKWARD, message, heads))
    return items


def _tp(ctx: StepContext, place: AxisPlacement, name: str, collective: Collective,
        phase: Phase, message: int, calls: int) -> TrafficItem:
    return make_item(axis=TrafficAxis.TP, name=name, collective=collective, phase=phase,
                     frequency=Frequency.PER_MICRO_BATCH, stage=ctx.stage.stage,
                     message_bytes=message, calls_per_step=calls, placement=place,
                     fabric=ctx.fabric, overlap_frac=0.0, overlap_note=_TP_NOTE)


def ep_items(ctx: StepContext) -> list[TrafficItem]:
    """Expert dispatch/combine of one stage per step (`layer.expert_calls` per MoE layer)."""
    if ctx.parallel.ep == 1 or ctx.stage.num_moe_layers == 0:
        return []
    return step_items(ctx, expert_calls(ctx.layer), layers=ctx.stage.num_moe_layers)


def cp_items(ctx: StepContext) -> list[TrafficItem]:
    """Context-parallel traffic of one stage per step: `layer.cp_calls` per full-attention
    layer, `layer.state_passing_calls` per linear-attention layer."""
    if ctx.parallel.cp == 1:
        return []
    linear = ctx.stage.num_linear_attention_layers
    items = step_items(ctx, cp_calls(ctx.layer), layers=ctx.stage.num_layers - linear)
    if linear:
        items += step_items(ctx, state_passing_calls(ctx.layer), layers=linear)
    return items


__all__ = ["cp_items", "ep_items", "step_items", "tp_items"]
