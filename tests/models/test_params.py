"""Parameter counts: Megatron-LM 2021 Eq. 2 and the 15 Hugging Face fixture configs."""

import pytest

from models.catalog.presets import MEGATRON_2021_TABLE1, hf_preset_config, model_preset
from models.catalog.vision import vision_tower_params
from models.core.params import count_parameters, layer_params

# Printed "Params (B)" of Megatron-LM 2021 Table 1 (arXiv:2104.04473).
PRINTED_PARAMS_B = {
    "gpt-1.7b": 1.7, "gpt-3.6b": 3.6, "gpt-7.5b": 7.5, "gpt-18.4b": 18.4, "gpt-39.1b": 39.1,
    "gpt-76.1b": 76.1, "gpt-145.6b": 145.6, "gpt-310.1b": 310.1, "gpt-529.6b": 529.6,
    "gpt-1008b": 1008.0,
}


@pytest.mark.parametrize(("name", "layers", "hidden", "heads"), MEGATRON_2021_TABLE1)
def test_count_parameters_matches_NAR21_eq2(name: str, layers: int, hidden: int,
                                            heads: int) -> None:
    spec = model_preset(name)
    vocab, seq = 51200, 2048
    eq2 = 12 * layers * hidden**2 * (1 + 13 / (12 * hidden)
                                     + (vocab + seq) / (12 * layers * hidden))
    count = count_parameters(spec)
    # Eq. 2 leaves out the final LayerNorm (2h); everything else is the same matrices.
    assert count.total == round(eq2) + 2 * hidden
    assert round(count.total / 1e9, 1) == PRINTED_PARAMS_B[name]


# Total and activated parameters from the fixtures README (embeddings and head included).
FIXTURE_COUNTS_B = {
    "llama-3.1-8b": (8.030, 8.030), "llama-3.1-70b": (70.554, None),
    "llama-3.1-405b": (405.853, None), "deepseek-v3": (671.026, 37.55),
    "deepseek-v2-lite": (15.706, 2.66), "kimi-k2-instruct": (1026.4, 32.86),
    "qwen3-235b-a22b": (235.094, 22.19), "qwen2-57b-a14b": (57.409, 14.25),
    "qwen1.5-moe-a2.7b": (14.316, 2.69), "mixtral-8x7b": (46.703, 12.88),
    "mixtral-8x22b": (140.630, 39.16), "olmoe-1b-7b-0924": (6.919, 1.28),
    "gpt-neox-20b": (20.555, None), "gpt2": (0.1244, None), "gpt2-medium": (0.3548, None),
}


@pytest.mark.parametrize("preset", sorted(FIXTURE_COUNTS_B))
def test_fixture_parameter_counts_within_half_percent(preset: str) -> None:
    total_b, activated_b = FIXTURE_COUNTS_B[preset]
    count = count_parameters(model_preset(preset))
    assert count.total / 1e9 == pytest.approx(total_b, rel=0.005)
    assert count.activated / 1e9 == pytest.approx(activated_b or total_b, rel=0.005)


def test_deepseek_v3_mtp_module_is_reported_apart() -> None:
    count = count_parameters(model_preset("deepseek-v3"))
    # README: 671.026 B main + 11.61 B MTP = 682.6 B (HF release 685B with shared emb/head).
    assert count.mtp_total / 1e9 == pytest.approx(11.61, rel=0.005)
    assert (count.total + count.mtp_total) / 1e9 == pytest.approx(682.6, rel=0.005)


def test_moe_layer_activated_counts_top_k_experts_only() -> None:
    spec = model_preset("mixtral-8x7b")
    layer = layer_params(spec, 0)
    assert layer.num_routed_experts == 8 and layer.top_k == 2
    assert layer.total - layer.activated == 6 * layer.routed_expert_each


def test_dense_leading_layers_of_deepseek_have_no_experts() -> None:
    spec = model_preset("deepseek-v3")
    assert [spec.is_moe_layer(i) for i in range(4)] == [False, False, False, True]
    assert layer_params(spec, 0).routed_experts == 0
    assert layer_params(spec, 3).num_routed_experts == 256


# Published totals of the families added for the Hub's top decoders: (total, activated or
# None, source). Counts come from the config through the formulas; these are the printed
# numbers they must land within 0.5% of. "keras-hub" = keras-team/keras-hub preset
# metadata `params` of the same checkpoint (keras_hub/src/models/<family>/*_presets.py).
PUBLISHED_COUNTS = {
    "gemma-7b": (8_537_680_896, None, "keras-hub gemma_7b_en"),
    "gemma-2-9b": (9_241_705_984, None, "keras-hub gemma2_9b_en"),
    "gemma-3-27b-it": (27_009_002_240, None, "keras-hub gemma3_27b_text (language model)"),
    "phi-3-mini-4k-instruct": (3_821_079_552, None, "keras-hub phi3_mini_4k_instruct_en"),
    "mistral-7b-v0.3": (7_248_023_552, None, "keras-hub mistral_0.3_7b_en"),
    "qwen2.5-3b": (3_085_938_688, None, "keras-hub qwen2.5_3b_en"),
    "qwen3-1.7b": (1_720_574_976, None, "keras-hub qwen3_1.7b_en"),
    "qwen3-30b-a3b": (30_532_122_624, None, "keras-hub qwen3_moe_30b_a3b_en"),
    "gpt-oss-20b": (20_914_757_184, None, "keras-hub gpt_oss_20b_en; model card 20.91B"),
    "deepseek-v2": (236e9, None, "DeepSeek-V2 arXiv:2405.04434 abstract: 236B total"),
    "phi-4": (14_659_507_200, None, "microsoft/phi-4 checkpoint parameter count (GGUF "
              "general.parameter_count of its conversions); model card: 14B"),
    "granite-3.3-8b-instruct": (8_170_864_640, None, "Hugging Face Hub safetensors total of "
                                "ibm-granite/granite-3.3-8b-instruct; model card: 8B"),
    "olmo-2-1124-13b": (54_864_793_600 // 4, None,
                        "allenai/OLMo-2-1124-13B safetensors index total_size / 4 (float32)"),
    "command-r-v01": (35e9, None, "transformers Cohere docs: 'a 35B parameter' model"),
    "mixtral-8x7b": (46.7e9, None, "Mistral AI, 'Mixtral of experts' (Dec 2023): 46.7B total"),
    "mixtral-8x22b": (141e9, None, "Mistral AI, Mixtral 8x22B announcement (Apr 2024): 141B"),
    "deepseek-v3": (671e9, None, "DeepSeek-V3 arXiv:2412.19437 abstract: 671B total"),
    "qwen3-235b-a22b": (235e9, None, "Qwen3 technical report arXiv:2505.09388: 235B total"),
    "olmoe-1b-7b-0924": (6.9e9, None, "OLMoE arXiv:2409.02060 Table 1: 6.9B total"),
    "olmo-1b-hf": (1_176_764_416, None, "allenai/OLMo-1B parameter count of the released "
                   "model (parameter-free LayerNorms); the paper's '1B'"),
}


@pytest.mark.parametrize("preset", sorted(PUBLISHED_COUNTS))
def test_hub_family_counts_match_the_published_count(preset: str) -> None:
    total, _, _ = PUBLISHED_COUNTS[preset]
    assert count_parameters(model_preset(preset)).total == pytest.approx(total, rel=0.005)


# Published totals of multimodal checkpoints: the language model the plan covers plus the
# vision tower counted apart (models/catalog/vision.py).
CHECKPOINT_COUNTS = {
    "llama-4-scout-17b-16e": (109e9, "Llama 4 model card: 109B total"),
    "llama-4-maverick-17b-128e": (400e9, "Llama 4 model card: 400B total"),
}


@pytest.mark.parametrize("preset", sorted(CHECKPOINT_COUNTS))
def test_multimodal_checkpoint_counts_match_the_model_card(preset: str) -> None:
    spec = model_preset(preset)
    vision = vision_tower_params(hf_preset_config(preset), text_hidden_size=spec.hidden_size)
    assert vision is not None
    total = count_parameters(spec).total + vision.total
    assert total == pytest.approx(CHECKPOINT_COUNTS[preset][0], rel=0.005)


def test_llama_4_scout_checkpoint_is_counted_exactly() -> None:
    spec = model_preset("llama-4-scout-17b-16e")
    vision = vision_tower_params(hf_preset_config("llama-4-scout-17b-16e"),
                                 text_hidden_size=spec.hidden_size)
    assert vision is not None
    # Hugging Face Hub safetensors total of meta-llama/Llama-4-Scout-17B-16E-Instruct.
    assert count_parameters(spec).total + vision.total == 108_641_793_536
    # Without the vision side the text decoder alone misses the card by more than 1%.
    assert count_parameters(spec).total / 109e9 - 1 < -0.01
    d, f = 1408, 5632
    assert vision.encoder_layers == 34 * (4 * (d * d + d) + 2 * d * f + f + d + 4 * d)
    assert vision.projector == 4096 * 5120


def test_gemma_gated_mlp_and_tied_embeddings_are_counted() -> None:
    spec = model_preset("gemma-7b")
    count = count_parameters(spec)
    # Gemma paper arXiv:2403.08295 Table 2 prints 7,751,248,896 non-embedding parameters.
    assert count.total - count.embedding == pytest.approx(7_751_248_896, rel=0.005)
    assert count.head == 0 and layer_params(spec, 0).dense_mlp == 3 * 3072 * 24576


def test_olmo_1_layer_norms_hold_no_weights() -> None:
    spec = model_preset("olmo-1b-hf")
    assert layer_params(spec, 0).norms == 0 and count_parameters(spec).final_norm == 0
    # 16 layers of 4h^2 attention and 3hf SwiGLU, plus the tied V x h embedding.
    h, f = 2048, 8192
    assert count_parameters(spec).total == 16 * (4 * h * h + 3 * h * f) + 50304 * h


def test_gemma_2_has_four_norms_per_layer() -> None:
    layer = layer_params(model_preset("gemma-2-9b"), 0)
    assert layer.norms == 4 * 3584


def test_llama_4_counts_the_shared_expert_and_interleaved_dense_layers() -> None:
    scout, maverick = model_preset("llama-4-scout-17b-16e"), model_preset(
        "llama-4-maverick-17b-128e")
    layer = layer_params(scout, 0)
    assert layer.shared_experts == 3 * 5120 * 8192
    # Model card: 17B activated for both (one routed expert + the shared one per token).
    assert round(count_parameters(scout).activated / 1e9) == 17
    assert round(count_parameters(maverick).activated / 1e9) == 17
    assert [maverick.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    assert layer_params(maverick, 0).dense_mlp == 3 * 5120 * 16384


def test_gpt_oss_activated_matches_the_model_card() -> None:
    count = count_parameters(model_preset("gpt-oss-20b"))
    # The card (arXiv:2508.10925 Table 1) counts the unembedding as active but not the
    # embedding lookup: 3.61B; ours counts both.
    assert (count.activated - count.embedding) / 1e9 == pytest.approx(3.61, rel=0.005)


# Exact totals of every packaged config, so a reader change cannot move a count silently.
PINNED_TOTALS = {
    "command-r-v01": 34_980_831_232, "deepseek-v2": 235_741_434_880,
    "deepseek-v2-lite": 15_706_484_224, "deepseek-v3": 671_026_419_200,
    "gemma-2-9b": 9_241_705_984, "gemma-3-27b-it": 27_009_346_304,
    "gemma-7b": 8_537_680_896, "gpt-neox-20b": 20_554_567_680,
    "granite-3.3-8b-instruct": 8_170_864_640, "phi-4": 14_659_507_200,
    "olmo-1b-hf": 1_176_764_416,
    "gpt-oss-20b": 20_908_050_240, "gpt2": 124_439_808, "gpt2-medium": 354_823_168,
    "kimi-k2-instruct": 1_026_408_232_448, "llama-3.1-405b": 405_853_388_800,
    "kimi-linear-48b-a3b-instruct": 49_122_681_728,
    "llama-3.1-70b": 70_553_706_496, "llama-3.1-8b": 8_030_261_248,
    "llama-4-maverick-17b-128e": 400_711_848_960, "llama-4-scout-17b-16e": 107_769_861_120,
    "mistral-7b-v0.3": 7_248_023_552, "mixtral-8x22b": 140_630_071_296,
    "mixtral-8x7b": 46_702_792_704, "olmo-2-1124-13b": 13_715_799_040,
    "olmoe-1b-7b-0924": 6_919_100_416, "phi-3-mini-4k-instruct": 3_821_079_552,
    "qwen1.5-moe-a2.7b": 14_315_784_192, "qwen2-57b-a14b": 57_408_658_944,
    "qwen2.5-3b": 3_085_938_688, "qwen3-1.7b": 1_720_574_976,
    "qwen3-235b-a22b": 235_093_634_560, "qwen3-30b-a3b": 30_532_122_624,
}


def test_every_packaged_config_keeps_its_count() -> None:
    from models.catalog.presets import hf_preset_ids

    assert sorted(PINNED_TOTALS) == hf_preset_ids()
    assert {p: count_parameters(model_preset(p)).total for p in PINNED_TOTALS} == PINNED_TOTALS
