"""DeepSpeed ZeRO-3's runtime properties: gathers hide only as far as its prefetch bucket
reaches, and its 2021 releases issue one collective per parameter tensor."""

import pytest

from api_schemas import (
    DType,
    MlpKind,
    ModelSpec,
    NormKind,
    ParallelConfig,
    TrainingSpec,
    Zero3Collectives,
)
from models.catalog.presets import cluster_preset
from models.core.collectives import Collective
from models.core.step_time.exposure import deepspeed_prefetch_share
from models.core.traffic import TrafficAxis, step_traffic
from models.core.traffic.layer import DEEPSPEED_MODULES_PER_LAYER, deepspeed_parameter_tensors

GPT_175B = ModelSpec(name="gpt-175b", num_layers=96, hidden_size=12288, num_attention_heads=96,
                     ffn_hidden_size=4 * 12288, mlp=MlpKind.GELU, norm=NormKind.LAYERNORM,
                     vocab_size=51200)


def test_prefetch_reaches_50m_elements_of_each_module() -> None:
    """DeepSpeed's `stage3_prefetch_bucket_size` default is 50,000,000 elements
    (`deepspeed/runtime/zero/constants.py`, v0.3.13 to v0.5.0): a 175B layer's four modules
    of 453M parameters each are prefetched 11%; a 7B layer's (50.3M each) almost whole."""
    layer = 12 * 12288**2
    assert deepspeed_prefetch_share(layer) == pytest.approx(
        50_000_000 / (layer / DEEPSPEED_MODULES_PER_LAYER))
    assert deepspeed_prefetch_share(layer) == pytest.approx(0.110, abs=1e-3)
    assert deepspeed_prefetch_share(12 * 4096**2) > 0.99
    assert deepspeed_prefetch_share(12 * 2048**2) == 1.0


def test_2021_deepspeed_issues_one_call_per_parameter_tensor() -> None:
    """v0.3.13 `_allgather_param` / `_reduce_scatter_gradient` run per parameter: a GPT layer
    with LayerNorms and no linear biases has 4 weights and 2 x 2 norm tensors, 8 calls of
    each kind per layer pass, moving the same bytes as one coalesced call."""
    assert deepspeed_parameter_tensors(GPT_175B) == 8
    training = TrainingSpec(global_batch_size=64, sequence_length=2048, grad_dtype=DType.BF16)
    cluster = cluster_preset("a100-sxm4-80gb", num_nodes=8)
    parallel = ParallelConfig(dp=64, zero_stage=3)

    def gathers(t: TrainingSpec) -> tuple[int, int]:
        items = step_traffic(GPT_175B, training=t, parallel=parallel, cluster=cluster)
        ag = [i for i in items.of_axis(TrafficAxis.DP) if i.collective == Collective.ALL_GATHER]
        return (sum(i.calls_per_step for i in ag),
                sum(i.paper_volume_bytes_per_step for i in ag))

    coalesced = gathers(training)
    per_parameter = gathers(training.model_copy(
        update={"zero3_collectives": Zero3Collectives.PER_PARAMETER}))
    assert per_parameter[0] == 8 * coalesced[0]
    assert per_parameter[1] == pytest.approx(coalesced[1], rel=1e-6)
