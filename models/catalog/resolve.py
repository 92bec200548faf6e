"""Resolving request inputs to specs: presets and overrides to `ModelSpec` and `ClusterSpec`.

Owns: the rules that turn `{"preset": ...}`, `{"hf_config": ...}` or explicit fields into a
`ModelSpec`, and a GPU preset plus node preset plus overrides into a `ClusterSpec`. Must not:
do I/O beyond the catalog's packaged data.
"""

from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec, GpuSpec, IntraNodeTopology, LinkSpec
from api_schemas.requests import ClusterInput, ModelFromHf, ModelInput, ModelPreset
from models.catalog.hf_config import spec_from_hf_config
from models.catalog.presets import (
    DEFAULT_NODE_FOR_GPU,
    INTER_NODE_LATENCY_S,
    INTRA_NODE_LATENCY_S,
    NODE_LINK_FIELDS,
    NODE_PRESETS,
    default_node,
    gpu_preset,
    model_preset,
    node_preset,
)
from models.errors import InvalidSpecError


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
        InvalidSpecError: unknown GPU or node preset, a GPU with no node preset whose
            links the request does not give (the message names the fields), or a
            calibration profile named but not expanded (only the service's store holds
            profiles: it replaces `cluster.profile` with `cluster.calibration`).
    """
    if cluster.profile is not None:
        raise InvalidSpecError(
            f"cluster.profile '{cluster.profile}' names a stored calibration profile, which "
            "is applied by POST /v1/evaluate and POST /v1/plans of the service; elsewhere "
            "give its constants (GET /v1/calibration/profiles/{name}) as "
            "cluster.calibration", field="cluster.profile")
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
    links = _node_links(cluster, gpu)
    intra = LinkSpec(
        bandwidth_bytes_per_s=(cluster.intra_node_bandwidth_bytes_per_s
                               or links.intra_node_bytes_per_s),
        latency_s=(cluster.intra_node_latency_s if cluster.intra_node_latency_s is not None
                   else INTRA_NODE_LATENCY_S))
    inter = LinkSpec(
        bandwidth_bytes_per_s=(cluster.inter_node_bandwidth_bytes_per_s
                               or links.inter_node_bytes_per_s),
        latency_s=(cluster.inter_node_latency_s if cluster.inter_node_latency_s is not None
                   else INTER_NODE_LATENCY_S))
    return ClusterSpec(
        gpu=gpu, num_nodes=cluster.num_nodes,
        gpus_per_node=cluster.gpus_per_node or links.gpus_per_node,
        intra_node=intra, inter_node=inter,
        intra_node_topology=cluster.intra_node_topology or links.topology,
        rail_optimized=True if cluster.rail_optimized is None else cluster.rail_optimized,
        host_memory_bytes=(cluster.host_memory_bytes if cluster.host_memory_bytes is not None
                           else links.host_memory_bytes),
        pcie_bandwidth_bytes_per_s=(cluster.pcie_bandwidth_bytes_per_s
                                    or links.pcie_bytes_per_s),
        host_memory_bandwidth_bytes_per_s=(cluster.host_memory_bandwidth_bytes_per_s
                                           or links.host_memory_bandwidth_bytes_per_s),
        memory_headroom_frac=cluster.memory_headroom_frac,
        memory_margin_frac=cluster.memory_margin_frac,
        calibration=cluster.calibration,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _NodeLinks:
    """What a node contributes to a cluster before the request's overrides."""

    gpus_per_node: int
    intra_node_bytes_per_s: float
    inter_node_bytes_per_s: float
    topology: IntraNodeTopology
    host_memory_bytes: int
    pcie_bytes_per_s: float
    host_memory_bandwidth_bytes_per_s: float


def _node_links(cluster: ClusterInput, gpu: GpuSpec) -> _NodeLinks:
    """The node the links come from: the named preset, the GPU's own preset, or, for a GPU
    with none, the links the request gives (an error naming them when it gives too few;
    host memory, PCIe and topology then keep `ClusterSpec`'s defaults)."""
    if cluster.node is not None or gpu.id in DEFAULT_NODE_FOR_GPU:
        node = node_preset(cluster.node) if cluster.node is not None else default_node(gpu.id)
        return _NodeLinks(
            gpus_per_node=node.gpus_per_node,
            intra_node_bytes_per_s=node.intra_node_bandwidth_bytes_per_s(),
            inter_node_bytes_per_s=node.inter_node_bandwidth_bytes_per_s(),
            topology=node.intra_node_topology, host_memory_bytes=node.host_memory_bytes,
            pcie_bytes_per_s=node.pcie_bandwidth_bytes_per_s,
            host_memory_bandwidth_bytes_per_s=node.host_memory_bandwidth_bytes_per_s)
    if cluster.gpus_per_node is None or cluster.intra_node_bandwidth_bytes_per_s is None or \
            cluster.inter_node_bandwidth_bytes_per_s is None:
        given = (cluster.gpus_per_node, cluster.intra_node_bandwidth_bytes_per_s,
                 cluster.inter_node_bandwidth_bytes_per_s)
        missing = [name for name, value in zip(NODE_LINK_FIELDS, given, strict=True)
                   if value is None]
        raise InvalidSpecError(
            f"GPU '{gpu.id}' has no node preset, so its links are unknown: give "
            f"{', '.join(missing)}, or name a node preset in cluster.node (one of "
            f"{', '.join(NODE_PRESETS)})", field=missing[0], diagnostics={"missing": missing})
    fields = ClusterSpec.model_fields
    return _NodeLinks(
        gpus_per_node=cluster.gpus_per_node,
        intra_node_bytes_per_s=cluster.intra_node_bandwidth_bytes_per_s,
        inter_node_bytes_per_s=cluster.inter_node_bandwidth_bytes_per_s,
        topology=IntraNodeTopology.SWITCH,
        host_memory_bytes=fields["host_memory_bytes"].default,
        pcie_bytes_per_s=fields["pcie_bandwidth_bytes_per_s"].default,
        host_memory_bandwidth_bytes_per_s=fields["host_memory_bandwidth_bytes_per_s"].default)

__all__ = ["ResolvedModel", "resolve_cluster", "resolve_model"]
