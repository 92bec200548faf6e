"""POST /v1/lab/remote-activations: the memory lab's what-if of remote activation offload
(K3's remote PP activation balancing) on one configuration.

Owns: turning an `EvaluateRequest` into a `RemoteActivationsResponse`: the memory ledger's
per-stage totals and stored layer activations, balanced by
`models.core.remote_activations.balance_remote_activations`, and each sender's bytes per step
over the link its pipeline group uses (scale-up inside a node, the NIC across nodes, from
`models.core.mesh.build_mesh`). Must not: change the ledger, search or do I/O.
"""

from api_schemas.remote_activations import RemoteActivationsResponse, StageRemoteReport
from api_schemas.requests import EvaluateRequest
from models.catalog.resolve import resolve_cluster, resolve_model
from models.core.layout import pipeline_layout
from models.core.memory import memory_ledger
from models.core.mesh import validate_mesh
from models.core.mesh.layout import GroupKind, build_mesh
from models.core.rank_activations import stored_activation_bytes
from models.core.remote_activations import balance_remote_activations, remote_offload_bytes_per_step

SOURCE = ("Kimi K3 arXiv:2607.24653 (unified activation manager; remote offload of "
          "activations to other PP ranks' memory to balance interleaved 1F1B's front-loaded "
          "ranks); in-flight counts: Narayanan et al. arXiv:2104.04473 Sec. 2.2 via the "
          "memory ledger")

ASSUMPTIONS = [
    "A receiver's room is the usable capacity less its own ledger peak, so the bound holds "
    "at every instant of the schedule.",
    "Only the stored layer activations move (not the recompute working set, logits or "
    "buffers).",
    "A moved share of a rank's in-flight bytes is that share of every micro-batch x chunk "
    "unit, sent once after its forward and fetched once before its backward.",
    "A pipeline group that spans nodes is timed at the NIC bandwidth for every transfer, "
    "including those between ranks that share a node.",
]


def remote_activations_report(request: EvaluateRequest) -> RemoteActivationsResponse:
    """Per-rank GPU memory before and after balancing stored activations across each
    pipeline group, and the traffic that costs (a deterministic model, not a measurement).

    Raises:
        InvalidSpecError: unknown presets, a mesh that breaks a rule, or a configuration the
            ledger cannot size.
    """
    spec = resolve_model(request.model).spec
    cluster = resolve_cluster(request.cluster)
    parallel = request.parallel
    validate_mesh(parallel, model=spec, num_nodes=cluster.num_nodes,
                  gpus_per_node=cluster.gpus_per_node, training=request.training)
    layouts = pipeline_layout(spec, parallel)
    ledger = memory_ledger(spec, request.training, parallel, cluster, stages=layouts)
    stages = sorted(ledger.stages, key=lambda s: s.stage)
    totals = [s.total_bytes for s in stages]
    movable = [stored_activation_bytes(s.components) for s in stages]
    balance = balance_remote_activations(totals=totals, movable=movable,
                                         capacity=ledger.capacity_bytes)
    mesh = build_mesh(parallel, num_nodes=cluster.num_nodes,
                      gpus_per_node=cluster.gpus_per_node)
    if mesh.placement(GroupKind.PP).all_intra_node:
        bandwidth = cluster.intra_node.bandwidth_bytes_per_s
        link = f"scale-up inside a node, {bandwidth / 1e9:.0f} GB/s"
    else:
        bandwidth = cluster.inter_node.bandwidth_bytes_per_s
        link = f"NIC across nodes, {bandwidth / 1e9:.0f} GB/s"
    chunks = {layout.rank: len(layout.chunks) for layout in layouts}
    host_link = cluster.pcie_bandwidth_bytes_per_s
    reports = []
    for index, stage in enumerate(stages):
        units = ledger.num_micro_batches * chunks[stage.stage]
        moved = balance.sent[index]
        per_step = (remote_offload_bytes_per_step(
            moved_bytes=moved, in_flight_units=max(1, stage.in_flight_chunks),
            units_per_step=units) if moved else 0)
        reports.append(StageRemoteReport(
            stage=stage.stage, total_bytes_before=totals[index],
            total_bytes_after=balance.totals_after[index], movable_bytes=movable[index],
            sent_bytes=moved, received_bytes=balance.received[index],
            in_flight_units=stage.in_flight_chunks, bytes_per_step=per_step,
            seconds_per_step=per_step / bandwidth,
            host_link_seconds_per_step=per_step / host_link))
    capacity = ledger.capacity_bytes
    return RemoteActivationsResponse(
        capacity_bytes=capacity, peak_bytes_before=balance.peak_before,
        peak_bytes_after=balance.peak_after, fits_before=balance.peak_before <= capacity,
        fits_after=balance.peak_after <= capacity, link=link,
        link_bandwidth_bytes_per_s=bandwidth, stages=reports, assumptions=list(ASSUMPTIONS),
        source=SOURCE)


__all__ = ["remote_activations_report"]
