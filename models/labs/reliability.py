"""Checkpoints and failures: what a training run loses to saving its state and to crashes.

Owns: the size of a full training checkpoint (weights, master weights, optimizer moments) and
each rank's share of it under a fully parallel save; the time to write it to storage and the
time it blocks training (synchronous, or only the device-to-host copy with an asynchronous
save); the job's mean time between failures from a per-GPU failure rate; the checkpoint
interval that minimises expected lost work (Young 1974, Daly 2006); and the expected wall
time and goodput of a run at a given interval. Must not: choose the parallel layout, price
GPU time or do I/O.

Sources:
- [YOUNG74] J. W. Young, "A first order approximation to the optimum checkpoint interval",
  Communications of the ACM 17(9), 1974: tau = sqrt(2 delta M).
- [DALY06] J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart
  dumps", Future Generation Computer Systems 22(3), 2006, doi:10.1016/j.future.2004.11.016:
  the complete cost function (expected wall time under Poisson failures, with restart time)
  and its perturbation solution for the optimum interval; Figs. 3-5 print tau_opt = 117, 57
  and 9.1 min for delta = 5 min, R = 10 min and M = 24 h, 6 h and 15 min.
- [LLAMA3] Llama 3, arXiv:2407.21783, Sec. 3.3.4: 466 job interruptions in a 54-day snapshot
  of pre-training on 16,384 H100 GPUs, 419 of them unexpected; Sec. 3.3.1: the Tectonic
  store sustains 2 TB/s (the request defaults, `api_schemas.run_level`).
- Megatron-core distributed checkpointing (`--ckpt-fully-parallel-save`, `--async-save`):
  data-parallel replicas split the writes of a shared shard, and an asynchronous save copies
  the shard to host memory and writes it in the background.
"""

import math
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.run_level import (
    LLAMA3_FAILURES_PER_GPU_HOUR,
    LLAMA3_STORAGE_BANDWIDTH_BYTES_PER_S,
)
from api_schemas.training import TrainingSpec
from models.core.params import count_parameters
from models.core.precision import moments_per_param

SECONDS_PER_HOUR = 3600.0
GOODPUT_CURVE_POINTS = 41
"""Intervals at which `RunReliability.goodput_curve` evaluates goodput."""
GOODPUT_CURVE_SPAN = 10.0
"""The curve runs from Daly's optimum / span to Daly's optimum x span."""

@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointSize:
    """Bytes of one full training checkpoint."""

    weights_bytes: int
    """Model weights in `param_dtype`."""
    master_bytes: int
    """The optimizer's master copy (0 without one)."""
    moments_bytes: int
    """Optimizer moments in `optimizer_state_dtype`."""

    @property
    def total_bytes(self) -> int:
        """Weights + master weights + moments."""
        return self.weights_bytes + self.master_bytes + self.moments_bytes


def checkpoint_size(spec: ModelSpec, training: TrainingSpec) -> CheckpointSize:
    """Bytes of a checkpoint that resumes training exactly: every parameter (MTP modules
    included) once in `param_dtype`, once as master weight, and its optimizer moments.

    Source: what Megatron-core's distributed checkpoint stores (model state dict plus the
    distributed optimizer's main parameters and moments); moments per parameter from
    `models.core.precision.moments_per_param` ([RAJ20] Sec. 3.1 for Adam; Muon keeps AdamW on
    embeddings and head).
    Assumes: every parameter outside the embedding and the head is a matrix for Muon (norm
    vectors are a negligible share); gradients, RNG and data-loader states are not counted
    (kilobytes to megabytes).
    """
    counts = count_parameters(spec)
    params = counts.total + counts.mtp_total
    vectors = counts.embedding + counts.head + counts.final_norm
    matrices = params - vectors
    state_bytes = training.optimizer_state_dtype.num_bytes
    moments = state_bytes * (
        matrices * moments_per_param(training.optimizer, is_matrix=True)
        + vectors * moments_per_param(training.optimizer, is_matrix=False))
    master = training.master_dtype.num_bytes if training.master_dtype is not None else 0.0
    return CheckpointSize(weights_bytes=math.ceil(params * training.param_dtype.num_bytes),
                          master_bytes=math.ceil(params * master),
                          moments_bytes=math.ceil(moments))


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointWrite:
    """Time of one save."""

    bytes_per_rank: int
    """Each rank's share under a fully parallel save."""
    write_s: float
    """Time to write the whole checkpoint at the storage bandwidth."""
    blocking_s: float
    """Time training stops per save: the write, or the device-to-host copy when async."""


def checkpoint_write(size: CheckpointSize, *, world_size: int, gpus_per_node: int,
                     storage_bandwidth_bytes_per_s: float,
                     node_storage_bandwidth_bytes_per_s: float, host_link_bytes_per_s: float,
                     async_save: bool) -> CheckpointWrite:
    """Write and blocking time of one save.

    Source: Megatron-core distributed checkpointing: a fully parallel save splits the
    checkpoint evenly over all ranks (`--ckpt-fully-parallel-save`), so every node writes
    its share at once and the slower of the storage system's aggregate bandwidth and the
    nodes' storage links bounds the write; an asynchronous save (`--async-save`) blocks only
    while each rank copies its share to host memory over its host link.
    Legend: C = checkpoint bytes, N = ranks, n = nodes, B = aggregate storage bandwidth,
    B_node = one node's storage link, b = host link bandwidth;
    write = C / min(B, n B_node); blocking = write (sync) or (C / N) / b (async).
    """
    if min(world_size, gpus_per_node) < 1 or min(
            storage_bandwidth_bytes_per_s, node_storage_bandwidth_bytes_per_s,
            host_link_bytes_per_s) <= 0:
        raise ValueError("world size, GPUs per node and bandwidths must be positive")
    per_rank = math.ceil(size.total_bytes / world_size)
    nodes = math.ceil(world_size / gpus_per_node)
    write = size.total_bytes / min(storage_bandwidth_bytes_per_s,
                                   nodes * node_storage_bandwidth_bytes_per_s)
    blocking = per_rank / host_link_bytes_per_s if async_save else write
    return CheckpointWrite(bytes_per_rank=per_rank, write_s=write, blocking_s=blocking)


def job_mtbf_s(*, world_size: int, failures_per_gpu_hour: float) -> float:
    """Mean time between failures of a job on `world_size` GPUs, each failing independently
    at `failures_per_gpu_hour` (the job stops when any one does): M = 1 / (N lambda).

    Source: [DALY06] Sec. 2 (exponential failures; the job's rate is the sum of its
    components'); [LLAMA3] Sec. 3.3.4 for the default rate.
    """
    if world_size < 1 or failures_per_gpu_hour <= 0:
        raise ValueError("world size and failure rate must be positive")
    return SECONDS_PER_HOUR / (world_size * failures_per_gpu_hour)


def young_interval_s(*, checkpoint_s: float, mtbf_s: float) -> float:
    """[YOUNG74]'s first-order optimum compute time between checkpoints:
    tau = sqrt(2 delta M), delta = time one checkpoint costs, M = MTBF."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(*, checkpoint_s: float, mtbf_s: float) -> float:
    """[DALY06]'s higher-order optimum compute time between checkpoints,
    tau = sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta for
    delta < 2M, and tau = M otherwise."""
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = checkpoint_s / (2.0 * mtbf_s)
    return (math.sqrt(2.0 * checkpoint_s * mtbf_s)
            * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - checkpoint_s)


def expected_wall_time_s(*, solve_s: float, interval_s: float, checkpoint_s: float,
                         restart_s: float, mtbf_s: float) -> float:
    """[DALY06]'s complete cost function: expected wall time of `solve_s` seconds of work
    checkpointed every `interval_s` seconds of work, under exponential failures of mean
    `mtbf_s`, with `restart_s` to restart and reload after each:
    T_w = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau.
    """
    if interval_s <= 0 or mtbf_s <= 0:
        raise ValueError("interval and MTBF must be positive")
    exponent = (interval_s + checkpoint_s) / mtbf_s
    return (mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1(exponent)
            * solve_s / interval_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunReliability:
    """Checkpoint and failure figures of one run."""

    checkpoint: CheckpointSize
    write: CheckpointWrite
    mtbf_s: float
    young_interval_s: float
    daly_interval_s: float
    interval_s: float
    """The interval used: the request's, or Daly's optimum."""
    wall_time_s: float
    """Expected wall time of the run with saves, failures and restarts."""
    expected_failures: float
    """wall_time_s / mtbf_s."""
    solve_s: float
    """Failure-free training time of the run."""
    restart_s: float
    """Time from a failure to training again."""
    interval_floor_s: float
    """The shortest interval allowed: an asynchronous save's write, else 0."""

    @property
    def goodput(self) -> float:
        """Useful training time over expected wall time."""
        return self.solve_s / self.wall_time_s if self.wall_time_s > 0 else 1.0

    def goodput_at(self, interval_s: float) -> float:
        """Goodput of the same run checkpointed every `interval_s` seconds of work
        ([DALY06]'s cost function; the run's length cancels out)."""
        return 1.0 / expected_wall_time_s(solve_s=1.0, interval_s=interval_s,
                                          checkpoint_s=self.write.blocking_s,
                                          restart_s=self.restart_s, mtbf_s=self.mtbf_s)

    def goodput_curve(self, *, points: int = GOODPUT_CURVE_POINTS,
                      span: float = GOODPUT_CURVE_SPAN) -> tuple[tuple[float, float], ...]:
        """(interval, goodput) at `points` intervals spaced evenly in log scale from Daly's
        optimum / `span` to Daly's optimum x `span`: how much a shorter or longer interval
        costs. Intervals below an asynchronous save's floor are left out."""
        low, high = self.daly_interval_s / span, self.daly_interval_s * span
        out = []
        for index in range(points):
            interval = low * (high / low) ** (index / (points - 1))
            if interval >= self.interval_floor_s and interval > 0:
                out.append((interval, self.goodput_at(interval)))
        return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointPolicy:
    """How a run fails, saves and restarts: the inputs of `run_reliability` beside the
    model, the run's length and its GPUs."""

    failures_per_gpu_hour: float
    storage_bandwidth_bytes_per_s: float
    node_storage_bandwidth_bytes_per_s: float
    host_link_bytes_per_s: float
    async_save: bool
    restart_s: float
    interval_s: float | None = None
    """None: Daly's optimum."""


def run_reliability(spec: ModelSpec, training: TrainingSpec, *, world_size: int,
                    gpus_per_node: int, solve_s: float,
                    policy: CheckpointPolicy) -> RunReliability:
    """Checkpoint size and time, the optimum interval and the expected wall time of a run of
    `solve_s` failure-free seconds on `world_size` GPUs ([YOUNG74], [DALY06])."""
    size = checkpoint_size(spec, training)
    write = checkpoint_write(size, world_size=world_size, gpus_per_node=gpus_per_node,
                             storage_bandwidth_bytes_per_s=policy.storage_bandwidth_bytes_per_s,
                             node_storage_bandwidth_bytes_per_s=(
                                 policy.node_storage_bandwidth_bytes_per_s),
                             host_link_bytes_per_s=policy.host_link_bytes_per_s,
                             async_save=policy.async_save)
    mtbf = job_mtbf_s(world_size=world_size,
                      failures_per_gpu_hour=policy.failures_per_gpu_hour)
    young = young_interval_s(checkpoint_s=write.blocking_s, mtbf_s=mtbf)
    daly = daly_interval_s(checkpoint_s=write.blocking_s, mtbf_s=mtbf)
    # An asynchronous save must finish writing before the next one starts.
    floor = write.write_s if policy.async_save else 0.0
    chosen = max(policy.interval_s if policy.interval_s is not None else daly, floor)
    wall = expected_wall_time_s(solve_s=solve_s, interval_s=chosen,
                                checkpoint_s=write.blocking_s, restart_s=policy.restart_s,
                                mtbf_s=mtbf) if solve_s > 0 else 0.0
    return RunReliability(checkpoint=size, write=write, mtbf_s=mtbf, young_interval_s=young,
                          daly_interval_s=daly, interval_s=chosen, wall_time_s=wall,
                          expected_failures=wall / mtbf, solve_s=solve_s,
                          restart_s=policy.restart_s, interval_floor_s=floor)


__all__ = [
    "CheckpointPolicy",
    "LLAMA3_FAILURES_PER_GPU_HOUR",
    "LLAMA3_STORAGE_BANDWIDTH_BYTES_PER_S",
    "CheckpointSize",
    "CheckpointWrite",
    "RunReliability",
    "checkpoint_size",
    "checkpoint_write",
    "daly_interval_s",
    "expected_wall_time_s",
    "job_mtbf_s",
    "run_reliability",
    "young_interval_s",
]
