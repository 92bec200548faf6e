"""Lower bounds of the pipeline makespan and of the step time that the search prunes with,
kept beside the exact step (`models.core.step_time.assembly`) they bound and never mixed
into it.

Owns: `pipeline_makespan_bound` (closed forms and the busiest rank's work),
`simulated_makespan_bound` (the simulation without a policy), `simulation_units`,
`step_time_bound` (one configuration) and `step_time_floors_s` (every activation policy on
a mesh, per ZeRO stage). Must not: assemble a step, or bound a policy's added work
(`models.core.step_time.policy_bound`).
"""

import dataclasses
import math
from collections.abc import Mapping

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig, RecomputeMode
from api_schemas.training import TrainingSpec
from models.core.compute import OpTimes, layer_compute
from models.core.layout import StageLayout, pipeline_layout
from models.core.pipeline import OpDurations, StagePlacement, closed_form_makespan, schedule_traits
from models.core.rank_states import micro_batch_count
from models.core.runtime_features import grad_reduce_overlapped
from models.core.step_time.assembly import pipeline_makespans, ranks_work_s
from models.core.step_time.exposure import sync_exposed_s, zero3_exposed_s
from models.core.step_time.makespan import (
    crossings_per_micro_batch,
    first_run_units,
    schedule_chunks,
    virtual_stage_durations,
)
from models.core.step_time.setting import StepSetting, p2p_latency_s, step_context, step_setting
from models.core.step_time.stage import (
    StageTime,
    TimingKind,
    chunk_timing_kinds,
    compute_context,
    kind_layers,
    stage_times,
    window_caps_s,
)
from models.core.step_time.step_terms import least_optimizer_s, rank_tails, slowest_gpu_wait_s
from models.core.traffic.data import dp_items
from models.core.traffic.items import Frequency, Phase, TrafficAxis, TrafficItem
from models.core.traffic.pipeline import pp_items
from models.core.traffic.weights import StageWeights, stage_weights


def _staged(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
            cluster: ClusterSpec) -> tuple[StepSetting, tuple[StageLayout, ...], list[StageTime]]:
    """(setting, layouts, every rank's stage times) of a configuration: what the bounds
    below read."""
    setting = step_setting(spec, training, parallel, cluster)
    layouts = pipeline_layout(spec, parallel)
    return setting, layouts, stage_times(spec, training, parallel, cluster, layouts,
                                         setting.num_micro_batches, setting.fabric,
                                         setting.groups)


def pipeline_makespan_bound(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                            cluster: ClusterSpec) -> float:
    """A lower bound of the pipeline makespan, exact for uniform stages without latency.

    Fixed-order schedules executed as soon as possible are monotone in op durations, so the
    closed form at the lightest virtual stage's F, B and W (no P2P latency) is a lower bound;
    so is m times the busiest rank's work, and so is one micro-batch's dependency chain
    (its forward on every virtual stage, then its input-gradient backward on every one),
    which dominates when there are fewer micro-batches than stages. Where the schedule has
    no exact closed form, the busiest rank's work bounds it, and for the linear ZB-H2 also
    the fill (the lightest forwards of all but one stage) plus the lightest rank's work.
    Source: the closed forms of `models.core.pipeline.closed_forms`.
    """
    setting, _, stages = _staged(spec, training, parallel, cluster)
    return _makespan_bound(setting, stages)


def simulation_units(training: TrainingSpec, parallel: ParallelConfig) -> int:
    """`models.core.step_time.makespan.first_run_units` of this configuration's pipeline: the size
    of the first simulation of its shape (micro-batch x chunk x rank units)."""
    return first_run_units(parallel.schedule, num_stages=parallel.pp,
                           num_micro_batches=micro_batch_count(training, parallel),
                           num_chunks=schedule_chunks(parallel),
                           group_size=parallel.microbatch_group_size)


def simulated_makespan_bound(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                             cluster: ClusterSpec) -> float:
    """A lower bound of the pipeline makespan of every plan that differs from `parallel` only
    in its activation policy, FP8 storage, offload or where it keeps gradient shards: the
    simulated makespan of `parallel`'s own op durations without P2P latency. Pass the mesh
    without a policy; tighter than `pipeline_makespan_bound` wherever the stages are uneven
    or the schedule has no exact closed form, at the price of one simulation.

    Why it holds: a fixed-order schedule run as soon as possible starts every op at a
    maximum of sums of op durations and latencies along dependency paths (a max-plus
    system), so its makespan never decreases when any duration or latency grows; and every
    policy choice only adds to op durations (recomputation, FP8 casts, offload stalls,
    ZeRO-3 gathers under the same ZeRO timing) or to the tail after the flush (remote
    offload, Pipeline ZeRO-2). The long-pipeline extrapolation of `pipeline_makespan` is
    used as it is for the plans themselves (exact where the steady state is affine).
    Source: the simulator of `models.core.pipeline` (reference Sec. 1.3, as-soon-as-possible
    execution of fixed op lists).

    Raises:
        InvalidSpecError: as `pipeline_makespan_bound`.
    """
    setting, _, stages = _staged(spec, training, parallel, cluster)
    return pipeline_makespans(parallel, stages, setting.num_micro_batches, 0.0, split=False)[0]


def step_time_bound(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                    cluster: ClusterSpec) -> float:
    """A lower bound of `estimate_step(...).step_time_s` for this exact configuration:
    `pipeline_makespan_bound` plus the largest per-step tail over ranks (exposed DP sync
    behind the rank's own chunk times, tied-embedding all-reduce, optimizer step).

    The step is the makespan plus the critical rank's tail, the largest of all ranks'
    (`estimate_step` picks it so), plus non-negative overheads; the tails here are the
    ones `estimate_step` computes, so only the makespan is bounded rather than simulated.

    Raises:
        InvalidSpecError: as `pipeline_makespan_bound`.
    """
    setting, layouts, stages = _staged(spec, training, parallel, cluster)
    span = _makespan_bound(setting, stages)
    tails = rank_tails(setting, layouts, stages, stage_weights(spec, parallel))
    # The plan's own stages: its wait exactly, as `estimate_step` books it.
    return span + max((sum(tail.values()) for tail in tails), default=0.0) \
        + slowest_gpu_wait_s(parallel, stages, setting.num_micro_batches)


STALL_SEARCH_STEPS = 80
"""Ternary-search steps of `step_time_floor_s` over a rank's offload stall."""

ZERO3_WINDOWS = (math.inf, math.inf, 0.0)
"""The window caps (forward, backward, largest transfer) of `step_time_floors_s` under
ZeRO-3, whose gathers lengthen the ops: unbounded windows, no offload stall."""


def step_time_floors_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                       cluster: ClusterSpec, *, makespan_bounds_s: Mapping[int, float],
                       max_offload: float = 1.0) -> dict[int, float]:
    """Per ZeRO stage z of `makespan_bounds_s`, a lower bound of `estimate_step(...).
    step_time_s` for every activation policy on `parallel`'s mesh at stage z that offloads
    at most `max_offload` of the stored activations (`parallel` itself carries none; its
    own ZeRO stage is not read), given `makespan_bounds_s[z]`, a lower bound of the
    pipeline makespan of every such plan (`pipeline_makespan_bound` without a policy).

    The step is the makespan plus the critical rank's tail, the largest of all ranks'
    (`models.core.step_time.step_terms.rank_tail_s`: exposed DP sync, tied-embedding
    all-reduce, optimizer step; `estimate_step` picks it so), plus non-negative overheads;
    so it is at least the makespan plus the tail of the busiest rank without a policy (one
    rank, to keep the bound cheap). Its optimizer step is counted at the lesser of the GPU
    and the CPU step over its shard (`least_optimizer_s`), so the floor holds for plans
    with any share of the optimizer states in host memory too. A policy
    changes that rank's DP exposure only through the windows it hides behind, and only
    shrinks it as they grow: the windows are at most the rank's plain ones plus the largest
    recomputation and FP8 casts (`models.core.step_time.stage.window_caps_s`) plus its offload
    stall s. The stall also lengthens the rank's busy time, which the makespan is at least,
    by s per micro-batch crossing. So makespan + tail >= the minimum over s in [0, the
    largest transfer] of max(makespan bound, busy time + crossings x s) + tail at windows
    (caps + s); the function is convex in s (a maximum of linear terms plus the exposure, a
    sum of convex non-increasing pieces), minimised by ternary search and lowered by the
    width of the last interval times the steepest descent the exposure can have (one window
    length per hidden repetition). Under ZeRO-3, whose gathers lengthen the ops
    (`zero3_exposed_s` per layer, as `stage_time` adds them), the windows are unbounded.
    Pipeline ZeRO-2's offload only adds a non-negative term and is left out.

    Raises:
        InvalidSpecError: as `pipeline_makespan_bound`.
        ValueError: `parallel` carries an activation policy.
    """
    _require_no_policy(parallel)
    setting = step_setting(spec, training, parallel, cluster)
    m = setting.num_micro_batches
    layouts = pipeline_layout(spec, parallel)
    # ZeRO-0, 1 and 2 give the same op durations: their stage times and windows are shared;
    # ZeRO-3's ops add each layer's exposed gathers and reduce-scatters to them.
    timed = parallel.model_copy(update={"zero_stage": 0})
    stages = stage_times(spec, training, timed, cluster, layouts, m, setting.fabric,
                         setting.groups)
    weights = stage_weights(spec, parallel)
    busy = ranks_work_s(parallel, stages, m)
    busy3 = _zero3_busy_s(setting, layouts, busy) if 3 in makespan_bounds_s else busy
    windows: dict[int, tuple[float, float, float]] = {}
    floors: dict[int, float] = {}
    wait = slowest_gpu_wait_s(parallel, stages, m, recompute=False)
    for zero, makespan in makespan_bounds_s.items():
        work = busy3 if zero == 3 else busy
        # The busiest rank's tail stands for all (the critical rank's is no smaller).
        rank = max(range(len(layouts)), key=work.__getitem__)
        if zero != 3 and rank not in windows:
            windows[rank] = window_caps_s(spec, training, timed, cluster, layouts[rank],
                                          stages[rank], fabric=setting.fabric,
                                          groups=setting.groups, max_offload=max_offload)
        caps = ZERO3_WINDOWS if zero == 3 else windows[rank]
        floors[zero] = _rank_floor_s(setting, zero, (layouts, rank), weights[rank], makespan,
                                     work[rank], caps) + wait
    return floors


def _require_no_policy(parallel: ParallelConfig) -> None:
    """Raises ValueError where `parallel` carries an activation policy."""
    if (parallel.stage_policies is not None or parallel.recompute != RecomputeMode.NONE
            or parallel.fp8_activations or parallel.activation_offload_frac > 0):
        raise ValueError("the step floor is taken over policies; pass the mesh without one")


def _zero3_busy_s(setting: StepSetting, layouts: tuple[StageLayout, ...],
                  busy: list[float]) -> list[float]:
    """Each rank's work under ZeRO-3: its work without a policy plus the exposed ZeRO-3
    gathers and reduce-scatters of its layers (`_zero3_kind_exposure_s`), every micro-batch
    crossing."""
    spec, parallel = setting.spec, setting.parallel
    crossings = setting.num_micro_batches * crossings_per_micro_batch(parallel)
    exposure = _zero3_kind_exposure_s(dataclasses.replace(
        setting, parallel=parallel.model_copy(update={"zero_stage": 3})))
    return [work + crossings * sum([exposure[kind]
                                    for kinds in chunk_timing_kinds(spec, layout.chunks)
                                    for kind in kinds])
            for work, layout in zip(busy, layouts, strict=True)]


def _rank_floor_s(setting: StepSetting, zero: int,
                  ranks: tuple[tuple[StageLayout, ...], int], held: StageWeights,
                  makespan: float, busy: float, caps: tuple[float, float, float]) -> float:
    """A lower bound of the makespan plus the tail of the rank holding `held` whose work is
    `busy` (`ranks`: every rank's layout and this rank's index), at ZeRO stage `zero`, plus
    the step's CPU optimizer: its tied-embedding all-reduce, the least optimizer time
    (`least_optimizer_s`), plus the least span over its offload stall (`_least_span`) under
    the window caps (forward, backward, largest transfer)."""
    setting = dataclasses.replace(
        setting, parallel=setting.parallel.model_copy(update={"zero_stage": zero}))
    m = setting.num_micro_batches
    ctx = step_context(setting, held)
    fixed = sum(i.time_per_step_s for i in pp_items(ctx)
                if i.axis == TrafficAxis.PP and i.phase == Phase.OPTIMIZER)
    # Whatever share of the optimizer states a plan keeps in host memory (the search may
    # choose it), its optimizer takes at least the lesser of the GPU and the CPU step.
    fixed += least_optimizer_s(setting.spec, setting.training, setting.parallel,
                               setting.cluster, *ranks)
    crossings = m * crossings_per_micro_batch(setting.parallel)
    return fixed + _least_span(tuple(dp_items(ctx)), grad_reduce_overlapped(setting.training),
                               m, makespan, busy, crossings, caps)


def _zero3_kind_exposure_s(setting: StepSetting) -> dict[TimingKind, float]:
    """Per layer timing kind (`timing_kind`), the exposed ZeRO-3 gathers and reduce-scatters
    one layer of it adds to its forward and backward per micro-batch (`zero3_exposed_s`, as
    `stage_time` adds them). The exposure is what a layer's compute does not hide, so it is
    larger for a cheaper layer (a sliding-window one) than for a costlier one of the same
    MoE kind: one layer per MoE kind would overstate it on the others."""
    spec, training, parallel = setting.spec, setting.training, setting.parallel
    groups, fabric = setting.groups, setting.fabric
    ctx = compute_context(training, parallel, setting.cluster)
    exposed = {}
    for kind, index, _ in kind_layers(spec):
        lc = layer_compute(spec, index, ctx)
        exposed[kind] = sum(zero3_exposed_s(spec, index, training, parallel, groups, fabric,
                                            lc))
    return exposed


def _least_span(items: tuple[TrafficItem, ...], overlap: bool, m: int, makespan: float,
                busy: float, crossings: float, caps: tuple[float, float, float]) -> float:
    """min over the stall s in [0, transfer] of max(makespan, busy + crossings x s) + the
    DP exposure behind windows (forward, backward + s), from below (`step_time_floors_s`);
    `caps`: (forward, backward, transfer)."""
    forward, backward, transfer = caps

    def span(stall: float) -> float:
        windows = (OpTimes(forward_s=forward, backward_input_s=backward + stall),)
        return (max(makespan, busy + crossings * stall)
                + sync_exposed_s(items, overlap=overlap, num_micro_batches=m,
                                 chunk_times=windows))

    low, high = 0.0, transfer
    for _ in range(STALL_SEARCH_STEPS if high > 0 else 0):
        left, right = low + (high - low) / 3, high - (high - low) / 3
        if span(left) <= span(right):
            high = right
        else:
            low = left
    steepest = sum(m if i.frequency == Frequency.PER_MICRO_BATCH else 1 for i in items)
    return min(span(low), span(high)) - (high - low) * steepest


def _makespan_bound(setting: StepSetting, stages: list[StageTime]) -> float:
    """`pipeline_makespan_bound` from the ranks' stage times."""
    parallel, m = setting.parallel, setting.num_micro_batches
    if parallel.pp == 1:
        return pipeline_makespans(parallel, stages, m, p2p_latency_s(setting))[0]
    durations = virtual_stage_durations(parallel, [(st.stage, st.chunk_times) for st in stages])
    busiest = max(ranks_work_s(parallel, stages, m))
    traits = schedule_traits(parallel.schedule)
    if not traits.overlapped_pairs:
        # One micro-batch's forwards through every virtual stage, then its input-gradient
        # backwards back: a path of the dependency graph (DualPipe's paired ops excepted).
        busiest = max(busiest, sum(durations.forward_s) + sum(durations.backward_input_s))
    closed = _closed_form(parallel, m, durations)
    if closed is not None:
        return max(busiest, closed)
    if traits.placement != StagePlacement.LINEAR:
        return busiest  # V and bidirectional placements start work on every rank at once
    # ZB-H2 (linear): the last rank cannot start before one forward has crossed every
    # earlier stage, then it does all its own work.
    fill = sum(sorted(durations.forward_s)[: len(durations.forward_s) - 1])
    return max(busiest, fill + min(ranks_work_s(parallel, stages, m)))


def _closed_form(parallel: ParallelConfig, m: int, durations: OpDurations) -> float | None:
    return closed_form_makespan(parallel.schedule, num_stages=parallel.pp,
                                num_micro_batches=m, num_chunks=schedule_chunks(parallel),
                                forward_s=min(durations.forward_s),
                                backward_input_s=min(durations.backward_input_s),
                                backward_weight_s=min(durations.backward_weight_s),
                                group_size=parallel.microbatch_group_size)




__all__ = [
    "STALL_SEARCH_STEPS",
    "pipeline_makespan_bound",
    "simulated_makespan_bound",
    "simulation_units",
    "step_time_bound",
    "step_time_floors_s",
]
