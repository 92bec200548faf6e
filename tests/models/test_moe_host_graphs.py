"""CUDA graphs of a dropless MoE layer: the captured regions (attention, router, count
preprocessing) leave the host's issue time of the layer; the expert part and the
token-count synchronisation stay (models/core/moe/host_issue.py)."""

import pytest
from pydantic import ValidationError

from api_schemas.training import CudaGraphModule, TrainingSpec
from models.catalog.presets import gpu_preset, model_preset
from models.core.compute import ComputeContext, layer_compute
from models.core.moe.host_issue import (
    GRAPHABLE_REGIONS,
    MOE_GRAPHABLE_HOST_S,
    MOE_HOST_ISSUE_S,
    MOE_HOST_LAUNCH_S,
    graphed_host_saving_s,
    moe_expert_launches,
    moe_host_issue_s,
    moe_host_sync_s,
)

B200 = gpu_preset("b200-sxm-180gb")
QWEN3_30B = model_preset("qwen3-30b-a3b")
ALL = (CudaGraphModule.ATTN, CudaGraphModule.MOE_ROUTER, CudaGraphModule.MOE_PREPROCESS)


def _ctx(modules: tuple[CudaGraphModule, ...]) -> ComputeContext:
    return ComputeContext(gpu=B200, seq_len=4096, micro_batch_size=1, ep=8,
                          cuda_graph_modules=modules)


def test_each_captured_region_is_one_graph_launch_instead_of_its_eager_share() -> None:
    """Megatron-Core's three capture regions of a dropless MoE layer each take a third of
    the fitted 2.3 ms when eager; captured, each costs one 3.8 us graph launch."""
    assert GRAPHABLE_REGIONS == ALL
    assert MOE_GRAPHABLE_HOST_S == pytest.approx(2.3e-3)
    assert graphed_host_saving_s(_ctx(())) == 0.0
    router = (CudaGraphModule.MOE_ROUTER, CudaGraphModule.MOE_PREPROCESS)
    assert graphed_host_saving_s(_ctx(router)) == pytest.approx(
        2 * (MOE_GRAPHABLE_HOST_S / 3 - MOE_HOST_LAUNCH_S))
    assert graphed_host_saving_s(_ctx(ALL)) == pytest.approx(
        MOE_GRAPHABLE_HOST_S - 3 * MOE_HOST_LAUNCH_S)


def test_graphs_shorten_the_host_issue_but_not_the_expert_launches_or_the_sync() -> None:
    """The per-expert GEMM and cast launches and the count synchronisation are outside every
    graph of a dropless layer (its expert shapes are data-dependent)."""
    eager, graphed = _ctx(()), _ctx(ALL)
    launches = moe_expert_launches(QWEN3_30B, graphed)
    assert launches == moe_expert_launches(QWEN3_30B, eager) == 16 * 2 * 1  # BF16: no casts
    assert moe_host_issue_s(QWEN3_30B, eager) == pytest.approx(
        MOE_HOST_ISSUE_S + launches * MOE_HOST_LAUNCH_S)
    assert moe_host_issue_s(QWEN3_30B, graphed) == pytest.approx(
        MOE_HOST_ISSUE_S - MOE_GRAPHABLE_HOST_S + 3 * MOE_HOST_LAUNCH_S
        + launches * MOE_HOST_LAUNCH_S)
    assert moe_host_sync_s(QWEN3_30B, graphed) == moe_host_sync_s(QWEN3_30B, eager) > 0
    assert moe_host_issue_s(model_preset("llama-3.1-8b"), graphed) == 0.0


def test_a_host_bound_moe_layer_runs_faster_with_graphs_and_a_dense_one_does_not() -> None:
    moe_index = next(i for i in range(QWEN3_30B.num_layers) if QWEN3_30B.is_moe_layer(i))
    eager = layer_compute(QWEN3_30B, moe_index, _ctx(())).times
    graphed = layer_compute(QWEN3_30B, moe_index, _ctx(ALL)).times
    assert graphed.forward_s == pytest.approx(eager.forward_s - (
        MOE_GRAPHABLE_HOST_S - 3 * MOE_HOST_LAUNCH_S))
    assert graphed.backward_input_s == eager.backward_input_s
    dense = model_preset("llama-3.1-8b")
    assert (layer_compute(dense, 0, _ctx(ALL)).times
            == layer_compute(dense, 0, _ctx(())).times)


def test_the_preprocessing_region_needs_the_router_region() -> None:
    """Megatron-Core asserts 'moe_preprocess cuda graph is only supported with moe_router
    cuda graph' (transformer_config.py)."""
    with pytest.raises(ValidationError, match="moe_preprocess"):
        TrainingSpec(global_batch_size=8, sequence_length=4096,
                     cuda_graph_modules=["attn", "moe_preprocess"])
    spec = TrainingSpec(global_batch_size=8, sequence_length=4096,
                        cuda_graph_modules=["moe_router", "moe_preprocess"])
    assert spec.cuda_graph_modules == (CudaGraphModule.MOE_ROUTER,
                                       CudaGraphModule.MOE_PREPROCESS)
