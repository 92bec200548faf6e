"""The collectives one layer issues for one micro-batch: the single definition of what moves.

Owns: `LayerCall` (collective, phase, message, calls per layer pass, the group's placement
and the cost of one call) and the per-layer rules: TP per block (all-reduce, or all-gather
+ reduce-scatter with sequence parallelism), CP (ring K/V hops, Ulysses all-to-alls, USP),
expert dispatch/combine over EP, and ZeRO-3's per-unit parameter all-gathers and gradient
reduce-scatters. The step totals of `models.core.traffic` and the step time of
`models.core.step_time` are both built from these calls. Must not: decide what is exposed
(`models.core.step_time` applies the overlap rules) or count parameters (`models.core.params`).
"""

from dataclasses import dataclass, field

from api_schemas import (
    ContextParallelKind,
    DType,
    MoeDispatcher,
    Zero3Collectives,
)
from models.core.collectives import Collective, CollectiveCost, all_to_all_split_cost
from models.core.deepspeed_2021 import gathered_tensors, gradient_buckets
from models.core.linear_attention import conv_halo_bytes, kcp_fragment_bytes
from models.core.mesh import AxisPlacement, GroupKind
from models.core.moe import DispatchDedup, EpRouting, ep_dispatch_split
from models.core.runtime_features import dispatcher, userbuffers_tp_overlap
from models.core.traffic.context import (
    LayerTrafficContext,
    group_placement,
    head_dims,
    split_group_placement,
)
from models.core.traffic.items import Phase, TrafficAxis, call_cost, timing_ranks_per_node
from models.errors import InvalidSpecError

TP_NOTE = "not overlapped by default (Megatron --tp-comm-overlap can hide part of it)"
RING_NOTE = "overlaps with the attention of the block in hand when that takes longer"
ULYSSES_NOTE = "on the critical path: attention waits for its heads"
ALL_GATHER_CP_NOTE = "on the critical path: attention waits for the whole sequence's K and V"
EXPERT_NOTE = "hidden only where the schedule pairs it with another micro-batch's compute"
DISPATCH_DEDUP = {MoeDispatcher.ALLTOALL: DispatchDedup.PER_EXPERT,
                  MoeDispatcher.DEEPEP: DispatchDedup.PER_NODE}
"""Copies each dispatcher sends per token. Megatron-Core `token_dispatcher.py`
`MoEAlltoAllTokenDispatcher`: tokens are permuted to one row per routed expert
(`num_out_tokens = num_tokens * topk` when dropless) and those rows go through
`all_to_all` with per-rank splits, so a token bound for two experts of one rank or node
travels twice. DeepEP (README, normal kernels; DeepSeek-V3 arXiv:2412.19437 Sec. 3.2.2):
one RDMA copy per destination node, forwarded over NVLink."""
COUNTS_NOTE = "latency-bound; the host waits for its result before the dispatch"
TOKEN_COUNT_BYTES = 8
"""Bytes of one per-expert token count in the dispatcher's metadata gather (torch.long)."""
ZERO3_NOTE = "prefetched: the next unit's gather overlaps this unit's compute"


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerCall:
    """One collective of a layer pass (one micro-batch through one layer), `count` times."""

    axis: TrafficAxis
    name: str
    collective: Collective
    phase: Phase
    message_bytes: int
    count: int
    """Calls per layer pass (ring hops for CP)."""
    placement: AxisPlacement
    cost: CollectiveCost
    """Cost of one call."""
    overlap_frac: float
    """Fraction that can hide behind compute (an upper bound, see `TrafficItem`)."""
    overlap_note: str
    share: float = 1.0
    """Fraction of the layers of its kind that issue it: a hybrid model's CP calls are
    split between its full-attention layers and its linear-attention layers, which layers
    grouped by MoE kind mix (`cp_calls`)."""
    time_s: float = field(init=False, repr=False, compare=False)
    """Time of all `count` calls of one layer pass (weighted by `share`), set from the other
    fields once (the cost model reads it per configuration of every layer kept)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "time_s", self.cost.time_s * self.count * self.share)


def _call(lctx: LayerTrafficContext, *, axis: TrafficAxis, name: str, collective: Collective,
          phase: Phase, message: int, count: int, placement: AxisPlacement, overlap: float,
          note: str) -> LayerCall:
    return LayerCall(axis=axis, name=name, collective=collective, phase=phase,
                     message_bytes=message, count=count, placement=placement,
                     cost=call_cost(collective, placement, message, lctx.fabric),
                     overlap_frac=overlap, overlap_note=note)


def tp_block_calls(lctx: LayerTrafficContext, block: str) -> list[LayerCall]:
    """TP collectives of one block ("attention" or "mlp") for one layer pass.

    Source: Megatron-LM 2021 (Narayanan et al., arXiv:2104.04473) Sec. 3.2: per layer and
    micro-batch, two all-reduces of b*s*h in forward and two in backward (one per block and
    direction), 8 b s h (t-1)/t per device with the ring; with sequence parallelism each
    all-reduce becomes an all-gather plus a reduce-scatter of the same tensor, the same
    volume (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4.2.2). Recomputation repeats
    the forward pair.
    Legend: b = micro_batch_size, s = sequence_length / cp, h = hidden_size, t = tp.
    Assumes: with SP, Megatron re-gathers the sequence-sharded input of each column-parallel
    GEMM in backward for the weight gradient, overlapped with the input-gradient GEMM.
    """
    p = lctx.parallel
    if p.tp == 1:
        return []
    place = group_placement(lctx.mesh, GroupKind.TP)
    message = lctx.tokens_per_rank * lctx.model.hidden_size * lctx.activation_bytes
    if p.sequence_parallel:
        pattern = [(Phase.FORWARD, Collective.ALL_GATHER),
                   (Phase.FORWARD, Collective.REDUCE_SCATTER),
                   (Phase.BACKWARD, Collective.REDUCE_SCATTER),
                   (Phase.BACKWARD, Collective.ALL_GATHER),
                   (Phase.RECOMPUTE, Collective.ALL_GATHER),
                   (Phase.RECOMPUTE, Collective.REDUCE_SCATTER)]
    else:
        pattern = [(Phase.FORWARD, Collective.ALL_REDUCE),
                   (Phase.BACKWARD, Collective.ALL_REDUCE),
                   (Phase.RECOMPUTE, Collective.ALL_REDUCE)]
    dgrad = (Collective.REDUCE_SCATTER if p.sequence_parallel else Collective.ALL_REDUCE
             ) if tp_dgrad_overlapped(lctx) else None
    calls = [_call(lctx, axis=TrafficAxis.TP,
                   name=(f"tp.{block}.{phase.value}.{c.value}"
                         + (WGRAD_OVERLAP_SUFFIX if overlapped else "")),
                   collective=c, phase=phase, message=message, count=1, placement=place,
                   overlap=1.0 if overlapped else 0.0,
                   note=WGRAD_OVERLAP_NOTE if overlapped else TP_NOTE)
             for phase, c in pattern
             for overlapped in [phase == Phase.BACKWARD and c == dgrad]]
    if p.sequence_parallel:
        calls.append(_call(lctx, axis=TrafficAxis.TP,
                           name=f"tp.{block}.backward.weight_grad_input_all_gather",
                           collective=Collective.ALL_GATHER, phase=Phase.BACKWARD,
                           message=message, count=1, placement=place, overlap=1.0,
                           note="overlapped with the input-gradient GEMM (Megatron SP)"))
    return calls


WGRAD_OVERLAP_SUFFIX = ".under_wgrad"
"""Name suffix of the TP call a column-parallel layer issues asynchronously under its
weight-gradient GEMM (`tp_dgrad_overlapped`)."""
WGRAD_OVERLAP_NOTE = ("asynchronous under the column-parallel layer's weight-gradient GEMM "
                      "(Megatron-LM --async-tensor-model-parallel-allreduce; Transformer "
                      "Engine 'Overlap dgrad-RS/AR with wgrad')")


def tp_dgrad_overlapped(lctx: LayerTrafficContext) -> bool:
    """Whether a block's backward input-gradient collective (the all-reduce of the column-
    parallel input gradient, a reduce-scatter with SP) runs under the weight-gradient GEMM.

    Source: Megatron-LM commits 3f65246911 / 16c90445e7 (September 2021,
    `megatron/mpu/layers.py` `LinearWithGradAccumulationAndAsyncAllreduce`, flag
    `--no-async-tensor-model-parallel-allreduce`: on by default): the column-parallel
    backward launches the all-reduce of grad_input with `async_op=True`, computes the
    weight gradient, then waits; at 80389ef6e2 (June 2022, the sequence-parallel release of
    Korthikanti et al. arXiv:2205.05198) `LinearWithGradAccumulationAndAsyncCommunication`
    does the same with the SP reduce-scatter. Transformer Engine's Linear, LayerNormLinear
    and LayerNormMLP do the same ("Overlap dgrad-RS/AR with wgrad"). Megatron-LM at
    6985e58938 (August 2021, arXiv:2104.04473's runs) and the Megatron-DeepSpeed forks
    (BigScience `megatron/mpu/layers.py`: `copy_to_tensor_model_parallel_region`, a
    synchronous backward all-reduce) do not. Userbuffers overlap (`overlap_tp_comm` with SP,
    `userbuffers_tp_overlap`) has its own exposure and is left to it.
    """
    t = lctx.training
    return bool(t.tp_dgrad_overlap) and not userbuffers_tp_overlap(
        t, lctx.parallel.sequence_parallel)


def has_tp_mlp(lctx: LayerTrafficContext, moe_layer: bool) -> bool:
    """Whether a layer's MLP runs tensor-parallel: a dense MLP, or shared experts (routed
    experts talk over EP instead)."""
    moe = lctx.model.moe
    return not moe_layer or (moe is not None and moe.num_shared_experts > 0)


def cp_calls(lctx: LayerTrafficContext, linear: bool = False) -> list[LayerCall]:
    """Context-parallel collectives of one layer pass: ring hops, Ulysses all-to-alls, or
    both (USP: Ulysses inside the first `ulysses_degree` ranks, ring across) for a
    full-attention layer; the state all-gather of a linear-attention layer (`linear`:
    `state_passing_calls`), whatever `cp_kind` says (`models.core.linear_attention.
    cp_kinds_for_layer`)."""
    if lctx.parallel.cp == 1:
        return []
    return state_passing_calls(lctx) if linear else _kv_exchange_calls(lctx)


STATE_NOTE = ("on the critical path: a rank's inter-chunk pass waits for the states of the "
              "ranks before it")


def state_passing_calls(lctx: LayerTrafficContext) -> list[LayerCall]:
    """State-passing context parallelism of one linear-attention layer pass: one
    all-gather of every rank's fixed-size state fragment (per local head the final state
    h, d_k x d_v, and the transition M, d_k x d_k, fp32) in forward, again in a recomputed
    forward, and one of the gradient fragments in backward (the state gradient flows from
    later ranks to earlier ones through the same affine maps); plus the short
    convolutions' halo, the previous rank's last W - 1 tokens of q, k, v, by P2P each way.
    Nothing here grows with the sequence length: the K/V of softmax attention do.
    Source: flash-linear-attention `fla/ops/cp` (`chunk_delta_h.py`: the [H, K, K + V]
    fp32 buffer, `all_gather_into_tensor`; `causal_conv1d` with `conv1d_kernel_size`);
    seed ledger Sec. 7.5 (K3: one all-gather of fixed-size fragments, prefix-combined);
    Kimi Linear arXiv:2510.26692 Sec. 3 (the state recurrence).
    Assumes: the backward exchanges gradient fragments of the forward's size; the merge
    runs after the gather (not overlapped).
    Legend: message = H_t d_k (d_k + d_v) 4 bytes (`kcp_fragment_bytes`), per rank.
    """
    p = lctx.parallel
    place = group_placement(lctx.mesh, GroupKind.CP)
    fragment = kcp_fragment_bytes(lctx.model, tp=p.tp)
    gathered = fragment * p.cp
    rows = ((Phase.FORWARD, "state_all_gather"), (Phase.RECOMPUTE, "state_all_gather"),
            (Phase.BACKWARD, "state_grad_all_gather"))
    calls = [_call(lctx, axis=TrafficAxis.CP, name=f"cp.state.{phase.value}.{name}",
                   collective=Collective.ALL_GATHER, phase=phase, message=gathered, count=1,
                   placement=place, overlap=0.0, note=STATE_NOTE) for phase, name in rows]
    halo = conv_halo_bytes(lctx.model, micro_batch_size=p.micro_batch_size, tp=p.tp,
                           activation_bytes=lctx.activation_bytes)
    if halo:
        calls += [_call(lctx, axis=TrafficAxis.CP, name=f"cp.state.{phase.value}.conv_halo_p2p",
                        collective=Collective.P2P, phase=phase, message=halo, count=1,
                        placement=place, overlap=0.0, note=STATE_NOTE)
                  for phase in (Phase.FORWARD, Phase.BACKWARD, Phase.RECOMPUTE)]
    return calls


def _kv_exchange_calls(lctx: LayerTrafficContext) -> list[LayerCall]:
    """The CP calls of a full-attention layer under the configured `cp_kind`."""
    p = lctx.parallel
    if p.cp_kind == ContextParallelKind.RING:
        return _ring_calls(lctx, group_placement(lctx.mesh, GroupKind.CP), ring=p.cp,
                           ulysses=1)
    if p.cp_kind == ContextParallelKind.ULYSSES:
        return _ulysses_calls(lctx, group_placement(lctx.mesh, GroupKind.CP), ulysses=p.cp)
    if p.cp_kind == ContextParallelKind.ALL_GATHER:
        return _gathered_kv_calls(lctx, group_placement(lctx.mesh, GroupKind.CP))
    u = p.ulysses_degree or 1
    inner, outer = split_group_placement(lctx.mesh, GroupKind.CP, u)
    calls = _ulysses_calls(lctx, inner, ulysses=u) if u > 1 else []
    return calls + (_ring_calls(lctx, outer, ring=p.cp // u, ulysses=u) if p.cp > u else [])


def _ring_calls(lctx: LayerTrafficContext, place: AxisPlacement, *, ring: int, ulysses: int
                ) -> list[LayerCall]:
    """Ring attention: each of ring-1 rounds passes one K/V block to the next rank.

    Source: Ring Attention (Liu et al. 2023, arXiv:2310.01889, Sec. 3): ring-1 K/V hops in
    forward; backward rotates K/V again and the dK/dV accumulators, 2 (ring-1) hops. USP
    (Fang and Zhao 2024, arXiv:2405.07719, Sec. 3) runs the ring on the heads left after its
    Ulysses axis.
    Legend: block = b * (s / cp) * (g_local / u) * (d_k + d_v) * bytes, u = ulysses degree.
    Assumes: KV heads fewer than the Ulysses degree are replicated (one per rank).
    """
    dims = head_dims(lctx.model, lctx.parallel.tp)
    kv_heads = max(1, dims.kv_heads // ulysses)
    tokens = lctx.tokens_per_rank * ulysses
    block = tokens * kv_heads * (dims.qk_dim + dims.v_dim) * lctx.activation_bytes
    rows = ((Phase.FORWARD, ring - 1), (Phase.BACKWARD, 2 * (ring - 1)),
            (Phase.RECOMPUTE, ring - 1))
    return [_call(lctx, axis=TrafficAxis.CP, name=f"cp.ring.{phase.value}.kv_p2p",
                  collective=Collective.P2P, phase=phase, message=block, count=hops,
                  placement=place, overlap=1.0, note=RING_NOTE) for phase, hops in rows]


def _gathered_kv_calls(lctx: LayerTrafficContext, place: AxisPlacement) -> list[LayerCall]:
    """All-gather context parallelism: the whole sequence's K and V gathered before each
    attention pass (forward, recomputed forward, and again in backward), and the
    reduce-scatter of dK and dV after backward; none of it overlaps.

    Source: Llama 3 (arXiv:2407.21783 Sec. 3.3.2): K and V are all-gathered and attention
    runs on the local Q chunk; the all-gather is exposed on the critical path but small, as
    GQA makes K and V much smaller than Q; Megatron-LM `--cp-comm-type allgather`
    (Transformer Engine's all-gather context parallelism gathers again in backward and
    reduce-scatters the K/V gradients).
    Legend: message = b * s * (g_local) * (d_k + d_v) * bytes, the gathered K and V of the
    rank's KV heads over the full sequence.
    """
    dims = head_dims(lctx.model, lctx.parallel.tp)
    gathered = (lctx.tokens_per_rank * lctx.parallel.cp * dims.kv_heads
                * (dims.qk_dim + dims.v_dim) * lctx.activation_bytes)
    rows = ((Phase.FORWARD, "kv_all_gather", Collective.ALL_GATHER),
            (Phase.RECOMPUTE, "kv_all_gather", Collective.ALL_GATHER),
            (Phase.BACKWARD, "kv_all_gather", Collective.ALL_GATHER),
            (Phase.BACKWARD, "dkv_reduce_scatter", Collective.REDUCE_SCATTER))
    return [_call(lctx, axis=TrafficAxis.CP, name=f"cp.all_gather.{phase.value}.{name}",
                  collective=collective, phase=phase, message=int(gathered), count=1,
                  placement=place, overlap=0.0, note=ALL_GATHER_CP_NOTE)
            for phase, name, collective in rows]


def _ulysses_calls(lctx: LayerTrafficContext, place: AxisPlacement, *, ulysses: int
                   ) -> list[LayerCall]:
    """Ulysses: all-to-alls of Q, K, V before attention and of O after, each way.

    Source: DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv:2309.14509, Sec. 3.2): per layer,
    an all-to-all of Q, K, V (3 N h / P per link) and of the output (N h / P), 4 N h / P in
    all; backward mirrors forward.
    Legend: N = b * sequence_length, h = hidden_size, P = ulysses; a rank's buffer for Q is
    b * (s / cp) * (a / t) * d.
    Assumes: KV heads fewer than P are replicated to P (each rank receives one).
    """
    dims = head_dims(lctx.model, lctx.parallel.tp)
    kv_heads = max(dims.kv_heads, ulysses)
    b_act, tokens = lctx.activation_bytes, lctx.tokens_per_rank
    tensors = {"q": tokens * dims.q_heads * dims.qk_dim * b_act,
               "k": tokens * kv_heads * dims.qk_dim * b_act,
               "v": tokens * kv_heads * dims.v_dim * b_act,
               "o": tokens * dims.q_heads * dims.v_dim * b_act}
    return [_call(lctx, axis=TrafficAxis.CP, name=f"cp.ulysses.{phase.value}.{t}_all_to_all",
                  collective=Collective.ALL_TO_ALL, phase=phase, message=nbytes, count=1,
                  placement=place, overlap=0.0, note=ULYSSES_NOTE)
            for phase in (Phase.FORWARD, Phase.BACKWARD, Phase.RECOMPUTE)
            for t, nbytes in tensors.items()]


def expert_calls(lctx: LayerTrafficContext) -> list[LayerCall]:
    """Dispatch and combine all-to-alls of one MoE layer pass, forward, backward and
    recomputed forward.

    The bytes each rank sends are split between NVLink and the NICs by
    `models.core.moe.ep_dispatch_split`: with DeepEP one IB copy per destination node, then
    NVLink forwards (node-limited routing caps the nodes per token at the router's group
    limit); with Megatron's alltoall dispatcher one row per (token, expert) assignment
    (`DISPATCH_DEDUP`), whatever the nodes. Scaled by
    the assumed load imbalance, and timed by `all_to_all_split_cost`. Dispatch travels in
    FP8 under FP8 compute, combine in 16 bit. Before each forward dispatch the ranks
    all-gather their per-expert token counts (int64, one per expert), a latency-bound call
    the host then waits on (`models.core.moe.host_issue.moe_host_sync_s`); backward reuses
    the splits.
    Source: DeepSeek-V3 arXiv:2412.19437 Sec. 3.2.2 (FP8 dispatch, BF16 combine); GShard
    arXiv:2006.16668 (dispatch and combine all-to-alls; backward mirrors them); Megatron-Core
    `token_dispatcher.py` `MoEAlltoAllTokenDispatcher.preprocess`
    (`gather_from_sequence_parallel_region(num_local_tokens_per_expert, group=tp_ep_group)`).
    Assumes: the counts gather is timed over the EP group (the TP x EP group when TP > 1 is
    larger: optimistic).
    """
    moe, p = lctx.model.moe, lctx.parallel
    if moe is None or p.ep <= 1:
        return []
    place = group_placement(lctx.mesh, GroupKind.EP)
    k = timing_ranks_per_node(place, Collective.ALL_TO_ALL)
    per_rank = max(1, int(lctx.tokens_per_rank * p.etp / p.tp))
    nodes = max(1, place.group_size // k)
    limit = min(nodes, moe.topk_groups) if moe.num_expert_groups > 1 else None
    scale = lctx.training.moe_load_imbalance
    dispatch_bytes = 1 if lctx.training.compute_dtype == DType.FP8 else 2
    calls = []
    for part, element_bytes in (("dispatch", dispatch_bytes), ("combine", 2)):
        payload = int(per_rank * moe.top_k * lctx.model.hidden_size * element_bytes * scale)
        try:
            routing = EpRouting(top_k=moe.top_k, num_experts=moe.num_experts,
                                ep_size=place.group_size, ranks_per_node=k,
                                max_nodes_per_token=limit,
                                dedup=DISPATCH_DEDUP[dispatcher(lctx.training)])
            split = ep_dispatch_split(routing, tokens_per_rank=per_rank,
                                      hidden_size=lctx.model.hidden_size,
                                      bytes_per_elem=element_bytes)
            cost = all_to_all_split_cost(
                num_ranks=place.group_size, ranks_per_node=k,
                intra_bytes_per_rank=int(split.intra_node_bytes * scale),
                inter_bytes_per_rank=int(split.inter_node_bytes * scale), fabric=lctx.fabric)
        except InvalidSpecError:
            cost = call_cost(Collective.ALL_TO_ALL, place, payload, lctx.fabric)
        for phase in (Phase.FORWARD, Phase.BACKWARD, Phase.RECOMPUTE):
            calls.append(LayerCall(axis=TrafficAxis.EP, name=f"ep.{phase.value}.{part}",
                                   collective=Collective.ALL_TO_ALL, phase=phase,
                                   message_bytes=payload, count=1, placement=place,
                                   cost=cost, overlap_frac=0.0, overlap_note=EXPERT_NOTE))
    counts = moe.num_experts * TOKEN_COUNT_BYTES * place.group_size
    for phase in (Phase.FORWARD, Phase.RECOMPUTE):
        calls.append(_call(lctx, axis=TrafficAxis.EP, name=f"ep.{phase.value}.token_counts",
                           collective=Collective.ALL_GATHER, phase=phase, message=counts,
                           count=1, placement=place, overlap=0.0, note=COUNTS_NOTE))
    return calls


DEEPSPEED_MODULES_PER_LAYER = 4
"""Linear modules of a transformer layer that DeepSpeed ZeRO-3 gathers one at a time, in
order (its hooks fire per `nn.Module` with parameters): the QKV and output projections and
the two MLP projections of Megatron-DeepSpeed's `ParallelTransformerLayer`
(`query_key_value`, `dense`, `dense_h_to_4h`, `dense_4h_to_h`); the norms' parameters are
negligible."""


def zero3_unit_calls(lctx: LayerTrafficContext, *, dense_params: int, expert_params: int
                     ) -> list[LayerCall]:
    """ZeRO-3 traffic of one unit (layer, embedding, head) per micro-batch pass: the
    parameter all-gather before forward and before backward, the gradient reduce-scatter
    after backward; dense weights over DP x CP, routed experts over expert-DP.

    Source: ZeRO (Rajbhandari et al. 2019, arXiv:1910.02054) Sec. 7.2.2: P_os+g+p
    all-gathers the parameters in forward and again in backward and reduce-scatters the
    gradients, 3 Psi per step; PyTorch FSDP (Zhao et al. 2023, arXiv:2304.11277) Sec. 3.3:
    one unit at a time, the next unit's gather issued while the current unit computes.
    Legend: `dense_params`, `expert_params` = the unit's parameters on one rank after TP
    and EP x ETP (before ZeRO sharding).
    Two FSDP settings drop calls from the pass. Without resharding after forward
    (`fsdp_reshard_after_forward` false; Llama 3 arXiv:2407.21783 Sec. 3.3.2) the unit stays
    gathered to the end of the step, as the memory ledger keeps it: no per-pass gather at
    all, one per step (`models.core.traffic.data.dp_items`). torch.distributed.pipelining
    runs FSDP2 so (pytorch/pytorch 88fa1e7170 `torch/distributed/pipelining/stage.py`,
    `backward_maybe_with_nosync`: `set_reshard_after_backward(False)` on every backward but
    the last); Llama 3's one-layer chunks hold several micro-batches between forward and
    backward, so resharding between them would bring back the gather Sec. 3.3.2 avoids.
    Deferred gradient sync (`fsdp_defer_grad_sync`, `set_requires_gradient_sync(False)`
    likewise): `dp_items` books the reduce-scatter once per step. DeepSpeed 2021
    (`zero3_collectives` per_parameter): one call per tensor, `_deepspeed_2021_rows`.
    """
    p, tr = lctx.parallel, lctx.training
    if p.zero_stage != 3:
        return []
    skipped: set[str] = set()
    if not p.fsdp_reshard_after_forward:
        skipped.update(("forward.param_all_gather", "backward.param_all_gather"))
    if p.fsdp_defer_grad_sync:
        skipped.add("backward.grad_reduce_scatter")
    # DeepSpeed of 2021 (no FSDP units) issues one call per gathered parameter tensor and
    # all-reduces flat gradient buckets (`models.core.deepspeed_2021`).
    runtime_2021 = tr.zero3_collectives == Zero3Collectives.PER_PARAMETER and not p.fsdp
    tensors = gathered_tensors(lctx.model, p.tp) if runtime_2021 else 1
    calls: list[LayerCall] = []
    for axis, kind, count in ((TrafficAxis.DP, GroupKind.DP_CP, dense_params),
                              (TrafficAxis.EDP, GroupKind.EDP, expert_params)):
        place = group_placement(lctx.mesh, kind)
        if place.group_size <= 1 or count <= 0:
            continue
        gather = count * int(tr.param_dtype.num_bytes)
        rows = [("forward.param_all_gather", Collective.ALL_GATHER, Phase.FORWARD, gather,
                 tensors),
                ("backward.param_all_gather", Collective.ALL_GATHER, Phase.BACKWARD, gather,
                 tensors)]
        if runtime_2021:
            rows += _deepspeed_2021_rows(lctx, count, tensors)
        else:
            rows.append(("backward.grad_reduce_scatter", Collective.REDUCE_SCATTER,
                         Phase.BACKWARD, count * int(tr.grad_dtype.num_bytes), 1))
        for name, collective, phase, message, calls_per_pass in rows:
            if name in skipped:
                continue
            calls.append(_call(lctx, axis=axis, name=f"{axis.value}.zero3.{name}",
                               collective=collective, phase=phase,
                               message=-(-message // calls_per_pass), count=calls_per_pass,
                               placement=place, overlap=1.0, note=ZERO3_NOTE))
    return calls


def _deepspeed_2021_rows(lctx: LayerTrafficContext, params: int, tensors: int
                         ) -> list[tuple[str, Collective, Phase, int, int]]:
    """The 2021 DeepSpeed rows of a unit beside its forward and backward gathers: the
    gradients all-reduced in flat buckets in the parameters' 16-bit type (`allreduce_always_
    fp32` off by default), and the gathers again before a recomputed forward (DeepSpeed's
    `CheckpointFunction.backward` re-runs the layer's forward, whose pre-forward hooks fetch
    the released parameters; charged only where the layer is fully recomputed). Source:
    `models.core.deepspeed_2021.gradient_buckets`; DeepSpeed v0.3.13
    `deepspeed/runtime/activation_checkpointing/checkpointing.py` (`ctx.run_function` under
    `torch.enable_grad()`) and `deepspeed/runtime/zero/stage3.py` (`_pre_forward_module_hook`
    -> `fetch_sub_module`)."""
    grad = params * int(lctx.training.param_dtype.num_bytes)
    gather = params * int(lctx.training.param_dtype.num_bytes)
    return [("backward.grad_all_reduce", Collective.ALL_REDUCE, Phase.BACKWARD, grad,
             gradient_buckets(params)),
            ("recompute.param_all_gather", Collective.ALL_GATHER, Phase.RECOMPUTE, gather,
             tensors)]


__all__ = ["LayerCall", "cp_calls", "expert_calls", "has_tp_mlp", "state_passing_calls",
           "tp_block_calls",
           "zero3_unit_calls"]
