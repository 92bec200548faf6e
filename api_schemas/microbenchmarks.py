"""Microbenchmark results: what a cluster's kernels and links measured, and what was fitted.

Owns: the shape of the microbenchmark results POST /v1/calibration/runs takes (GEMM
throughput by shape and format, collective bus bandwidth by size and group span, attention
kernel throughput, host-link copy bandwidth) as the `calibration` kit writes them, and the
constants fitted from them with their uncertainties. Must not: fit, check physics or time
anything (`models/evidence/microbenchmarks.py`).
"""

from typing import Literal

from pydantic import Field

from api_schemas._base import ResultModel, SpecModel
from api_schemas.collectives import Collective
from api_schemas.dtypes import DType
from api_schemas.hardware import KernelCalibration
from api_schemas.units import PositiveBytes, PositiveInt

MAX_MICROBENCHMARK_ENTRIES = 512
"""Most entries of one kind in one submission."""

BENCHMARKED_COLLECTIVES = (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.ALL_TO_ALL)
"""Collectives whose bus bandwidth the fit takes (the kit measures these three)."""


class GemmMeasurement(SpecModel):
    """One GEMM (m x k) @ (k x n) timed on one GPU."""

    m: PositiveInt = Field(description="Rows of the output.", examples=[8192])
    n: PositiveInt = Field(description="Columns of the output.", examples=[8192])
    k: PositiveInt = Field(description="Reduction width.", examples=[8192])
    dtype: DType = Field(description="Input format.", examples=["bf16"])
    tflops: float = Field(gt=0.0, description="Measured throughput, 2 m n k / time, in "
                          "TFLOP/s (10^12).", examples=[720.0])


class CollectiveMeasurement(SpecModel):
    """One collective timed over a group of GPUs, as nccl-tests reports it."""

    collective: Collective = Field(description="all_reduce, all_gather or all_to_all.")
    message_bytes: PositiveBytes = Field(
        description="Message size in nccl-tests' convention: all-reduce the tensor each rank "
        "holds, all-gather the full output, all-to-all each rank's whole send buffer.",
        examples=[1073741824])
    num_ranks: int = Field(ge=2, description="GPUs in the group.", examples=[8])
    ranks_per_node: PositiveInt = Field(description="Group members per node (node-contiguous "
                                        "placement); num_ranks for a single-node group.",
                                        examples=[8])
    bus_bandwidth_bytes_per_s: float = Field(
        gt=0.0, description="nccl-tests busbw: message_bytes / time x the collective's bus "
        "factor (all-reduce 2(n-1)/n, all-gather and all-to-all (n-1)/n), bytes/s.",
        examples=[360e9])


class AttentionMeasurement(SpecModel):
    """One attention kernel (forward and backward) timed on one GPU."""

    seq_len: PositiveInt = Field(description="Sequence length.", examples=[4096])
    head_dim: PositiveInt = Field(default=128, description="Head dimension.")
    fused: bool = Field(default=True, description="A fused (flash) kernel; false for "
                        "attention with the score matrix in memory.")
    causal: bool = Field(default=True, description="Causal mask (FLOPs counted halved).")
    tflops: float = Field(gt=0.0, description="Forward+backward throughput in TFLOP/s, FLOPs "
                          "counted as the FlashAttention benchmarks do: forward 4 b h s^2 d "
                          "(halved when causal), backward 2.5x forward.", examples=[480.0])


class HostLinkMeasurement(SpecModel):
    """One pinned host<->GPU copy timed on one GPU."""

    direction: Literal["h2d", "d2h"] = Field(description="Host to device or device to host.")
    message_bytes: PositiveBytes = Field(description="Bytes copied.", examples=[268435456])
    bandwidth_bytes_per_s: float = Field(gt=0.0, description="Bytes / time.",
                                         examples=[50e9])


class Microbenchmarks(SpecModel):
    """Microbenchmark results of one cluster (the `calibration` kit writes this object)."""

    gemm: list[GemmMeasurement] = Field(
        default_factory=list, max_length=MAX_MICROBENCHMARK_ENTRIES,
        description="GEMM throughput by shape and format (set the GEMM kernel level).")
    collectives: list[CollectiveMeasurement] = Field(
        default_factory=list, max_length=MAX_MICROBENCHMARK_ENTRIES,
        description="Bus bandwidth by collective, size and group span (single-node groups "
        "set the scale-up bandwidth scale, multi-node groups the scale-out one).")
    attention: list[AttentionMeasurement] = Field(
        default_factory=list, max_length=MAX_MICROBENCHMARK_ENTRIES,
        description="Attention kernel throughput (sets the attention efficiency scale).")
    host_link: list[HostLinkMeasurement] = Field(
        default_factory=list, max_length=MAX_MICROBENCHMARK_ENTRIES,
        description="Pinned host<->GPU copies (set the host-link bandwidth).")
    device_name: str | None = Field(default=None, max_length=200,
                                    description="What the GPU called itself, if recorded.")
    source: str | None = Field(default=None, max_length=500,
                               description="What produced the results (tool and version).")


class MicrobenchmarkConstant(ResultModel):
    """One constant fitted from microbenchmarks."""

    name: str = Field(description="The constant's name in the cost model.")
    value: float = Field(description="The least-squares value.")
    standard_error: float = Field(description="Its standard error (-1 when one entry "
                                  "leaves no degree of freedom).")
    num_entries: int = Field(description="Entries it was fitted on.")
    log_residual_rms: float = Field(description="RMS of log(measured / fitted model).")
    uncalibrated_relative_error: float = Field(
        description="Mean |model/measured - 1| of the entries without the fit.")
    fitted_relative_error: float = Field(description="The same with the fitted constant.")


class MicrobenchmarkFit(ResultModel):
    """The constants the microbenchmarks set, and how the GEMM level was used."""

    constants: list[MicrobenchmarkConstant] = Field(description="Each fitted constant.")
    gemm_kernel_level: dict[str, float] = Field(
        default_factory=dict, description="Fitted share of the dense peak a large GEMM "
        "reaches in the benchmark, per input format.")
    applied: KernelCalibration = Field(
        description="The constants the microbenchmarks set in the profile (those with no "
        "entries stay at 1 / null; the GEMM scale here is the kernel-implied one).")
    gemm_sets_level: bool = Field(
        default=False, description="GEMM entries were given: the GEMM efficiency scale comes "
        "from them and the runs fit only the per-step overhead.")
    notes: list[str] = Field(default_factory=list, description="How each was applied.")


__all__ = [
    "BENCHMARKED_COLLECTIVES",
    "MAX_MICROBENCHMARK_ENTRIES",
    "AttentionMeasurement",
    "CollectiveMeasurement",
    "GemmMeasurement",
    "HostLinkMeasurement",
    "MicrobenchmarkConstant",
    "MicrobenchmarkFit",
    "Microbenchmarks",
]
