"""Per-rank weights of the traffic model: counted by core.params, placed by core.layout."""

import pytest

from api_schemas import ParallelConfig, TrainingSpec
from models.catalog.presets import model_preset
from models.core.layout import pipeline_layout
from models.core.memory import stage_memory
from models.core.params import count_parameters, layer_params
from models.core.traffic import layer_weights, stage_layers, stage_weights

CONFIGS = [
    ("deepseek-v3", ParallelConfig(tp=2, pp=16, dp=8, ep=16, schedule="dualpipe",
                                   layers_per_stage=(3,) + (4,) * 13 + (3, 3))),
    ("gpt-175b", ParallelConfig(tp=8, pp=8, dp=2)),
    ("qwen3-235b-a22b", ParallelConfig(tp=4, pp=4, dp=8, ep=8,
                                       layers_per_stage=(23, 24, 24, 23))),
    ("gpt-neox-20b", ParallelConfig(tp=4, pp=4, dp=2, vpp=2, schedule="interleaved_1f1b")),
    ("gpt2", ParallelConfig(tp=2, pp=2, dp=1, vpp=2, schedule="zbv")),
]


@pytest.mark.parametrize(("preset", "parallel"), CONFIGS, ids=[c[0] for c in CONFIGS])
def test_stage_weights_equal_the_memory_ledgers_weights(preset: str,
                                                        parallel: ParallelConfig) -> None:
    """The gradients the traffic model reduces are the weights the memory ledger holds."""
    spec = model_preset(preset)
    training = TrainingSpec(global_batch_size=64 * parallel.dp, sequence_length=4096)
    for layout, held in zip(pipeline_layout(spec, parallel), stage_weights(spec, parallel),
                            strict=True):
        memory = stage_memory(spec, training, parallel, layout, num_micro_batches=64)
        weights_bytes = sum(c.bytes for c in memory.components if c.kind == "parameters")
        params = held.dense_params + held.expert_params
        assert weights_bytes == params * training.param_dtype.num_bytes


@pytest.mark.parametrize("preset", ["deepseek-v3", "llama-3.1-70b", "mixtral-8x7b"])
def test_unsharded_stages_add_up_to_the_parameter_count(preset: str) -> None:
    """With no TP or EP the ranks hold the whole model once, MTP modules included."""
    spec = model_preset(preset)
    counts = count_parameters(spec)
    pp = 2 if spec.num_layers % 2 == 0 else 1
    held = stage_weights(spec, ParallelConfig(pp=pp, dp=1))
    assert sum(s.dense_params + s.expert_params for s in held) == counts.total + counts.mtp_total
    assert held[-1].num_mtp_modules == spec.num_mtp_layers


def test_tied_head_rank_keeps_its_own_copy_and_positions_are_replicated() -> None:
    """GPT-175B (V = 51200, h = 12288, 2048 learned positions) on tp = 8, pp = 8: the first
    rank adds a vocab shard and the whole position table, the last a vocab shard (its copy of
    the tied embedding) and the final LayerNorm (2 h)."""
    spec = model_preset("gpt-175b")
    held = stage_weights(spec, ParallelConfig(tp=8, pp=8, dp=1))
    h, vocab_shard = 12288, 51200 // 8 * 12288
    assert held[0].dense_params - held[1].dense_params == vocab_shard + 2048 * h
    assert held[7].dense_params - held[1].dense_params == vocab_shard + 2 * h
    assert (held[0].num_embeddings, held[0].num_heads, held[7].num_heads) == (1, 0, 1)


def test_interleaved_ranks_split_their_layer_counts_over_chunks() -> None:
    """Rank r holds chunks r and r + p; an uneven `layers_per_stage` is spread over both."""
    spec = model_preset("gpt-neox-20b").model_copy(update={"num_layers": 16})
    p = ParallelConfig(pp=2, dp=1, vpp=2, schedule="interleaved_1f1b", layers_per_stage=(6, 10))
    assert stage_layers(spec, p) == ((0, 1, 2, 8, 9, 10), (3, 4, 5, 6, 7, 11, 12, 13, 14, 15))


def test_layer_weights_are_the_parameter_modules_count() -> None:
    spec = model_preset("deepseek-v3")
    for index in (0, 5):
        weights, params = layer_weights(spec, layer_index=index), layer_params(spec, index)
        assert weights.dense_total == params.dense_part
        assert weights.routed_experts == params.routed_experts
        assert weights.total == params.total
