"""Runtime kernel fusion: eager PyTorch, torch.compile and fused kernels pay different HBM
passes for the memory-bound ops between GEMMs (models/core/runtime_passes.py `RUNTIME_PASSES`)."""

import pytest

from api_schemas import ElementwiseFusion, ParallelConfig, RecomputeModule, TrainingSpec
from models.catalog.kernels import memory_bound_time_s
from models.catalog.presets import cluster_preset, gpu_preset, model_preset
from models.core.compute import (
    ComputeContext,
    _attention_core,
    _elementwise_bytes,
    _runtime_elementwise_bytes,
    head_compute,
    layer_compute,
)
from models.core.runtime_passes import RUNTIME_PASSES
from models.core.step_time import estimate_step

F32, BF16 = 4, 2


def _ctx(fusion: ElementwiseFusion) -> ComputeContext:
    return ComputeContext(gpu=gpu_preset("h100-sxm5-80gb"), seq_len=8192, micro_batch_size=2,
                          elementwise_fusion=fusion)


def test_eager_rmsnorm_passes_follow_torchtitan_op_by_op() -> None:
    # torchtitan norms.py RMSNorm: x.float(), pow(2), mean(-1), x * rsqrt(...), type_as(x),
    # * weight; each op reads its inputs and writes its output (per-row terms negligible).
    kernels = [(BF16, F32), (F32, F32), (F32, 0), (F32, F32), (F32, BF16), (BF16, BF16)]
    assert RUNTIME_PASSES[ElementwiseFusion.EAGER]["norm"].forward == sum(
        r + w for r, w in kernels)
    # compiled: one kernel reads x and writes the output, as a fused kernel does.
    assert RUNTIME_PASSES[ElementwiseFusion.COMPILED]["norm"].forward == BF16 + BF16
    # SwiGLU: silu (r2 w2) and the product (r2 r2 w2).
    assert RUNTIME_PASSES[ElementwiseFusion.EAGER]["swiglu"].forward == 4 + 6
    # loss: .float() of bf16 logits then log_softmax in fp32.
    assert RUNTIME_PASSES[ElementwiseFusion.EAGER]["loss"].forward == (BF16 + F32) + (F32 + F32)


def test_fused_default_keeps_the_previous_counts() -> None:
    default = ComputeContext(gpu=gpu_preset("h100-sxm5-80gb"), seq_len=8192, micro_batch_size=2)
    assert default.elementwise_fusion == ElementwiseFusion.FUSED
    spec = model_preset("llama-3.1-8b")
    assert layer_compute(spec, 0, default) == layer_compute(spec, 0,
                                                            _ctx(ElementwiseFusion.FUSED))
    assert TrainingSpec(global_batch_size=8, sequence_length=4096).elementwise_fusion == \
        ElementwiseFusion.FUSED


def test_unfused_runtimes_add_exactly_their_extra_passes() -> None:
    spec = model_preset("llama-3.1-8b")
    fused, eager = _ctx(ElementwiseFusion.FUSED), _ctx(ElementwiseFusion.EAGER)
    gpu = fused.gpu
    fused_bytes = _elementwise_bytes(spec, fused, moe_layer=False)
    eager_bytes = _runtime_elementwise_bytes(spec, eager)
    # norms: 2 per layer over h elements per token, 36 bytes each in eager.
    assert eager_bytes["norms"].forward == pytest.approx(eager.tokens * 2 * spec.hidden_size * 36)
    delta_f = sum(memory_bound_time_s(eager_bytes[k].forward, gpu=gpu)
                  - memory_bound_time_s(fused_bytes[k], gpu=gpu) for k in eager_bytes)
    a, b = layer_compute(spec, 0, fused).times, layer_compute(spec, 0, eager).times
    # ... and the attention core at the PyTorch SDPA (FlashAttention-2) rate.
    core = {ctx: _attention_core(spec, ctx)[0] for ctx in (fused, eager)}
    assert b.forward_s - a.forward_s == pytest.approx(delta_f + core[eager] - core[fused])
    assert b.backward_weight_s == a.backward_weight_s  # GEMMs do not move
    compiled = layer_compute(spec, 0, _ctx(ElementwiseFusion.COMPILED)).times
    assert a.total_s < compiled.total_s < b.total_s


def test_unfused_loss_pays_the_fp32_copy_of_the_logits() -> None:
    spec = model_preset("llama-3.1-8b")
    fused, eager = _ctx(ElementwiseFusion.FUSED), _ctx(ElementwiseFusion.EAGER)
    logits = fused.tokens * spec.vocab_size
    extra = (head_compute(spec, eager).total_s - head_compute(spec, fused).total_s)
    assert extra == pytest.approx(memory_bound_time_s(logits * (14 + 22 - 24), gpu=fused.gpu))


def test_eager_step_is_slower_than_compiled_which_is_slower_than_fused() -> None:
    spec = model_preset("llama-3.1-8b")
    cluster = cluster_preset("h100-sxm5-96gb-500w", num_nodes=1)
    times = []
    for fusion in (ElementwiseFusion.FUSED, ElementwiseFusion.COMPILED, ElementwiseFusion.EAGER):
        training = TrainingSpec(global_batch_size=8, sequence_length=4096,
                                elementwise_fusion=fusion)
        times.append(estimate_step(spec, training, ParallelConfig(
            dp=8, zero_stage=3, micro_batch_size=1, recompute="full"), cluster).step_time_s)
    assert times[0] < times[1] < times[2]


def test_pytorch_sdpa_attention_runs_at_the_flashattention2_h100_rate() -> None:
    """A PyTorch-native runtime reaches attention through `scaled_dot_product_attention`,
    whose default backend is FlashAttention-2: the FlashAttention-2 repository measures
    338 TFLOP/s forward + backward (d=128, causal, 16k) on H100 SXM5, where the fused
    (cuDNN / FlashAttention-3) level of Megatron / Transformer Engine is higher. On A100 both
    are the FlashAttention-2 kernels."""
    from models.catalog.kernels import attention_time_s

    h100 = gpu_preset("h100-sxm5-80gb")
    flop = 1e15
    sdpa = flop / attention_time_s(flop, seq_len=16384, gpu=h100, flash=True, sdpa=True) / 1e12
    fused = flop / attention_time_s(flop, seq_len=16384, gpu=h100, flash=True) / 1e12
    assert sdpa == pytest.approx(338, rel=0.02)
    assert fused > 1.3 * sdpa
    a100 = gpu_preset("a100-sxm4-80gb")
    assert attention_time_s(flop, seq_len=8192, gpu=a100, flash=True, sdpa=True) == (
        attention_time_s(flop, seq_len=8192, gpu=a100, flash=True))
    spec = model_preset("llama-3.1-8b")
    times = {f: layer_compute(spec, 0, _ctx(f)).recompute_module_s for f in ElementwiseFusion}
    core = {f: t[RecomputeModule.CORE_ATTN] for f, t in times.items()}
    assert core[ElementwiseFusion.EAGER] == core[ElementwiseFusion.COMPILED]
    assert core[ElementwiseFusion.EAGER] > 1.3 * core[ElementwiseFusion.FUSED]


def test_an_attention_calibration_scales_sdpa_attention_as_well() -> None:
    """A cluster profile's `attention_efficiency_scale` (fitted on attention microbenchmarks)
    applies to every attention path, the PyTorch SDPA one included."""
    from models.catalog.kernels import attention_time_s, calibrated_profile, profile_for

    h100 = gpu_preset("h100-sxm5-80gb")
    profile = profile_for(h100)
    slower = calibrated_profile(profile, 1.0, attention_efficiency_scale=0.8)
    flop = 1e15
    for sdpa in (False, True):
        base = attention_time_s(flop, seq_len=16384, gpu=h100, flash=True, sdpa=sdpa,
                                profile=profile)
        scaled = attention_time_s(flop, seq_len=16384, gpu=h100, flash=True, sdpa=sdpa,
                                  profile=slower)
        assert scaled == pytest.approx(base / 0.8, rel=0.02)
