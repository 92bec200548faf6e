"""Traffic of one training step against the volumes the papers print."""

import pytest

from api_schemas import (
    AttentionKind,
    ClusterSpec,
    Collective,
    DType,
    GpuSpec,
    LinkSpec,
    MLASpec,
    ModelSpec,
    MoESpec,
    ParallelConfig,
    TrainingSpec,
)
from models.core.traffic import (
    Frequency,
    Phase,
    TrafficAxis,
    axis_collectives,
    bucket_params,
    stage_layers,
    stage_weights,
    step_traffic,
    total_params,
)
from models.errors import InvalidSpecError

GIB = 2**30


def gpt(hidden: int, heads: int, layers: int) -> ModelSpec:
    """A GPT of Megatron-LM 2021 Table 1 (V = 51200, s = 2048, learned positions, tied)."""
    return ModelSpec(name=f"gpt-{hidden}", num_layers=layers, hidden_size=hidden,
                     num_attention_heads=heads, ffn_hidden_size=4 * hidden, vocab_size=51200,
                     mlp="gelu", norm="layernorm", linear_bias=True,
                     learned_position_embeddings=2048, tie_word_embeddings=True)


def cluster(nodes: int, gpus_per_node: int = 8) -> ClusterSpec:
    gpu = GpuSpec(id="a100-sxm4-80gb", name="NVIDIA A100 SXM4 80GB", memory_bytes=80 * GIB,
                  hbm_bandwidth_bytes_per_s=2.039e12, dense_peak_flop_per_s={"bf16": 312e12})
    return ClusterSpec(gpu=gpu, num_nodes=nodes, gpus_per_node=gpus_per_node,
                       intra_node=LinkSpec(bandwidth_bytes_per_s=240e9, latency_s=3e-6),
                       inter_node=LinkSpec(bandwidth_bytes_per_s=25e9, latency_s=10e-6))


GPT_175 = gpt(12288, 96, 96)
TRAIN = TrainingSpec(global_batch_size=64, sequence_length=2048)


@pytest.mark.parametrize("rows", [
    (1.7, 2304, 24, 24), (3.6, 3072, 32, 30), (7.5, 4096, 32, 36), (18.4, 6144, 48, 40),
    (39.1, 8192, 64, 48), (76.1, 10240, 80, 60), (145.6, 12288, 96, 80),
    (310.1, 16384, 128, 96), (529.6, 20480, 128, 105), (1008.0, 25600, 160, 128)])
def test_total_params_matches_NAR21_table1(rows: tuple[float, int, int, int]) -> None:
    billions, hidden, heads, layers = rows
    assert round(total_params(gpt(hidden, heads, layers)) / 1e9, 1) == billions


def test_total_params_matches_deepseek_v3_671b() -> None:
    """DeepSeek-V3 (arXiv:2412.19437, Sec. 4.2): 671B total parameters, MTP excluded."""
    v3 = ModelSpec(
        name="deepseek-v3", num_layers=61, hidden_size=7168, num_attention_heads=128,
        attention=AttentionKind.MLA,
        mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                    qk_rope_head_dim=64, v_head_dim=128),
        ffn_hidden_size=18432, vocab_size=129280,
        moe=MoESpec(num_experts=256, top_k=8, expert_ffn_hidden_size=2048,
                    num_shared_experts=1, shared_expert_ffn_hidden_size=2048,
                    first_dense_layers=3, num_expert_groups=8, topk_groups=4))
    assert round(total_params(v3) / 1e9) == 671


def _per_layer_mb(items, phases=(Phase.FORWARD, Phase.BACKWARD)) -> int:
    return sum(i.cost.bytes_sent_per_rank for i in items
               if i.frequency == Frequency.PER_LAYER_PER_MICRO_BATCH and i.phase in phases
               and "weight_grad" not in i.name)


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_tp_traffic_matches_NAR21(sequence_parallel: bool) -> None:
    """8 b s h (t-1)/t elements per layer, device and micro-batch (Sec. 3.2), SP alike."""
    b, s, h, t = 1, 2048, 12288, 8
    p = ParallelConfig(tp=t, pp=8, dp=1, sequence_parallel=sequence_parallel)
    traffic = step_traffic(GPT_175, training=TRAIN, parallel=p, cluster=cluster(8))
    attention = [i for i in traffic.of_axis(TrafficAxis.TP) if i.name.startswith("tp.attention")]
    mlp = [i for i in traffic.of_axis(TrafficAxis.TP) if i.name.startswith("tp.mlp")]
    per_layer = _per_layer_mb(attention) + _per_layer_mb(mlp)
    assert per_layer == 8 * b * s * h * (t - 1) // t * 2  # bf16 elements
    assert per_layer // 2 == 176_160_768
    layers_on_rank = 96 // 8
    assert all(i.calls_per_step == layers_on_rank * 64 for i in attention)
    assert all(i.overlap_frac == 0.0 for i in attention if "weight_grad" not in i.name)


def test_sequence_parallel_adds_an_overlapped_input_gather_in_backward() -> None:
    p = ParallelConfig(tp=8, pp=8, dp=1, sequence_parallel=True)
    traffic = step_traffic(GPT_175, training=TRAIN, parallel=p, cluster=cluster(8))
    extra = [i for i in traffic.items if "weight_grad_input_all_gather" in i.name]
    assert len(extra) == 2 and all(i.overlap_frac == 1.0 for i in extra)


def test_full_recompute_repeats_the_forward_tp_collectives() -> None:
    base = ParallelConfig(tp=8, pp=8, dp=1)
    full = ParallelConfig(tp=8, pp=8, dp=1, recompute="full")
    plain = step_traffic(GPT_175, training=TRAIN, parallel=base, cluster=cluster(8))
    redo = step_traffic(GPT_175, training=TRAIN, parallel=full, cluster=cluster(8))
    forward = _per_layer_mb(plain.of_axis(TrafficAxis.TP), (Phase.FORWARD,))
    again = _per_layer_mb(redo.of_axis(TrafficAxis.TP), (Phase.RECOMPUTE,))
    assert again == forward


@pytest.mark.parametrize("sharded", ["none", "scatter_gather", "sequence_parallel"])
def test_pp_message_matches_NAR21(sharded: str) -> None:
    """b s h per micro-batch between stages (Sec. 3.2); b s h / t with scatter/gather (4.1)."""
    b, s, h, t = 2, 2048, 12288, 8
    p = ParallelConfig(tp=t, pp=8, dp=1, micro_batch_size=b,
                       sequence_parallel=sharded == "sequence_parallel")
    traffic = step_traffic(GPT_175, training=TRAIN, parallel=p, cluster=cluster(8), stage=3,
                           pp_scatter_gather=sharded == "scatter_gather")
    p2p = [i for i in traffic.of_axis(TrafficAxis.PP) if i.collective == Collective.P2P]
    full = b * s * h * 2
    expected = full if sharded == "none" else full // t
    assert {i.message_bytes for i in p2p} == {expected}
    assert sum(i.calls_per_step for i in p2p) == 2 * 32  # one send each way per micro-batch
    gathers = [i for i in traffic.items if i.name == "pp.scatter_gather.all_gather"]
    assert len(gathers) == (1 if sharded == "scatter_gather" else 0)


def test_interleaving_multiplies_pp_sends_by_v() -> None:
    """Sec. 2.2.2: with v chunks per rank P2P communication grows by v."""
    plain = ParallelConfig(tp=8, pp=8, dp=1)
    inter = ParallelConfig(tp=8, pp=8, dp=1, vpp=4, schedule="interleaved_1f1b")
    sends = [sum(i.calls_per_step for i in step_traffic(
        GPT_175, training=TRAIN, parallel=cfg, cluster=cluster(8), stage=3
    ).of_axis(TrafficAxis.PP)) for cfg in (plain, inter)]
    assert sends[1] == 4 * sends[0]


def test_first_and_last_stage_skip_the_missing_neighbour() -> None:
    p = ParallelConfig(tp=8, pp=8, dp=1)
    first = step_traffic(GPT_175, training=TRAIN, parallel=p, cluster=cluster(8), stage=0)
    names = {i.name: i.calls_per_step for i in first.of_axis(TrafficAxis.PP)}
    assert names["pp.forward.p2p"] == 64 and "pp.backward.p2p" not in names
    assert "pp.embedding_grad.all_reduce" in names  # tied embedding, pp > 1


def _model_7b_fp16() -> tuple[ModelSpec, TrainingSpec]:
    model = gpt(4096, 32, 36)  # 7.5B, the ZeRO paper's running example size
    training = TrainingSpec(global_batch_size=64, sequence_length=2048,
                            param_dtype=DType.FP16, grad_dtype=DType.FP16,
                            compute_dtype=DType.FP16)
    return model, training


@pytest.mark.parametrize("zero, factor", [(0, 2), (1, 2), (2, 2), (3, 3)])
def test_dp_traffic_matches_RAJ20(zero: int, factor: int) -> None:
    """ZeRO Sec. 7: 2 Psi for DP, P_os and P_os+g; 3 Psi for P_os+g+p (one micro-batch)."""
    model, training = _model_7b_fp16()
    p = ParallelConfig(dp=64, zero_stage=zero, fsdp=False)
    traffic = step_traffic(model, training=training.model_copy(update={"global_batch_size": 64}),
                           parallel=p, cluster=cluster(8))
    assert traffic.num_micro_batches == 1
    psi = stage_weights(model, p)[0].dense_params
    assert round(psi / 1e9, 1) == 7.5
    volume = sum(i.paper_volume_bytes_per_step for i in traffic.of_axis(TrafficAxis.DP))
    assert volume == pytest.approx(factor * psi * 2, rel=1e-6)
    ring = sum(i.bytes_sent_per_rank_per_step for i in traffic.of_axis(TrafficAxis.DP))
    assert ring == pytest.approx(factor * psi * 2 * 63 / 64, rel=1e-6)


def test_dp_buckets_follow_megatron_default_and_overlap_all_but_one() -> None:
    model, training = _model_7b_fp16()
    p = ParallelConfig(dp=64, zero_stage=1)
    items = step_traffic(model, training=training, parallel=p, cluster=cluster(8)).of_axis(
        TrafficAxis.DP)
    assert bucket_params(64) == 64_000_000 and bucket_params(8) == 40_000_000
    reduce = next(i for i in items if i.collective == Collective.REDUCE_SCATTER)
    buckets = -(-stage_weights(model, p)[0].dense_params // 64_000_000)
    assert reduce.calls_per_step == buckets
    assert reduce.overlap_frac == pytest.approx((buckets - 1) / buckets)
    assert reduce.group_size == 64 and reduce.ranks_per_node == 8


def test_zero2_reduces_every_micro_batch_zero3_gathers_every_layer() -> None:
    model, training = _model_7b_fp16()
    z2 = step_traffic(model, training=training, parallel=ParallelConfig(dp=32, zero_stage=2),
                      cluster=cluster(4))
    m = z2.num_micro_batches
    rs = next(i for i in z2.of_axis(TrafficAxis.DP) if i.collective == Collective.REDUCE_SCATTER)
    ag = next(i for i in z2.of_axis(TrafficAxis.DP) if i.collective == Collective.ALL_GATHER)
    assert rs.calls_per_step == m * ag.calls_per_step and rs.frequency == Frequency.PER_MICRO_BATCH
    z3 = step_traffic(model, training=training, parallel=ParallelConfig(dp=32, zero_stage=3),
                      cluster=cluster(4))
    gathers = [i for i in z3.of_axis(TrafficAxis.DP) if i.collective == Collective.ALL_GATHER]
    assert [g.calls_per_step for g in gathers] == [(36 + 2) * m] * 2


def test_ulysses_matches_JAC23_against_megatron_sp() -> None:
    """DeepSpeed-Ulysses Sec. 3.2: 4 N h / P per layer vs Megatron-SP's 4 N h (forward)."""
    n_seq, h, heads, P = 32768, 4096, 32, 8
    model = ModelSpec(num_layers=8, hidden_size=h, num_attention_heads=heads,
                      ffn_hidden_size=4 * h, vocab_size=32000, mlp="gelu")
    training = TrainingSpec(global_batch_size=1, sequence_length=n_seq)
    ulysses = step_traffic(model, training=training, cluster=cluster(1),
                           parallel=ParallelConfig(cp=P, cp_kind="ulysses"))
    forward = [i for i in ulysses.of_axis(TrafficAxis.CP) if i.phase == Phase.FORWARD]
    assert len(forward) == 4 and all(i.collective == Collective.ALL_TO_ALL for i in forward)
    per_layer = sum(i.cost.paper_volume_bytes for i in forward) // 2  # elements
    assert per_layer == 4 * n_seq * h // P
    megatron_sp = step_traffic(model, training=training, cluster=cluster(1),
                               parallel=ParallelConfig(tp=P, sequence_parallel=True))
    sp_forward = [i for i in megatron_sp.of_axis(TrafficAxis.TP) if i.phase == Phase.FORWARD
                  and i.frequency == Frequency.PER_LAYER_PER_MICRO_BATCH]
    sp_per_layer = sum(i.cost.paper_volume_bytes for i in sp_forward) // 2
    assert sp_per_layer == 4 * n_seq * h
    assert sp_per_layer == P * per_layer


def test_ring_attention_passes_gqa_kv_blocks() -> None:
    """Ring: cp-1 hops forward, 2(cp-1) backward, each K+V of the local shard."""
    model = ModelSpec(num_layers=8, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                      attention="gqa", ffn_hidden_size=14336, vocab_size=128256)
    training = TrainingSpec(global_batch_size=8, sequence_length=131072)
    p = ParallelConfig(tp=2, cp=4, dp=1)
    items = step_traffic(model, training=training, parallel=p, cluster=cluster(1)).of_axis(
        TrafficAxis.CP)
    block = 1 * 131072 // 4 * (8 // 2) * (128 + 128) * 2
    assert {i.message_bytes for i in items} == {block}
    calls = {i.phase: i.calls_per_step for i in items}
    assert calls == {Phase.FORWARD: 3 * 8 * 8, Phase.BACKWARD: 6 * 8 * 8}
    assert all(i.overlap_frac == 1.0 for i in items)


def test_usp_runs_ulysses_inside_and_ring_across() -> None:
    model = ModelSpec(num_layers=8, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=16384, vocab_size=32000)
    training = TrainingSpec(global_batch_size=2, sequence_length=65536)
    p = ParallelConfig(cp=16, dp=1, cp_kind="usp", ulysses_degree=8)
    items = step_traffic(model, training=training, parallel=p, cluster=cluster(2)).of_axis(
        TrafficAxis.CP)
    a2a = [i for i in items if i.collective == Collective.ALL_TO_ALL]
    ring = [i for i in items if i.collective == Collective.P2P]
    assert a2a and all(i.group_size == 8 and i.nodes_spanned == 1 for i in a2a)
    assert ring and all(i.ranks_per_node == 1 for i in ring)  # ring hops cross nodes
    # The ring passes the heads left after Ulysses: b*(s/2)*(32/8 heads)*(d_k+d_v)*2 bytes.
    assert {i.message_bytes for i in ring} == {65536 // 2 * 4 * 256 * 2}


def test_mla_cp_exchanges_up_projected_heads() -> None:
    model = ModelSpec(num_layers=4, hidden_size=5120, num_attention_heads=128,
                      attention="mla", mla=MLASpec(kv_lora_rank=512, qk_nope_head_dim=128,
                                                   qk_rope_head_dim=64, v_head_dim=128),
                      ffn_hidden_size=12288, vocab_size=102400)
    training = TrainingSpec(global_batch_size=8, sequence_length=16384)
    items = step_traffic(model, training=training, parallel=ParallelConfig(tp=8, cp=2,
                         dp=1), cluster=cluster(2)).of_axis(TrafficAxis.CP)
    assert {i.message_bytes for i in items} == {16384 // 2 * 16 * (192 + 128) * 2}


def test_expert_gradients_reduce_over_expert_dp() -> None:
    model = ModelSpec(num_layers=8, hidden_size=2048, num_attention_heads=16,
                      ffn_hidden_size=8192, vocab_size=32000,
                      moe=MoESpec(num_experts=64, top_k=4, expert_ffn_hidden_size=1024))
    p = ParallelConfig(dp=32, ep=8, zero_stage=1)
    traffic = step_traffic(model, training=TrainingSpec(global_batch_size=64,
                                                        sequence_length=4096),
                           parallel=p, cluster=cluster(4))
    edp = traffic.of_axis(TrafficAxis.EDP)
    assert edp and all(i.group_size == 4 for i in edp)
    expert = stage_weights(model, p)[0].expert_params
    assert expert == 8 * 64 // 8 * 3 * 2048 * 1024
    reduce = next(i for i in edp if i.collective == Collective.REDUCE_SCATTER)
    assert reduce.message_bytes * reduce.calls_per_step == pytest.approx(expert * 4, abs=64)
    dense = traffic.of_axis(TrafficAxis.DP)
    assert dense and all(i.group_size == 32 for i in dense)


def test_totals_and_exposed_time_are_consistent() -> None:
    p = ParallelConfig(tp=8, pp=4, dp=2, vpp=2, schedule="interleaved_1f1b",
                       sequence_parallel=True)
    traffic = step_traffic(GPT_175, training=TRAIN, parallel=p, cluster=cluster(8))
    assert 0 < traffic.exposed_time_s() <= traffic.time_s()
    assert traffic.time_s() == pytest.approx(sum(traffic.time_s(a) for a in TrafficAxis))
    for item in traffic.items:
        assert 0.0 <= item.overlap_frac <= 1.0
        assert item.time_per_step_s == pytest.approx(item.time_per_call_s * item.calls_per_step)
    tp_items = traffic.of_axis(TrafficAxis.TP)
    assert all(i.nodes_spanned == 1 and i.ranks_per_node == 8 for i in tp_items)
    pp_items = traffic.of_axis(TrafficAxis.PP)
    assert all(i.ranks_per_node == 1 for i in pp_items)  # stages sit on different nodes


def test_invalid_mesh_raises_with_alternative() -> None:
    with pytest.raises(InvalidSpecError, match=r"\[tp-divides-heads\].*a valid alternative"):
        step_traffic(GPT_175, training=TRAIN, parallel=ParallelConfig(tp=5, dp=1),
                     cluster=cluster(1, gpus_per_node=5))
    with pytest.raises(InvalidSpecError, match="stage=9"):
        step_traffic(GPT_175, training=TRAIN, parallel=ParallelConfig(tp=8, pp=8, dp=1),
                     cluster=cluster(8), stage=9)


def test_axis_collectives_summary() -> None:
    rows = axis_collectives(ParallelConfig(tp=8, cp=2, dp=4, pp=2, sequence_parallel=True,
                                           cp_kind="usp", ulysses_degree=2, zero_stage=3,
                                           fsdp=True))
    pairs = {(r.axis, r.collective, r.frequency) for r in rows}
    assert (TrafficAxis.TP, Collective.ALL_GATHER, Frequency.PER_LAYER_PER_MICRO_BATCH) in pairs
    assert (TrafficAxis.CP, Collective.ALL_TO_ALL, Frequency.PER_LAYER_PER_MICRO_BATCH) in pairs
    assert (TrafficAxis.CP, Collective.P2P, Frequency.PER_LAYER_PER_MICRO_BATCH) in pairs
    assert (TrafficAxis.PP, Collective.P2P, Frequency.PER_MICRO_BATCH) in pairs
    assert (TrafficAxis.DP, Collective.ALL_GATHER, Frequency.PER_LAYER_PER_MICRO_BATCH) in pairs


def test_v_shape_and_dualpipe_placements() -> None:
    """ZB-V: rank i holds virtual stages i and 2p-1-i; DualPipe: stages i and p-1-i, twice."""
    model = gpt(2048, 16, 16)
    zbv = ParallelConfig(tp=8, pp=4, dp=1, vpp=2, schedule="zbv")
    assert stage_layers(model, zbv)[0] == (0, 1, 14, 15)
    assert stage_layers(model, zbv)[3] == (6, 7, 8, 9)
    training = TrainingSpec(global_batch_size=16, sequence_length=2048)
    v_first = step_traffic(model, training=training, parallel=zbv, cluster=cluster(4), stage=0)
    assert not [i for i in v_first.items if "embedding_grad" in i.name]
    assert {i.name for i in v_first.of_axis(TrafficAxis.TP)} >= {"tp.embedding.forward",
                                                               "tp.head.backward"}
    v_last = step_traffic(model, training=training, parallel=zbv, cluster=cluster(4), stage=3)
    sends = {i.phase: i.calls_per_step for i in v_last.of_axis(TrafficAxis.PP)}
    assert sends == {Phase.FORWARD: 16, Phase.BACKWARD: 16}  # the turn of the V is local

    dual = ParallelConfig(tp=8, pp=4, dp=1, schedule="dualpipe")
    assert stage_layers(model, dual)[0] == (0, 1, 2, 3, 12, 13, 14, 15)
    weights = stage_weights(model, dual)
    single = stage_weights(model, ParallelConfig(tp=8, pp=4, dp=1))
    assert weights[1].dense_params == 2 * single[1].dense_params
    middle = step_traffic(model, training=training, parallel=dual, cluster=cluster(4), stage=1)
    attention = next(i for i in middle.items if i.name == "tp.attention.forward.all_reduce")
    assert attention.calls_per_step == 8 * 16 // 2  # each micro-batch runs one copy
    sends = {i.phase: i.calls_per_step for i in middle.of_axis(TrafficAxis.PP)}
    assert sends == {Phase.FORWARD: 16, Phase.BACKWARD: 16}


def test_layer_calls_kept_per_family_equal_the_rules_on_every_mesh() -> None:
    """`layer_calls` keeps the TP, CP and expert calls apart under the inputs each family
    reads, so meshes differing in another axis share them. Over a sweep in which
    consecutive meshes differ in one axis at a time (tp, cp and its kind, Ulysses degree,
    ep, micro-batch, dp against pp, nodes), every layer's calls equal the traffic rules run
    afresh on that mesh, for two models in turn: a key missing an input would hand a later
    mesh (or the other model) an earlier one's."""
    import itertools

    from api_schemas import ContextParallelKind as K
    from models.catalog.presets import cluster_preset, model_preset
    from models.core.collectives import fabric_of
    from models.core.step_time import axis_groups
    from models.core.step_time.exposure import layer_calls
    from models.core.traffic.layer import cp_calls, expert_calls, has_tp_mlp, tp_block_calls

    specs = (model_preset("deepseek-v2-lite"), model_preset("qwen3-30b-a3b"))
    training = TrainingSpec(global_batch_size=64, sequence_length=16384)
    meshes = 0
    for nodes, tp, (cp, kind, ulysses), ep, mbs, (dp, pp) in itertools.product(
            (2, 4), (1, 2), ((1, K.RING, None), (4, K.RING, None), (4, K.ULYSSES, None),
                             (4, K.USP, 2), (8, K.USP, 2), (8, K.USP, 4)),
            (1, 2, 8), (1, 2), ((2, 1), (1, 2))):
        world = nodes * 8
        if world % (tp * cp * dp * pp):
            continue
        dp *= world // (tp * cp * dp * pp)
        cluster = cluster_preset("h100-sxm5-80gb", num_nodes=nodes)
        parallel = ParallelConfig(tp=tp, cp=cp, cp_kind=kind, ulysses_degree=ulysses, ep=ep,
                                  dp=dp, pp=pp, micro_batch_size=mbs,
                                  sequence_parallel=tp > 1)
        groups = axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
        fabric = fabric_of(cluster)
        spec = specs[meshes % 2]
        for index in (0, spec.num_layers - 1):  # DeepSeek-V2-Lite: dense, then MoE
            kept = layer_calls(spec, index, training=training, parallel=parallel,
                               groups=groups, fabric=fabric)
            lctx = groups.layer_context(spec, training, parallel, fabric)
            moe_layer = spec.is_moe_layer(index)
            fresh = tp_block_calls(lctx, "attention")
            if has_tp_mlp(lctx, moe_layer):
                fresh += tp_block_calls(lctx, "mlp")
            fresh += cp_calls(lctx, spec.is_linear_attention_layer(index))
            if moe_layer:
                fresh += expert_calls(lctx)
            assert list(kept) == fresh, (parallel, index)
        meshes += 1
    assert meshes >= 80
