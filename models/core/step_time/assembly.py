"""Assembly of one optimizer step: the pipeline makespan, the per-step terms after it, and a
breakdown whose terms add up to the step time.

Owns: `StepEstimate` (step time, breakdown, tokens/s, TFLOP/s per GPU, MFU and HFU with
their FLOP conventions), `estimate_step`, `pipeline_inputs`, and the split of the makespan
into busy time, bubble and exposed pipeline P2P. Breakdown identity: step_time = compute +
recompute + sum(exposed_comm) + offload_stall + bubble + optimizer + sum(overheads), the
wait for the slowest GPU among the overheads. Must not: search or bound the step for one
(`models.core.step_time.bounds`), size memory, or define traffic or the per-step terms
(`models.core.step_time.step_terms`).
"""

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import (
    FullLayers,
    ParallelConfig,
    PipelineSchedule,
    RecomputeMode,
    RecomputeModule,
)
from api_schemas.training import TrainingSpec, VisionPlacement
from models.core.compute import OpTimes
from models.core.flops import StepFlops, step_flops
from models.core.layout import StageLayout, pipeline_layout
from models.core.memory import memory_ledger
from models.core.pipeline import OpDurations
from models.core.step_time.makespan import (
    crossings_per_micro_batch,
    pipeline_makespan,
    schedule_chunks,
    virtual_stage_durations,
)
from models.core.step_time.remote_offload import REMOTE_ACTIVATIONS, remote_offload_cost
from models.core.step_time.setting import StepSetting, p2p_latency_s, step_setting
from models.core.step_time.stage import StageTime, layer_mode, stage_times
from models.core.step_time.step_terms import (
    GRAD_UPDATE,
    OFFLOAD_ROUND_TRIP,
    SLOWEST_GPU,
    ZERO3_COPIES,
    rank_tails,
    slowest_gpu_wait_s,
    step_overheads,
)
from models.core.traffic.weights import stage_weights
from models.core.vision_pipeline import stage0_vision_times, vision_encoder, vision_step_cost

FLOP_CONVENTION = ("causal attention counted as the kernels compute it (half the score and "
                   "value matrices); the Megatron-LM / PaLM full-attention figure is "
                   "tflops_per_gpu_full_attention / mfu_full_attention")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEstimate:
    """Predicted time of one optimizer step and its breakdown (a model, not a measurement).

    The terms add up: step_time_s = compute_s + recompute_s + sum(exposed_comm_s) +
    offload_stall_s + bubble_s + optimizer_s + sum(overheads_s)."""

    step_time_s: float
    pipeline_makespan_s: float
    compute_s: float
    recompute_s: float
    bubble_s: float
    exposed_comm_s: dict[str, float]
    offload_stall_s: float
    optimizer_s: float
    overheads_s: dict[str, float]
    """Per-step terms outside the pipeline and the optimizer, by name."""
    critical_stage: int
    num_micro_batches: int
    model_flop: float
    """Model FLOPs of the step, causal attention as the kernels compute it."""
    model_flop_full_attention: float
    """Model FLOPs with the full attention matrix (Megatron-LM / PaLM convention)."""
    hardware_flop: float
    """Model FLOPs plus recomputation, causal attention."""
    hardware_flop_full_attention: float
    """Hardware FLOPs with the full attention matrix (Megatron-LM 2021 Eq. 3 convention)."""
    world_size: int
    tokens_per_step: int
    peak_flop_per_s: float
    stages: tuple[StageTime, ...]

    @property
    def breakdown_s(self) -> dict[str, float]:
        """Every term of the step, by name; the values add up to `step_time_s`."""
        terms = {"compute": self.compute_s, "recompute": self.recompute_s,
                 "pipeline bubble": self.bubble_s, "offload": self.offload_stall_s,
                 "optimizer": self.optimizer_s}
        terms.update({f"{axis} communication": t for axis, t in self.exposed_comm_s.items()})
        terms.update(self.overheads_s)
        return terms

    @property
    def tokens_per_s(self) -> float:
        """Training tokens per second over the cluster."""
        return self.tokens_per_step / self.step_time_s

    def _tflops_per_gpu(self, flop: float) -> float:
        """`flop` FLOPs a step as TFLOP/s per GPU (the step time, the world size)."""
        return flop / self.step_time_s / self.world_size / 1e12

    @property
    def tflops_per_gpu(self) -> float:
        """Model TFLOP/s per GPU (no recomputation; causal attention, `FLOP_CONVENTION`)."""
        return self._tflops_per_gpu(self.model_flop)

    @property
    def tflops_per_gpu_full_attention(self) -> float:
        """Model TFLOP/s per GPU in the Megatron-LM / PaLM convention (full attention)."""
        return self._tflops_per_gpu(self.model_flop_full_attention)

    @property
    def hardware_tflops_per_gpu(self) -> float:
        """Hardware TFLOP/s per GPU (recomputation counted)."""
        return self._tflops_per_gpu(self.hardware_flop)

    @property
    def hardware_tflops_per_gpu_full_attention(self) -> float:
        """Hardware TFLOP/s per GPU with the full attention matrix counted."""
        return self._tflops_per_gpu(self.hardware_flop_full_attention)

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation against the dense peak of the compute format
        (`FLOP_CONVENTION`)."""
        return self.tflops_per_gpu * 1e12 / self.peak_flop_per_s

    @property
    def mfu_full_attention(self) -> float:
        """MFU in the Megatron-LM / PaLM convention (full attention matrix counted)."""
        return self.tflops_per_gpu_full_attention * 1e12 / self.peak_flop_per_s

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation."""
        return self.hardware_tflops_per_gpu * 1e12 / self.peak_flop_per_s

    @property
    def bottleneck(self) -> str:
        """The largest term of the breakdown, named for people."""
        terms = self.breakdown_s
        return max(terms, key=lambda k: terms[k])


def rank_work_s(parallel: ParallelConfig, stage: StageTime, m: int) -> float:
    """Busy time of one rank over a step: every micro-batch crosses every chunk of the rank,
    except under DualPipe, where each micro-batch crosses one of the rank's two stages."""
    per_micro_batch = sum([t.total_s for t in stage.chunk_times])
    return m * crossings_per_micro_batch(parallel) * per_micro_batch


def ranks_work_s(parallel: ParallelConfig, stages: Iterable[StageTime], m: int) -> list[float]:
    """`rank_work_s` of each of `stages` (the crossings read once; each chunk's F + B + W
    summed as `OpTimes.total_s` sums it)."""
    crossings = m * crossings_per_micro_batch(parallel)
    return [crossings * sum([t.forward_s + t.backward_input_s + t.backward_weight_s
                             for t in stage.chunk_times]) for stage in stages]


def pipeline_makespans(parallel: ParallelConfig, stages: list[StageTime], m: int,
                       p2p_s: float, *, split: bool = True) -> tuple[float, float]:
    """(makespan, makespan without P2P latency) of the pipeline; without `split` the second
    is not simulated and equals the first."""
    if parallel.pp == 1 and len(stages[0].chunk_times) == 1:
        span = m * stages[0].chunk_times[0].total_s
        return span, span
    durations = virtual_stage_durations(parallel, [(st.stage, st.chunk_times) for st in stages])
    chunks = schedule_chunks(parallel)
    group = parallel.microbatch_group_size
    span = pipeline_makespan(parallel.schedule, num_stages=parallel.pp, num_micro_batches=m,
                             num_chunks=chunks, durations=durations, p2p_latency_s=p2p_s,
                             group_size=group)
    if p2p_s <= 0 or not split:
        return span, span
    ideal = pipeline_makespan(parallel.schedule, num_stages=parallel.pp, num_micro_batches=m,
                              num_chunks=chunks, durations=durations, p2p_latency_s=0.0,
                              group_size=group)
    return span, ideal




def estimate_step(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  cluster: ClusterSpec, *, layouts: tuple[StageLayout, ...] | None = None,
                  split_pipeline_idle: bool = True) -> StepEstimate:
    """The predicted step time of a configuration and its breakdown.

    The pipeline makespan comes from the discrete-event simulator run on the schedule's op
    lists with each virtual stage's own F, B and W (exposed collectives, recomputation and
    offload stalls folded in) and the P2P time between neighbouring ranks as the latency.
    The busiest rank's work is split into its terms; the makespan without P2P latency minus
    that work is the bubble (DualPipe's and ZB-V's idle time included), and the latency's
    share is the exposed PP communication. The rank with the longest per-step tail (DP sync,
    tied-embedding all-reduce, optimizer) ends the step. With `split_pipeline_idle=False`
    (the search, which needs only the step time) the second simulation is skipped and the
    P2P latency's share stays in the bubble; the step time is the same.

    Raises:
        InvalidSpecError: the batch does not divide, the schedule refuses the shape, or
            layers do not fill the stages.
    """
    setting = step_setting(spec, training, parallel, cluster)
    m = setting.num_micro_batches
    layouts = layouts or pipeline_layout(spec, parallel)
    stages = stage_times(spec, training, parallel, cluster, layouts, m, setting.fabric,
                         setting.groups)
    weights = stage_weights(spec, parallel)
    p2p = p2p_latency_s(setting, weights[0])
    makespan, ideal = pipeline_makespans(parallel, stages, m, p2p, split=split_pipeline_idle)
    tails = rank_tails(setting, layouts, stages, weights)
    critical = max(range(len(stages)), key=lambda i: (sum(tails[i].values()),
                                                      stages[i].compute_s))
    tail = tails[critical]
    overheads = _overheads_s(setting, layouts, critical, stages, p2p, makespan, ideal)
    busiest = max(stages, key=lambda st: rank_work_s(parallel, st, m))
    crossings = m * crossings_per_micro_batch(parallel)
    flops = _flops(spec, training, parallel, layouts)
    return StepEstimate(
        step_time_s=makespan + sum(tail.values()) + sum(overheads.values()),
        pipeline_makespan_s=makespan,
        compute_s=crossings * busiest.compute_s, recompute_s=crossings * busiest.recompute_s,
        bubble_s=ideal - rank_work_s(parallel, busiest, m),
        exposed_comm_s=_exposed_comm_s(busiest, crossings, tail, makespan - ideal),
        offload_stall_s=crossings * busiest.offload_stall_s, optimizer_s=tail["optimizer"],
        overheads_s=_booked_overheads_s(overheads, tail, busiest, crossings),
        critical_stage=busiest.stage, num_micro_batches=m,
        model_flop=flops[0].model_flop, model_flop_full_attention=flops[1].model_flop,
        hardware_flop=flops[0].hardware_flop,
        hardware_flop_full_attention=flops[1].hardware_flop, world_size=parallel.world_size,
        tokens_per_step=training.tokens_per_step,
        peak_flop_per_s=cluster.gpu.peak_flop_per_s(training.compute_dtype),
        stages=tuple(stages))


def _overheads_s(setting: StepSetting, layouts: tuple[StageLayout, ...], critical: int,
                 stages: list[StageTime], p2p: float, makespan: float, ideal: float
                 ) -> dict[str, float]:
    """The terms the step adds after the critical rank's tail: the step's overheads at the
    critical rank's layout (`step_overheads`), the vision encoder's exposed time, remote
    activation offload's exposed time and the wait for the slowest GPU."""
    spec, training, parallel = setting.spec, setting.training, setting.parallel
    m = setting.num_micro_batches
    overheads = step_overheads(setting, layouts[critical])
    if training.vision is not None:
        overheads = {**overheads, **_vision_terms(setting, stages, p2p, makespan, ideal)}
    if parallel.remote_activation_offload and parallel.pp > 1:
        ledger = memory_ledger(spec, training, parallel, setting.cluster, stages=layouts)
        remote = remote_offload_cost(setting, ledger, stages)
        if remote is not None and remote.exposed_s > 0:
            overheads = {**overheads, REMOTE_ACTIVATIONS: remote.exposed_s}
    wait = slowest_gpu_wait_s(parallel, stages, m)
    if wait > 0:
        overheads = {**overheads, SLOWEST_GPU: wait}
    return overheads


def _exposed_comm_s(busiest: StageTime, crossings: float, tail: dict[str, float],
                    p2p_share_s: float) -> dict[str, float]:
    """Exposed communication by axis: the busiest rank's per micro-batch crossing, the
    critical rank's DP sync and tied-embedding all-reduce, and the P2P latency's share of
    the makespan (`p2p_share_s`) under PP."""
    exposed = {axis: crossings * t for axis, t in busiest.exposed_comm_s.items() if t > 0}
    for axis in ("dp", "pp"):
        extra = tail[axis] + (p2p_share_s if axis == "pp" else 0.0)
        if extra > 0:
            exposed[axis] = exposed.get(axis, 0.0) + extra
    return exposed


def _booked_overheads_s(overheads: dict[str, float], tail: dict[str, float],
                        busiest: StageTime, crossings: float) -> dict[str, float]:
    """`StepEstimate.overheads_s`: the step's overheads, the critical rank's tail terms other
    than the DP sync, the embedding all-reduce and the optimizer, and the busiest rank's FP8
    casts, ZeRO-3 copy kernels and fp32 gradient update (inside the makespan)."""
    return {**overheads,
            **{k: t for k, t in tail.items() if k not in ("dp", "pp", "optimizer") and t > 0},
            **({"fp8 activation casts": crossings * busiest.fp8_cast_s}
               if busiest.fp8_cast_s else {}),
            **({ZERO3_COPIES: crossings * busiest.zero3_copy_s}
               if busiest.zero3_copy_s else {}),
            **({GRAD_UPDATE: crossings * busiest.grad_update_s}
               if busiest.grad_update_s else {}),
            **({OFFLOAD_ROUND_TRIP: crossings * busiest.offload_round_trip_s}
               if busiest.offload_round_trip_s else {})}


VISION_ENCODER = "vision encoder"
"""Name, in `overheads_s`, of the step time a vision encoder adds under its placement
(`models.core.vision_pipeline`)."""


def _vision_terms(setting: StepSetting, stages: list[StageTime], p2p: float, makespan: float,
                  ideal: float) -> dict[str, float]:
    """The encoder's exposed time (`models.core.vision_pipeline.vision_step_cost`): under
    'stage0' the pipeline is simulated again with stage 0's first chunk lengthened by the
    encoder's forward and backward of each micro-batch; under 'bubbles' each rank's idle
    time is the makespan without P2P latency less its own work."""
    spec, training, parallel = setting.spec, setting.training, setting.parallel
    cluster, m = setting.cluster, setting.num_micro_batches
    assert training.vision is not None
    encoder = vision_encoder(training.vision, spec)
    with_stage0 = makespan
    if training.vision.placement == VisionPlacement.STAGE0:
        forward, backward = stage0_vision_times(encoder, training, parallel, cluster.gpu)
        first = stages[0]
        times = list(first.chunk_times)
        times[0] = times[0] + OpTimes(forward_s=forward, backward_input_s=backward)
        longer = [dataclasses.replace(first, chunk_times=tuple(times)), *stages[1:]]
        with_stage0 = pipeline_makespans(parallel, longer, m, p2p, split=False)[0]
    idle = tuple([ideal - work for work in ranks_work_s(parallel, stages, m)])
    cost = vision_step_cost(encoder, training, parallel, cluster.gpu, num_micro_batches=m,
                            makespan_s=makespan, makespan_with_stage0_s=with_stage0,
                            rank_idle_s=idle)
    return {VISION_ENCODER: cost.exposed_s}


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineInputs:
    """The simulation behind a configuration's pipeline makespan, as the simulator's input."""

    schedule: PipelineSchedule
    num_stages: int
    num_micro_batches: int
    num_chunks: int
    durations: OpDurations
    """Per virtual stage in layer order (exposed collectives and recompute folded in)."""
    p2p_latency_s: float
    group_size: int | None
    """Micro-batches per interleaving group (None: the number of stages)."""


def pipeline_inputs(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                    cluster: ClusterSpec) -> PipelineInputs:
    """The schedule, shape, per-virtual-stage F / B / W and P2P latency that
    `estimate_step` simulates for this configuration (simulating them in full gives the
    timeline whose makespan is `StepEstimate.pipeline_makespan_s`).

    Raises:
        InvalidSpecError: the batch does not divide or the layers do not fill the stages.
    """
    setting = step_setting(spec, training, parallel, cluster)
    m = setting.num_micro_batches
    layouts = pipeline_layout(spec, parallel)
    stages = stage_times(spec, training, parallel, cluster, layouts, m, setting.fabric,
                         setting.groups)
    return PipelineInputs(
        schedule=parallel.schedule, num_stages=parallel.pp, num_micro_batches=m,
        num_chunks=schedule_chunks(parallel),
        durations=virtual_stage_durations(parallel, [(st.stage, st.chunk_times)
                                                     for st in stages]),
        p2p_latency_s=p2p_latency_s(setting),
        group_size=parallel.microbatch_group_size)



def _rank_layer_modes(parallel: ParallelConfig, layout: StageLayout) -> list[RecomputeMode]:
    """`layer_mode` of every layer rank `layout.rank` holds, in `layout.layers` order."""
    recompute = parallel.policy_of(layout.rank).recompute
    if isinstance(recompute, FullLayers):
        return [layer_mode(parallel, layout.rank, position)
                for position in range(len(layout.layers))]
    return [recompute] * len(layout.layers)


def _flops(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
           layouts: tuple[StageLayout, ...]) -> tuple[StepFlops, StepFlops]:
    """FLOPs of one step with causal attention and with the full attention matrix,
    recomputation per stage policy."""
    full: set[int] = set()
    selective: set[int] = set()
    for layout in layouts:
        core_attention = RecomputeModule.CORE_ATTN in \
            parallel.policy_of(layout.rank).recompute_modules
        for index, mode in zip(layout.layers, _rank_layer_modes(parallel, layout), strict=True):
            if mode == RecomputeMode.FULL:
                full.add(index)
            elif mode == RecomputeMode.SELECTIVE and core_attention:
                selective.add(index)
    # DualPipe's second copy holds the same layers: each layer is counted once.
    causal, dense = (step_flops(spec, num_sequences=training.global_batch_size,
                                seq_len=training.sequence_length, full_recompute_layers=full,
                                selective_recompute_layers=selective, causal=c)
                     for c in (True, False))
    return causal, dense




__all__ = [
    "FLOP_CONVENTION",
    "VISION_ENCODER",
    "PipelineInputs",
    "StepEstimate",
    "estimate_step",
    "pipeline_inputs",
    "pipeline_makespans",
    "rank_work_s",
    "ranks_work_s",
]
