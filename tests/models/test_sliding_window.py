"""Sliding-window attention: the spec's window and its layers, the causal FLOPs inside the
window, and the fused kernel's work over the key tiles the window touches (Mistral 7B
arXiv:2310.06825 Sec. 2; GPT-OSS's alternating 128-token windows); GPT-OSS's attention sinks
as read from its config."""

import pytest

from api_schemas import ModelSpec, RecomputeModule
from models.catalog.hf_config import spec_from_hf_config
from models.catalog.presets import cluster_preset, hf_preset_config, model_preset
from models.core.attention_window import (
    ATTENTION_KEY_TILE,
    window_kernel_keys,
    window_loop_keys,
    window_work_fraction,
)
from models.core.compute import ComputeContext, layer_compute
from models.core.flops import attention_core_forward_flops, layer_forward_flops, model_forward_flops

H100 = cluster_preset("h100-sxm5-80gb", num_nodes=1).gpu


def _without_window(spec: ModelSpec) -> ModelSpec:
    return spec.model_copy(update={"sliding_window": None, "sliding_window_layers": None})


def test_gpt_oss_windows_the_even_layers_only() -> None:
    spec = model_preset("gpt-oss-20b")
    assert spec.sliding_window == 128
    assert [spec.attention_window(i) for i in range(4)] == [128, None, 128, None]


def test_causal_count_keeps_the_pairs_inside_the_window() -> None:
    spec = model_preset("gpt-oss-20b")
    s, w, a, d = 4096, 128, 64, 64
    windowed = layer_forward_flops(spec, 0, seq_len=s, causal=True)
    dense = layer_forward_flops(spec, 1, seq_len=s, causal=True)
    assert windowed.attention_flop == 2 * (w * s - w * w / 2) * a * (d + d)
    assert dense.attention_flop == 2 * s * s * a * (d + d) / 2
    assert windowed.gemm_flop == dense.gemm_flop
    # The full-attention convention (Megatron-LM, PaLM) counts the whole matrix anyway.
    assert (layer_forward_flops(spec, 0, seq_len=s).attention_flop
            == layer_forward_flops(spec, 1, seq_len=s).attention_flop)
    # A window as long as the sequence is plain causal attention.
    assert attention_core_forward_flops(spec, seq_len=s, causal=True, window=s) == \
        dense.attention_flop


def test_model_flops_drop_only_under_the_causal_count() -> None:
    spec = model_preset("gpt-oss-20b")
    plain = _without_window(spec)
    assert model_forward_flops(spec, seq_len=4096, causal=True) < \
        model_forward_flops(plain, seq_len=4096, causal=True)
    assert model_forward_flops(spec, seq_len=4096) == model_forward_flops(plain, seq_len=4096)


def test_window_of_4096_at_16k_is_the_two_fold_speed_mistral_prints() -> None:
    # Mistral 7B Sec. 2: sequence 16K, W = 4096, FlashAttention / xFormers "2x speed
    # improvement" over a vanilla (causal) baseline. 128 query tiles: the first 33 touch
    # 1 .. 33 key tiles, the other 95 touch 33 each.
    keys = window_kernel_keys(4096, seq_len=16384)
    assert keys == ATTENTION_KEY_TILE * (33 * 34 / 2 + 95 * 33) / 128
    assert window_loop_keys(4096, seq_len=16384) == 33 * ATTENTION_KEY_TILE
    spec = model_preset("mistral-7b-v0.3")
    ctx = ComputeContext(gpu=H100, seq_len=16384, micro_batch_size=1)
    causal = layer_compute(spec, 0, ctx).recompute_module_s[RecomputeModule.CORE_ATTN]
    windowed = layer_compute(spec.model_copy(update={"sliding_window": 4096}), 0, ctx)
    speed_up = causal / windowed.recompute_module_s[RecomputeModule.CORE_ATTN]
    assert speed_up == pytest.approx(2.0, abs=0.25)  # 2.21 when this was written


def test_a_128_key_window_computes_two_key_tiles_per_query_tile() -> None:
    # Every query tile but the first touches two key tiles: (1 + 2 * 31) / 32 tiles.
    assert window_kernel_keys(128, seq_len=4096) == ATTENTION_KEY_TILE * 63 / 32
    assert window_loop_keys(128, seq_len=4096) == 2 * ATTENTION_KEY_TILE
    # A window spanning the sequence computes what the causal kernel computes.
    assert window_kernel_keys(256, seq_len=256) == window_kernel_keys(128, seq_len=256) == 192
    assert window_work_fraction(128, seq_len=256) == 1.0


def test_a_window_near_half_the_sequence_saves_through_the_causal_ramp() -> None:
    # Phi-3-mini-4k: a 2047-key window at 4096 tokens. Each query tile reaches 17 key tiles
    # once it is past the 17th; the first 16 reach fewer. The mean, 12.75 tiles, is below
    # the causal kernel's mean of 16.5 tiles although 17 is above it.
    assert window_kernel_keys(2047, seq_len=4096) == ATTENTION_KEY_TILE * 12.75
    assert window_work_fraction(2047, seq_len=4096) == 12.75 / 16.5  # 16.5: causal tiles
    spec = model_preset("phi-3-mini-4k-instruct")
    ctx = ComputeContext(gpu=H100, seq_len=4096, micro_batch_size=1)
    core = RecomputeModule.CORE_ATTN
    assert (layer_compute(spec, 0, ctx).recompute_module_s[core]
            < 0.85 * layer_compute(_without_window(spec), 0, ctx).recompute_module_s[core])


def test_fused_kernel_time_follows_the_window_and_a_materialised_one_does_not() -> None:
    spec = model_preset("gpt-oss-20b")
    fused = ComputeContext(gpu=H100, seq_len=4096, micro_batch_size=1, ep=8)
    windowed, dense = layer_compute(spec, 0, fused), layer_compute(spec, 1, fused)
    core = RecomputeModule.CORE_ATTN
    # Two key tiles of 128 against a causal mean of 2048 keys: an eighth of the work, run at
    # the lower efficiency of a short key loop.
    ratio = windowed.recompute_module_s[core] / dense.recompute_module_s[core]
    assert 1 / 8 < ratio < 1 / 2
    assert windowed.times.backward_input_s < dense.times.backward_input_s
    unfused = ComputeContext(gpu=H100, seq_len=4096, micro_batch_size=1, ep=8,
                             flash_attention=False)
    assert (layer_compute(spec, 0, unfused).times.total_s
            == pytest.approx(layer_compute(spec, 1, unfused).times.total_s))


def test_window_layers_need_a_window_inside_the_model() -> None:
    base = model_preset("gpt-oss-20b")
    with pytest.raises(ValueError, match="without sliding_window"):
        ModelSpec(**{**base.model_dump(), "sliding_window": None})
    with pytest.raises(ValueError, match="beyond num_layers"):
        ModelSpec(**{**base.model_dump(), "sliding_window_layers": (0, 24)})


def test_a_window_is_read_only_with_per_layer_types() -> None:
    gpt_oss = spec_from_hf_config(hf_preset_config("gpt-oss-20b"))
    assert gpt_oss.spec.sliding_window_layers == tuple(range(0, 24, 2))
    assert any("sliding window of 128" in note for note in gpt_oss.notes)
    # Qwen2.5 carries 'sliding_window' but leaves it off (use_sliding_window false).
    assert spec_from_hf_config(hf_preset_config("qwen2.5-3b")).spec.sliding_window is None


def test_gemma_windows_follow_the_pattern_of_their_modelling_code() -> None:
    # Gemma 2: local and global attention in every other layer, a local one first
    # (arXiv:2408.00118 Sec. 2); Gemma 3: five local layers per global one, a local one
    # first (arXiv:2503.19786 Sec. 2). Neither config lists 'layer_types'.
    gemma2 = spec_from_hf_config(hf_preset_config("gemma-2-9b")).spec
    assert gemma2.sliding_window == 4096
    assert gemma2.sliding_window_layers == tuple(range(0, 42, 2))
    gemma3 = spec_from_hf_config(hf_preset_config("gemma-3-27b-it")).spec
    assert gemma3.sliding_window == 1024
    assert [gemma3.attention_window(i) for i in range(12)] == [1024] * 5 + [None] + [1024] * 5 \
        + [None]
    assert len(gemma3.sliding_window_layers or ()) == 62 - 62 // 6
    # A config's own pattern wins over the default.
    config = {**hf_preset_config("gemma-3-27b-it")}
    config["text_config"] = {**config["text_config"], "sliding_window_pattern": 2}
    assert spec_from_hf_config(config).spec.sliding_window_layers == tuple(range(0, 62, 2))


def test_mistral_family_and_phi3_window_every_layer_when_the_config_sets_a_window() -> None:
    # transformers modeling_phi3.py / modeling_mixtral.py: the model builds a sliding-window
    # causal mask for every layer unless config.sliding_window is None.
    phi3 = spec_from_hf_config(hf_preset_config("phi-3-mini-4k-instruct"))
    assert phi3.spec.sliding_window == 2047
    assert phi3.spec.sliding_window_layers == tuple(range(32))
    assert any("windows every layer" in note for note in phi3.notes)
    # Mixtral 8x7B and Mistral 7B v0.3 set it to null: full causal attention.
    assert spec_from_hf_config(hf_preset_config("mixtral-8x7b")).spec.sliding_window is None
    mistral_v01 = {**hf_preset_config("mistral-7b-v0.3"), "sliding_window": 4096}
    spec = spec_from_hf_config(mistral_v01).spec
    assert spec.sliding_window == 4096 and spec.sliding_window_layers == tuple(range(32))


def test_gemma_3_at_32k_trains_faster_with_its_windows_than_all_global() -> None:
    from api_schemas import ParallelConfig, TrainingSpec
    from models.core.step_time import estimate_step

    spec = model_preset("gemma-3-27b-it")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=8)
    training = TrainingSpec(global_batch_size=64, sequence_length=32768)
    parallel = ParallelConfig(tp=8, pp=2, dp=4, micro_batch_size=1)
    windowed = estimate_step(spec, training, parallel, cluster).step_time_s
    everywhere = estimate_step(_without_window(spec), training, parallel, cluster).step_time_s
    assert windowed < 0.9 * everywhere  # 18.1 s against 21.4 s when this was written


def test_gpt_oss_declares_its_attention_sinks() -> None:
    assert spec_from_hf_config(hf_preset_config("gpt-oss-20b")).spec.attention_sinks
    assert not model_preset("llama-3.1-8b").attention_sinks


def test_ranks_with_differently_placed_sliding_layers_keep_their_own_stage_times() -> None:
    # gpt-oss alternates sliding-window and full attention. On a V-shaped pipeline of 4
    # ranks with 3 layers per chunk, ranks 1 and 2 hold the same MoE pattern but start
    # their chunks on different attention kinds; each must be timed from its own layers,
    # whichever rank the memo met first.
    from api_schemas import ParallelConfig, TrainingSpec
    from models.core.collectives import fabric_of
    from models.core.layout import pipeline_layout
    from models.core.rank_states import micro_batch_count
    from models.core.step_time import axis_groups, clear_step_time_cache, stage_time
    from models.core.step_time.stage import stage_times

    spec = model_preset("gpt-oss-20b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=4)
    training = TrainingSpec(global_batch_size=256, sequence_length=4096)
    parallel = ParallelConfig(tp=4, pp=4, dp=2, vpp=2, schedule="dualpipev",
                              micro_batch_size=2)
    m = micro_batch_count(training, parallel)
    layouts = pipeline_layout(spec, parallel)
    fabric, groups = fabric_of(cluster), axis_groups(parallel, gpus_per_node=8)
    clear_step_time_cache()
    shared = stage_times(spec, training, parallel, cluster, layouts, m, fabric, groups)
    alone = [stage_time(spec, training, parallel, cluster, layout, num_micro_batches=m,
                        fabric=fabric, groups=groups) for layout in layouts]
    assert [st.chunk_times for st in shared] == [st.chunk_times for st in alone]
    assert shared[1].chunk_times != shared[2].chunk_times


def test_a_chunk_takes_each_layers_own_time_whichever_attention_kind_comes_first() -> None:
    # Two middle ranks of gpt-oss holding two sliding-window and two full-attention layers
    # each, one starting on a sliding layer and one on a full one, take the same time, and
    # that time is the sum of the layers' times alone: a rank is not timed as copies of its
    # first layer (at 32k tokens a full-attention layer costs several window layers).
    from api_schemas import ParallelConfig, TrainingSpec
    from models.core.collectives import fabric_of
    from models.core.layout import StageLayout
    from models.core.step_time import axis_groups, stage_time

    spec = model_preset("gpt-oss-20b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=4)
    training = TrainingSpec(global_batch_size=64, sequence_length=32768)
    parallel = ParallelConfig(tp=1, pp=4, dp=8, ep=8, micro_batch_size=1)
    fabric, groups = fabric_of(cluster), axis_groups(parallel, gpus_per_node=8)

    def chunk_time(*layers: int) -> tuple[float, float, float]:
        layout = StageLayout(rank=1, chunks=(layers,), num_embeddings=0, num_heads=0,
                             num_mtp_modules=0)
        times = stage_time(spec, training, parallel, cluster, layout, num_micro_batches=8,
                           fabric=fabric, groups=groups).chunk_times[0]
        return times.forward_s, times.backward_input_s, times.backward_weight_s

    sliding_first, full_first = chunk_time(2, 3, 4, 5), chunk_time(3, 4, 5, 6)
    assert sliding_first == pytest.approx(full_first, rel=1e-12)
    alone = [chunk_time(i) for i in (2, 3, 4, 5)]
    assert sliding_first == pytest.approx(tuple(map(sum, zip(*alone, strict=True))), rel=1e-12)
    # The kinds do differ: a full-attention layer's forward is well above a window one's.
    assert chunk_time(3)[0] > 1.5 * chunk_time(2)[0]


def test_chunked_attention_counts_each_chunk_as_its_own_causal_sequence() -> None:
    spec = model_preset("llama-4-scout-17b-16e")
    whole = attention_core_forward_flops(spec, seq_len=8192, causal=True)
    assert attention_core_forward_flops(spec, seq_len=32768, causal=True, chunk=8192) \
        == pytest.approx(4 * whole)
    assert attention_core_forward_flops(spec, seq_len=20000, causal=True, chunk=8192) \
        == pytest.approx(2 * whole + attention_core_forward_flops(spec, seq_len=3616,
                                                                  causal=True))
    # A sequence no longer than a chunk, and the full-matrix convention, are unchanged.
    assert attention_core_forward_flops(spec, seq_len=8192, causal=True, chunk=8192) == whole
    assert attention_core_forward_flops(spec, seq_len=32768, chunk=8192) \
        == attention_core_forward_flops(spec, seq_len=32768)


def test_llama_4_attends_in_chunks_on_its_rope_layers_and_globally_on_every_fourth() -> None:
    ingested = spec_from_hf_config(hf_preset_config("llama-4-scout-17b-16e"))
    spec = ingested.spec
    assert spec.attention_chunk_size == 8192
    assert [spec.attention_chunk(i) for i in range(8)] == [8192, 8192, 8192, None] * 2
    assert any("36 of 48 layers attend within chunks of 8192" in n for n in ingested.notes)
    # An explicit 'no_rope_layers' list wins over the interval.
    config = {**hf_preset_config("llama-4-scout-17b-16e")}
    config["text_config"] = {**config["text_config"], "no_rope_layers": [1, 0] * 24}
    assert spec_from_hf_config(config).spec.chunked_attention_layers == tuple(range(0, 48, 2))
    with pytest.raises(ValueError, match="without attention_chunk_size"):
        ModelSpec(**{**spec.model_dump(), "attention_chunk_size": None})


def test_llama_4_at_32k_trains_faster_with_its_chunks_and_alike_within_one_chunk() -> None:
    from api_schemas import ParallelConfig, TrainingSpec
    from models.core.step_time import estimate_step

    spec = model_preset("llama-4-scout-17b-16e")
    global_everywhere = spec.model_copy(update={"attention_chunk_size": None,
                                                "chunked_attention_layers": None})
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=8)
    parallel = ParallelConfig(tp=8, pp=2, dp=4, ep=8, micro_batch_size=1)
    steps = {}
    for seq in (8192, 32768):
        training = TrainingSpec(global_batch_size=64, sequence_length=seq)
        steps[seq] = [estimate_step(s, training, parallel, cluster).step_time_s
                      for s in (spec, global_everywhere)]
    assert steps[8192][0] == pytest.approx(steps[8192][1], rel=1e-12)
    assert steps[32768][0] < 0.9 * steps[32768][1], steps


def test_a_window_inside_the_chunks_trims_both_the_count_and_the_kernel_time() -> None:
    from api_schemas import ParallelConfig, TrainingSpec
    from models.core.step_time import compute_context

    base = model_preset("llama-3.1-8b")
    chunked = base.model_copy(update={"attention_chunk_size": 8192})
    both = chunked.model_copy(update={"sliding_window": 1024})
    assert attention_core_forward_flops(both, seq_len=65536, causal=True, window=1024,
                                        chunk=8192) \
        == pytest.approx(8 * attention_core_forward_flops(base, seq_len=8192, causal=True,
                                                          window=1024))
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    ctx = compute_context(TrainingSpec(global_batch_size=8, sequence_length=65536),
                          ParallelConfig(dp=8), cluster)
    attention = {name: layer_compute(spec, 0, ctx).recompute_module_s[RecomputeModule.CORE_ATTN]
                 for name, spec in (("chunks", chunked), ("both", both))}
    assert attention["both"] < 0.5 * attention["chunks"]
