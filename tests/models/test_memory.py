"""The memory ledger: component placement, MoE sharding, schedules, and monotonicity."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api_schemas import (
    ClusterSpec,
    FullLayers,
    ModelSpec,
    MoESpec,
    ParallelConfig,
    PipelineSchedule,
    RecomputeMode,
    TrainingSpec,
)
from models.catalog import cluster_preset, model_preset
from models.errors import InvalidSpecError
from models.memory import MemoryLedger, memory_ledger
from models.params import layer_params

CLUSTER = cluster_preset("h100-sxm5-80gb", num_nodes=64)


def _state_bytes(ledger: MemoryLedger) -> int:
    return max(s.bytes_of("parameters") + s.bytes_of("gradients") + s.bytes_of("optimizer")
               for s in ledger.stages)


def _activation_bytes(ledger: MemoryLedger) -> int:
    return max(s.bytes_of("activations") for s in ledger.stages)


SMALL_MOE = ModelSpec(
    name="small-moe", num_layers=8, hidden_size=1024, num_attention_heads=16, num_kv_heads=4,
    ffn_hidden_size=4096, vocab_size=32000,
    moe=MoESpec(num_experts=16, top_k=2, expert_ffn_hidden_size=512, num_shared_experts=1,
                shared_expert_ffn_hidden_size=512, first_dense_layers=1),
)
TRAINING = TrainingSpec(global_batch_size=64, sequence_length=2048)


def test_every_component_is_a_non_negative_integer() -> None:
    ledger = memory_ledger(model_preset("deepseek-v3"), TrainingSpec(
        global_batch_size=1024, sequence_length=4096), ParallelConfig(
        pp=16, dp=16, ep=16, schedule=PipelineSchedule.INTERLEAVED_1F1B, vpp=2),
        cluster_preset("h800-sxm5-80gb", num_nodes=32))
    for stage in ledger.stages:
        for component in stage.components + stage.host_components:
            assert isinstance(component.bytes, int) and component.bytes >= 0, component
    assert ledger.peak_bytes == max(s.total_bytes for s in ledger.stages)


def test_routed_experts_are_divided_by_ep_times_etp_not_tp() -> None:
    # ETP x EP = 1 x 4 != TP = 2: the old Megatron formula divided experts by TP.
    parallel = ParallelConfig(tp=2, dp=4, ep=4, etp=1, pp=1, zero_stage=0)
    stage = memory_ledger(SMALL_MOE, TRAINING, parallel, CLUSTER).stages[0]
    per_layer = layer_params(SMALL_MOE, 1)
    expected_params = 7 * per_layer.routed_experts // (4 * 1)
    weights = next(c for c in stage.components if c.name == "weights: routed experts")
    assert weights.bytes == expected_params * 2  # bf16
    # Expert optimizer states shard over edp = tp*cp*dp/(ep*etp) = 2 under ZeRO-1.
    z1 = memory_ledger(SMALL_MOE, TRAINING, parallel.model_copy(update={"zero_stage": 1}),
                       CLUSTER).stages[0]
    optimizer = next(c for c in z1.components if c.name == "optimizer: routed experts")
    assert optimizer.bytes == expected_params * 12 // 2


def test_first_and_last_stage_carry_embedding_and_head() -> None:
    spec = model_preset("llama-3.1-8b")
    ledger = memory_ledger(spec, TRAINING, ParallelConfig(pp=4, dp=2), CLUSTER)
    names = [{c.name for c in s.components} for s in ledger.stages]
    assert "weights: embedding" in names[0] and "weights: embedding" not in names[1]
    assert "weights: output head" in names[3] and "weights: output head" not in names[0]


def test_1f1b_first_stage_holds_p_micro_batches_and_last_one() -> None:
    ledger = memory_ledger(model_preset("llama-3.1-8b"), TRAINING,
                           ParallelConfig(pp=4, dp=2), CLUSTER)
    assert [s.in_flight_chunks for s in ledger.stages] == [4, 3, 2, 1]
    assert ledger.binding_stage == 0


def test_dualpipe_doubles_parameters() -> None:
    spec = model_preset("llama-3.1-8b")
    one = memory_ledger(spec, TRAINING, ParallelConfig(pp=4, dp=2), CLUSTER).stages[1]
    dual = memory_ledger(spec, TRAINING, ParallelConfig(pp=4, dp=2,
                                                        schedule=PipelineSchedule.DUALPIPE),
                         CLUSTER).stages[1]
    assert dual.bytes_of("parameters") == pytest.approx(2 * one.bytes_of("parameters"), rel=0.01)
    assert dual.in_flight_chunks == 5  # PP + 1


def test_gpipe_keeps_every_micro_batch() -> None:
    ledger = memory_ledger(model_preset("llama-3.1-8b"), TRAINING,
                           ParallelConfig(pp=4, dp=2, schedule=PipelineSchedule.GPIPE), CLUSTER)
    assert all(s.in_flight_chunks == 32 for s in ledger.stages)


def test_offload_moves_bytes_to_host() -> None:
    spec = model_preset("llama-3.1-8b")
    base = ParallelConfig(pp=4, dp=2)
    plain = memory_ledger(spec, TRAINING, base, CLUSTER).stages[0]
    half = memory_ledger(spec, TRAINING, base.model_copy(update={"activation_offload_frac": 0.5}),
                         CLUSTER).stages[0]
    assert half.bytes_of("activations") < plain.bytes_of("activations")
    assert half.host_bytes > 0 and plain.host_bytes == 0


def test_pipeline_zero2_keeps_two_gradient_buffers_on_gpu() -> None:
    spec = model_preset("llama-3.1-8b")
    base = ParallelConfig(pp=4, dp=8, vpp=2, schedule=PipelineSchedule.INTERLEAVED_1F1B)
    host = memory_ledger(spec, TrainingSpec(global_batch_size=64, sequence_length=2048),
                         base.model_copy(update={"gradient_host_shards": True}),
                         CLUSTER).stages[1]
    gpu = memory_ledger(spec, TrainingSpec(global_batch_size=64, sequence_length=2048), base,
                        CLUSTER).stages[1]
    assert host.bytes_of("gradients") == pytest.approx(gpu.bytes_of("gradients"), rel=0.01)
    assert host.host_bytes == pytest.approx(gpu.bytes_of("gradients") / 8, rel=0.01)


def test_batch_that_does_not_divide_is_rejected_with_a_fix() -> None:
    with pytest.raises(InvalidSpecError, match="multiple of micro_batch_size x dp"):
        memory_ledger(model_preset("llama-3.1-8b"),
                      TrainingSpec(global_batch_size=10, sequence_length=2048),
                      ParallelConfig(dp=4), CLUSTER)


def test_deepseek_v3_published_configuration_fits_80gb() -> None:
    # DeepSeek-V3 (arXiv:2412.19437 Sec. 3): PP16 DualPipe, EP64, ZeRO-1, no TP, FP8 compute,
    # BF16 optimizer moments, RMSNorm and MLA up-projection recomputation, FP8 caching.
    training = TrainingSpec(global_batch_size=15360, sequence_length=4096, compute_dtype="fp8",
                            optimizer="adamw", optimizer_state_dtype="bf16",
                            moe_keep_expert_outputs=False)
    parallel = ParallelConfig(pp=16, dp=128, ep=64, schedule=PipelineSchedule.DUALPIPE,
                              recompute=RecomputeMode.SELECTIVE,
                              recompute_modules=("layernorm", "mla_up_proj", "moe_act"),
                              fp8_activations=True)
    ledger = memory_ledger(model_preset("deepseek-v3"), training, parallel,
                           cluster_preset("h800-sxm5-80gb", num_nodes=256))
    assert ledger.fits


settings_small = settings(max_examples=40, deadline=None)


@settings_small
@given(tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]), zero=st.integers(0, 2))
def test_raising_tp_pp_or_zero_never_raises_model_states(tp: int, pp: int, zero: int) -> None:
    spec = model_preset("llama-3.1-8b")
    base = ParallelConfig(tp=tp, pp=pp, dp=8, zero_stage=zero)
    reference = _state_bytes(memory_ledger(spec, TRAINING, base, CLUSTER))
    for change in ({"tp": tp * 2}, {"pp": pp * 2}, {"zero_stage": zero + 1}):
        raised = memory_ledger(spec, TRAINING, base.model_copy(update=change), CLUSTER)
        assert _state_bytes(raised) <= reference, change


@settings_small
@given(ep=st.sampled_from([1, 2, 4]), zero=st.integers(0, 3))
def test_raising_ep_never_raises_model_states(ep: int, zero: int) -> None:
    base = ParallelConfig(dp=8, ep=ep, zero_stage=zero)
    reference = _state_bytes(memory_ledger(SMALL_MOE, TRAINING, base, CLUSTER))
    raised = memory_ledger(SMALL_MOE, TRAINING, base.model_copy(update={"ep": ep * 2}), CLUSTER)
    assert _state_bytes(raised) <= reference


@settings_small
@given(
    pp=st.sampled_from([1, 2, 4]),
    tp=st.sampled_from([1, 2]),
    sp=st.booleans(),
    full_layers=st.integers(0, 8),
    moe=st.booleans(),
)
def test_recompute_never_raises_activation_bytes(pp: int, tp: int, sp: bool, full_layers: int,
                                                 moe: bool) -> None:
    spec = SMALL_MOE if moe else model_preset("llama-3.1-8b")
    base = ParallelConfig(pp=pp, tp=tp, dp=4, sequence_parallel=sp)
    none = _activation_bytes(memory_ledger(spec, TRAINING, base, CLUSTER))
    for recompute in (RecomputeMode.SELECTIVE, RecomputeMode.FULL,
                      FullLayers(full_layers=full_layers)):
        changed = base.model_copy(update={"recompute": recompute})
        assert _activation_bytes(memory_ledger(spec, TRAINING, changed, CLUSTER)) <= none


def test_headroom_lowers_capacity() -> None:
    cluster: ClusterSpec = CLUSTER.model_copy(update={"memory_headroom_frac": 0.1})
    ledger = memory_ledger(model_preset("llama-3.1-8b"), TRAINING, ParallelConfig(dp=8), cluster)
    assert ledger.capacity_bytes == int(CLUSTER.gpu.memory_bytes * 0.9)
