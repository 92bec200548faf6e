"""Data-parallel traffic: gradient reduction and ZeRO parameter gathers.

Owns: per step, for the dense parameters over the DP x CP group and the routed-expert
parameters over the expert-DP group: the gradient all-reduce (ZeRO-0), reduce-scatter +
all-gather (ZeRO-1/2; per micro-batch reduce-scatter for ZeRO-2), and ZeRO-3's per-layer
parameter all-gathers in forward and backward plus its per-layer gradient reduce-scatter;
the bucketing and the part that overlaps backward. Must not: count memory.
"""

import math

from api_schemas.parallel import ParallelConfig
from models.core.collectives import Collective
from models.core.mesh import AxisPlacement, GroupKind
from models.core.pipeline import schedule_traits
from models.core.traffic.context import StepContext, group_placement
from models.core.traffic.items import Frequency, Phase, TrafficAxis, TrafficItem, make_item
from models.core.traffic.layer import zero3_unit_calls

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
    With Pipeline ZeRO-2 (`gradient_host_shards`) the gradient reduce-scatter follows the
    chunk buffers instead: one per eviction (`chunk_evictions`), timed and exposed by
    `models.core.step_time.host_gradients`.
    Assumes: gradients travel in grad_dtype, gathered parameters in param_dtype; ZeRO-2 and
    ZeRO-3 reduce-scatter every micro-batch (they keep no full gradient buffer); ZeRO-3
    gathers and reduces one layer (plus embedding, head, MTP module) at a time. An FSDP
    plan that keeps its units gathered (`fsdp_reshard_after_forward` false) gathers every
    unit once per step, before its first forward (`zero3_unit_calls`). An FSDP
    plan that defers its gradient sync (`fsdp_defer_grad_sync`) instead keeps each unit's
    unsharded gradients for the whole step and reduce-scatters every unit once, after the
    last micro-batch's backward, overlapped with it (torch.distributed.pipelining with FSDP2;
    the same once-per-step reduction MegaScale arXiv:2402.15627 Sec. 3.2 and Megatron-LM's
    distributed optimizer run, which the ZeRO-1 items express).
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
        return _zero3_items(ctx, axis, place, params)
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
        return [_chunk_reduce_item(ctx, axis, place, params), *gather]
    return [_item(ctx, axis, place, "grad_reduce_scatter", Collective.REDUCE_SCATTER,
                  Phase.BACKWARD, rs_freq, grad_bytes, rs_calls, buckets, hide, grad_note),
            *gather]


def _zero3_items(ctx: StepContext, axis: TrafficAxis, place: AxisPlacement, params: int
                 ) -> list[TrafficItem]:
    """ZeRO-3's items over one group: each unit's calls per pass (`zero3_unit_calls`), plus
    the once-per-step gather of units kept gathered and the deferred reduce-scatter."""
    held = ctx.stage
    units = held.num_layers + held.num_embeddings + held.num_heads + held.num_mtp_modules
    per_unit = -(-params // units)
    dense, expert = (per_unit, 0) if axis == TrafficAxis.DP else (0, per_unit)
    calls = ctx.passes(units)
    # A recomputed forward's gathers (DeepSpeed 2021) run only for the recomputed layers.
    recomputed = ctx.passes(ctx.recomputed_layers)
    hide = (units - 1) / units
    once: list[TrafficItem] = []
    if ctx.parallel.fsdp_defer_grad_sync:
        once.append(_item(ctx, axis, place, "zero3.deferred_grad_reduce_scatter",
                          Collective.REDUCE_SCATTER, Phase.BACKWARD, Frequency.PER_STEP,
                          params * int(ctx.training.grad_dtype.num_bytes), units, units, hide,
                          "one per unit after the step's last backward; all but the last "
                          "unit's reduce while that backward continues"))
    if not ctx.parallel.fsdp_reshard_after_forward:
        once.append(_item(ctx, axis, place, "zero3.step.forward.param_all_gather",
                          Collective.ALL_GATHER, Phase.FORWARD, Frequency.PER_STEP,
                          params * int(ctx.training.param_dtype.num_bytes), units, units, hide,
                          "one per unit before the step's first forward; all but the first "
                          "unit's gather while the previous unit computes"))
    return once + [make_item(axis=axis, name=call.name, collective=call.collective,
                             phase=call.phase, frequency=Frequency.PER_LAYER_PER_MICRO_BATCH,
                             stage=ctx.stage.stage, message_bytes=call.message_bytes,
                             calls_per_step=(recomputed if call.phase == Phase.RECOMPUTE
                                             else calls) * call.count,
                             placement=call.placement, fabric=ctx.fabric,
                             overlap_frac=hide, overlap_note=call.overlap_note)
                   for call in zero3_unit_calls(ctx.layer, dense_params=dense,
                                                expert_params=expert)]


GRADIENT_BUFFER_SLOTS = 2
"""Chunk-sized gradient buffers a rank keeps on the GPU under Pipeline ZeRO-2: one slot
accumulates the chunk now in backward, the other drains (reduces and copies to the host) or
is filled ahead. Source: Kimi K3 arXiv:2607.24653, as the research ledger (Sec. 9.5, 9.8)
summarises it."""

CHUNK_REDUCE = "grad_reduce_scatter_chunk"
"""Name (after the axis) of Pipeline ZeRO-2's per-chunk gradient reduce-scatter, whose
exposure `models.core.step_time.host_gradients` owns."""


def chunk_evictions(parallel: ParallelConfig, num_micro_batches: int) -> int:
    """How many times per step a rank's chunks leave the GPU gradient buffers under Pipeline
    ZeRO-2: each is one reduce-scatter and host accumulation of that chunk's gradients.

    Source: Megatron-LM interleaved 1F1B (Narayanan et al. 2021, arXiv:2104.04473 Sec. 2.2;
    `megatron/core/pipeline_parallel/schedules.py`, `get_model_chunk_id`): a rank runs a
    group of `microbatch_group_size` (default: the pipeline size) micro-batches on one chunk
    before moving to the next, so backward visits each of its v chunks ceil(m / group)
    times; Kimi K3 (ledger Sec. 9.5, 9.8) keeps `GRADIENT_BUFFER_SLOTS` chunk buffers, so
    with v <= 2 every chunk keeps its buffer for the whole step and is reduced once at the
    end, while with v > 2 every visit ends in an eviction.
    Legend: v = chunks per rank (`schedule_traits(...).num_chunks`), m = micro-batches.
    Assumes: chunk visits of a group are contiguous in backward (the interleaved order); a
    schedule with one or two chunks (1F1B, V shapes) never evicts before the step ends.
    """
    v = schedule_traits(parallel.schedule).num_chunks(parallel.vpp)
    if v <= GRADIENT_BUFFER_SLOTS:
        return v
    group = parallel.microbatch_group_size or parallel.pp
    return v * math.ceil(num_micro_batches / group)


def _chunk_reduce_item(ctx: StepContext, axis: TrafficAxis, place: AxisPlacement,
                       params: int) -> TrafficItem:
    """Pipeline ZeRO-2: every eviction reduce-scatters one chunk's gradients (the rank's
    parameters / v) in Megatron-size buckets, instead of one reduce-scatter per step.
    Source: Kimi K3 (ledger Sec. 9.5); ZeRO arXiv:1910.02054 Sec. 7.2 for the volume."""
    chunks = schedule_traits(ctx.parallel.schedule).num_chunks(ctx.parallel.vpp)
    chunk_bytes = math.ceil(params / chunks) * int(ctx.training.grad_dtype.num_bytes)
    buckets = max(1, math.ceil(params / chunks / bucket_params(place.group_size)))
    calls = buckets * chunk_evictions(ctx.parallel, ctx.num_micro_batches)
    return _item(ctx, axis, place, CHUNK_REDUCE, Collective.REDUCE_SCATTER, Phase.BACKWARD,
                 Frequency.PER_STEP, chunk_bytes, calls, buckets, 0.0,
                 "drains while the rank computes its next chunk visit (Pipeline ZeRO-2)")


def _item(ctx: StepContext, axis: TrafficAxis, place: AxisPlacement, name: str,
          collective: Collective, phase: Phase, frequency: Frequency, total_bytes: int,
          calls: int, pieces: int, overlap: float, note: str) -> TrafficItem:
    """One item whose `total_bytes` per pass is cut into `pieces` equal calls."""
    return make_item(axis=axis, name=f"{axis.value}.{name}", collective=collective,
                     phase=phase, frequency=frequency, stage=ctx.stage.stage,
                     message_bytes=-(-total_bytes // pieces), calls_per_step=calls,
                     placement=place, fabric=ctx.fabric, overlap_frac=overlap,
                     overlap_note=note)


__all__ = ["CHUNK_REDUCE", "GRADIENT_BUFFER_SLOTS", "MEGATRON_BUCKET_PARAMS_PER_DP_RANK",
           "MEGATRON_MIN_BUCKET_PARAMS", "bucket_params", "chunk_evictions", "dp_items"]
