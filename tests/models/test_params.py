"""Parameter counts: Megatron-LM 2021 Eq. 2 and the 15 Hugging Face fixture configs."""

import pytest

from models.catalog import MEGATRON_2021_TABLE1, model_preset
from models.params import count_parameters, layer_params

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
