"""The attention kernel a runtime names (`TrainingSpec.attention_kernel`): each generation of
fused attention at the share of the 16-bit peak its kernel benchmark measured."""

import dataclasses

import pytest

from api_schemas import AttentionKernel, ElementwiseFusion, TrainingSpec
from models.catalog.kernels import (
    attention_time_s,
    calibrated_profile,
    fused_attention_frac,
    profile_for,
)
from models.catalog.presets import gpu_preset, model_preset
from models.core.compute import ComputeContext, _attention_core, layer_compute
from models.errors import InvalidSpecError

K = AttentionKernel


def _tflops(gpu_id: str, kernel: AttentionKernel | None, seq_len: int = 16384) -> float:
    """Forward + backward attention TFLOP/s the model gives at `seq_len` tokens."""
    flop = 1e15
    return flop / attention_time_s(flop, seq_len=seq_len, gpu=gpu_preset(gpu_id), flash=True,
                                   kernel=kernel) / 1e12


def test_the_2022_kernels_reproduce_their_printed_throughput() -> None:
    """FlashAttention-2 repository figures (head dim 128, no causal mask, 16k tokens, forward
    + backward): A100 Triton 95 TFLOP/s and FlashAttention 83; H100 FlashAttention 139, which
    also stands for the Triton kernel there (no H100 Triton bar)."""
    assert _tflops("a100-sxm4-80gb", K.TRITON_FLASH_ATTENTION) == pytest.approx(95, rel=0.005)
    assert _tflops("a100-sxm4-80gb", K.FLASH_ATTENTION_1) == pytest.approx(83, rel=0.005)
    assert _tflops("h100-sxm5-80gb", K.FLASH_ATTENTION_1) == pytest.approx(139, rel=0.005)
    assert _tflops("h100-sxm5-80gb", K.TRITON_FLASH_ATTENTION) == pytest.approx(139, rel=0.005)
    # The newer kernels are the profile's own levels: FlashAttention-2 (203 on A100, 338 on
    # H100 in the same figures) and Transformer Engine's fused level.
    assert _tflops("a100-sxm4-80gb", K.FLASH_ATTENTION_2) == pytest.approx(203, rel=0.01)
    assert _tflops("h100-sxm5-80gb", K.FLASH_ATTENTION_2) == pytest.approx(338, rel=0.02)
    h100 = profile_for(gpu_preset("h100-sxm5-80gb"))
    assert fused_attention_frac(h100, K.TRANSFORMER_ENGINE) == h100.flash_attention_frac
    assert _tflops("h100-sxm5-80gb", None) == _tflops("h100-sxm5-80gb", K.TRANSFORMER_ENGINE)


def test_each_generation_is_slower_than_the_next_at_every_length() -> None:
    for gpu_id in ("a100-sxm4-80gb", "h100-sxm5-80gb"):
        for seq_len in (512, 2048, 32768):
            first = _tflops(gpu_id, K.FLASH_ATTENTION_1, seq_len)
            second = _tflops(gpu_id, K.FLASH_ATTENTION_2, seq_len)
            assert first < second <= _tflops(gpu_id, K.TRANSFORMER_ENGINE, seq_len)


def test_a_kernel_without_a_measurement_on_the_family_is_refused_by_name() -> None:
    with pytest.raises(InvalidSpecError) as info:
        _tflops("b200-sxm-180gb", K.TRITON_FLASH_ATTENTION)
    assert info.value.field == "training.attention_kernel"
    assert "triton_flash_attention" in info.value.detail
    # FlashAttention-2 falls back to the fused level where the family has no measurement of
    # it, as PyTorch SDPA does.
    b200 = profile_for(gpu_preset("b200-sxm-180gb"))
    assert fused_attention_frac(b200, K.FLASH_ATTENTION_2) == b200.flash_attention_frac


def test_an_attention_calibration_scales_the_2022_levels() -> None:
    profile = profile_for(gpu_preset("a100-sxm4-80gb"))
    slower = calibrated_profile(profile, 1.0, attention_efficiency_scale=0.8)
    for kernel in K:
        assert fused_attention_frac(slower, kernel) == pytest.approx(
            0.8 * fused_attention_frac(profile, kernel))


def test_the_recipe_kernel_reaches_the_layer_and_only_its_attention() -> None:
    """A Llama 3.1 8B layer on H100 at 8k tokens: naming the Triton kernel lengthens the
    attention core by the ratio of the levels and leaves the GEMMs alone; unnamed, a fused
    runtime takes Transformer Engine's level and an eager one FlashAttention-2's."""
    spec = model_preset("llama-3.1-8b")
    gpu = gpu_preset("h100-sxm5-80gb")

    def ctx(kernel: AttentionKernel | None, fusion: ElementwiseFusion) -> ComputeContext:
        return ComputeContext(gpu=gpu, seq_len=8192, micro_batch_size=1,
                              attention_kernel=kernel, elementwise_fusion=fusion)

    def forward_s(kernel: AttentionKernel | None, fusion: ElementwiseFusion) -> float:
        return layer_compute(spec, 0, ctx(kernel, fusion)).times.forward_s

    fused = ElementwiseFusion.FUSED
    profile = profile_for(gpu)
    attention_te = forward_s(K.TRANSFORMER_ENGINE, fused) - forward_s(None, fused)
    assert attention_te == 0.0
    slower = forward_s(K.TRITON_FLASH_ATTENTION, fused) - forward_s(None, fused)
    # The extra time is the attention core's, at the ratio of the two levels.
    core_te, _ = _attention_core(spec, ctx(None, fused))
    ratio = profile.flash_attention_frac / profile.triton_attention_frac
    assert core_te > 0.0
    assert slower == pytest.approx(core_te * (ratio - 1.0), rel=1e-9)
    eager = ElementwiseFusion.EAGER
    assert forward_s(None, eager) == forward_s(K.FLASH_ATTENTION_2, eager)
    training = TrainingSpec(global_batch_size=8, sequence_length=8192,
                            attention_kernel="triton_flash_attention")
    assert training.attention_kernel == K.TRITON_FLASH_ATTENTION
    assert TrainingSpec(global_batch_size=8, sequence_length=8192).attention_kernel is None
    # Contexts are memo keys: two alike but for the kernel must not share an entry.
    named = ComputeContext(gpu=gpu, seq_len=8192, micro_batch_size=1,
                           attention_kernel=K.FLASH_ATTENTION_1)
    assert named != dataclasses.replace(named, attention_kernel=None)
