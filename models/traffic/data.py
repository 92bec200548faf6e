"""Data-parallel traffic: gradient reduction and ZeRO parameter gathers.

Owns: per step, for the dense parameters over the DP x CP group and the routed-expert
parameters over the expert-DP group: the gradient all-reduce (ZeRO-0), reduce-scatter +
all-gather (ZeRO-1/2; per micro-batch reduce-scatter for ZeRO-2), and ZeRO-3's per-layer
parameter all-gathers in forward and backward plus its per-layer gradient reduce-scatter;
the bucketing and the part that overlaps backward. Must not: count memory.
"""

import math

from models.collectives import Collective
from models.mesh import AxisPlacement, GroupKind
from models.traffic.context import StepContext, group_placement
from models.traffic.items import Frequency, Phase, TrafficAxis, TrafficItem, make_item
from models.traffic.layer import zero3_unit_calls

MEGATRON_MIN_BUCKET_PARAMS = 40_000_000
"""Megatron-core's default gradient bucket floor, in parameters.

Source: Megatron-LM `megatron/core/distributed/distributed_data_parallel_config.py`,
`bucket_size` docstring: default max(40000000, 1000000 * dp_size) parameters."""
MEGATRON_BUCKET_PARAMS_PER_DP_RANK = 1_000_000
"""Megatron-core's default bucket growth per data-parallel rank (same source)."""


def bucket_params(dp_size: int) -> int:
    """Megatron-core's default gradient bucket size in parameters for a DP group size.

    Source: Megatron-LM `DistributedDataParallelConfig.bucket_size` (default
    max(40000000, 1000000 * dp_size)); dp_size is the DP x CP group.
    """
    return max(MEGATRON_MIN_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_DP_RANK * dp_size)


def dp_items(ctx: StepContext) -> list[TrafficItem]:
    """Dense-gradient and ZeRO traffic over DP x CP, and expert traffic over expert-DP.

    Source: ZeRO (Rajbhandari et al. 2019, arXiv:1910.02054) Sec. 7.2: plain DP all-reduces
    2 Psi per step; P_os and P_os+g reduce-scatter Psi and all-gather Psi, 2 Psi; P_os+g+p
    all-gathers the parameters in forward and again in backward and reduce-scatters the
    gradients, 3 Psi. Megatron folds CP into the gradient group (`dp-cp`), and expert
    gradients reduce over the expert data-parallel group.
    Legend: Psi = parameters of the rank's model partition.
    With Pipeline ZeRO-2 (`gradient_host_shards`) the gradient reduce-scatters are not
    here: they follow the chunk buffers (`models.step_time.host_gradients`).
    Assumes: gradients travel in grad_dtype, gathered parameters in param_dtype; ZeRO-2 and
    ZeRO-3 reduce-scatter every micro-batch (they keep no full gradient buffer); ZeRO-3
    gathers and reduces one layer (plus embedding, head, MTP module) at a time.
    """
    items: list[TrafficItem] = []
    groups = ((TrafficAxis.DP, GroupKind.DP_CP, ctx.stage.dense_params),
              (TrafficAxis.EDP, GroupKind.EDP, ctx.stage.expert_params))
    for axis, kind, params in groups:
        place = group_placement(ctx.mesh, kind)
        if place.group_size == 1 or params == 0:
            continue
        items.extend(_zero_items(ctx, axis, place, params))
    return items


def _zero_items(ctx: StepContext, axis: TrafficAxis, place: AxisPlacement, params: int
                ) -> list[TrafficItem]:
    zero, m = ctx.parallel.zero_stage, ctx.num_micro_batches
    grad_bytes = params * int(ctx.training.grad_dtype.num_bytes)
    param_bytes = params * int(ctx.training.param_dtype.num_bytes)
    if zero == 3:
        held = ctx.stage
        units = held.num_layers + held.num_embeddings + held.num_heads + held.num_mtp_modules
        per_unit = -(-params // units)
        dense, expert = (per_unit, 0) if axis == TrafficAxis.DP else (0, per_unit)
        calls = ctx.passes(units)
        hide = (units - 1) / units
        return [make_item(axis=axis, name=call.name, collective=call.collective,
                          phase=call.phase, frequency=Frequency.PER_LAYER_PER_MICRO_BATCH,
                          stage=ctx.stage.stage, message_bytes=call.message_bytes,
                          calls_per_step=calls, placement=call.placement, fabric=ctx.fabric,
                          overlap_frac=hide, overlap_note=call.overlap_note)
                for call in zero3_unit_calls(ctx.layer, dense_params=dense,
                                             expert_params=expert)]
    buckets = max(1, math.ceil(params / bucket_params(place.group_size)))
    hide = (buckets - 1) / buckets
    grad_note = "all buckets but the last reduce while backward continues"
    if zero == 0:
        return [_item(ctx, axis, place, "grad_all_reduce", Collective.ALL_REDUCE,
                      Phase.BACKWARD, Frequency.PER_STEP, grad_bytes, buckets, buckets, hide,
                      grad_note)]
    rs_calls, rs_freq = (buckets * m, Frequency.PER_MICRO_BATCH) if zero == 2 else (
        buckets, Frequency.PER_STEP)
    gather = [_item(ctx, axis, place, "param_all_gather", Collective.ALL_GATHER, Phase.OPTIMIZER,
              Frequency.PER_STEP, param_bytes, buckets, buckets, hide,
              "all buckets but the first gather while the next forward runs")]
    if ctx.parallel.gradient_host_shards:
        # Pipeline ZeRO-2 reduces each chunk as it leaves the GPU buffers, not once per
        # step: `models.step_time.host_gradients` owns that traffic and its time.
        return gather
    return [_item(ctx, axis, place, "grad_reduce_scatter", Collective.REDUCE_SCATTER,
                  Phase.BACKWARD, rs_freq, grad_bytes, rs_calls, buckets, hide, grad_note),
            *gather]


def _item(ctx: StepContext, axis: TrafficAxis, place: AxisPlacement, name: str,
          collective: Collective, phase: Phase, frequency: Frequency, total_bytes: int,
          calls: int, pieces: int, overlap: float, note: str) -> TrafficItem:
    """One item whose `total_bytes` per pass is cut into `pieces` equal calls."""
    return make_item(axis=axis, name=f"{axis.value}.{name}", collective=collective,
                     phase=phase, frequency=frequency, stage=ctx.stage.stage,
                     message_bytes=-(-total_bytes // pieces), calls_per_step=calls,
                     placement=place, fabric=ctx.fabric, overlap_frac=overlap,
                     overlap_note=note)


__all__ = ["MEGATRON_BUCKET_PARAMS_PER_DP_RANK", "MEGATRON_MIN_BUCKET_PARAMS", "bucket_params",
           "dp_items"]
