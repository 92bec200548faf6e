"""Activation bytes: Korthikanti et al. 2022 Table 2 and the stated adaptations."""

import dataclasses

import pytest

from api_schemas.parallel import RecomputeMode, RecomputeModule
from models.catalog.presets import KORTHIKANTI_2022_TABLE3, model_preset
from models.core.activations import (
    LayerActivationContext,
    head_activation_bytes,
    layer_activation_bytes,
)


def _gpt_layer(name: str, **kw: object):
    ctx = LayerActivationContext(seq_len=2048, micro_batch_size=1, dropout=True,
                                 flash_attention=False, **kw)  # type: ignore[arg-type]
    return layer_activation_bytes(model_preset(name), 0, ctx)


@pytest.mark.parametrize(("name", "layers", "h", "a"), KORTHIKANTI_2022_TABLE3)
def test_layer_activation_bytes_matches_KOR22_table2(name: str, layers: int, h: int,
                                                     a: int) -> None:
    s, b, t = 2048, 1, 8
    assert _gpt_layer(name).total_bytes == pytest.approx(s * b * h * (34 + 5 * a * s / h), abs=1)
    assert _gpt_layer(name, tp=t).total_bytes == pytest.approx(
        s * b * h * (10 + 24 / t + 5 * a * s / (h * t)), abs=1)
    assert _gpt_layer(name, tp=t, sequence_parallel=True).total_bytes == pytest.approx(
        s * b * h * (34 / t + 5 * a * s / (h * t)), abs=1)
    assert _gpt_layer(name, tp=t).stored_bytes(RecomputeMode.SELECTIVE) == pytest.approx(
        s * b * h * (10 + 24 / t), abs=1)
    assert _gpt_layer(name, tp=t, sequence_parallel=True).stored_bytes(
        RecomputeMode.SELECTIVE) == pytest.approx(s * b * h * 34 / t, abs=1)
    assert _gpt_layer(name).stored_bytes(RecomputeMode.FULL) == 2 * s * b * h


def test_selective_recompute_saves_KOR22_70_percent_for_gpt3() -> None:
    # Sec. 5: 5as/h = 80 for GPT-3, selective recompute saves 70% of activation memory.
    layer = _gpt_layer("gpt-175b", tp=8, sequence_parallel=True)
    saving = 1 - layer.stored_bytes(RecomputeMode.SELECTIVE) / layer.total_bytes
    assert round(saving, 2) == 0.70


def test_flash_attention_removes_the_s_squared_term() -> None:
    spec = model_preset("llama-3.1-70b")
    flash = layer_activation_bytes(spec, 0, LayerActivationContext(seq_len=8192,
                                                                   micro_batch_size=1))
    dense = layer_activation_bytes(spec, 0, LayerActivationContext(seq_len=8192,
                                                                   micro_batch_size=1,
                                                                   flash_attention=False))
    assert flash.scores_bytes == 0
    assert dense.scores_bytes == 2 * 64 * 8192 * 8192
    assert flash.total_bytes < dense.total_bytes


def test_gqa_stores_smaller_k_and_v() -> None:
    gqa = model_preset("llama-3.1-70b")
    mha = gqa.model_copy(update={"num_kv_heads": None, "attention": "mha"})
    ctx = LayerActivationContext(seq_len=4096, micro_batch_size=1)
    diff = (layer_activation_bytes(mha, 0, ctx).attention_bytes
            - layer_activation_bytes(gqa, 0, ctx).attention_bytes)
    # K and V shrink from 64 to 8 heads of 128: 2 tensors x 2 bytes x 56 x 128 per token.
    assert diff == 4096 * 2 * 2 * 56 * 128


def test_context_parallel_divides_every_term() -> None:
    spec = model_preset("llama-3.1-8b")
    one = layer_activation_bytes(spec, 0, LayerActivationContext(seq_len=32768,
                                                                 micro_batch_size=1))
    four = layer_activation_bytes(spec, 0, LayerActivationContext(seq_len=32768,
                                                                  micro_batch_size=1, cp=4))
    assert four.total_bytes == pytest.approx(one.total_bytes / 4, abs=4)


def test_moe_routed_tokens_scale_with_top_k_over_tp_not_ep() -> None:
    spec = model_preset("mixtral-8x7b")
    base = LayerActivationContext(seq_len=4096, micro_batch_size=1, tp=2,
                                  sequence_parallel=True)
    skew = LayerActivationContext(seq_len=4096, micro_batch_size=1, tp=2,
                                  sequence_parallel=True, moe_load_imbalance=2.0)
    balanced = layer_activation_bytes(spec, 0, base).mlp_bytes
    skewed = layer_activation_bytes(spec, 0, skew).mlp_bytes
    # Per token of the sequence: shared input 2h/t and fp32 router probabilities 4E/t, then
    # top-k x etp / tp routed copies, each with input 2h and SwiGLU 6f (the expert output is
    # not kept: Megatron-Core applies the probabilities inside the activation).
    s, h, f, k, e, t = 4096, 4096, 14336, 2, 8, 2
    copies = k * 1 / t
    expected = s * ((2 * h + 4 * e) / t + copies * (2 * h + 6 * f))
    assert balanced == pytest.approx(expected, rel=1e-9)
    assert skewed - balanced == pytest.approx(s * copies * (2 * h + 6 * f), rel=1e-9)
    kept = layer_activation_bytes(spec, 0, dataclasses.replace(
        base, moe_keep_expert_outputs=True)).mlp_bytes
    assert kept - balanced == pytest.approx(s * copies * 2 * h, rel=1e-9)


def test_fp8_storage_shrinks_mlp_inputs() -> None:
    spec = model_preset("kimi-k2-instruct")
    plain = LayerActivationContext(seq_len=4096, micro_batch_size=1)
    fp8 = LayerActivationContext(seq_len=4096, micro_batch_size=1, fp8_storage=True)
    assert (layer_activation_bytes(spec, 5, fp8).mlp_bytes
            < 0.75 * layer_activation_bytes(spec, 5, plain).mlp_bytes)


def test_head_activation_matches_KOR22_final_terms() -> None:
    spec = model_preset("gpt-175b")
    ctx = LayerActivationContext(seq_len=2048, micro_batch_size=1, tp=8)
    s, b, h, v, t = 2048, 1, 12288, 51200, 8
    assert head_activation_bytes(spec, ctx) == pytest.approx(4 * s * b * h / t * (1 + v / h),
                                                             abs=1)


def test_moe_down_projection_recompute_drops_the_expert_outputs_only() -> None:
    # Kimi K2 Sec. 2.4.3: recomputing the MoE down-projections frees the expert outputs the
    # probability-weighted combine keeps; the same bytes are absent when the outputs are not
    # kept at all.
    from api_schemas.parallel import RecomputeModule as M

    spec = model_preset("kimi-k2-instruct")
    ctx = LayerActivationContext(seq_len=4096, micro_batch_size=1, moe_keep_expert_outputs=True)
    layer = layer_activation_bytes(spec, 5, ctx)
    base = layer.stored_bytes(RecomputeMode.SELECTIVE, (M.LAYERNORM,))
    down = layer.stored_bytes(RecomputeMode.SELECTIVE, (M.LAYERNORM, M.MOE_DOWN_PROJ))
    copies = spec.moe.top_k if spec.moe else 0
    assert base - down == 4096 * copies * 2 * spec.hidden_size
    dropped = layer_activation_bytes(spec, 5, LayerActivationContext(
        seq_len=4096, micro_batch_size=1, moe_keep_expert_outputs=False))
    assert dropped.stored_bytes(RecomputeMode.SELECTIVE, (M.LAYERNORM,)) == down


def test_memory_efficient_norms_keep_their_outputs_not_their_inputs() -> None:
    # A norm that keeps its output (Apex FusedRMSNorm(memory_efficient=True)) drops its input
    # where the next GEMM keeps that output in 16 bits at the same shard: 2 x 2h / t per token.
    spec = model_preset("llama-3.1-70b")
    base = LayerActivationContext(seq_len=4096, micro_batch_size=1, tp=8,
                                  sequence_parallel=True)
    plain = layer_activation_bytes(spec, 0, base)
    lean = layer_activation_bytes(spec, 0, dataclasses.replace(base, norm_saves_output=True))
    norm_inputs = 2 * 4096 * 2 * spec.hidden_size // 8
    assert plain.total_bytes - lean.total_bytes == norm_inputs
    assert lean.norm_bytes == 0
    # Recomputing the norm output (selective 'layernorm') needs the input again.
    modules = (RecomputeModule.LAYERNORM,)
    assert lean.stored_bytes(RecomputeMode.SELECTIVE, modules) == \
        plain.stored_bytes(RecomputeMode.SELECTIVE, modules)
    # Full recomputation keeps the layer input either way.
    assert lean.stored_bytes(RecomputeMode.FULL) == plain.stored_bytes(RecomputeMode.FULL)
    # FP8 GEMM inputs (or a gathered sequence) are not the norm's 16-bit output: kept.
    fp8 = dataclasses.replace(base, fp8_compute=True)
    assert layer_activation_bytes(spec, 0, dataclasses.replace(fp8, norm_saves_output=True)) \
        .total_bytes == layer_activation_bytes(spec, 0, fp8).total_bytes
    gathered = dataclasses.replace(base, gathered_inputs_saved=True)
    assert layer_activation_bytes(
        spec, 0, dataclasses.replace(gathered, norm_saves_output=True)).norm_bytes == \
        layer_activation_bytes(spec, 0, gathered).norm_bytes
