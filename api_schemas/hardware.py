"""Accelerators, links and clusters.

Owns: the shape of a GPU description (memory, dense and sparse peak FLOP/s per format, HBM
bandwidth), of a link (achievable bandwidth per GPU and direction, latency) and of a cluster
(nodes x GPUs per node, scale-up and scale-out links, host memory, PCIe). Must not: hold
preset values (those live in `models/catalog/presets.py` with their sources) or compute times.
"""

import math
from enum import StrEnum
from typing import Self

from pydantic import Field, field_validator, model_validator

from api_schemas._base import MAX_NAME_LENGTH, SpecModel
from api_schemas.dtypes import DType
from api_schemas.units import (
    Bytes,
    BytesPerSecond,
    DurationSeconds,
    Fraction,
    PositiveFlopPerSecond,
    PositiveInt,
)


class IntraNodeTopology(StrEnum):
    """How GPUs inside a node (scale-up domain) are wired."""

    SWITCH = "switch"
    """Every GPU reaches a switch (NVSwitch): any pair at the full per-GPU bandwidth."""
    FULL_MESH = "full_mesh"
    """Point-to-point links between every pair (AMD xGMI): a pair gets one link's share."""


class GpuSpec(SpecModel):
    """One accelerator type."""

    id: str = Field(max_length=MAX_NAME_LENGTH, description="Catalog id, e.g. "
                    "'h100-sxm5-80gb' (at most 200 characters).", examples=["h100-sxm5-80gb"])
    name: str = Field(description="Human-readable name.", examples=["NVIDIA H100 SXM5 80GB"])
    vendor: str = Field(default="", description="Vendor name.", examples=["NVIDIA"])
    memory_bytes: Bytes = Field(
        description="Device memory in bytes (HBM capacity as sold, binary GiB).",
        examples=[85899345920],
    )
    hbm_bandwidth_bytes_per_s: BytesPerSecond = Field(
        description="Peak HBM bandwidth in bytes/s.", examples=[3.35e12]
    )
    dense_peak_flop_per_s: dict[DType, PositiveFlopPerSecond] = Field(
        description="Dense (no 2:4 sparsity) tensor-core peak FLOP/s per input format.",
        examples=[{"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "tf32": 494.7e12}],
    )
    sparse_peak_flop_per_s: dict[DType, PositiveFlopPerSecond] = Field(
        default_factory=dict,
        description="2:4-sparse peak FLOP/s per format, kept apart; never used for training cost.",
    )
    scale_up_bandwidth_bytes_per_s: BytesPerSecond = Field(
        default=0.0,
        description="Marketed aggregate bidirectional scale-up (NVLink/xGMI) bandwidth per GPU.",
    )
    tdp_watts: float | None = Field(default=None, ge=0.0, description="Board power in watts.")
    sources: tuple[str, ...] = Field(default=(), description="Where the figures come from.")
    confidence: str = Field(default="high", description="'high' or 'medium' (see sources).")

    @model_validator(mode="after")
    def _needs_a_16_bit_peak(self) -> Self:
        peaks = self.dense_peak_flop_per_s
        if DType.BF16 not in peaks and DType.FP16 not in peaks:
            raise ValueError(
                f"gpu '{self.id}': dense_peak_flop_per_s has no 'bf16' or 'fp16' entry "
                f"(got keys {sorted(self.dense_peak_flop_per_s)}); add the dense 16-bit "
                "tensor-core peak in FLOP/s, e.g. {'bf16': 989.4e12}"
            )
        return self

    def __hash__(self) -> int:
        # The peaks are dicts (natural JSON); hash their sorted items so a GPU can key caches.
        return hash((self.id, self.memory_bytes, self.hbm_bandwidth_bytes_per_s,
                     tuple(sorted(self.dense_peak_flop_per_s.items()))))

    def peak_flop_per_s(self, dtype: DType) -> float:
        """Dense peak for a format, falling back to the 16-bit peak when absent."""
        if dtype in self.dense_peak_flop_per_s:
            return self.dense_peak_flop_per_s[dtype]
        return self.dense_peak_flop_per_s.get(DType.BF16) or self.dense_peak_flop_per_s[DType.FP16]


class LinkSpec(SpecModel):
    """A link class as the cost model sees it: per GPU, per direction, achievable."""

    bandwidth_bytes_per_s: BytesPerSecond = Field(
        description="Achievable bandwidth per GPU per direction in bytes/s (not the marketed "
        "bidirectional aggregate).",
        examples=[160e9],
    )
    latency_s: DurationSeconds = Field(
        description="Per-message start-up latency (the alpha term) in seconds.", examples=[5e-6]
    )


class KernelCalibration(SpecModel):
    """Fitted constants applied on top of a GPU family's kernel profile (a stored
    calibration profile, POST /v1/calibration/runs)."""

    gemm_efficiency_scale: float = Field(
        default=1.0, gt=0.0, le=10.0,
        description="Multiplier on the GPU family's GEMM efficiency (`gemm_peak_frac` of "
        "every input format); 1 is the uncalibrated model. The scaled efficiency must stay "
        "at or below 100% of the dense peak.", examples=[0.93])
    step_overhead_s: float = Field(
        default=0.0, ge=0.0, le=3600.0,
        description="Fixed time added to every optimizer step (data loading, logging, "
        "synchronisation the model does not itemise), seconds.", examples=[0.05])
    attention_efficiency_scale: float = Field(
        default=1.0, gt=0.0, le=10.0,
        description="Multiplier on the GPU family's attention-kernel efficiency (fused and "
        "unfused), fitted on attention microbenchmarks; the scaled efficiency must stay at "
        "or below 100% of the dense 16-bit peak.", examples=[1.1])
    intra_node_bandwidth_scale: float = Field(
        default=1.0, gt=0.0, le=10.0,
        description="Multiplier on the achievable scale-up (NVLink/xGMI) bandwidth, fitted on "
        "single-node collective microbenchmarks.", examples=[0.95])
    inter_node_bandwidth_scale: float = Field(
        default=1.0, gt=0.0, le=10.0,
        description="Multiplier on the achievable scale-out (NIC) bandwidth, fitted on "
        "multi-node collective microbenchmarks.", examples=[0.9])
    host_link_bandwidth_bytes_per_s: float | None = Field(
        default=None, gt=0.0, le=1e13,
        description="Measured host<->GPU copy bandwidth per GPU per direction (bytes/s), "
        "replacing the node's PCIe figure; null keeps it.", examples=[52e9])
    moe_host_issue_s: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="Fixed host time to issue one MoE layer forward (seconds), fitted on "
        "host-bound MoE runs; replaces the published 7.9 ms (the per-expert launches are "
        "added to it). An MoE layer forward takes the longer of this host time and its GPU "
        "time. Null keeps the published value.", examples=[0.0065])
    profile: str | None = Field(
        default=None, max_length=64,
        description="Name of the stored profile these constants come from (set by the "
        "service when a request names `cluster.profile`).")
    version: int | None = Field(default=None, ge=1,
                                description="Version of that stored profile.")
    leave_one_out_errors: tuple[float, ...] | None = Field(
        default=None, max_length=64,
        description="Step-time error (measured / predicted - 1) of each run the constants "
        "were fitted on, predicted by the constants fitted on the other runs (set by the "
        "service from the stored fit when a request names `cluster.profile`); predictions "
        "on this cluster report their 10th to 90th percentile as the predicted range.")

    @field_validator("leave_one_out_errors")
    @classmethod
    def _errors_above_minus_one(cls, value: tuple[float, ...] | None
                                ) -> tuple[float, ...] | None:
        if value is not None and any(e <= -1.0 for e in value):
            raise ValueError("a step-time error measured / predicted - 1 is above -1 (a "
                             "measured step takes some time)")
        return value


class ClusterSpec(SpecModel):
    """A homogeneous GPU cluster: nodes of GPUs joined by a scale-up and a scale-out fabric."""

    gpu: GpuSpec = Field(description="The accelerator in every slot.")
    num_nodes: PositiveInt = Field(description="Number of nodes.", examples=[256])
    gpus_per_node: PositiveInt = Field(
        description="GPUs per node (the scale-up domain).", examples=[8]
    )
    intra_node: LinkSpec = Field(description="Scale-up link (NVLink/NVSwitch, xGMI).")
    inter_node: LinkSpec = Field(description="Scale-out link per GPU (InfiniBand/RoCE NIC).")
    intra_node_topology: IntraNodeTopology = Field(
        default=IntraNodeTopology.SWITCH,
        description="'switch' (NVSwitch) or 'full_mesh' (xGMI: one link per GPU pair).",
    )
    rail_optimized: bool = Field(
        default=True,
        description="True when NIC k of every node sits on the same leaf switch (rail), so "
        "same-local-rank traffic crosses one switch hop.",
    )
    host_memory_bytes: Bytes = Field(
        default=2 * 2**40, description="Host (CPU) memory per node in bytes."
    )
    pcie_bandwidth_bytes_per_s: BytesPerSecond = Field(
        default=25e9, description="Achievable host<->GPU bandwidth per GPU per direction."
    )
    host_memory_bandwidth_bytes_per_s: BytesPerSecond = Field(
        default=409.6e9,
        description="Aggregate CPU DRAM bandwidth per node, shared by its GPUs' CPU work "
        "(default a dual-socket, 8-channel DDR4-3200 server, 409.6 GB/s).",
    )
    memory_headroom_frac: Fraction = Field(
        default=0.0,
        description="Fraction of each GPU's memory kept free (usable = memory x (1 - this)).",
    )
    memory_margin_frac: Fraction = Field(
        default=0.0,
        description="Fraction of the usable memory a plan keeps free for the memory model's "
        "own error (capacity = usable - ceil(usable x this)); the request default is "
        "`api_schemas.requests.DEFAULT_MEMORY_MARGIN_FRAC`.",
    )
    calibration: KernelCalibration | None = Field(
        default=None, description="Fitted kernel constants of a calibration profile (None: "
        "the GPU family's published calibration).")

    @property
    def world_size(self) -> int:
        """Number of GPUs in the cluster."""
        return self.num_nodes * self.gpus_per_node

    @property
    def usable_bytes(self) -> int:
        """Per-GPU memory after the configured headroom (rounded down)."""
        return int(self.gpu.memory_bytes * (1.0 - self.memory_headroom_frac))

    @property
    def memory_margin_bytes(self) -> int:
        """Per-GPU bytes a plan keeps free under the usable memory (`memory_margin_frac`,
        rounded up)."""
        return math.ceil(self.usable_bytes * self.memory_margin_frac)

    @property
    def capacity_bytes(self) -> int:
        """Per-GPU memory a plan may use: the usable memory less the safety margin (every
        memory check, bound and verdict compares a predicted peak with this)."""
        return self.usable_bytes - self.memory_margin_bytes


__all__ = ["ClusterSpec", "GpuSpec", "IntraNodeTopology", "KernelCalibration", "LinkSpec"]
