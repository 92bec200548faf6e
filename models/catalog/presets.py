"""The hardware and architecture catalog: GPU presets, node presets and model presets.

Owns: turning the packaged data files (`models/data/hardware.json`, copied with its sources
from vendor datasheets; `models/data/hf_configs/*.json`, public Hugging Face configs) into
`GpuSpec`, `ClusterSpec` and `ModelSpec` values, plus the published Megatron-LM GPT shapes
used as presets, and the named link constants with their sources. Must not: compute costs.
Reading its own package data is the only I/O it does.
"""

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from api_schemas.architecture import MlpKind, ModelSpec, NormKind
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec, GpuSpec, IntraNodeTopology, LinkSpec
from api_schemas.units import GIB
from models.catalog.assumed_presets import ASSUMED_PRESETS
from models.errors import InvalidSpecError

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
"""Packaged data files (hardware table with sources, Hugging Face configs)."""

GB = 10**9
"""Decimal gigabyte, the unit vendors use for bandwidth."""

NVLINK_ACHIEVABLE_FRAC = 0.8
"""Achievable share of the nominal per-direction NVLink bandwidth.

Source: DeepSeek-V3 (arXiv:2412.19437) Sec. 3.2.2 measures about 160 GB/s of NVLink on H800
nodes whose nominal per-direction bandwidth is 200 GB/s (400 GB/s bidirectional): 160/200.
Applied to every NVLink/xGMI generation (Assumes: the same protocol efficiency).
"""

NIC_ACHIEVABLE_FRAC = 1.0
"""Achievable share of the NIC line rate per GPU.

Source: DeepSeek-V3 (arXiv:2412.19437) Sec. 3.2.2 uses 50 GB/s for a 400 Gb/s InfiniBand NIC
per GPU, i.e. the line rate. Collective algorithm factors are applied in `collectives`.
"""

INTRA_NODE_LATENCY_S = 2e-6
"""Per-hop start-up latency on NVLink/xGMI (alpha). Source: NCCL `src/graph/tuning.cc` hwLat
table, NVLink ring LL128 row (about 1.9 us per hop), rounded up."""

INTER_NODE_LATENCY_S = 5e-6
"""Per-hop start-up latency across nodes over InfiniBand/RoCE (alpha). Source: NCCL
`src/graph/tuning.cc` network latencies (a few microseconds per hop), rounded up."""

PCIE_GEN4_X16_BYTES_PER_S = 25e9
"""Achievable host<->GPU copy bandwidth per direction on PCIe Gen4 x16 (32 GB/s nominal)."""

PCIE_GEN5_X16_BYTES_PER_S = 50e9
"""Achievable host<->GPU copy bandwidth per direction on PCIe Gen5 x16 (64 GB/s nominal)."""

NVLINK_C2C_BYTES_PER_S_PER_GPU = 225e9
"""Host<->GPU bandwidth per GPU per direction on a Grace-Blackwell superchip: NVLink-C2C
carries 900 GB/s bidirectional between one Grace and its two B200 GPUs (NVIDIA GB200 NVL72
specifications), 450 GB/s each way shared by two GPUs. Nominal: no achieved figure is
published here."""

_DTYPE_KEYS = {
    DType.BF16: "bf16_{}_tflops",
    DType.FP16: "bf16_{}_tflops",
    DType.TF32: "tf32_{}_tflops",
    DType.FP8: "fp8_{}_tflops",
    DType.FP4: "fp4_{}_tflops",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePreset:
    """A typical server: its GPU, GPUs per node, links and host resources, with sources."""

    id: str
    gpu_id: str
    gpu_ids: tuple[str, ...]
    """Every GPU preset this node carries (the first is `gpu_id`)."""
    gpus_per_node: int
    """GPUs in the scale-up domain (what the cost model calls a node)."""
    nvlink_bidirectional_bytes_per_s: float
    intra_node_topology: IntraNodeTopology
    nic_bits_per_s: float
    host_memory_bytes: int
    host_memory_bandwidth_bytes_per_s: float
    """Aggregate CPU DRAM bandwidth of the node (what a CPU optimizer streams through)."""
    pcie_bandwidth_bytes_per_s: float
    description: str
    sources: tuple[str, ...]
    intra_node_bandwidth_override: float | None = None

    def intra_node_bandwidth_bytes_per_s(self) -> float:
        """Achievable per-GPU, per-direction scale-up bandwidth."""
        if self.intra_node_bandwidth_override is not None:
            return self.intra_node_bandwidth_override
        return self.nvlink_bidirectional_bytes_per_s / 2 * NVLINK_ACHIEVABLE_FRAC

    def inter_node_bandwidth_bytes_per_s(self) -> float:
        """Achievable per-GPU, per-direction scale-out bandwidth (NIC line rate / 8 bits)."""
        return self.nic_bits_per_s / 8 * NIC_ACHIEVABLE_FRAC


_PCIE_BYTES_PER_S = {"gen4": PCIE_GEN4_X16_BYTES_PER_S, "gen5": PCIE_GEN5_X16_BYTES_PER_S,
                     "nvlink-c2c": NVLINK_C2C_BYTES_PER_S_PER_GPU}


_HARDWARE: dict[str, Any] = json.loads((DATA_DIR / "hardware.json").read_text(encoding="utf-8"))
"""The packaged accelerator and node table (data/hardware.json), read once at import."""


def _hardware_records() -> dict[str, dict[str, Any]]:
    return {rec["id"]: rec for rec in _HARDWARE["accelerators"]}


def _node_from_record(node: dict[str, Any]) -> NodePreset:
    """A node preset: GPU count, scale-up bandwidth and NIC rate from its accelerator's
    record (`scale_up.domain_size`, `scale_up.bandwidth_gb_s`,
    `typical_node.nic_gbps_per_accelerator`), the rest from the node entry."""
    gpu = _hardware_records()[node["gpu_ids"][0]]
    measured = node.get("measured_scale_up_gb_s")
    return NodePreset(
        id=node["id"], gpu_id=node["gpu_ids"][0], gpu_ids=tuple(node["gpu_ids"]),
        gpus_per_node=int(gpu["scale_up"]["domain_size"]),
        nvlink_bidirectional_bytes_per_s=float(gpu["scale_up"]["bandwidth_gb_s"]) * GB,
        intra_node_topology=IntraNodeTopology(node["topology"]),
        nic_bits_per_s=float(gpu["typical_node"]["nic_gbps_per_accelerator"]) * 1e9,
        host_memory_bytes=int(node["host_memory_bytes"]),
        host_memory_bandwidth_bytes_per_s=float(node["host_memory_bandwidth_gb_s"]) * GB,
        pcie_bandwidth_bytes_per_s=_PCIE_BYTES_PER_S[node["pcie"]],
        description=node["description"], sources=tuple(node["sources"]),
        intra_node_bandwidth_override=None if measured is None else float(measured) * GB)


NODE_PRESETS: dict[str, NodePreset] = {
    node["id"]: _node_from_record(node) for node in _HARDWARE["nodes"]}
"""Node presets, read from the `nodes` of `models/data/hardware.json` (the only copy)."""

DEFAULT_NODE_FOR_GPU: dict[str, str] = {
    gpu_id: node.id for node in reversed(NODE_PRESETS.values()) for gpu_id in node.gpu_ids}
"""The node preset of each GPU preset: the first node that lists it."""




POWER_CLOCK_EXPONENT = 1.0 / 3.0
"""Sustained tensor-core clock of a power-limited part: f / f_ref = (P / P_ref)^(1/3).

Source: CMOS dynamic power P = a C V^2 f with the supply voltage scaled with the clock in
the DVFS range (V proportional to f), so P grows as f^3 (Weste & Harris, "CMOS VLSI
Design", chapter on power: dynamic power and voltage scaling). Checked, not fitted,
against NVIDIA's own datasheet: the H100 NVL (same GH100 die and 132 SMs) is rated 835.5
dense BF16 TFLOPS at 400 W against the SXM5's 989.4 at 700 W, a ratio of 0.844; the relation
gives 0.830 (-1.7%). Assumes: the whole board limit scales with the SM clock (HBM and static
power are not split off), which makes the derived clock slightly low.
"""


def power_limited_clock_ratio(power_w: float, reference_power_w: float) -> float:
    """Sustained clock of a part held to `power_w` relative to the same die at
    `reference_power_w` (see `POWER_CLOCK_EXPONENT`); never above 1."""
    return float(min(1.0, (power_w / reference_power_w) ** POWER_CLOCK_EXPONENT))


def _gpu_from_record(rec: dict[str, Any]) -> GpuSpec:
    """A GPU preset. A record with `power_limit_of` takes the peaks of that reference part
    times `power_limited_clock_ratio(tdp_w, reference tdp_w)` (a power-capped variant whose
    vendor peaks are not printed)."""
    reference = rec.get("power_limit_of")
    scale = 1.0
    source = rec
    if reference is not None:
        source = _hardware_records()[reference]
        scale = power_limited_clock_ratio(float(rec["tdp_w"]), float(source["tdp_w"]))

    def peaks(kind: str) -> dict[DType, float]:
        out: dict[DType, float] = {}
        for dtype, key in _DTYPE_KEYS.items():
            value = source.get(key.format(kind))
            if value is not None:
                out[dtype] = float(value) * 1e12 * scale
        return out

    return GpuSpec(
        id=rec["id"], name=rec["name"], vendor=rec.get("vendor", ""),
        memory_bytes=int(rec["memory_gb"]) * GIB if float(rec["memory_gb"]).is_integer()
        else int(float(rec["memory_gb"]) * GIB),
        hbm_bandwidth_bytes_per_s=float(rec["memory_bandwidth_tb_s"]) * 1e12,
        dense_peak_flop_per_s=peaks("dense"), sparse_peak_flop_per_s=peaks("sparse"),
        scale_up_bandwidth_bytes_per_s=float(rec["scale_up"]["bandwidth_gb_s"]) * GB,
        tdp_watts=rec.get("tdp_w"), sources=tuple(rec.get("sources", ())),
        confidence=rec.get("confidence", "high"),
    )


def gpu_ids() -> list[str]:
    """Ids of every GPU preset (TPU entries excluded: the cost model is for GPUs)."""
    return [gid for gid, rec in _hardware_records().items() if rec.get("vendor") != "Google"]


def gpu_preset(gpu_id: str) -> GpuSpec:
    """The `GpuSpec` of a catalog id such as 'h100-sxm5-80gb'.

    Raises:
        InvalidSpecError: for an unknown id (the message lists the known ids).
    """
    if gpu_id not in gpu_ids():
        raise InvalidSpecError(
            f"unknown GPU preset '{gpu_id}'; known presets: {', '.join(gpu_ids())}",
            field="cluster.gpu",
        )
    return _gpu_from_record(_hardware_records()[gpu_id])


def node_preset(node_id: str) -> NodePreset:
    """A node preset by id (see `NODE_PRESETS`)."""
    if node_id not in NODE_PRESETS:
        raise InvalidSpecError(
            f"unknown node preset '{node_id}'; known presets: {', '.join(NODE_PRESETS)}",
            field="cluster.node",
        )
    return NODE_PRESETS[node_id]


NODE_LINK_FIELDS: tuple[str, ...] = (
    "cluster.gpus_per_node", "cluster.intra_node_bandwidth_bytes_per_s",
    "cluster.inter_node_bandwidth_bytes_per_s")
"""What a cluster of a GPU with no node preset must give (or name `cluster.node`)."""


def default_node(gpu_id: str) -> NodePreset:
    """The node preset of a GPU preset id.

    Raises:
        InvalidSpecError: the GPU has no node preset (a custom GPU): the message names the
            fields to give instead, never borrowing another GPU's links.
    """
    node_id = DEFAULT_NODE_FOR_GPU.get(gpu_id)
    if node_id is None:
        raise InvalidSpecError(
            f"GPU '{gpu_id}' has no node preset, so its links are unknown: give "
            f"{', '.join(NODE_LINK_FIELDS)}, or name a node preset in cluster.node (one of "
            f"{', '.join(NODE_PRESETS)})", field="cluster.node",
            diagnostics={"missing": list(NODE_LINK_FIELDS)})
    return NODE_PRESETS[node_id]


def cluster_preset(gpu_id: str, *, num_nodes: int, gpus_per_node: int | None = None,
                   node_id: str | None = None) -> ClusterSpec:
    """A cluster of `num_nodes` typical nodes of a GPU preset (links from the node preset)."""
    gpu = gpu_preset(gpu_id)
    node = node_preset(node_id) if node_id is not None else default_node(gpu_id)
    return ClusterSpec(
        gpu=gpu, num_nodes=num_nodes, gpus_per_node=gpus_per_node or node.gpus_per_node,
        intra_node=LinkSpec(bandwidth_bytes_per_s=node.intra_node_bandwidth_bytes_per_s(),
                            latency_s=INTRA_NODE_LATENCY_S),
        inter_node=LinkSpec(bandwidth_bytes_per_s=node.inter_node_bandwidth_bytes_per_s(),
                            latency_s=INTER_NODE_LATENCY_S),
        intra_node_topology=node.intra_node_topology,
        host_memory_bytes=node.host_memory_bytes,
        host_memory_bandwidth_bytes_per_s=node.host_memory_bandwidth_bytes_per_s,
        pcie_bandwidth_bytes_per_s=node.pcie_bandwidth_bytes_per_s,
    )


def megatron_gpt(*, name: str, num_layers: int, hidden_size: int, num_heads: int,
                 vocab_size: int = 51200, seq_len: int = 2048) -> ModelSpec:
    """A GPT model as Megatron-LM 2021 / Korthikanti 2022 configure it.

    Source: [NAR21] arXiv:2104.04473 Sec. 5.1 (V=51,200, s=2048, 4h MLP, learned positions,
    tied embeddings, biases everywhere, LayerNorm).
    """
    return ModelSpec(
        name=name, num_layers=num_layers, hidden_size=hidden_size,
        num_attention_heads=num_heads, ffn_hidden_size=4 * hidden_size, mlp=MlpKind.GELU,
        norm=NormKind.LAYERNORM, linear_bias=True, vocab_size=vocab_size,
        tie_word_embeddings=True, learned_position_embeddings=seq_len,
        max_position_embeddings=seq_len,
    )


MEGATRON_2021_TABLE1: tuple[tuple[str, int, int, int], ...] = (
    ("gpt-1.7b", 24, 2304, 24), ("gpt-3.6b", 30, 3072, 32), ("gpt-7.5b", 36, 4096, 32),
    ("gpt-18.4b", 40, 6144, 48), ("gpt-39.1b", 48, 8192, 64), ("gpt-76.1b", 60, 10240, 80),
    ("gpt-145.6b", 80, 12288, 96), ("gpt-310.1b", 96, 16384, 128),
    ("gpt-529.6b", 105, 20480, 128), ("gpt-1008b", 128, 25600, 160),
)
"""(name, layers, hidden, heads) of Megatron-LM 2021 Table 1 (arXiv:2104.04473)."""

KORTHIKANTI_2022_TABLE3: tuple[tuple[str, int, int, int], ...] = (
    ("gpt-22b", 48, 6144, 64), ("gpt-175b", 96, 12288, 96), ("gpt-530b", 105, 20480, 128),
    ("gpt-1t", 128, 25600, 160),
)
"""(name, layers, hidden, heads) of Korthikanti et al. 2022 Table 3 (arXiv:2205.05198)."""


def hf_preset_ids() -> list[str]:
    """File stems of the packaged Hugging Face configs."""
    return sorted(path.stem for path in (DATA_DIR / "hf_configs").glob("*.json"))


@cache
def hf_preset_config(preset_id: str) -> dict[str, Any]:
    """The raw Hugging Face `config.json` of a preset."""
    if preset_id not in hf_preset_ids():
        raise InvalidSpecError(
            f"unknown model preset '{preset_id}'; known presets: {', '.join(model_ids())}",
            field="model.preset",
        )
    path = DATA_DIR / "hf_configs" / f"{preset_id}.json"
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def model_ids() -> list[str]:
    """Every model preset id: the Hugging Face configs and the Megatron GPT shapes."""
    gpt = [row[0] for row in MEGATRON_2021_TABLE1 + KORTHIKANTI_2022_TABLE3]
    return hf_preset_ids() + sorted(set(gpt)) + sorted(ASSUMED_PRESETS)


@cache
def model_preset(preset_id: str) -> ModelSpec:
    """The `ModelSpec` of a preset id (Hugging Face stem, Megatron GPT name, or an assumed
    preset of `models.catalog.assumed_presets`)."""
    for name, layers, hidden, heads in MEGATRON_2021_TABLE1 + KORTHIKANTI_2022_TABLE3:
        if name == preset_id:
            return megatron_gpt(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads)
    from models.catalog.hf_config import spec_from_hf_config

    if preset_id in ASSUMED_PRESETS:
        base, derive = ASSUMED_PRESETS[preset_id]
        return spec_from_hf_config(derive(hf_preset_config(base)), name=preset_id).spec
    return spec_from_hf_config(hf_preset_config(preset_id), name=preset_id).spec


__all__ = [
    "DEFAULT_NODE_FOR_GPU",
    "INTER_NODE_LATENCY_S",
    "INTRA_NODE_LATENCY_S",
    "KORTHIKANTI_2022_TABLE3",
    "MEGATRON_2021_TABLE1",
    "NIC_ACHIEVABLE_FRAC",
    "NODE_LINK_FIELDS",
    "NODE_PRESETS",
    "NVLINK_ACHIEVABLE_FRAC",
    "POWER_CLOCK_EXPONENT",
    "NodePreset",
    "cluster_preset",
    "default_node",
    "gpu_ids",
    "gpu_preset",
    "hf_preset_config",
    "hf_preset_ids",
    "megatron_gpt",
    "model_ids",
    "model_preset",
    "node_preset",
    "power_limited_clock_ratio",
]
