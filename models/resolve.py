"""Resolving request inputs to specs: presets and overrides to `ModelSpec` and `ClusterSpec`.

Owns: the rules that turn `{"preset": ...}`, `{"hf_config": ...}` or explicit fields into a
`ModelSpec`, and a GPU preset plus node preset plus overrides into a `ClusterSpec`. Must not:
do I/O beyond the catalog's packaged data.
"""

from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec, GpuSpec, LinkSpec
from api_schemas.requests import ClusterInput, ModelFromHf, ModelInput, ModelPreset
from models.catalog import (
    DEFAULT_NODE_FOR_GPU,
    INTER_NODE_LATENCY_S,
    INTRA_NODE_LATENCY_S,
    gpu_preset,
    model_preset,
    node_preset,
)
from models.hf_config import spec_from_hf_config


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedModel:
    """A model spec and the notes made while resolving it."""

    spec: ModelSpec
    notes: tuple[str, ...] = ()


def resolve_model(model: ModelInput) -> ResolvedModel:
    """The `ModelSpec` of a preset, a Hugging Face config or explicit fields.

    Raises:
        InvalidSpecError: unknown preset or unreadable config (the message names the fix).
    """
    if isinstance(model, ModelPreset):
        return ResolvedModel(spec=model_preset(model.preset))
    if isinstance(model, ModelFromHf):
        ingested = spec_from_hf_config(model.hf_config)
        return ResolvedModel(spec=ingested.spec, notes=ingested.notes)
    return ResolvedModel(spec=model)


def resolve_cluster(cluster: ClusterInput) -> ClusterSpec:
    """A `ClusterSpec` from a GPU preset (or object), a node preset and overrides.

    Raises:
        InvalidSpecError: unknown GPU or node preset.
    """
    gpu: GpuSpec = gpu_preset(cluster.gpu) if isinstance(cluster.gpu, str) else cluster.gpu
    gpu_updates: dict[str, object] = {}
    if cluster.gpu_memory_bytes is not None:
        gpu_updates["memory_bytes"] = cluster.gpu_memory_bytes
    if cluster.peak_flop_per_s is not None:
        gpu_updates["dense_peak_flop_per_s"] = {**gpu.dense_peak_flop_per_s,
                                                **cluster.peak_flop_per_s}
    if cluster.hbm_bandwidth_bytes_per_s is not None:
        gpu_updates["hbm_bandwidth_bytes_per_s"] = cluster.hbm_bandwidth_bytes_per_s
    if gpu_updates:
        gpu = GpuSpec.model_validate({**gpu.model_dump(), **gpu_updates})
    node = node_preset(cluster.node or DEFAULT_NODE_FOR_GPU.get(gpu.id, "hgx-h100"))
    intra = LinkSpec(
        bandwidth_bytes_per_s=(cluster.intra_node_bandwidth_bytes_per_s
                               or node.intra_node_bandwidth_bytes_per_s()),
        latency_s=(cluster.intra_node_latency_s if cluster.intra_node_latency_s is not None
                   else INTRA_NODE_LATENCY_S))
    inter = LinkSpec(
        bandwidth_bytes_per_s=(cluster.inter_node_bandwidth_bytes_per_s
                               or node.inter_node_bandwidth_bytes_per_s()),
        latency_s=(cluster.inter_node_latency_s if cluster.inter_node_latency_s is not None
                   else INTER_NODE_LATENCY_S))
    return ClusterSpec(
        gpu=gpu, num_nodes=cluster.num_nodes,
        gpus_per_node=cluster.gpus_per_node or node.gpus_per_node,
        intra_node=intra, inter_node=inter,
        intra_node_topology=cluster.intra_node_topology or node.intra_node_topology,
        rail_optimized=True if cluster.rail_optimized is None else cluster.rail_optimized,
        host_memory_bytes=(cluster.host_memory_bytes if cluster.host_memory_bytes is not None
                           else node.host_memory_bytes),
        pcie_bandwidth_bytes_per_s=(cluster.pcie_bandwidth_bytes_per_s
                                    or node.pcie_bandwidth_bytes_per_s),
        memory_headroom_frac=cluster.memory_headroom_frac,
    )


__all__ = ["ResolvedModel", "resolve_cluster", "resolve_model"]
