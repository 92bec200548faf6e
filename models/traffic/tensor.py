"""Per-layer traffic: tensor parallelism (with or without Megatron SP) and context parallelism.

Owns: the TP collectives of attention and MLP per layer and micro-batch (all-reduce, or
all-gather + reduce-scatter with sequence parallelism, plus the vocab-parallel embedding and
head), the ring-attention K/V P2P, the Ulysses all-to-alls, and USP's two axes. Must not:
count expert dispatch/combine (the MoE cost model owns it) or pipeline and gradient traffic.
"""

import logging

from api_schemas import ContextParallelKind
from models.collectives import Collective
from models.mesh import AxisPlacement, GroupKind
from models.traffic.context import StepContext, head_dims
from models.traffic.items import Frequency, Phase, TrafficAxis, TrafficItem, make_item

logger = logging.getLogger(__name__)

_TP_NOTE = "not overlapped by default (Megatron --tp-comm-overlap can hide part of it)"


def tp_items(ctx: StepContext) -> list[TrafficItem]:
    """TP collectives of one stage per step.

    Source: Megatron-LM 2021 (Narayanan et al., arXiv:2104.04473) Sec. 3.2: per layer and
    micro-batch, two all-reduces of b*s*h in forward and two in backward, i.e.
    8 b s h (t-1)/t per device with the ring; with sequence parallelism each all-reduce
    becomes an all-gather plus a reduce-scatter of the same tensor, the same volume
    (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4.2.2).
    Legend: b = micro_batch_size, s = sequence_length / cp, h = hidden_size, t = tp.
    Deviation: in MoE layers only the attention half and the shared experts are counted here;
    routed-expert communication belongs to the expert-parallel model.
    Assumes: with SP, Megatron re-gathers the sequence-sharded input of each column-parallel
    GEMM in backward for the weight gradient (overlapped with the input-gradient GEMM); this
    extra all-gather is listed as its own item and is not part of the paper's volume.
    """
    p = ctx.parallel
    if p.tp == 1:
        return []
    place = ctx.mesh.placement(GroupKind.TP)
    message = ctx.tokens_per_rank * ctx.model.hidden_size * ctx.activation_bytes
    mlp_layers = _mlp_tp_layers(ctx)
    blocks = [("attention", ctx.stage.num_layers), ("mlp", mlp_layers)]
    items: list[TrafficItem] = []
    for block, layers in blocks:
        if layers == 0:
            continue
        calls = ctx.passes(layers)
        recompute = ctx.passes(min(ctx.recomputed_layers, layers))
        for phase, collective, count in _tp_pattern(p.sequence_parallel, calls, recompute):
            items.append(_tp(ctx, place, f"tp.{block}.{phase.value}.{collective.value}",
                             collective, phase, Frequency.PER_LAYER_PER_MICRO_BATCH, message,
                             count, 0.0, _TP_NOTE))
        if p.sequence_parallel:
            items.append(_tp(ctx, place, f"tp.{block}.backward.weight_grad_input_all_gather",
                             Collective.ALL_GATHER, Phase.BACKWARD,
                             Frequency.PER_LAYER_PER_MICRO_BATCH, message, calls, 1.0,
                             "overlapped with the input-gradient GEMM (Megatron SP)"))
    items.extend(_vocab_items(ctx, place, message))
    return items


def _mlp_tp_layers(ctx: StepContext) -> int:
    """Layers whose MLP runs tensor-parallel: dense layers, plus MoE layers with shared experts."""
    moe = ctx.model.moe
    dense = ctx.stage.num_layers - ctx.stage.num_moe_layers
    shared = ctx.stage.num_moe_layers if moe is not None and moe.num_shared_experts else 0
    return dense + shared


def _tp_pattern(sequence_parallel: bool, calls: int, recompute: int
                ) -> list[tuple[Phase, Collective, int]]:
    """One block (attention or MLP): forward f/g pair, backward pair, recomputed forward."""
    if not sequence_parallel:
        pattern = [(Phase.FORWARD, Collective.ALL_REDUCE, calls),
                   (Phase.BACKWARD, Collective.ALL_REDUCE, calls),
                   (Phase.RECOMPUTE, Collective.ALL_REDUCE, recompute)]
    else:
        pattern = [(Phase.FORWARD, Collective.ALL_GATHER, calls),
                   (Phase.FORWARD, Collective.REDUCE_SCATTER, calls),
                   (Phase.BACKWARD, Collective.REDUCE_SCATTER, calls),
                   (Phase.BACKWARD, Collective.ALL_GATHER, calls),
                   (Phase.RECOMPUTE, Collective.ALL_GATHER, recompute),
                   (Phase.RECOMPUTE, Collective.REDUCE_SCATTER, recompute)]
    return [entry for entry in pattern if entry[2] > 0]


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
                         Phase.FORWARD, Frequency.PER_MICRO_BATCH, message, embeddings, 0.0,
                         _TP_NOTE))
    if held.num_heads:
        if sp:
            items.append(_tp(ctx, place, "tp.head.forward", Collective.ALL_GATHER,
                             Phase.FORWARD, Frequency.PER_MICRO_BATCH, message, heads, 0.0,
                             _TP_NOTE))
        items.append(_tp(ctx, place, "tp.head.backward",
                         Collective.REDUCE_SCATTER if sp else Collective.ALL_REDUCE,
                         Phase.BACKWARD, Frequency.PER_MICRO_BATCH, message, heads, 0.0,
                         _TP_NOTE))
    return items


def _tp(ctx: StepContext, place: AxisPlacement, name: str, collective: Collective,
        phase: Phase, frequency: Frequency, message: int, calls: int, overlap: float,
        note: str) -> TrafficItem:
    return make_item(axis=TrafficAxis.TP, name=name, collective=collective, phase=phase,
                     frequency=frequency, stage=ctx.stage.stage, message_bytes=message,
                     calls_per_step=calls, placement=place, fabric=ctx.fabric,
                     overlap_frac=overlap, overlap_note=note)


def cp_items(ctx: StepContext) -> list[TrafficItem]:
    """Context-parallel traffic of one stage per step: ring P2P, Ulysses all-to-all, or both."""
    p = ctx.parallel
    if p.cp == 1:
        return []
    place = ctx.mesh.placement(GroupKind.CP)
    if p.cp_kind == ContextParallelKind.RING:
        return _ring_items(ctx, place, ring=p.cp, ulysses=1)
    if p.cp_kind == ContextParallelKind.ULYSSES:
        return _ulysses_items(ctx, place, ulysses=p.cp)
    u = p.ulysses_degree or 1
    inner, outer = ctx.mesh.split_placement(GroupKind.CP, u)
    items = _ulysses_items(ctx, inner, ulysses=u) if u > 1 else []
    return items + (_ring_items(ctx, outer, ring=p.cp // u, ulysses=u) if p.cp > u else [])


def _ring_items(ctx: StepContext, place: AxisPlacement, *, ring: int, ulysses: int
                ) -> list[TrafficItem]:
    """Ring attention: each of ring-1 rounds passes one K/V block to the next rank.

    Source: Ring Attention (Liu et al. 2023, arXiv:2310.01889, Sec. 3): the K/V block of the
    local sequence shard rotates around the ring, ring-1 hops in forward; backward rotates
    K/V again and the dK/dV accumulators, 2 (ring-1) hops. USP (Fang and Zhao 2024,
    arXiv:2405.07719, Sec. 3) runs the ring on the heads left after its Ulysses axis.
    Legend: block = b * (s / cp) * (g_local / u) * (d_k + d_v) * bytes, u = ulysses degree.
    Assumes: KV heads fewer than the Ulysses degree are replicated (one per rank).
    """
    dims = head_dims(ctx.model, ctx.parallel.tp)
    kv_heads = max(1, dims.kv_heads // ulysses)
    tokens = ctx.tokens_per_rank * ulysses
    block = tokens * kv_heads * (dims.qk_dim + dims.v_dim) * ctx.activation_bytes
    per_layer = ctx.passes(ctx.stage.num_layers)
    recompute = ctx.passes(ctx.recomputed_layers)
    note = "overlaps with the attention of the block in hand when that takes longer"
    rows = [(Phase.FORWARD, ring - 1), (Phase.BACKWARD, 2 * (ring - 1)),
            (Phase.RECOMPUTE, ring - 1 if recompute else 0)]
    return [
        make_item(axis=TrafficAxis.CP, name=f"cp.ring.{phase.value}.kv_p2p",
                  collective=Collective.P2P, phase=phase,
                  frequency=Frequency.PER_LAYER_PER_MICRO_BATCH, stage=ctx.stage.stage,
                  message_bytes=block,
                  calls_per_step=hops * (recompute if phase == Phase.RECOMPUTE else per_layer),
                  placement=place, fabric=ctx.fabric, overlap_frac=1.0, overlap_note=note)
        for phase, hops in rows if hops > 0
    ]


def _ulysses_items(ctx: StepContext, place: AxisPlacement, *, ulysses: int
                   ) -> list[TrafficItem]:
    """Ulysses: all-to-alls of Q, K, V before attention and of O after, each way.

    Source: DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv:2309.14509, Sec. 3.2): per layer,
    an all-to-all of Q, K, V (3 N h / P per link) and of the output (N h / P), 4 N h / P in
    all, against Megatron-SP's 4 N h; backward mirrors forward.
    Legend: N = b * sequence_length, h = hidden_size, P = ulysses; a rank's buffer for Q is
    b * (s / cp) * (a / t) * d.
    Assumes: KV heads fewer than P are replicated to P (each rank receives one).
    """
    dims = head_dims(ctx.model, ctx.parallel.tp)
    kv_heads = max(dims.kv_heads, ulysses)
    b_act, tokens = ctx.activation_bytes, ctx.tokens_per_rank
    tensors = {"q": tokens * dims.q_heads * dims.qk_dim * b_act,
               "k": tokens * kv_heads * dims.qk_dim * b_act,
               "v": tokens * kv_heads * dims.v_dim * b_act,
               "o": tokens * dims.q_heads * dims.v_dim * b_act}
    per_layer = ctx.passes(ctx.stage.num_layers)
    recompute = ctx.passes(ctx.recomputed_layers)
    items = []
    for phase, calls in ((Phase.FORWARD, per_layer), (Phase.BACKWARD, per_layer),
                         (Phase.RECOMPUTE, recompute)):
        if calls == 0:
            continue
        for tensor, nbytes in tensors.items():
            items.append(make_item(
                axis=TrafficAxis.CP, name=f"cp.ulysses.{phase.value}.{tensor}_all_to_all",
                collective=Collective.ALL_TO_ALL, phase=phase,
                frequency=Frequency.PER_LAYER_PER_MICRO_BATCH, stage=ctx.stage.stage,
                message_bytes=nbytes, calls_per_step=calls, placement=place,
                fabric=ctx.fabric, overlap_frac=0.0,
                overlap_note="on the critical path: attention waits for its heads"))
    return items


__all__ = ["cp_items", "tp_items"]
