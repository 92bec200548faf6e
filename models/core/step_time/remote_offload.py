"""Step-time cost of remote activation offload: stored activations held in other pipeline
ranks' memory, sent after their forward and fetched back before their backward.

Owns: each rank's bytes per step over its pipeline group's link (senders' and receivers'),
the time of that traffic, the window it can hide in (the rank's forward and input-backward
time less the time the same link carries the step's other traffic), and the exposed time
(`remote_offload_cost`). The bytes moved come from the memory ledger
(`models.core.memory.apply_remote_offload`); the balance itself is
`models.core.remote_activations`. Must not: size memory, search, or define the step's other
traffic (`models.core.traffic` does).
"""

from dataclasses import dataclass

from models.catalog.kernels import memory_bound_time_s
from models.core.memory import MemoryLedger
from models.core.mesh import GroupKind
from models.core.remote_activations import remote_offload_bytes_per_step
from models.core.step_time.makespan import crossings_per_micro_batch
from models.core.step_time.setting import StepSetting
from models.core.step_time.stage import StageTime
from models.core.traffic import step_traffic

REMOTE_ACTIVATIONS = "remote activation offload"
"""Name, in `overheads_s`, of the exposed time of remote activation offload."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteOffloadCost:
    """Remote activation offload's per-step traffic and time (a model, not a
    measurement)."""

    intra_node: bool
    """The pipeline group stays inside a node (scale-up link), else it crosses the NIC."""
    bandwidth_bytes_per_s: float
    bytes_per_step: tuple[int, ...]
    """Per pipeline rank: bytes it sends and fetches back (senders), or receives and
    returns (receivers), in one step."""
    transfer_s: tuple[float, ...]
    """Per rank: that traffic over the link, before any overlap."""
    window_s: tuple[float, ...]
    """Per rank: forward and input-backward time per step less the link's other traffic."""
    hbm_s: tuple[float, ...]
    """Per rank: the HBM time of reading and writing its moved bytes, never hidden."""
    exposed_s: float
    """The largest rank's transfer beyond its window plus its HBM time (a stalled rank
    delays the pipeline by its stall)."""


def remote_offload_cost(setting: StepSetting, ledger: MemoryLedger, stages: list[StageTime]
                        ) -> RemoteOffloadCost | None:
    """The exposed step time of remote activation offload (None when nothing moves).

    Source: Kimi K3 arXiv:2607.24653 as the seed ledger summarises it (Sec. 9.4-9.5):
    activations move into other pipeline ranks' memory over the Mooncake Transfer Engine,
    with layer-granularity prefetch overlapping compute; the bytes per step follow
    `models.core.remote_activations.remote_offload_bytes_per_step` (each moved share out after
    forward and back before backward, once per micro-batch x chunk unit).
    Legend: S_i = bytes rank i keeps elsewhere at its peak, u_i = its in-flight units at
    the peak, U_i = m x chunks x crossings per micro-batch (units per step), R_j = bytes
    rank j holds for others, B = the pipeline group's link (scale-up inside a node, else
    the NIC), F_i, Bin_i = the rank's forward and input-backward time per micro-batch.
    Sender: D_i = 2 S_i U_i / u_i. Receiver: D_j = (R_j / sum R) sum_i D_i (each receiver
    carries its share of the senders' traffic). Window W_i = m x crossings x (F_i + Bin_i)
    less the per-step time of the rank's other traffic on the same link (items crossing
    nodes for the NIC, items inside a node for the scale-up link).
    Exposed = max_i [max(0, D_i / B - W_i) + D_i / B_hbm]: every moved byte is read from
    and written to HBM once on each side (B_hbm: `models.catalog.kernels.memory_bound_time_s`),
    which competes with the kernels for HBM bandwidth and is charged in full, so the
    mechanism is never free.
    Assumes: transfers run at the link's bandwidth per direction, timed as the round trip
    in one direction (as the host offload stall is); the link's other traffic occupies it
    for its whole time, hidden or not; a GPUDirect transfer across nodes does not also
    contend with host-offload copies on the GPU's PCIe link.
    """
    sent = [s.remote_sent_bytes for s in ledger.stages]
    if not any(sent):
        return None
    intra, bandwidth = _pp_link(setting)
    crossings = setting.num_micro_batches * crossings_per_micro_batch(setting.parallel)
    per_step = _bytes_per_step(ledger, stages, crossings)
    transfer, window = [], []
    for rank, (st, d) in enumerate(zip(stages, per_step, strict=True)):
        transfer.append(d / bandwidth)
        if not d:
            window.append(0.0)
            continue
        hidden = crossings * sum(t.forward_s + t.backward_input_s for t in st.chunk_times)
        window.append(max(0.0, hidden - _link_busy_s(setting, rank, intra)))
    hbm = [memory_bound_time_s(d, gpu=setting.cluster.gpu) for d in per_step]
    exposed = max(max(0.0, t - w) + h for t, w, h in zip(transfer, window, hbm, strict=True))
    return RemoteOffloadCost(intra_node=intra, bandwidth_bytes_per_s=bandwidth,
                             bytes_per_step=tuple(per_step), transfer_s=tuple(transfer),
                             window_s=tuple(window), hbm_s=tuple(hbm), exposed_s=exposed)


def _pp_link(setting: StepSetting) -> tuple[bool, float]:
    """(whether the pipeline group stays inside a node, the bandwidth of its link: the
    scale-up link inside a node, else the NIC)."""
    intra = setting.groups.mesh.placement(GroupKind.PP).all_intra_node
    cluster = setting.cluster
    return intra, (cluster.intra_node.bandwidth_bytes_per_s if intra
                   else cluster.inter_node.bandwidth_bytes_per_s)


def _link_busy_s(setting: StepSetting, rank: int, intra: bool) -> float:
    """Per-step time of rank `rank`'s other traffic on the pipeline group's link: items
    inside a node for the scale-up link, items crossing nodes for the NIC."""
    traffic = step_traffic(setting.spec, training=setting.training, parallel=setting.parallel,
                           cluster=setting.cluster, stage=rank)
    return sum(i.time_per_step_s for i in traffic.items if (i.nodes_spanned == 1) == intra)


def _bytes_per_step(ledger: MemoryLedger, stages: list[StageTime],
                    crossings: float) -> list[int]:
    """Per rank, the bytes it moves per step: D_i of its own sent share
    (`remote_offload_bytes_per_step`), plus, as a receiver, its share of all senders'
    traffic in proportion to the bytes it holds for others."""
    received = [s.remote_received_bytes for s in ledger.stages]
    per_step: list[int] = []
    for stage, st in zip(ledger.stages, stages, strict=True):
        units = max(1, round(crossings * len(st.chunk_times)))
        per_step.append(remote_offload_bytes_per_step(
            moved_bytes=stage.remote_sent_bytes, in_flight_units=max(1, stage.in_flight_chunks),
            units_per_step=units) if stage.remote_sent_bytes else 0)
    sent_total, received_total = sum(per_step), sum(received)
    for j, r in enumerate(received):
        if r:
            per_step[j] += round(sent_total * r / received_total)
    return per_step


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteOffloadRates:
    """Per pipeline rank and micro-batch crossing, what remote activation offload costs per
    byte, for a solver that chooses the bytes (`remote_offload_cost` times a given
    balance): the same terms divided by the m x crossings a step has."""

    send_link_s: tuple[float, ...]
    """Link seconds per byte the rank keeps elsewhere: 2 chunks / (u_i B)."""
    receive_link_s: tuple[float, ...]
    """Link seconds per byte the rank holds for others, at the highest rate of the ranks
    that may send: an upper bound of its share of their traffic."""
    hbm_send_s: tuple[float, ...]
    """HBM seconds per byte kept elsewhere (never hidden)."""
    hbm_receive_s: tuple[float, ...]
    window_s: tuple[float, ...]
    """Forward and input-backward time per crossing less the link's other traffic."""


def remote_offload_rates(setting: StepSetting, in_flight: list[int], stages: list[StageTime],
                         senders: list[bool] | None = None) -> RemoteOffloadRates:
    """`remote_offload_cost`'s terms per byte and per micro-batch crossing (same source,
    legend and assumptions), with `in_flight` the ranks' units in flight at their peaks.
    A receiver carries its share of the senders' traffic: it is charged at the highest rate
    of the ranks that may send (`senders`, default every rank)."""
    intra, bandwidth = _pp_link(setting)
    hbm = memory_bound_time_s(1.0, gpu=setting.cluster.gpu)
    crossings = setting.num_micro_batches * crossings_per_micro_batch(setting.parallel)
    per_byte = [2 * len(st.chunk_times) / max(1, u)
                for st, u in zip(stages, in_flight, strict=True)]
    top = max(b for i, b in enumerate(per_byte) if senders is None or senders[i]) if (
        senders is None or any(senders)) else max(per_byte)
    window = []
    for rank, st in enumerate(stages):
        hidden = sum(t.forward_s + t.backward_input_s for t in st.chunk_times)
        window.append(max(0.0, hidden - _link_busy_s(setting, rank, intra) / crossings))
    return RemoteOffloadRates(
        send_link_s=tuple(b / bandwidth for b in per_byte),
        receive_link_s=(top / bandwidth,) * len(stages),
        hbm_send_s=tuple(b * hbm for b in per_byte), hbm_receive_s=(top * hbm,) * len(stages),
        window_s=tuple(window))


__all__ = ["REMOTE_ACTIVATIONS", "RemoteOffloadCost", "RemoteOffloadRates",
           "remote_offload_cost", "remote_offload_rates"]
