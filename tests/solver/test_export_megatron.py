"""Megatron-LM core_v0.14.0 arguments: vocabulary, degrees, layer split, MoE/MLA, notes."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_export_cases import CASES, case

from api_schemas.architecture import ModelSpec, MoESpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.catalog.presets import model_preset
from models.core.layout import virtual_stage_sizes
from models.errors import InvalidSpecError
from solver.export import MEGATRON_FLAGS, megatron_args, megatron_notes
from solver.export.megatron_model import moe_layer_freq
from solver.export.megatron_pipeline import layout_string, split_flags


def _values(args: list[str], flag: str) -> list[str]:
    """Tokens following `flag` up to the next flag (empty for a switch)."""
    assert args.count(flag) == 1, f"{flag} appears {args.count(flag)} times"
    start = args.index(flag) + 1
    end = start
    while end < len(args) and not args[end].startswith("--"):
        end += 1
    return args[start:end]


def _value(args: list[str], flag: str) -> str:
    values = _values(args, flag)
    assert len(values) == 1, (flag, values)
    return values[0]


def _expand_layout(layout: str) -> list[str]:
    """Megatron's documented layout grammar: `(...)*n` and `x*n` repeat, `|` splits stages."""
    text = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    return text.split("|")


def _megatron_sizes(args: list[str], *, num_layers: int, pp: int) -> list[int]:
    """Decoder layers per virtual stage as core_v0.14.0 builds them from these flags
    (transformer_block.get_num_layers_to_build and PipelineParallelLayerLayout)."""
    if "--pipeline-model-parallel-layout" in args:
        return [stage.count("t") for stage in
                _expand_layout(_value(args, "--pipeline-model-parallel-layout"))]
    embedding = "--account-for-embedding-in-pipeline-split" in args
    loss = "--account-for-loss-in-pipeline-split" in args
    first = last = None
    if "--decoder-first-pipeline-num-layers" in args:
        first = int(_value(args, "--decoder-first-pipeline-num-layers"))
    if "--decoder-last-pipeline-num-layers" in args:
        last = int(_value(args, "--decoder-last-pipeline-num-layers"))
    if first is not None or last is not None:
        rest, left = num_layers - (first or 0) - (last or 0), pp - (first is not None) - (
            last is not None)
        assert left == 0 or rest % left == 0
        per_rank = [rest // left if left else 0] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
    else:
        slots = num_layers + embedding + loss
        assert slots % pp == 0
        per_rank = [slots // pp] * pp
    if "--num-layers-per-virtual-pipeline-stage" in args:
        chunks = per_rank[0] // int(_value(args, "--num-layers-per-virtual-pipeline-stage"))
    elif "--num-virtual-stages-per-pipeline-rank" in args:
        chunks = int(_value(args, "--num-virtual-stages-per-pipeline-rank"))
    else:
        chunks = 1
    assert all(count % chunks == 0 for count in per_rank)
    sizes = [per_rank[stage % pp] // chunks for stage in range(pp * chunks)]
    sizes[0] -= embedding
    sizes[-1] -= loss
    return sizes


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_flag_is_in_the_vocabulary_and_takes_values_once(name: str) -> None:
    args = megatron_args(*CASES[name])
    flags = [token for token in args if token.startswith("--")]
    assert set(flags) <= MEGATRON_FLAGS
    assert len(flags) == len(set(flags)), "a flag is repeated"


def test_llama405b_interleaved_counts_embedding_and_loss_as_layers() -> None:
    spec, training, parallel = CASES["llama405b-tp8-pp16-vpp2"]
    args = megatron_args(spec, training, parallel)
    assert _value(args, "--tensor-model-parallel-size") == "8"
    assert _value(args, "--pipeline-model-parallel-size") == "16"
    assert _values(args, "--sequence-parallel") == []
    per_virtual = int(_value(args, "--num-layers-per-virtual-pipeline-stage"))
    # 126 layers + embedding + loss = 128 slots over 16 ranks x 2 chunks.
    assert (spec.num_layers + 2) // parallel.pp // per_virtual == parallel.vpp
    assert "--account-for-embedding-in-pipeline-split" in args
    assert "--account-for-loss-in-pipeline-split" in args
    assert _megatron_sizes(args, num_layers=126, pp=16) == virtual_stage_sizes(spec, parallel)
    assert _value(args, "--global-batch-size") == "2048"
    assert "--use-distributed-optimizer" in args


def test_even_interleaved_split_uses_layers_per_virtual_stage_only() -> None:
    spec, training, parallel = case("llama-3.1-70b", tp=8, pp=8, dp=4, vpp=5,
                                    schedule="interleaved_1f1b")
    args = megatron_args(spec, training, parallel)
    assert _value(args, "--num-layers-per-virtual-pipeline-stage") == "2"
    assert not any("account-for" in token or "decoder-" in token for token in args)


def test_deepseek_v3_moe_and_mla_flags() -> None:
    args = megatron_args(*CASES["deepseek-v3-dualpipe"])
    expected = {
        "--moe-layer-freq": "([0]*3+[1]*58)",
        "--num-experts": "256",
        "--moe-router-topk": "8",
        "--moe-ffn-hidden-size": "2048",
        "--moe-shared-expert-intermediate-size": "2048",
        "--q-lora-rank": "1536",
        "--kv-lora-rank": "512",
        "--qk-head-dim": "128",
        "--qk-pos-emb-head-dim": "64",
        "--mtp-num-layers": "1",
        "--moe-token-dispatcher-type": "alltoall",
        "--expert-model-parallel-size": "64",
        "--expert-tensor-parallel-size": "1",
    }
    assert {flag: _value(args, flag) for flag in expected} == expected
    assert {"--multi-latent-attention", "--moe-grouped-gemm", "--fp8-param-gather"} <= set(args)
    assert "--kv-channels" not in args and "--group-query-attention" not in args
    assert _values(args, "--fp8-format") == ["e4m3"]


def _moe_spec(num_layers: int, first_dense: int, freq: int, dense: tuple[int, ...]) -> ModelSpec:
    return ModelSpec(num_layers=num_layers, hidden_size=256, num_attention_heads=4,
                     ffn_hidden_size=512, vocab_size=1024,
                     moe=MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=128,
                                 first_dense_layers=first_dense, layer_freq=freq,
                                 dense_layer_indices=dense))


@settings(max_examples=60, deadline=None)
@given(num_layers=st.integers(2, 64), first_dense=st.integers(0, 5), freq=st.integers(1, 4),
       dense=st.lists(st.integers(0, 63), max_size=3))
def test_moe_layer_freq_evaluates_to_the_spec_pattern(num_layers: int, first_dense: int,
                                                      freq: int, dense: list[int]) -> None:
    first_dense = min(first_dense, num_layers - 1)
    spec = _moe_spec(num_layers, first_dense, freq, tuple(i for i in dense if i < num_layers))
    pattern = [int(spec.is_moe_layer(i)) for i in range(num_layers)]
    value = moe_layer_freq(spec)
    if value is None:
        assert all(pattern)
    elif value.isdigit():
        assert pattern == [int(i % int(value) == 0) for i in range(num_layers)]
    else:
        # Megatron evaluates the expression as a Python list (moe_freq_type).
        assert re.fullmatch(r"[\[\]()01+*0-9]+", value)
        assert eval(value) == pattern


@pytest.mark.parametrize(("layers", "expected"), [
    ((5, 9, 9, 9), {"--decoder-first-pipeline-num-layers": "5"}),
    ((9, 9, 9, 5), {"--decoder-last-pipeline-num-layers": "5"}),
    ((7, 8, 8, 9), {"--decoder-first-pipeline-num-layers": "7",
                    "--decoder-last-pipeline-num-layers": "9"}),
    ((6, 9, 9, 8), {"--decoder-first-pipeline-num-layers": "6",
                    "--decoder-last-pipeline-num-layers": "8"}),
])
def test_uneven_first_last_ranks_become_decoder_first_last_flags(
        layers: tuple[int, ...], expected: dict[str, str]) -> None:
    spec, training, parallel = case("llama-3.1-8b", gbs=64, pp=4, dp=2, layers_per_stage=layers)
    args = megatron_args(spec, training, parallel)
    for flag, value in expected.items():
        assert _value(args, flag) == value
    assert "--pipeline-model-parallel-layout" not in args
    assert _megatron_sizes(args, num_layers=32, pp=4) == list(layers)


def test_uneven_interleaved_ranks_use_virtual_stages_per_rank() -> None:
    spec, training, parallel = case("llama-3.1-8b", gbs=64, pp=4, dp=2, vpp=2,
                                    schedule="interleaved_1f1b", layers_per_stage=(6, 8, 8, 10))
    args = megatron_args(spec, training, parallel)
    assert _value(args, "--num-virtual-stages-per-pipeline-rank") == "2"
    assert "--num-layers-per-virtual-pipeline-stage" not in args
    assert _megatron_sizes(args, num_layers=32, pp=4) == virtual_stage_sizes(spec, parallel)


def test_uneven_middle_becomes_an_explicit_layout_with_a_note() -> None:
    spec, training, parallel = case("llama-3.1-8b", gbs=64, pp=4, dp=2,
                                    layers_per_stage=(8, 7, 9, 8))
    args = megatron_args(spec, training, parallel)
    assert not any(token.startswith("--decoder-") for token in args)
    layout = _value(args, "--pipeline-model-parallel-layout")
    assert _expand_layout(layout) == ["E" + "t" * 8, "t" * 7, "t" * 9, "t" * 8 + "L"]
    notes = megatron_notes(spec, training, parallel)
    assert any("--pipeline-model-parallel-layout" in note and "middle" in note
               for note in notes)


def test_layout_string_places_mtp_with_the_loss_and_folds_runs() -> None:
    assert layout_string([1, 2, 2, 2, 1], num_mtp_layers=1) == "Et|(t*2|)*3tmL"
    assert _expand_layout("Et|(t*2|)*3tmL") == ["Et", "tt", "tt", "tt", "tmL"]


@settings(max_examples=80, deadline=None)
@given(data=st.data(), pp=st.integers(2, 6), chunks=st.integers(1, 3))
def test_split_flags_reproduce_any_split(data: st.DataObject, pp: int, chunks: int) -> None:
    sizes = data.draw(st.lists(st.integers(0, 5), min_size=pp * chunks, max_size=pp * chunks))
    if sum(sizes) == 0:
        sizes[len(sizes) // 2] = 1
    args, notes = split_flags(sizes, pp=pp, chunks=chunks, num_mtp_layers=0)
    assert set(token for token in args if token.startswith("--")) <= MEGATRON_FLAGS
    assert _megatron_sizes(args, num_layers=sum(sizes), pp=pp) == sizes
    assert bool(notes) == ("--pipeline-model-parallel-layout" in args)


@pytest.mark.parametrize("schedule", ["gpipe", "zb_h1", "zb_h2", "zbv", "dualpipe", "dualpipev"])
def test_schedules_megatron_lacks_become_notes_not_flags(schedule: str) -> None:
    vpp = 2 if schedule in ("zbv", "dualpipev") else 1
    spec, training, parallel = case("llama-3.1-8b", gbs=64, pp=4, dp=2, vpp=vpp,
                                    schedule=schedule)
    args = megatron_args(spec, training, parallel)
    assert not {"--num-layers-per-virtual-pipeline-stage",
                "--num-virtual-stages-per-pipeline-rank"} & set(args)
    assert set(token for token in args if token.startswith("--")) <= MEGATRON_FLAGS
    notes = megatron_notes(spec, training, parallel)
    assert any(f"schedule '{schedule}'" in note for note in notes)
    if schedule not in ("gpipe",):
        assert any("extension" in note for note in notes)
    per_rank = _megatron_sizes(args, num_layers=32, pp=4)
    assert sum(per_rank) == 32


@pytest.mark.parametrize(("recompute", "expected"), [
    ("full", ["full", "uniform", "1"]),
    ({"full_layers": 3}, ["full", "block", "3"]),
])
def test_full_recompute_flags(recompute: object, expected: list[str]) -> None:
    spec, training, parallel = case("llama-3.1-8b", gbs=64, pp=4, dp=2, recompute=recompute)
    args = megatron_args(spec, training, parallel)
    assert [_value(args, "--recompute-granularity"), _value(args, "--recompute-method"),
            _value(args, "--recompute-num-layers")] == expected


def test_selective_modules_are_listed_and_impossible_ones_dropped_with_a_note() -> None:
    args = megatron_args(*CASES["kimi-k2-interleaved"])
    assert _values(args, "--recompute-modules") == ["layernorm", "mla_up_proj", "moe_act"]
    spec, training, parallel = case("llama-3.1-8b", gbs=64, dp=8, recompute="selective",
                                    recompute_modules=["core_attn", "mla_up_proj"])
    assert _values(megatron_args(spec, training, parallel), "--recompute-modules") == [
        "core_attn"]
    assert any("mla_up_proj" in note for note in megatron_notes(spec, training, parallel))


def test_interleaved_full_layers_cover_the_plan_per_chunk() -> None:
    spec, training, parallel = case("llama-3.1-8b", gbs=64, pp=4, dp=2, vpp=2,
                                    schedule="interleaved_1f1b", recompute={"full_layers": 6})
    args = megatron_args(spec, training, parallel)
    # 4 layers per chunk; the first 6 of a rank span chunk 0 (4) and chunk 1 (2): 4 per chunk.
    assert _value(args, "--recompute-num-layers") == "4"
    assert any("block method" in note for note in megatron_notes(spec, training, parallel))


def test_differing_stage_policies_export_the_strongest_with_a_note() -> None:
    spec, training, parallel = CASES["neox-stage-policies"]
    args = megatron_args(spec, training, parallel)
    assert _value(args, "--recompute-granularity") == "full"
    notes = megatron_notes(spec, training, parallel)
    assert any("per-stage activation policies differ" in note for note in notes)
    assert any("Pipeline ZeRO-2" in note for note in notes)


def test_fp8_activations_and_offload_are_notes() -> None:
    spec, training, parallel = CASES["deepseek-v3-zbv-fulllayers"]
    notes = megatron_notes(spec, training, parallel)
    assert any("FP8 storage" in note for note in notes)
    assert any("offload" in note for note in notes)


@pytest.mark.parametrize(("zero", "present", "absent"), [
    (0, [], ["--use-distributed-optimizer", "--use-megatron-fsdp", "--overlap-param-gather"]),
    (1, ["--use-distributed-optimizer", "--overlap-param-gather"], ["--use-megatron-fsdp"]),
    (2, ["--use-megatron-fsdp", "optim_grads"], []),
    (3, ["--use-megatron-fsdp", "optim_grads_params", "fsdp_dtensor"], []),
])
def test_zero_stage_flags(zero: int, present: list[str], absent: list[str]) -> None:
    spec, training, parallel = case("llama-3.1-8b", gbs=64, dp=8, zero_stage=zero)
    args = megatron_args(spec, training, parallel)
    assert set(present) <= set(args)
    assert not set(absent) & set(args)


def test_context_parallel_usp_is_hierarchical_a2a_then_p2p() -> None:
    args = megatron_args(*CASES["llama8b-zero3-fsdp"])
    assert _value(args, "--context-parallel-size") == "2"
    assert _value(args, "--cp-comm-type") == "a2a+p2p"
    assert _values(args, "--hierarchical-context-parallel-sizes") == ["2", "1"]


def test_tp_comm_overlap_needs_sequence_parallel() -> None:
    spec, training, parallel = CASES["llama70b-1f1b-full"]
    assert "--tp-comm-overlap" not in megatron_args(spec, training, parallel)
    assert any("--tp-comm-overlap" in note for note in megatron_notes(spec, training, parallel))
    with_sp = parallel.model_copy(update={"sequence_parallel": True})
    assert "--tp-comm-overlap" in megatron_args(spec, training, with_sp)


def test_fp8_param_gather_needs_the_distributed_optimizer() -> None:
    spec, training, parallel = case("llama-3.1-8b", gbs=64, dp=8, zero_stage=0,
                                    training={"compute_dtype": "fp8",
                                              "fp8_weight_storage": "fp8_only"})
    assert "--fp8-param-gather" not in megatron_args(spec, training, parallel)
    assert any("--fp8-param-gather" in note for note in megatron_notes(spec, training, parallel))


def test_bf16_optimizer_states_use_the_precision_aware_optimizer() -> None:
    args = megatron_args(*CASES["deepseek-v3-dualpipe"])
    assert "--use-precision-aware-optimizer" in args
    assert _value(args, "--exp-avg-dtype") == "bf16"
    assert _value(args, "--exp-avg-sq-dtype") == "bf16"


def test_batch_that_does_not_divide_is_rejected_with_the_fix() -> None:
    spec = case("llama-3.1-8b")[0]
    with pytest.raises(InvalidSpecError, match="global_batch_size=100"):
        megatron_args(spec, TrainingSpec(global_batch_size=100, sequence_length=2048),
                      ParallelConfig(dp=8))
    with pytest.raises(InvalidSpecError, match="num_micro_batches"):
        megatron_args(spec, TrainingSpec(global_batch_size=64, sequence_length=2048),
                      ParallelConfig(dp=8, num_micro_batches=4))


def test_dense_model_has_no_expert_flags_and_gpt2_keeps_learned_positions() -> None:
    args = megatron_args(*CASES["gpt2-gpipe-fp16"])
    assert not any(token.startswith("--moe") or token.startswith("--expert") for token in args)
    assert _value(args, "--position-embedding-type") == "learned_absolute"
    assert "--untie-embeddings-and-output-weights" not in args
    assert "--fp16" in args and "--disable-bias-linear" not in args
    assert _value(args, "--normalization") == "LayerNorm"



def test_a_norm_without_affine_parameters_is_exported_with_a_note() -> None:
    from models.catalog.presets import model_preset

    spec = model_preset("olmo-1b-hf")
    training = TrainingSpec(global_batch_size=8, sequence_length=2048)
    parallel = ParallelConfig(dp=8)
    assert _value(megatron_args(spec, training, parallel), "--normalization") == "LayerNorm"
    notes = megatron_notes(spec, training, parallel)
    assert any("layernorm_no_affine" in note for note in notes)
    plain = megatron_notes(model_preset("llama-3.1-8b"), training, parallel)
    assert not any("layernorm_no_affine" in note for note in plain)


def test_the_interleaving_group_is_exported_and_a_group_below_pp_is_noted() -> None:
    from solver.export.megatron_pipeline import pipeline_args

    spec = model_preset("llama-3.1-8b")
    for group, noted in ((8, False), (2, True)):
        parallel = ParallelConfig(pp=4, vpp=2, schedule="interleaved_1f1b",
                                  microbatch_group_size=group)
        out = pipeline_args(spec, parallel)
        flag = out.args.index("--microbatch-group-size-per-virtual-pipeline-stage")
        assert out.args[flag + 1] == str(group)
        assert any("refuses a group outside [PP, M]" in n for n in out.notes) == noted
    plain = pipeline_args(spec, ParallelConfig(pp=4, vpp=2, schedule="interleaved_1f1b"))
    assert "--microbatch-group-size-per-virtual-pipeline-stage" not in plain.args


def test_a_sliding_window_is_named_in_the_notes_not_exported_as_flags() -> None:
    # core_v0.14.0 has no window flag; core_v0.15.0 adds --window-size and
    # --window-attn-skip-freq, which Megatron-Bridge's GPT-OSS provider sets to (128, 0) and 2.
    spec = model_preset("gpt-oss-20b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    parallel = ParallelConfig(dp=8, ep=8)
    notes = megatron_notes(spec, training, parallel)
    assert any("--window-size 128,0 --window-attn-skip-freq 2" in note for note in notes)
    assert not any(flag.startswith("--window") for flag in megatron_args(spec, training, parallel))
    plain = spec.model_copy(update={"sliding_window": None, "sliding_window_layers": None})
    assert not any("sliding-window" in note for note in megatron_notes(plain, training, parallel))
    listed = spec.model_copy(update={"sliding_window_layers": (0, 1, 2)})
    assert any('--window-attn-skip-freq "[1,1,1,0,' in note
               for note in megatron_notes(listed, training, parallel))


def test_cuda_graphs_of_attention_are_exported_and_moe_regions_are_notes() -> None:
    """core_v0.14.0 captures a dropless MoE layer's attention (`--external-cuda-graph
    --cuda-graph-scope attn`); its scope choices have no router or preprocessing region."""
    graphs = {"cuda_graph_modules": ["attn", "moe_router", "moe_preprocess"]}
    spec, training, parallel = case("qwen3-30b-a3b", gbs=64, dp=8, ep=8, training=graphs)
    args = megatron_args(spec, training, parallel)
    assert "--external-cuda-graph" in args and _value(args, "--cuda-graph-scope") == "attn"
    notes = megatron_notes(spec, training, parallel)
    assert any("moe_preprocess, moe_router" in note and "eagerly" in note for note in notes)
    eager = training.model_copy(update={"cuda_graph_modules": ()})
    assert "--external-cuda-graph" not in megatron_args(spec, eager, parallel)
    full = parallel.model_copy(update={"recompute": "full"})
    assert "--external-cuda-graph" not in megatron_args(spec, training, full)
    assert any("full recomputation" in note for note in megatron_notes(spec, training, full))


@pytest.mark.parametrize(("preset", "score", "bias"), [
    ("llama-4-scout-17b-16e", "sigmoid", False), ("llama-4-maverick-17b-128e", "sigmoid", False),
    ("deepseek-v3", "sigmoid", True), ("kimi-k2-instruct", "sigmoid", True),
    ("deepseek-v2", "softmax", False), ("mixtral-8x7b", "softmax", False),
])
def test_the_router_score_function_is_the_models(preset: str, score: str, bias: bool) -> None:
    """Llama 4 routes top-1 by sigmoid scores with no `scoring_func` key in its config;
    Megatron-LM's default is softmax, so the flag must be given (core_v0.14.0 refuses top-1
    softmax routing without --moe-router-pre-softmax)."""
    args = megatron_args(*case(preset, gbs=64, dp=8))
    assert _value(args, "--moe-router-score-function") == score
    assert ("--moe-router-enable-expert-bias" in args) == bias


def test_expert_bias_with_softmax_scores_is_a_note_not_a_flag() -> None:
    spec = _moe_spec(8, 0, 1, ()).model_copy(update={"moe": MoESpec(
        num_experts=8, top_k=2, expert_ffn_hidden_size=128, router_bias=True,
        router_score_function="softmax")})
    training = TrainingSpec(global_batch_size=8, sequence_length=256)
    args = megatron_args(spec, training, ParallelConfig(dp=8))
    assert _value(args, "--moe-router-score-function") == "softmax"
    assert "--moe-router-enable-expert-bias" not in args
    assert any("sigmoid scores only" in note
               for note in megatron_notes(spec, training, ParallelConfig(dp=8)))


def test_a_router_bias_alone_means_sigmoid_scores() -> None:
    moe = MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=128, router_bias=True)
    assert moe.router_score_function == "sigmoid"
    assert MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=128).router_score_function \
        == "softmax"


@pytest.mark.parametrize(("preset", "pre_softmax"), [
    ("olmoe-1b-7b-0924", True), ("qwen1.5-moe-a2.7b", True), ("deepseek-v2", True),
    ("qwen3-30b-a3b", False), ("mixtral-8x7b", False), ("deepseek-v3", False),
])
def test_unrenormalised_softmax_routing_takes_the_softmax_before_the_top_k(
        preset: str, pre_softmax: bool) -> None:
    """Hugging Face `norm_topk_prob: false` (stated, or the config class's default for OLMoE,
    Qwen2-MoE and DeepSeek-V2) weights the chosen experts by the softmax over every expert:
    Megatron-LM's `--moe-router-pre-softmax`. Sigmoid routers (DeepSeek-V3) never take it."""
    assert model_preset(preset).moe is not None
    args = megatron_args(*case(preset, gbs=64, dp=8))
    assert ("--moe-router-pre-softmax" in args) == pre_softmax
