"""Remote activation offload across pipeline ranks (Kimi K3): the balanced level, the
receivers' bounds, the traffic per step, and the what-if on a real configuration."""

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api_schemas.requests import EvaluateRequest
from models.catalog.kernels import HBM_ACHIEVABLE_FRAC
from models.catalog.resolve import resolve_cluster, resolve_model
from models.core.collectives import fabric_of
from models.core.layout import pipeline_layout
from models.core.memory import REMOTE_RECEIVED, fits_memory, memory_ledger
from models.core.rank_activations import STORED_ACTIVATIONS
from models.core.remote_activations import (
    balance_remote_activations,
    fits_after_remote_offload,
    remote_offload_bytes_per_step,
)
from models.core.step_time import axis_groups, estimate_step
from models.core.step_time.remote_offload import REMOTE_ACTIVATIONS, remote_offload_cost
from models.core.step_time.setting import step_setting
from models.core.step_time.stage import stage_times
from models.labs.remote_activations_report import remote_activations_report


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
            # Balanced against the usable memory (no safety margin), the capacity these
            # scenarios are laid out for.
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8,
                        "memory_margin_frac": 0},
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


def test_a_plan_moves_only_the_bytes_over_the_capacity() -> None:
    # With the capacity as the least level only rank 0's 1 byte over 9 moves, to the
    # emptiest rank; the what-if (no least level) would bring every rank down to 6.
    balance = balance_remote_activations(totals=[10, 8, 4, 2], movable=[6, 5, 3, 1],
                                         capacity=9, least_level=9)
    assert balance.level == 9
    assert balance.sent == (1, 0, 0, 0) and balance.received == (0, 0, 0, 1)
    # Nothing over the capacity: nothing moves.
    idle = balance_remote_activations(totals=[8, 2], movable=[8, 2], capacity=9,
                                      least_level=9)
    assert idle.sent == (0, 0) and idle.totals_after == (8, 2)


def _specs(doc: dict[str, Any], **parallel: Any) -> tuple[Any, ...]:
    request = EvaluateRequest.model_validate(doc)
    return (resolve_model(request.model).spec, request.training,
            request.parallel.model_copy(update=parallel), resolve_cluster(request.cluster))


def test_the_ledger_with_remote_offload_holds_the_excess_on_the_emptiest_ranks() -> None:
    """Interleaved 1F1B at 16K tokens: rank 0 is over the capacity without remote offload;
    with it rank 0 sends exactly its excess and the last rank (the fewest units in flight)
    holds it, within the capacity, and no byte is created or lost."""
    spec, training, parallel, cluster = _specs(_doc(16384))
    before = memory_ledger(spec, training, parallel, cluster)
    after = memory_ledger(spec, training,
                          parallel.model_copy(update={"remote_activation_offload": True}),
                          cluster)
    capacity = before.capacity_bytes
    assert before.stages[0].total_bytes > capacity and not before.fits
    assert after.fits and after.peak_bytes == capacity
    sent = [s.remote_sent_bytes for s in after.stages]
    received = [s.remote_received_bytes for s in after.stages]
    assert sent[0] == before.stages[0].total_bytes - capacity and sum(sent[1:]) == 0
    assert received[-1] == sent[0] and sum(received[:-1]) == 0
    assert sum(s.total_bytes for s in after.stages) == sum(s.total_bytes for s in before.stages)
    held = [c for c in after.stages[-1].components if c.name == REMOTE_RECEIVED]
    assert [c.bytes for c in held] == [sent[0]]
    for b, a in zip(before.stages[1:-1], after.stages[1:-1], strict=True):
        assert a == b  # ranks within the capacity that receive nothing are unchanged
    assert fits_memory(spec, training, parallel.model_copy(
        update={"remote_activation_offload": True}), cluster)


def test_remote_offload_cannot_beat_the_pipelines_mean() -> None:
    """At 32K tokens the pipeline's mean exceeds the capacity: no balance fits, and the
    verdict says so (remote offload only moves bytes, never removes them)."""
    spec, training, parallel, cluster = _specs(_doc(32768), remote_activation_offload=True)
    ledger = memory_ledger(spec, training, parallel, cluster)
    mean = sum(s.total_bytes for s in ledger.stages) / len(ledger.stages)
    assert mean > ledger.capacity_bytes
    assert not ledger.fits and not fits_memory(spec, training, parallel, cluster)


def test_remote_offload_is_charged_to_the_step_and_grows_as_the_link_narrows() -> None:
    """Sender traffic is 2 x sent x (m v) / (units in flight at its peak) over the pipeline
    group's link (the NIC here: ranks eight GPUs apart); the receiver carries the same bytes.
    Exposed = the largest rank's transfer beyond its window plus the HBM time of its bytes,
    so the term is positive even when the link hides the transfer, and it follows
    transfer - window once the link is slow enough."""
    spec, training, parallel, cluster = _specs(_doc(16384), remote_activation_offload=True)
    ledger = memory_ledger(spec, training, parallel, cluster)
    m = ledger.num_micro_batches
    layouts = pipeline_layout(spec, parallel)
    groups = axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    stages = stage_times(spec, training, parallel, cluster, layouts, m, fabric_of(cluster),
                         groups)
    cost = remote_offload_cost(step_setting(spec, training, parallel, cluster), ledger, stages)
    assert cost is not None and not cost.intra_node
    sender = ledger.stages[0]
    expected = math.ceil(2 * sender.remote_sent_bytes * m * 2 / sender.in_flight_chunks)
    assert cost.bytes_per_step[0] == expected and cost.bytes_per_step[-1] == expected
    assert cost.transfer_s[0] == pytest.approx(expected / 50e9)
    hbm = expected / (cluster.gpu.hbm_bandwidth_bytes_per_s * HBM_ACHIEVABLE_FRAC)
    assert cost.exposed_s == pytest.approx(hbm)  # hidden behind the window but for HBM
    estimate = estimate_step(spec, training, parallel, cluster)
    assert estimate.overheads_s[REMOTE_ACTIVATIONS] == pytest.approx(cost.exposed_s)
    plain = estimate_step(spec, training, parallel.model_copy(
        update={"remote_activation_offload": False}), cluster)
    assert estimate.step_time_s == pytest.approx(plain.step_time_s + cost.exposed_s)
    # A 1 GB/s NIC: the transfer no longer hides.
    slow = cluster.model_copy(update={"inter_node": cluster.inter_node.model_copy(
        update={"bandwidth_bytes_per_s": 1e9})})
    slow_ledger = memory_ledger(spec, training, parallel, slow)
    slow_stages = stage_times(spec, training, parallel, slow, layouts, m, fabric_of(slow),
                              groups)
    slow_cost = remote_offload_cost(step_setting(spec, training, parallel, slow), slow_ledger,
                                    slow_stages)
    assert slow_cost is not None
    worst = max(max(0.0, t - w) + h for t, w, h in zip(
        slow_cost.transfer_s, slow_cost.window_s, slow_cost.hbm_s, strict=True))
    assert slow_cost.transfer_s[0] > slow_cost.window_s[0]
    assert slow_cost.exposed_s == pytest.approx(worst) and slow_cost.exposed_s > 1.0


@settings(max_examples=300, deadline=None)
@given(ranks=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200)), min_size=1,
                      max_size=12),
       capacity=st.integers(0, 250))
def test_the_closed_form_verdict_is_the_balances(ranks: list[tuple[int, int]],
                                                 capacity: int) -> None:
    totals = [t for t, _ in ranks]
    movable = [min(t, m) for t, m in ranks]
    balance = balance_remote_activations(totals=totals, movable=movable, capacity=capacity,
                                         least_level=capacity)
    assert fits_after_remote_offload(totals=totals, movable=movable, capacity=capacity) == (
        balance.peak_after <= capacity)
