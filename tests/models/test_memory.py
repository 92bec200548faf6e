"""The memory ledger: component placement, MoE sharding, schedules, and monotonicity."""

import pytest
from hypothesis import example, given, settings
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
from models.catalog.presets import cluster_preset, model_ids, model_preset
from models.core.layout import pipeline_layout
from models.core.ledger_memo import LedgerMemo
from models.core.memory import (
    MemoryLedger,
    StageMemory,
    _rank_bytes,
    fits_memory,
    memory_ledger,
    stage_memory,
)
from models.core.params import layer_attention_params, layer_params
from models.core.precision import StateBytesPerParam
from models.core.rank_activations import stored_activation_bytes
from models.core.rank_states import chunk_weight_kinds, micro_batch_count
from models.core.sharded_states import cpu_optimizer_gradient_bytes
from models.errors import InvalidSpecError

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

DSV3_TRAINING = TrainingSpec(global_batch_size=1024, sequence_length=4096)
DSV3_PARALLEL = ParallelConfig(pp=16, dp=16, ep=16, schedule=PipelineSchedule.INTERLEAVED_1F1B,
                               vpp=2)
H800_256 = cluster_preset("h800-sxm5-80gb", num_nodes=32)
"""DeepSeek-V3 on 256 H800: batch 1024 x 4K, PP16 x DP16 x EP16, interleaved 1F1B (v=2)."""


def test_every_component_is_a_non_negative_integer() -> None:
    ledger = memory_ledger(model_preset("deepseek-v3"), DSV3_TRAINING, DSV3_PARALLEL, H800_256)
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


def test_pipeline_zero2_chunk_buffers_hold_the_rank_s_expert_shard_not_every_expert() -> None:
    """Kimi K3's two gradient buffers hold one chunk each of what the rank owns: routed
    experts divided by EP, like the gradients they replace. Mixtral 8x7B (32 layers) with
    EP8, PP4 and even chunks, a middle stage: with two chunks per rank the two buffers are
    exactly the stage's gradients, with four chunks half of them."""
    spec = model_preset("mixtral-8x7b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=4)

    def gradients(pp: int, vpp: int, host_shards: bool) -> int:
        parallel = ParallelConfig(pp=pp, dp=32 // pp, ep=8, vpp=vpp,
                                  schedule=PipelineSchedule.INTERLEAVED_1F1B,
                                  gradient_host_shards=host_shards)
        stage = memory_ledger(spec, training, parallel, cluster).stages[1]
        return stage.bytes_of("gradients")

    assert gradients(4, 2, True) == pytest.approx(gradients(4, 2, False), rel=0.01)
    assert gradients(4, 4, True) == pytest.approx(gradients(4, 4, False) / 2, rel=0.01)


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


def _host_bytes_of(stage: StageMemory, kind: str) -> int:
    return sum(c.bytes for c in stage.host_components if c.kind == kind)


@settings(max_examples=25, deadline=None)
@given(frac=st.sampled_from([0.0, 0.25, 0.5, 1.0]), zero=st.sampled_from([0, 1, 2, 3]))
def test_optimizer_offload_moves_bytes_to_host_and_never_raises_gpu_bytes(frac: float,
                                                                        zero: int) -> None:
    """The offloaded optimizer states leave the GPU for host memory; the CPU optimizer's
    gradients are added in host memory, the GPU's gradients staying as they are."""
    base = ParallelConfig(tp=2, dp=4, ep=4, pp=1, zero_stage=zero)
    kept = memory_ledger(SMALL_MOE, TRAINING, base, CLUSTER).stages[0]
    moved = memory_ledger(SMALL_MOE, TRAINING, base.model_copy(
        update={"optimizer_offload_frac": frac}), CLUSTER).stages[0]
    assert moved.total_bytes <= kept.total_bytes
    assert moved.host_bytes >= kept.host_bytes
    shifted = kept.bytes_of("optimizer") - moved.bytes_of("optimizer")
    host_optimizer = _host_bytes_of(moved, "optimizer") - _host_bytes_of(kept, "optimizer")
    assert abs(shifted - host_optimizer) <= 8  # per-line rounding
    host_gradients = _host_bytes_of(moved, "gradients") - _host_bytes_of(kept, "gradients")
    assert (host_gradients > 0) == (frac > 0)
    assert moved.bytes_of("gradients") == kept.bytes_of("gradients")


def test_cpu_optimizer_gradients_take_the_dtypes_the_frameworks_allocate() -> None:
    """Megatron Core 0.16.1's HybridDeviceOptimizer and DeepSpeed 0.19.8's ZeRO-1/2 give the
    CPU optimizer's fp32 master copies an fp32 host gradient (4 bytes a parameter); DeepSpeed
    ZeRO-3 adds its gradient partition in the accumulation dtype, the model dtype unless
    `grad_accum_dtype` says otherwise (`DeepSpeedEngine.get_data_types`): 4 + 2 bytes for
    bf16 accumulation, 4 + 4 for fp32."""
    bf16_grads = StateBytesPerParam(weights=2, fp8_copy=0, gradients=2, master=4, moments=8)
    fp32_grads = StateBytesPerParam(weights=2, fp8_copy=0, gradients=4, master=4, moments=8)
    no_master = StateBytesPerParam(weights=2, fp8_copy=0, gradients=2, master=0, moments=4)
    moved = 1_000_000_000
    assert cpu_optimizer_gradient_bytes(moved_params=moved, zero_stage=1,
                                        per_param=bf16_grads) == 4_000_000_000
    assert cpu_optimizer_gradient_bytes(moved_params=moved, zero_stage=2,
                                        per_param=fp32_grads) == 4_000_000_000
    assert cpu_optimizer_gradient_bytes(moved_params=moved, zero_stage=3,
                                        per_param=bf16_grads) == 6_000_000_000
    assert cpu_optimizer_gradient_bytes(moved_params=moved, zero_stage=3,
                                        per_param=fp32_grads) == 8_000_000_000
    assert cpu_optimizer_gradient_bytes(moved_params=moved, zero_stage=1,
                                        per_param=no_master) == 2_000_000_000


@settings(max_examples=25, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), fsdp=st.booleans())
def test_zero3_buffers_never_exceed_two_unsharded_layers(tp: int, fsdp: bool) -> None:
    parallel = ParallelConfig(tp=tp, dp=16 // tp, pp=1, zero_stage=3, fsdp=fsdp)
    stage = memory_ledger(SMALL_MOE, TRAINING, parallel, CLUSTER).stages[0]
    gathered = next(c.bytes for c in stage.components if c.name == "ZeRO-3 gathered parameters")
    layer = max(layer_params(SMALL_MOE, i).total for i in range(SMALL_MOE.num_layers))
    assert gathered <= 2 * 2 * layer  # two whole layers in bf16: the old upper bound
    total = sum(layer_params(SMALL_MOE, i).total for i in range(SMALL_MOE.num_layers))
    assert gathered <= 2 * total  # never more than the rank's parameters


TWIN_MODEL = ModelSpec(
    name="twin-moe", num_layers=16, hidden_size=1024, num_attention_heads=16, num_kv_heads=4,
    ffn_hidden_size=4096, vocab_size=32000,
    moe=MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=512, first_dense_layers=3),
)


@settings(max_examples=40, deadline=None)
@given(schedule=st.sampled_from(list(PipelineSchedule)), pp=st.sampled_from([2, 4, 8]),
       vpp=st.sampled_from([1, 2]), m=st.sampled_from([4, 8, 16]),
       moe=st.booleans(),
       recompute=st.sampled_from([RecomputeMode.NONE, RecomputeMode.SELECTIVE,
                                  RecomputeMode.FULL, FullLayers(full_layers=1),
                                  FullLayers(full_layers=3, others="selective")]),
       offload=st.sampled_from([0.0, 0.5]), uneven=st.booleans())
@example(schedule=PipelineSchedule.ZBV, pp=4, vpp=2, m=16, moe=False,
         recompute=RecomputeMode.NONE, offload=0.0, uneven=True)
def test_fits_memory_agrees_with_the_ledger_at_every_capacity(
        schedule: PipelineSchedule, pp: int, vpp: int, m: int, moe: bool,
        recompute: RecomputeMode | FullLayers, offload: float, uneven: bool) -> None:
    """`fits_memory` skips ranks another rank dominates; at capacities between every pair of
    stage totals (where each rank in turn binds) its verdict must stay the ledger's. Uneven
    chunks (an embedding-only first stage so that rank 0 is light, four layers on the other
    ranks' first chunk and one on their second) make the middle ranks' byte peaks differ
    where their live vectors do (V shapes, interleaving)."""
    from hypothesis import assume

    from models.core.memory import fits_memory

    spec = TWIN_MODEL if moe else TWIN_MODEL.model_copy(update={"moe": None})
    chunks = vpp if schedule == PipelineSchedule.INTERLEAVED_1F1B else (
        2 if schedule in (PipelineSchedule.ZBV, PipelineSchedule.DUALPIPEV) else 1)
    split = None
    if uneven:
        assume(chunks == 2 and pp == 4)
        split = (0, 4, 4, 4, 1, 1, 1, 1)
    parallel = ParallelConfig(pp=pp, dp=2, ep=2 if moe else 1, schedule=schedule, vpp=chunks,
                              layers_per_virtual_stage=split,
                              recompute=recompute, activation_offload_frac=offload)
    training = TrainingSpec(global_batch_size=2 * m, sequence_length=2048)
    try:
        ledger = memory_ledger(spec, training, parallel, CLUSTER)
    except InvalidSpecError:
        assume(False)
        return
    totals = sorted({s.total_bytes for s in ledger.stages})
    memory = CLUSTER.gpu.memory_bytes
    for low, high in zip([totals[0] // 2, *totals], [*totals, totals[-1] * 2], strict=True):
        cluster = CLUSTER.model_copy(update={"memory_headroom_frac": 1 - (low + high) / 2 / memory})
        expected = memory_ledger(spec, training, parallel, cluster).fits
        assert fits_memory(spec, training, parallel, cluster) == expected


@settings(max_examples=40, deadline=None)
@given(chunks=st.one_of(st.lists(st.integers(0, 10**12), min_size=2, max_size=2),
                        st.integers(0, 10**12).map(lambda b: [b, b])))
@example(chunks=[0, 0])
@example(chunks=[3 * 2**40, 3 * 2**40])
def test_in_flight_peak_bytes_is_the_largest_dot_product(chunks: list[int]) -> None:
    from models.core.pipeline import in_flight_profile

    profile = in_flight_profile(PipelineSchedule.INTERLEAVED_1F1B, num_stages=4,
                                num_micro_batches=12, num_chunks=2)
    for rank in range(4):
        expected = max(sum(n * b for n, b in zip(vec, chunks, strict=True))
                       for vec in profile.live_vectors[rank])
        assert profile.peak_bytes(rank, chunks) == expected
        for other in range(4):
            if profile.dominates(rank, other):
                assert profile.peak_bytes(other, chunks) <= profile.peak_bytes(rank, chunks)


def test_unfused_loss_keeps_the_16_bit_logits_block_reserved_on_the_loss_rank_only() -> None:
    # torchtitan's 8B recipe (local batch 2 x 8192 tokens, vocabulary 128,256): the freed
    # bf16 logits leave 16,384 x 128,256 x 2 bytes (3.9 GiB) that the fp32 backward tensors
    # of PyTorch's cross entropy cannot reuse; Megatron's fused loss leaves none.
    spec = model_preset("llama-3.1-8b")
    name = "allocator: freed logits block at the loss backward"
    training = TrainingSpec(global_batch_size=16, sequence_length=8192,
                            fused_cross_entropy=False)
    ledger = memory_ledger(spec, training, ParallelConfig(pp=2, dp=4, micro_batch_size=2),
                           CLUSTER)
    holes = [sum(c.bytes for c in s.components if c.name == name) for s in ledger.stages]
    assert holes == [0, 16_384 * 128_256 * 2]
    tp = memory_ledger(spec, training, ParallelConfig(tp=2, dp=4, micro_batch_size=2,
                                                      sequence_parallel=True), CLUSTER)
    assert sum(c.bytes for c in tp.stages[0].components if c.name == name) == (
        16_384 * 128_256 * 2 // 2)
    fused = memory_ledger(spec, training.model_copy(update={"fused_cross_entropy": True}),
                          ParallelConfig(pp=2, dp=4, micro_batch_size=2), CLUSTER)
    assert all(c.name != name for s in fused.stages for c in s.components)
    # The memo the planner shares across a candidate's policies keeps the term: filled by
    # another ZeRO stage and policy of the mesh first, so that the ledger compared is built
    # from the memo's pieces.
    memo = LedgerMemo(spec=spec, training=training)
    parallel = ParallelConfig(pp=2, dp=4, micro_batch_size=2)
    memory_ledger(spec, training, parallel.model_copy(
        update={"zero_stage": 3, "recompute": RecomputeMode.FULL}), CLUSTER, memo=memo)
    assert memo.runtime and memo.states and memo.activations
    memory_ledger(spec, training, parallel.model_copy(update={"zero_stage": 3}), CLUSTER,
                  memo=memo)
    assert memory_ledger(spec, training, parallel, CLUSTER, memo=memo) == memory_ledger(
        spec, training, parallel, CLUSTER)


def test_a_memo_shared_across_zero_stages_and_policies_gives_the_same_ledgers() -> None:
    # One memo serves every ZeRO stage and activation policy of one mesh, in any order;
    # each ledger equals the one built without it, component by component.
    spec, training, cluster = model_preset("deepseek-v3"), DSV3_TRAINING, H800_256
    memo = LedgerMemo(spec=spec, training=training)
    policies: list[dict[str, object]] = [
        {}, {"recompute": RecomputeMode.SELECTIVE},
        {"recompute": FullLayers(full_layers=1), "activation_offload_frac": 0.5},
        {"recompute": RecomputeMode.FULL, "fp8_activations": True}]
    for zero in (3, 0, 1, 2):
        for policy in policies:
            parallel = DSV3_PARALLEL.model_copy(update={"zero_stage": zero, **policy})
            fresh = memory_ledger(spec, training, parallel, cluster)
            assert memory_ledger(spec, training, parallel, cluster, memo=memo) == fresh
            assert fits_memory(spec, training, parallel, cluster, memo=memo) == fresh.fits
    assert memo.states and memo.activations
    assert len(memo.states) < 4 * len(policies) * 16  # the policies shared the states


@pytest.mark.parametrize("preset", model_ids())
def test_layers_of_one_weight_kind_hold_the_same_parameters(preset: str) -> None:
    # The ledger reads a rank's layers through the first layer of each weight kind (MoE
    # block, linear-attention mixer), and the memo shares model states between ranks whose
    # layers are alike in kind: both rest on this.
    spec = model_preset(preset)
    seen: dict[tuple[bool, bool], tuple[object, int]] = {}
    for index in range(spec.num_layers):
        kind = (spec.is_moe_layer(index), spec.is_linear_attention_layer(index))
        params = (layer_params(spec, index),
                  layer_attention_params(spec, index, matrices_only=True))
        assert seen.setdefault(kind, params) == params, (preset, index, kind)


@pytest.mark.parametrize("preset,pp,vpp", [("kimi-linear-48b-a3b-instruct", 9, 1),
                                           ("deepseek-v3", 16, 1), ("gpt-1008b", 8, 4)])
def test_ranks_alike_in_layer_kinds_share_states_and_probe_totals_match_the_ledger(
        preset: str, pp: int, vpp: int) -> None:
    # The memo keys a rank's model states by its layers' kinds, not its rank: middle ranks
    # alike share one entry, and every rank's probe totals (states, activations, runtime
    # items, from the memo's sums) equal its ledger built without a memo.
    spec = model_preset(preset)
    training = TrainingSpec(global_batch_size=256, sequence_length=4096)
    schedule = PipelineSchedule.INTERLEAVED_1F1B if vpp > 1 else PipelineSchedule.ONE_F_ONE_B
    ep = 8 if spec.moe is not None else 1
    parallel = ParallelConfig(tp=2, pp=pp, dp=8, ep=ep, schedule=schedule, vpp=vpp,
                              zero_stage=1, recompute=FullLayers(full_layers=1))
    memo = LedgerMemo(spec=spec, training=training)
    m = micro_batch_count(training, parallel)
    layouts = pipeline_layout(spec, parallel)
    for layout in layouts:
        fresh = stage_memory(spec, training, parallel, layout, num_micro_batches=m)
        probe = _rank_bytes(spec, training, parallel, layout, m, memo)
        assert probe == (fresh.total_bytes, fresh.host_bytes,
                         stored_activation_bytes(fresh.components))
    kinds = {chunk_weight_kinds(spec, x.chunks) + (x.num_embeddings, x.num_heads,
                                                   x.num_mtp_modules) for x in layouts}
    assert len(memo.states) == len(kinds) < len(layouts)


def test_a_memo_made_for_another_recipe_is_not_used() -> None:
    spec, training, parallel, cluster = (model_preset("deepseek-v3"), DSV3_TRAINING,
                                         DSV3_PARALLEL, H800_256)
    longer = TrainingSpec(global_batch_size=1024, sequence_length=8192)
    memo = LedgerMemo(spec=spec, training=training)
    memory_ledger(spec, training, parallel, cluster, memo=memo)
    assert memory_ledger(spec, longer, parallel, cluster, memo=memo) == \
        memory_ledger(spec, longer, parallel, cluster)


@settings(max_examples=25, deadline=None)
@given(schedule=st.sampled_from([PipelineSchedule.ONE_F_ONE_B,
                                 PipelineSchedule.INTERLEAVED_1F1B, PipelineSchedule.ZBV]),
       pp=st.sampled_from([2, 4, 8]), m=st.sampled_from([8, 16]),
       recompute=st.sampled_from([RecomputeMode.NONE, RecomputeMode.SELECTIVE,
                                  FullLayers(full_layers=1)]),
       offload=st.sampled_from([0.0, 0.5]), use_memo=st.booleans())
def test_fits_memory_with_remote_offload_agrees_with_the_balanced_ledger(
        schedule: PipelineSchedule, pp: int, m: int, recompute: RecomputeMode | FullLayers,
        offload: float, use_memo: bool) -> None:
    """Under remote activation offload `fits_memory` decides from every rank's totals and
    movable bytes in closed form; at capacities around each rank total and the pipeline's
    mean (where the balance starts and stops to fit) it must give the balanced ledger's
    verdict, with or without a memo."""
    from hypothesis import assume

    chunks = 2 if schedule != PipelineSchedule.ONE_F_ONE_B else 1
    parallel = ParallelConfig(pp=pp, dp=2, schedule=schedule, vpp=chunks, recompute=recompute,
                              activation_offload_frac=offload, remote_activation_offload=True)
    training = TrainingSpec(global_batch_size=2 * m, sequence_length=4096)
    try:
        plain = memory_ledger(TWIN_MODEL, training, parallel.model_copy(
            update={"remote_activation_offload": False}), CLUSTER)
    except InvalidSpecError:
        assume(False)
        return
    totals = sorted({s.total_bytes for s in plain.stages})
    mean = sum(s.total_bytes for s in plain.stages) // len(plain.stages)
    memory = CLUSTER.gpu.memory_bytes
    memo = LedgerMemo(spec=TWIN_MODEL, training=training) if use_memo else None
    verdicts = set()
    for capacity in {*totals, mean - 1, mean, mean + 1, totals[0] - 1, totals[-1] + 1}:
        cluster = CLUSTER.model_copy(update={"memory_headroom_frac": 1 - capacity / memory})
        expected = memory_ledger(TWIN_MODEL, training, parallel, cluster).fits
        verdicts.add(expected)
        assert fits_memory(TWIN_MODEL, training, parallel, cluster, memo=memo) == expected
    assert verdicts == {True, False}


def test_fits_memory_tells_apart_ranks_alike_in_moe_layers_but_not_in_mixers() -> None:
    """A Kimi Linear variant (MLA on layers 3 and 24-26 only, a 1,024-token vocabulary so
    that the head rank is light) under GPipe, where every rank holds every micro-batch: rank
    1 (one MLA, two KDA layers) is checked before ranks 2-7 (three KDA layers each, whose
    weights are larger) and holds as many micro-batches, so a twin test by MoE pattern alone
    let it stand for them and called a capacity between the two totals enough (a false
    "fits"). At capacities between every pair of stage totals `fits_memory` must give the
    ledger's verdict."""
    from models.core.memory import fits_memory

    base = model_preset("kimi-linear-48b-a3b-instruct")
    assert base.linear_attention is not None
    mixers = base.linear_attention.model_copy(update={
        "layers": tuple(i for i in range(27) if i not in (3, 24, 25, 26))})
    spec = base.model_copy(update={"vocab_size": 1024, "linear_attention": mixers})
    parallel = ParallelConfig(pp=9, dp=8, ep=8, schedule=PipelineSchedule.GPIPE)
    training = TrainingSpec(global_batch_size=144, sequence_length=256)
    ledger = memory_ledger(spec, training, parallel, CLUSTER)
    totals = sorted({s.total_bytes for s in ledger.stages})
    assert ledger.stages[1].total_bytes < ledger.stages[4].total_bytes
    memory = CLUSTER.gpu.memory_bytes
    for low, high in zip([totals[0] // 2, *totals], [*totals, totals[-1] * 2], strict=True):
        cluster = CLUSTER.model_copy(update={"memory_headroom_frac": 1 - (low + high) / 2 / memory})
        expected = memory_ledger(spec, training, parallel, cluster).fits
        assert fits_memory(spec, training, parallel, cluster) == expected, (low, high)
