"""PyTorch's non-reentrant activation checkpoint stops its recomputation early
(`TrainingSpec.checkpoint_early_stop`): a wholly recomputed dense layer does not run its last
GEMM, the MLP's down projection, again."""

import pytest

from api_schemas import DType, ElementwiseFusion, TrainingSpec
from models.catalog.kernels import gemm_time_s
from models.catalog.presets import gpu_preset, model_preset
from models.core.compute import ComputeContext, layer_compute
from models.core.step_time import estimate_step
from models.core.step_time.stage import checkpoint_stops_early
from research import validate_published as vp

TORCHTITAN_70B = "torchtitan-t4-70b-256gpu-2d"


def _recompute_s(spec_name: str, early_stop: bool, layer: int = 0) -> tuple[float, float]:
    """(forward, whole-layer recomputation) of one layer at 4,096 tokens on H100, TP 2."""
    ctx = ComputeContext(gpu=gpu_preset("h100-sxm5-80gb"), seq_len=4096, micro_batch_size=1,
                         tp=2, checkpoint_early_stop=early_stop)
    lc = layer_compute(model_preset(spec_name), layer, ctx)
    return lc.times.forward_s, lc.recompute_full_s


def test_a_dense_layer_skips_its_down_projection_and_nothing_else() -> None:
    spec = model_preset("llama-3.1-8b")
    forward, whole = _recompute_s("llama-3.1-8b", early_stop=False)
    same_forward, stopped = _recompute_s("llama-3.1-8b", early_stop=True)
    assert whole == forward and same_forward == forward
    # The down projection on this rank: 4,096 tokens x (14,336 / TP 2) -> 4,096.
    down = gemm_time_s(4096, spec.hidden_size, spec.ffn_hidden_size // 2,
                       gpu=gpu_preset("h100-sxm5-80gb"), dtype=DType.BF16)
    assert forward - stopped == pytest.approx(down, rel=1e-12)
    # About a third of the layer's GEMM work (4 h f / (4 h^2 + 6 h f) for Llama's shape).
    assert 0.2 < down / forward < 0.45


def test_a_moe_layer_recomputes_its_whole_forward() -> None:
    """The last op of an MoE layer is the combine of the routed experts' outputs, which its
    backward saves: the early stop is not taken (kept whole, the conservative side)."""
    spec = model_preset("qwen3-30b-a3b")
    moe = next(i for i in range(spec.num_layers) if spec.is_moe_layer(i))
    _, whole = _recompute_s("qwen3-30b-a3b", early_stop=False, layer=moe)
    _, stopped = _recompute_s("qwen3-30b-a3b", early_stop=True, layer=moe)
    assert stopped == whole


def test_pytorch_native_runtimes_stop_early_unless_the_recipe_says_otherwise() -> None:
    base = TrainingSpec(global_batch_size=8, sequence_length=4096)
    assert not checkpoint_stops_early(base)  # fused kernels: Megatron-LM / DeepSpeed, reentrant
    for fusion in (ElementwiseFusion.EAGER, ElementwiseFusion.COMPILED):
        native = base.model_copy(update={"elementwise_fusion": fusion})
        assert checkpoint_stops_early(native)
        assert not checkpoint_stops_early(native.model_copy(
            update={"checkpoint_early_stop": False}))
    assert checkpoint_stops_early(base.model_copy(update={"checkpoint_early_stop": True}))


def test_torchtitan_70b_with_full_checkpointing_lands_on_its_printed_rate() -> None:
    """torchtitan's Llama 3 70B on 256 H100 (FSDP 32 x TP 8, full activation checkpointing
    through PyTorch's non-reentrant checkpoint, as published): 829 tokens/s per GPU printed;
    within 1% with the early stop, 3% slow with the whole forward recomputed."""
    row = next(r for r in vp.DATA["runs"] if r["id"] == TORCHTITAN_70B)
    spec, config = vp.model_of(row), vp.as_published_config(row)
    assert spec is not None and config is not None
    parallel, training = config
    assert parallel.recompute == "full" and checkpoint_stops_early(training)
    printed = row["measured"]["tokens_per_s_per_gpu"]

    def rate(recipe: TrainingSpec) -> float:
        step = estimate_step(spec, recipe, parallel, vp.row_cluster(row)).step_time_s
        return recipe.tokens_per_step / step / row["hardware"]["num_gpus"]

    assert printed == 829
    assert rate(training) == pytest.approx(printed, rel=0.01)
    whole = rate(training.model_copy(update={"checkpoint_early_stop": False}))
    assert whole == pytest.approx(printed * 0.97, rel=0.01)
