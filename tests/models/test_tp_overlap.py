"""TP communication overlap (Transformer Engine userbuffers): hidden behind the GEMMs, but
never free."""

from dataclasses import dataclass
from typing import Any

import pytest

from api_schemas import ParallelConfig, TrainingSpec
from models.catalog.presets import cluster_preset, model_preset
from models.core.collectives import Collective
from models.core.step_time import estimate_step
from models.core.step_time.exposure import (
    H100_SMS,
    TP_OVERLAP_BULK_RS_SMS,
    tp_overlap_exposed_s,
)
from models.core.traffic.items import Phase

LLAMA_70B = model_preset("llama-3.1-70b")
CLUSTER = cluster_preset("h100-sxm5-80gb", num_nodes=8)
TRAIN = TrainingSpec(global_batch_size=128, sequence_length=8192, compute_dtype="fp8")
MESH = ParallelConfig(tp=4, pp=8, dp=2, vpp=5, schedule="interleaved_1f1b",
                      sequence_parallel=True, micro_batch_size=1)


@dataclass(frozen=True)
class _Call:
    """The fields of a `LayerCall` the overlap rule reads."""

    name: str
    collective: Collective
    phase: Phase
    time_s: float


def _call(name: str, collective: Collective, phase: Phase, seconds: float) -> Any:
    return _Call(name=name, collective=collective, phase=phase, time_s=seconds)


def test_the_bulk_reduce_scatter_sm_counts_are_the_llama3_70b_h100_fp8_recipe() -> None:
    """Megatron-Bridge `userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192`: qkv_wgrad and
    fc1_wgrad BulkOverlapCfg num_sm 24 and 4, of the H100's 132 SMs."""
    assert TP_OVERLAP_BULK_RS_SMS == {"attention": 24, "mlp": 4}
    assert H100_SMS == 132


def test_each_overlapped_collective_pays_its_own_mechanism() -> None:
    ms = 1e-3
    forward = [_call("tp.attention.forward.all_gather", Collective.ALL_GATHER, Phase.FORWARD,
                     ms),
               _call("tp.attention.forward.reduce_scatter", Collective.REDUCE_SCATTER,
                     Phase.FORWARD, ms)]
    # The all-gather hides entirely; the ring-exchange reduce-scatter leaves its last step.
    assert tp_overlap_exposed_s(forward, tp=4, window_s=1.0) == pytest.approx(ms / 4)
    backward = [_call("tp.attention.backward.reduce_scatter", Collective.REDUCE_SCATTER,
                      Phase.BACKWARD, ms),
                _call("tp.mlp.backward.reduce_scatter", Collective.REDUCE_SCATTER,
                      Phase.BACKWARD, ms),
                _call("tp.mlp.backward.all_gather", Collective.ALL_GATHER, Phase.BACKWARD, ms)]
    # Bulk reduce-scatters take 24 and 4 of 132 SMs from the weight-gradient GEMM meanwhile.
    assert tp_overlap_exposed_s(backward, tp=4, window_s=1.0) == pytest.approx(28 / 132 * ms)
    # What outlasts the phase's compute stays exposed.
    assert tp_overlap_exposed_s(forward, tp=4, window_s=0.5 * ms) == pytest.approx(
        1.5 * ms + 0.5 * ms / 4)


def test_tp_overlap_hides_most_but_not_all_of_the_tp_time() -> None:
    exposed = estimate_step(LLAMA_70B, TRAIN, MESH, CLUSTER)
    overlapped = estimate_step(LLAMA_70B, TRAIN.model_copy(update={"overlap_tp_comm": True}),
                               MESH, CLUSTER)
    assert 0 < overlapped.exposed_comm_s["tp"] < 0.25 * exposed.exposed_comm_s["tp"]
    assert overlapped.step_time_s < exposed.step_time_s
    assert sum(overlapped.breakdown_s.values()) == pytest.approx(overlapped.step_time_s,
                                                                 rel=1e-9)


def test_tp_overlap_needs_sequence_parallelism() -> None:
    """Megatron's `--tp-comm-overlap` runs only with sequence parallelism; without it the
    all-reduces stay exposed."""
    no_sp = MESH.model_copy(update={"sequence_parallel": False})
    plain = estimate_step(LLAMA_70B, TRAIN, no_sp, CLUSTER)
    asked = estimate_step(LLAMA_70B, TRAIN.model_copy(update={"overlap_tp_comm": True}), no_sp,
                          CLUSTER)
    assert asked.exposed_comm_s["tp"] == pytest.approx(plain.exposed_comm_s["tp"], rel=1e-12)


def test_tp_overlap_never_exposes_more_than_the_collectives_take() -> None:
    """The planner takes the overlap wherever a framework offers it, so it must never make
    a phase slower: three forward reduce-scatters each longer than the phase's compute would
    add 3 x window / 2 beside the 2 x ms - window that outlasts it; the figure stops at the
    plain 3 x ms."""
    ms = 1e-3
    calls = [_call(f"tp.attention.forward.reduce_scatter{i}", Collective.REDUCE_SCATTER,
                   Phase.FORWARD, ms) for i in range(3)]
    window = ms
    uncapped = (3 * ms - window) + 3 * window / 2
    assert uncapped > 3 * ms
    assert tp_overlap_exposed_s(calls, tp=2, window_s=window) == pytest.approx(3 * ms)
