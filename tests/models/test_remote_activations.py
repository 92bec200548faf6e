"""Remote activation offload across pipeline ranks (Kimi K3): the balanced level, the
receivers' bounds, the traffic per step, and the what-if on a real configuration."""

import math
from typing import Any

import pytest

from api_schemas.requests import EvaluateRequest
from models.memory import STORED_ACTIVATIONS, memory_ledger
from models.remote_activations import balance_remote_activations, remote_offload_bytes_per_step
from models.remote_activations_report import remote_activations_report
from models.resolve import resolve_cluster, resolve_model


def test_balance_water_fills_senders_down_to_receivers_room() -> None:
    # need(L) = (10 - L) + (8 - L), room(L) = (L - 4) + (L - 2): equal at L = 6.
    balance = balance_remote_activations(totals=[10, 8, 4, 2], movable=[6, 5, 3, 1],
                                         capacity=12)
    assert balance.level == 6
    assert balance.sent == (4, 2, 0, 0)
    assert balance.received == (0, 0, 2, 4)
    assert balance.totals_after == (6, 6, 6, 6)


def test_a_sender_keeps_what_may_not_move_and_receivers_stop_at_capacity() -> None:
    # Rank 0 may move only 1 of its 10: the level cannot go below 9.
    movable_bound = balance_remote_activations(totals=[10, 2], movable=[1, 0], capacity=20)
    assert movable_bound.level == 9 and movable_bound.totals_after == (9, 3)
    # The receiver has 1 byte of room below the capacity: the sender keeps the rest.
    capacity_bound = balance_remote_activations(totals=[10, 7], movable=[10, 0], capacity=8)
    assert capacity_bound.totals_after == (9, 8)
    assert max(capacity_bound.totals_after) == capacity_bound.peak_after == 9


def test_balancing_conserves_bytes_and_cannot_beat_the_mean() -> None:
    totals = [53, 48, 45, 42, 39, 37, 34, 34]
    balance = balance_remote_activations(totals=totals, movable=[t // 2 for t in totals],
                                         capacity=100)
    assert sum(balance.sent) == sum(balance.received)
    assert sum(balance.totals_after) == sum(totals)
    assert balance.peak_after == math.ceil(sum(totals) / len(totals))
    with pytest.raises(ValueError):
        balance_remote_activations(totals=[1], movable=[2], capacity=10)


def test_traffic_is_the_moved_share_of_every_unit_out_and_back() -> None:
    # 23 units in flight at the peak hold the moved 23 GB: 1 GB of each; 128 units a step.
    assert remote_offload_bytes_per_step(moved_bytes=23 * 10**9, in_flight_units=23,
                                         units_per_step=128) == 2 * 128 * 10**9


def _doc(sequence_length: int) -> dict[str, Any]:
    return {"model": {"preset": "llama-3.1-70b"},
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
            "training": {"global_batch_size": 64, "sequence_length": sequence_length},
            "parallel": {"tp": 8, "pp": 8, "dp": 1, "vpp": 2, "micro_batch_size": 1,
                         "schedule": "interleaved_1f1b", "zero_stage": 1,
                         "sequence_parallel": True, "recompute": "none"}}


def test_interleaved_front_ranks_send_and_back_ranks_receive() -> None:
    """Kimi K3: under interleaved 1F1B the front pipeline ranks hold more activations, and
    remote offload to other PP ranks balances them. Megatron's interleaved warm-up keeps
    (p - i - 1) 2 + (v - 1) p + 1 units on rank i: 23 on rank 0 and 9 on rank 7 for p = 8,
    v = 2."""
    report = remote_activations_report(EvaluateRequest.model_validate(_doc(8192)))
    stages = report.stages
    assert [s.in_flight_units for s in stages] == [(8 - i - 1) * 2 + 8 + 1 for i in range(8)]
    assert stages[0].sent_bytes > 0 and stages[0].received_bytes == 0
    assert stages[-1].received_bytes > 0 and stages[-1].sent_bytes == 0
    assert sum(s.sent_bytes for s in stages) == sum(s.received_bytes for s in stages)
    assert report.peak_bytes_after < report.peak_bytes_before
    for stage in stages:
        assert stage.total_bytes_after <= report.capacity_bytes
        assert stage.sent_bytes <= stage.movable_bytes
        assert stage.seconds_per_step == pytest.approx(
            stage.bytes_per_step / report.link_bandwidth_bytes_per_s)
    # Pipeline ranks sit eight GPUs apart on different nodes: the NIC carries them.
    assert report.link.startswith("NIC") and report.link_bandwidth_bytes_per_s == 50e9


def test_remote_offload_makes_an_oversized_front_rank_fit() -> None:
    request = EvaluateRequest.model_validate(_doc(16384))
    report = remote_activations_report(request)
    assert not report.fits_before and report.fits_after
    ledger = memory_ledger(resolve_model(request.model).spec, request.training,
                           request.parallel, resolve_cluster(request.cluster))
    stored = {s.stage: sum(c.bytes for c in s.components if c.name == STORED_ACTIVATIONS)
              for s in ledger.stages}
    assert [s.movable_bytes for s in report.stages] == [stored[s.stage] for s in report.stages]
    assert report.peak_bytes_before == ledger.peak_bytes
