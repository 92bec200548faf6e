"""Hugging Face config ingestion: every family's vocabulary, aliases and clear errors."""

import pytest

from api_schemas.architecture import AttentionKind, MlpKind, NormKind
from models.catalog.hf_config import spec_from_hf_config
from models.catalog.presets import hf_preset_config, hf_preset_ids
from models.errors import InvalidSpecError


def test_all_fixture_configs_are_read() -> None:
    assert len(hf_preset_ids()) == 33
    for preset in hf_preset_ids():
        ingested = spec_from_hf_config(hf_preset_config(preset), name=preset)
        assert ingested.spec.num_layers > 0
        assert not any("not a known family" in note for note in ingested.notes)


def test_deepseek_v3_fields() -> None:
    spec = spec_from_hf_config(hf_preset_config("deepseek-v3")).spec
    assert spec.attention == AttentionKind.MLA and spec.mla is not None
    assert (spec.mla.q_lora_rank, spec.mla.kv_lora_rank) == (1536, 512)
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.top_k, spec.moe.first_dense_layers) == (256, 8, 3)
    assert spec.moe.shared_expert_ffn_hidden_size == 2048 and spec.moe.router_bias
    assert spec.num_mtp_layers == 1


def test_qwen2_moe_shared_expert_gate_and_qkv_bias() -> None:
    spec = spec_from_hf_config(hf_preset_config("qwen2-57b-a14b")).spec
    assert spec.moe is not None and spec.moe.shared_expert_gate
    assert spec.moe.shared_expert_ffn_hidden_size == 20480
    assert spec.attention_bias and spec.attention == AttentionKind.GQA


def test_mixtral_and_olmoe_read_expert_width_from_intermediate_size() -> None:
    mixtral = spec_from_hf_config(hf_preset_config("mixtral-8x7b")).spec
    olmoe = spec_from_hf_config(hf_preset_config("olmoe-1b-7b-0924")).spec
    assert mixtral.moe is not None and mixtral.moe.expert_ffn_hidden_size == 14336
    assert olmoe.moe is not None and olmoe.moe.expert_ffn_hidden_size == 1024
    assert olmoe.qk_norm


def test_gpt2_defaults_to_tied_layernorm_gelu_with_positions() -> None:
    spec = spec_from_hf_config(hf_preset_config("gpt2")).spec
    assert spec.tie_word_embeddings and spec.norm == NormKind.LAYERNORM
    assert spec.mlp == MlpKind.GELU and spec.learned_position_embeddings == 1024
    assert spec.ffn_hidden_size == 4 * 768 and spec.linear_bias


def test_gpt_neox_is_untied_with_biases() -> None:
    spec = spec_from_hf_config(hf_preset_config("gpt-neox-20b")).spec
    assert not spec.tie_word_embeddings and spec.linear_bias and spec.parallel_residual


def test_qwen_sparse_step_becomes_dense_layer_indices() -> None:
    config = dict(hf_preset_config("qwen2-57b-a14b"), decoder_sparse_step=2)
    spec = spec_from_hf_config(config).spec
    assert spec.moe is not None
    assert [spec.is_moe_layer(i) for i in range(4)] == [False, True, False, True]


def test_missing_fields_are_all_named() -> None:
    config = {"model_type": "llama", "hidden_size": 4096, "vocab_size": 32000}
    with pytest.raises(InvalidSpecError) as err:
        spec_from_hf_config(config)
    message = str(err.value)
    assert "'num_hidden_layers'" in message and "'num_attention_heads'" in message
    assert "'intermediate_size'" in message


def test_unknown_family_is_read_generically_with_a_note() -> None:
    config = dict(hf_preset_config("llama-3.1-8b"), model_type="brand_new_llm")
    ingested = spec_from_hf_config(config)
    assert ingested.spec.hidden_size == 4096
    assert any("not a known family" in note for note in ingested.notes)


def test_unknown_family_missing_fields_is_an_error() -> None:
    with pytest.raises(InvalidSpecError, match="missing") as err:
        spec_from_hf_config({"model_type": "mamba", "d_state": 16})
    message = str(err.value)
    assert "unknown model_type 'mamba'" in message
    assert "'num_hidden_layers'" in message and "top level of config.json" in message


def test_unknown_multimodal_family_names_the_nested_fields() -> None:
    config = {"model_type": "new_vlm", "text_config": {"hidden_size": 4096}}
    with pytest.raises(InvalidSpecError) as err:
        spec_from_hf_config(config)
    message = str(err.value)
    assert "'text_config.num_hidden_layers'" in message
    assert "'text_config.vocab_size'" in message and "under 'text_config'" in message


def test_llama_4_nested_text_config_is_read() -> None:
    ingested = spec_from_hf_config(hf_preset_config("llama-4-scout-17b-16e"))
    spec = ingested.spec
    assert ingested.model_type == "llama4_text"
    assert spec.moe is not None and spec.moe.num_shared_experts == 1
    assert spec.moe.shared_expert_ffn_hidden_size == spec.moe.expert_ffn_hidden_size == 8192
    assert spec.num_moe_layers == 48 and not spec.tie_word_embeddings
    assert any("text_config" in note for note in ingested.notes)


def test_llama_4_read_flat_needs_no_extra_field() -> None:
    flat = dict(hf_preset_config("llama-4-maverick-17b-128e")["text_config"])
    spec = spec_from_hf_config(flat).spec
    assert spec.moe is not None and spec.num_moe_layers == 24 and spec.ffn_hidden_size == 16384


def test_llama_4_moe_layers_list_wins_over_the_step() -> None:
    flat = dict(hf_preset_config("llama-4-scout-17b-16e")["text_config"], moe_layers=[0, 2])
    spec = spec_from_hf_config(flat).spec
    assert [spec.is_moe_layer(i) for i in range(4)] == [True, False, True, False]


@pytest.mark.parametrize(("preset", "score"), [
    ("llama-4-scout-17b-16e", "sigmoid"), ("deepseek-v3", "sigmoid"), ("deepseek-v2", "softmax"),
    ("kimi-linear-48b-a3b-instruct", "sigmoid"), ("mixtral-8x7b", "softmax"),
    ("gpt-oss-20b", "softmax"),
])
def test_the_router_score_function_is_read(preset: str, score: str) -> None:
    """'scoring_func' (DeepSeek), 'moe_router_activation_func' (Kimi Linear), and Llama 4's
    sigmoid router, which its config does not name."""
    moe = spec_from_hf_config(hf_preset_config(preset)).spec.moe
    assert moe is not None and moe.router_score_function == score


def test_an_unknown_router_score_function_is_refused() -> None:
    config = dict(hf_preset_config("deepseek-v3"), scoring_func="sqrtsoftplus")
    with pytest.raises(InvalidSpecError, match="sqrtsoftplus"):
        spec_from_hf_config(config)


def test_gemma_families_are_gated_tied_and_post_normed() -> None:
    for preset, norms in (("gemma-7b", 2), ("gemma-2-9b", 4), ("gemma-3-27b-it", 4)):
        ingested = spec_from_hf_config(hf_preset_config(preset))
        spec = ingested.spec
        assert spec.mlp == MlpKind.SWIGLU and spec.tie_word_embeddings, preset
        assert spec.num_layer_norms == norms, preset
    gemma3 = spec_from_hf_config(hf_preset_config("gemma-3-27b-it"))
    assert gemma3.spec.qk_norm and gemma3.spec.vocab_size == 262_208
    assert any("'text_config.vocab_size' absent" in note for note in gemma3.notes)


def test_command_r_is_tied_with_one_norm_and_a_parallel_residual() -> None:
    spec = spec_from_hf_config(hf_preset_config("command-r-v01")).spec
    assert spec.tie_word_embeddings and spec.parallel_residual and spec.num_layer_norms == 1


def test_gpt_oss_reads_experts_from_intermediate_size() -> None:
    ingested = spec_from_hf_config(hf_preset_config("gpt-oss-20b"))
    moe = ingested.spec.moe
    assert moe is not None and (moe.num_experts, moe.top_k) == (32, 4)
    assert moe.expert_ffn_hidden_size == 2880 and ingested.spec.attention_bias
    assert any("not counted" in note for note in ingested.notes)


def test_phi_4_is_read_as_phi3_with_grouped_query_attention() -> None:
    ingested = spec_from_hf_config(hf_preset_config("phi-4"))
    spec = ingested.spec
    assert ingested.model_type == "phi3" and spec.attention == AttentionKind.GQA
    assert (spec.num_layers, spec.hidden_size, spec.kv_heads) == (40, 5120, 10)
    assert spec.mlp == MlpKind.SWIGLU and not spec.tie_word_embeddings


def test_granite_keeps_its_own_tied_embeddings() -> None:
    spec = spec_from_hf_config(hf_preset_config("granite-3.3-8b-instruct")).spec
    assert spec.tie_word_embeddings and spec.attention == AttentionKind.GQA
    untied = dict(hf_preset_config("granite-3.3-8b-instruct"), tie_word_embeddings=False)
    assert not spec_from_hf_config(untied).spec.tie_word_embeddings


def test_olmo_1_norms_have_no_parameters() -> None:
    ingested = spec_from_hf_config(hf_preset_config("olmo-1b-hf"))
    assert ingested.spec.norm == NormKind.LAYERNORM_NO_AFFINE
    assert ingested.spec.tie_word_embeddings
    assert any("without scale or bias" in note for note in ingested.notes)
    olmo2 = spec_from_hf_config(hf_preset_config("olmo-2-1124-13b")).spec
    assert olmo2.norm == NormKind.RMSNORM


def test_inconsistent_heads_are_rejected_with_the_values() -> None:
    config = dict(hf_preset_config("llama-3.1-8b"), num_key_value_heads=5)
    with pytest.raises(InvalidSpecError, match="num_kv_heads=5"):
        spec_from_hf_config(config)


def test_non_object_config_is_rejected() -> None:
    with pytest.raises(InvalidSpecError):
        spec_from_hf_config([1, 2])  # type: ignore[arg-type]
