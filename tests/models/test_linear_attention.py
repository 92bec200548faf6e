"""Linear-attention (KDA) layers: the Kimi Linear config, its weights, chunkwise FLOPs, stored
activations and state-passing context parallelism against the numbers and relations the
sources print."""

import pytest

from api_schemas import ContextParallelKind, DType, ParallelConfig, TrainingSpec
from api_schemas.architecture import AttentionKind, LinearAttentionKind
from api_schemas.parallel import RecomputeMode, RecomputeModule
from models.catalog.hf_config import spec_from_hf_config
from models.catalog.kernels import attention_time_s
from models.catalog.presets import cluster_preset, gpu_preset, hf_preset_config, model_preset
from models.core.activations import LayerActivationContext, layer_activation_bytes
from models.core.collectives import fabric_of
from models.core.compute import layer_compute
from models.core.flops import attention_core_forward_flops, layer_core_forward_flops
from models.core.linear_attention import (
    STATE_PASSING,
    chunkwise_forward_flops_per_token_head,
    cp_kinds_for_layer,
    kcp_fragment_bytes,
    linear_attention_core_time_s,
    linear_attention_weights,
)
from models.core.params import count_parameters, layer_params
from models.core.step_time.groups import axis_groups
from models.core.step_time.stage import compute_context
from models.core.traffic.layer import cp_calls, state_passing_calls

KIMI_LINEAR = "kimi-linear-48b-a3b-instruct"


def test_kimi_linear_config_parses_into_its_layer_mix() -> None:
    ingested = spec_from_hf_config(hf_preset_config(KIMI_LINEAR))
    spec = ingested.spec
    linear = spec.linear_attention
    assert linear is not None and linear.kind == LinearAttentionKind.KDA
    assert (linear.num_heads, linear.head_dim, linear.dim_v) == (32, 128, 128)
    # 1-based full_attn_layers 4, 8, ..., 24, 27 in the config: 0-based 3, 7, ..., 23, 26.
    full = [i for i in range(spec.num_layers) if not spec.is_linear_attention_layer(i)]
    assert full == [3, 7, 11, 15, 19, 23, 26]
    assert len(linear.layers) == 20  # 3 KDA : 1 MLA, Kimi Linear Sec. 4
    assert spec.attention == AttentionKind.MLA and spec.mla is not None
    assert spec.mla.q_lora_rank is None and spec.mla.kv_lora_rank == 512
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.top_k, spec.moe.first_dense_layers) == (256, 8, 1)
    assert spec.moe.shared_expert_ffn_hidden_size == 1024 and spec.moe.router_bias
    assert any("Kimi Delta Attention" in note for note in ingested.notes)


def test_kimi_linear_parameter_count_matches_the_published_48b_a3b() -> None:
    """Model card and arXiv:2510.26692 abstract: 48B total, 3B activated; both are the
    non-embedding counts (with the 163840 x 2304 embedding and untied head, 49.1B)."""
    count = count_parameters(model_preset(KIMI_LINEAR))
    outer = count.embedding + count.head
    assert round((count.total - outer) / 1e9) == 48
    assert round((count.activated - outer) / 1e9) == 3
    assert round(count.total / 1e9) == 49  # so the published 48B excludes the embeddings


def test_kda_block_weights_follow_the_released_tensor_shapes() -> None:
    """`KimiDeltaAttention` tensors of the released checkpoint for h = 2304, H = 32,
    d = 128, W = 4: q/k/v_proj (4096, 2304), three convolutions (4096, 1, 4), A_log (32),
    dt_bias (4096), f_a (128, 2304), f_b (4096, 128), b_proj (32, 2304), g_a (128, 2304),
    g_b (4096, 128), o_norm (128), o_proj (2304, 4096)."""
    spec = model_preset(KIMI_LINEAR)
    shapes = [(4096, 2304)] * 3 + [(4096, 4)] * 3 + [(32,), (4096,), (128, 2304), (4096, 128),
                                                    (32, 2304), (128, 2304), (4096, 128),
                                                    (128,), (2304, 4096)]
    expected = 0
    for shape in shapes:
        size = 1
        for dim in shape:
            size *= dim
        expected += size
    assert linear_attention_weights(spec).total == expected == 39_514_272
    # The KDA layer (index 0) and an MLA layer (index 3) differ only in their token mixer.
    kda, mla = layer_params(spec, 1), layer_params(spec, 3)
    assert kda.total - mla.total == expected - mla.attention


def test_kda_core_flops_are_linear_in_sequence_length_and_mla_quadratic() -> None:
    spec = model_preset(KIMI_LINEAR)
    for short in (4096, 32_768):
        kda = [layer_core_forward_flops(spec, 0, seq_len=s) for s in (short, 2 * short)]
        mla = [layer_core_forward_flops(spec, 3, seq_len=s) for s in (short, 2 * short)]
        assert kda[1] == pytest.approx(2 * kda[0])
        assert mla[1] == pytest.approx(4 * mla[0])
        assert mla[0] == attention_core_forward_flops(spec, seq_len=short)
    # Per token and head: C (6 d_k + 4 d_v) + C^2 / 3 + 6 d_k d_v at C = 64, d = 128.
    linear = spec.linear_attention
    assert linear is not None
    assert chunkwise_forward_flops_per_token_head(linear) == pytest.approx(
        64 * 1280 + 64 * 64 / 3 + 6 * 128 * 128)


def test_each_layer_type_names_the_cp_kinds_it_supports() -> None:
    spec = model_preset(KIMI_LINEAR)
    assert cp_kinds_for_layer(spec, 0) == {STATE_PASSING}
    assert cp_kinds_for_layer(spec, 3) == {kind.value for kind in ContextParallelKind}


def test_stored_activations_keep_a_state_per_chunk_that_core_recompute_rebuilds() -> None:
    spec = model_preset(KIMI_LINEAR)
    ctx = LayerActivationContext(seq_len=8192, micro_batch_size=1)
    kda = layer_activation_bytes(spec, 0, ctx)  # layer 0: dense MLP, every such layer is KDA
    states = next(t for t in kda.tensors if "recurrent states" in t.name)
    # 32 heads x 128 x 128 fp32 every 64 tokens.
    assert states.bytes == 8192 // 64 * 32 * 128 * 128 * 4
    kept = kda.stored_bytes(RecomputeMode.SELECTIVE, (RecomputeModule.CORE_ATTN,))
    assert kept <= kda.total_bytes - states.bytes


def _lctx(seq: int, cp: int, cp_kind: ContextParallelKind = ContextParallelKind.RING):
    spec = model_preset(KIMI_LINEAR)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    parallel = ParallelConfig(tp=1, pp=1, dp=8 // cp, cp=cp, ep=1, cp_kind=cp_kind)
    training = TrainingSpec(global_batch_size=8, sequence_length=seq)
    groups = axis_groups(parallel, gpus_per_node=8)
    return groups.layer_context(spec, training, parallel, fabric_of(cluster)), training, \
        parallel, cluster


def test_state_passing_traffic_is_independent_of_sequence_length() -> None:
    """Linear attention passes only fixed-size state fragments between CP ranks (seed
    ledger Sec. 7.5; flash-linear-attention KCP: [H, d_k, d_k + d_v] fp32 per rank); the
    ring's K/V blocks of the MLA layers grow with the sequence."""
    state = {seq: state_passing_calls(_lctx(seq, 4)[0]) for seq in (32_768, 131_072)}
    ring = {seq: cp_calls(_lctx(seq, 4)[0]) for seq in (32_768, 131_072)}
    for short, long in zip(state[32_768], state[131_072], strict=True):
        assert short.message_bytes == long.message_bytes and short.time_s == long.time_s
    gather = next(c for c in state[32_768] if c.name.endswith("forward.state_all_gather"))
    assert gather.message_bytes == 4 * kcp_fragment_bytes(model_preset(KIMI_LINEAR))
    assert kcp_fragment_bytes(model_preset(KIMI_LINEAR)) == 32 * 128 * 256 * 4
    assert ring[131_072][0].message_bytes == 4 * ring[32_768][0].message_bytes


def test_a_linear_layer_passes_states_and_a_full_layer_exchanges_kv() -> None:
    """In a hybrid model each layer pays its own mixer's CP traffic, whole (share 1)."""
    lctx = _lctx(32_768, 4)[0]
    linear, full = cp_calls(lctx, linear=True), cp_calls(lctx)
    assert linear == state_passing_calls(lctx)
    assert all(c.name.startswith("cp.state.") for c in linear)
    assert full and all(c.name.startswith("cp.ring.") for c in full)
    assert {c.share for c in linear + full} == {1.0}


def test_kda_layers_shorten_the_step_at_long_context() -> None:
    """At 128K tokens the KDA layers' linear core makes the mixed MoE layer cheaper than a
    full-MLA one (Kimi Linear Sec. 5: faster prefill at long context)."""
    _, training, parallel, cluster = _lctx(131_072, 4)
    spec = model_preset(KIMI_LINEAR)
    all_mla = spec.model_copy(update={"linear_attention": None})
    ctx = compute_context(training, parallel, cluster)
    hybrid = layer_compute(spec, 1, ctx).times.total_s
    full = layer_compute(all_mla, 1, ctx).times.total_s
    assert hybrid < 0.6 * full


# flash-linear-attention kernels on an H800 (PaddlePaddle/flash-attention PR #133,
# FLA_BENCHMARK table, forward, d = 128): (kind, B, T, H) -> milliseconds.
PADDLE_H800_FORWARD_MS = {
    (LinearAttentionKind.KDA, 1, 8192, 96): 3.268,  # fitted
    (LinearAttentionKind.KDA, 2, 16384, 16): 2.299,  # held out
    (LinearAttentionKind.GATED_DELTA, 1, 8192, 96): 2.033,  # fitted
    (LinearAttentionKind.GATED_DELTA, 2, 16384, 16): 1.342,  # held out
}


@pytest.mark.parametrize("row", sorted(PADDLE_H800_FORWARD_MS, key=str))
def test_chunkwise_kernel_time_reproduces_the_published_h800_rows(row) -> None:
    kind, batch, seq, heads = row
    base = model_preset(KIMI_LINEAR)
    assert base.linear_attention is not None
    spec = base.model_copy(update={"linear_attention": base.linear_attention.model_copy(
        update={"kind": kind, "num_heads": heads})})
    flop = batch * layer_core_forward_flops(spec, 0, seq_len=seq)
    predicted = linear_attention_core_time_s(
        spec, flop, peak_flop_per_s=gpu_preset("h800-sxm5-80gb").peak_flop_per_s(DType.BF16))
    assert predicted * 1e3 == pytest.approx(PADDLE_H800_FORWARD_MS[row], rel=0.06)


def test_kernel_time_grows_linearly_where_softmax_attention_grows_quadratically() -> None:
    """flash-linear-attention issue #645 (H200, B = 4, H = 32, d = 128): KDA 45.179 ms at
    8K and 181.341 ms at 32K (x4.01); attention 90.129 and 1433.073 ms (x15.9)."""
    spec = model_preset(KIMI_LINEAR)
    gpu = gpu_preset("h200-sxm-141gb")
    peak = gpu.peak_flop_per_s(DType.BF16)
    kda = [linear_attention_core_time_s(spec, layer_core_forward_flops(spec, 0, seq_len=s),
                                        peak_flop_per_s=peak) for s in (8192, 32_768)]
    soft = [attention_time_s(attention_core_forward_flops(spec, seq_len=s, causal=True),
                             seq_len=s, gpu=gpu, flash=True) for s in (8192, 32_768)]
    assert kda[1] / kda[0] == pytest.approx(181.341 / 45.179, rel=0.01)
    assert soft[1] / soft[0] == pytest.approx(1433.073 / 90.129, rel=0.05)


def test_each_layer_of_a_hybrid_stage_is_timed_with_its_own_token_mixer() -> None:
    """A rank of Kimi Linear holding KDA and MLA layers takes the sum of its layers' own
    times: at 128K tokens a rank with two MLA layers among four is slower than one with one,
    where a per-kind mix of the model's layers (19 of 26 MoE layers KDA) timed both alike."""
    from models.core.collectives import fabric_of as step_fabric
    from models.core.layout import StageLayout
    from models.core.step_time import stage_time

    spec = model_preset(KIMI_LINEAR)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=4)
    training = TrainingSpec(global_batch_size=32, sequence_length=131_072)
    parallel = ParallelConfig(tp=1, cp=4, pp=4, dp=2, ep=8, micro_batch_size=1)
    fabric, groups = step_fabric(cluster), axis_groups(parallel, gpus_per_node=8)

    def forward_s(*layers: int) -> float:
        layout = StageLayout(rank=1, chunks=(layers,), num_embeddings=0, num_heads=0,
                             num_mtp_modules=0)
        return stage_time(spec, training, parallel, cluster, layout, num_micro_batches=8,
                          fabric=fabric, groups=groups).chunk_times[0].forward_s

    one_mla, two_mla = forward_s(4, 5, 6, 7), forward_s(5, 6, 7, 11)
    assert [spec.is_linear_attention_layer(i) for i in (4, 5, 6, 7, 11)] == [
        True, True, True, False, False]
    assert two_mla > one_mla * 1.05
    assert one_mla == pytest.approx(sum(forward_s(i) for i in (4, 5, 6, 7)), rel=1e-12)


def test_each_layer_of_a_hybrid_stage_stores_its_own_token_mixers_activations() -> None:
    """A Kimi Linear rank stores the sum of its layers' own activations: a KDA layer and an
    MLA layer with the same MoE block store different bytes, and a chunk of three KDA layers
    and one MLA layer is booked as such, not as four of the larger kind."""
    from models.core.layout import StageLayout
    from models.core.rank_activations import activation_context, stage_activation_components

    spec = model_preset(KIMI_LINEAR)
    training = TrainingSpec(global_batch_size=8, sequence_length=8192)
    parallel = ParallelConfig(dp=8, ep=8, micro_batch_size=1)
    ctx = activation_context(training, parallel, False)
    layers = (4, 5, 6, 7)
    assert [spec.is_linear_attention_layer(i) for i in layers] == [True, True, True, False]
    assert all(spec.is_moe_layer(i) for i in layers)
    policy = parallel.policy_of(0)
    own = [layer_activation_bytes(spec, i, ctx).stored_bytes(policy.recompute,
                                                             policy.recompute_modules)
           for i in layers]
    assert own[0] != own[3]
    layout = StageLayout(rank=0, chunks=(layers,), num_embeddings=0, num_heads=0,
                         num_mtp_modules=0)
    gpu, _, _ = stage_activation_components(spec, training, parallel, layout,
                                            num_micro_batches=1)
    assert gpu[0].bytes == sum(own)
