"""DeepSpeed ZeRO-3's runtime properties: gathers hide only as far as its prefetch bucket
reaches (the coalesced runtime), and its 2021 releases issue one collective per gathered
parameter tensor, keep the small ones, all-reduce gradient buckets, gather again for a
recomputed forward and pay host work per rank of the group."""

from types import SimpleNamespace

import pytest

from api_schemas import (
    DType,
    MlpKind,
    ModelSpec,
    NormKind,
    ParallelConfig,
    RecomputeMode,
    TrainingSpec,
    Zero3Collectives,
)
from models.catalog.presets import cluster_preset
from models.core.collectives import Collective
from models.core.collectives.fabric import fabric_of
from models.core.deepspeed_2021 import (
    PERSISTENCE_THRESHOLD,
    VIEW_OP_S,
    forward_step_ids,
    gather_issue_s,
    gathered_tensors,
    gradient_buckets,
    layer_tensor_numels,
    persistent_regather_s,
    persistent_tensors,
)
from models.core.step_time.deepspeed_zero3_2021 import layer_exposed_s
from models.core.step_time.exposure import deepspeed_prefetch_share
from models.core.step_time.groups import axis_groups
from models.core.traffic import TrafficAxis, step_traffic
from models.core.traffic.items import Phase
from models.core.traffic.layer import DEEPSPEED_MODULES_PER_LAYER, zero3_unit_calls

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


def test_2021_deepspeed_gathers_each_tensor_above_the_persistence_threshold() -> None:
    """v0.3.13 `_allgather_param` runs per parameter, but tensors under
    `stage3_param_persistence_threshold` (100,000 elements) stay gathered: of a GPT-175B layer
    with linear biases (4 weights, 4 biases, 2 x 2 LayerNorm tensors) the 4 weights are
    gathered at each use and the 8 others (at most 4h = 49,152 elements) persist."""
    biased = GPT_175B.model_copy(update={"linear_bias": True})
    assert PERSISTENCE_THRESHOLD == 100_000
    assert sorted(layer_tensor_numels(biased))[-4:] == [
        12288**2, 3 * 12288**2, 4 * 12288**2, 4 * 12288**2]
    assert gathered_tensors(biased) == 4 and persistent_tensors(biased) == 8
    assert persistent_tensors(GPT_175B) == 4
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
    # 4 calls per unit pass where the coalesced runtime issues one (the embedding and head
    # units are priced as layers of the same shape).
    assert per_parameter[0] == 4 * coalesced[0]
    assert per_parameter[1] == pytest.approx(coalesced[1], rel=1e-6)


def test_2021_deepspeed_all_reduces_gradients_in_flat_buckets() -> None:
    """With `contiguous_gradients` off (the stage-3 default to v0.4.4) the gradients are
    all-reduced in flat 500M-element buckets in 16-bit: a 175B layer's 1.81B parameters in 4
    calls per micro-batch; the coalesced runtime reduce-scatters them once per unit."""
    training = TrainingSpec(global_batch_size=64, sequence_length=2048,
                            zero3_collectives=Zero3Collectives.PER_PARAMETER)
    cluster = cluster_preset("a100-sxm4-80gb", num_nodes=8)
    items = step_traffic(GPT_175B, training=training, parallel=ParallelConfig(
        dp=64, zero_stage=3), cluster=cluster)
    reduces = [i for i in items.of_axis(TrafficAxis.DP) if "grad" in i.name]
    assert {i.collective for i in reduces} == {Collective.ALL_REDUCE}
    assert gradient_buckets(12 * 12288**2) == 4


def test_the_recomputed_forward_gathers_again_only_under_full_recompute() -> None:
    """DeepSpeed's checkpointing re-runs each layer's forward in backward, whose hooks fetch
    the released weights again: a third gather pass per layer under full recomputation, none
    without it."""
    training = TrainingSpec(global_batch_size=64, sequence_length=2048,
                            zero3_collectives=Zero3Collectives.PER_PARAMETER)
    cluster = cluster_preset("a100-sxm4-80gb", num_nodes=8)

    def recompute_gathers(recompute: RecomputeMode) -> int:
        items = step_traffic(GPT_175B, training=training, parallel=ParallelConfig(
            dp=64, zero_stage=3, recompute=recompute), cluster=cluster)
        return sum(i.calls_per_step for i in items.of_axis(TrafficAxis.DP)
                   if i.name.endswith("recompute.param_all_gather"))

    assert recompute_gathers(RecomputeMode.FULL) == 96 * 4
    assert recompute_gathers(RecomputeMode.NONE) == 0


def test_host_work_of_the_list_form_collectives_grows_with_the_group() -> None:
    """One view op (3.3 us, PyTorch's operator benchmark of `split` on CUDA) and one copy
    launch (3.8 us) per rank for each per-parameter gather; three views and a copy per rank
    and persistent tensor for the step's re-gather. At 1,536 ranks: 10.9 ms per gather, and
    for GPT-175B with biases (768 persistent tensors) 16.2 s per step, twice that of 768
    ranks."""
    assert VIEW_OP_S == pytest.approx(3.333e-6, abs=0.05e-6)
    assert gather_issue_s(1536) == pytest.approx(1536 * 7.1e-6, rel=1e-9)
    biased = GPT_175B.model_copy(update={"linear_bias": True})
    step = persistent_regather_s(biased, layers=96, tp=1, group_size=1536)
    assert step == pytest.approx(96 * 8 * 1536 * (3 * 3.3e-6 + 3.8e-6), rel=1e-9)
    assert step == pytest.approx(16.16, abs=0.01)
    assert persistent_regather_s(biased, layers=96, tp=1, group_size=768) == pytest.approx(
        step / 2)


def test_the_prefetch_counter_runs_one_behind_the_trace() -> None:
    """The DeepSpeed thread "Performance Degradation with ZERO Stage 3"
    (github.com/deepspeedai/DeepSpeed/issues/1069, May 2021): the root's sub-module hook
    counts step 1, the reset hook registered after it (v0.3.14, PR #867) sets it back to 0,
    and every later module of the forward reads its trace position minus one, so none
    prefetches; the root alone reads its own step."""
    steps = forward_step_ids(8)
    assert steps == [0, 0, 1, 2, 3, 4, 5, 6]
    assert [k for k, step in enumerate(steps) if step == k] == [0]


def test_the_2021_runtime_exposes_every_gather_and_hides_the_gradient_all_reduces() -> None:
    """With nothing prefetched each of a GPT-175B layer's 4 weight gathers over 768 ranks is
    issued at its module's hook and waited for: the forward, the recomputed forward and the
    backward each expose 4 x (host issue + wire) whatever the compute beside them, 4 x (5.45 +
    3.84 + 4.53) ms = 55.2 ms (768 x 7.1 us of host work, 767 ring steps of 5 us, a 906 MB
    weight at 200 GB/s per GPU); the backward's gradient all-reduces run beside its compute
    and show only past it."""
    cluster = cluster_preset("a100-sxm4-80gb", num_nodes=96)
    training = TrainingSpec(global_batch_size=1536, sequence_length=2048,
                            zero3_collectives=Zero3Collectives.PER_PARAMETER)
    parallel = ParallelConfig(dp=768, zero_stage=3, micro_batch_size=2,
                              recompute=RecomputeMode.FULL)
    lctx = axis_groups(parallel, gpus_per_node=8).layer_context(
        GPT_175B, training, parallel, fabric_of(cluster))
    calls = zero3_unit_calls(lctx, dense_params=12 * 12288**2, expert_params=0)
    gather = next(c for c in calls if c.phase == Phase.FORWARD)
    reduce_s = sum(c.time_s for c in calls if c.collective == Collective.ALL_REDUCE)
    whole = gather.count * (gather_issue_s(768) + gather.cost.time_s)
    assert gather.count == 4 and whole == pytest.approx(0.0552, abs=5e-4)

    def exposed(window_s: float) -> tuple[float, float, float]:
        lc = SimpleNamespace(recompute_full_s=window_s, times=SimpleNamespace(
            forward_s=window_s, backward_input_s=window_s / 2, backward_weight_s=window_s / 2))
        return layer_exposed_s(calls, lc)  # type: ignore[arg-type]

    assert exposed(1.0) == pytest.approx((whole, whole, whole))
    assert exposed(0.0) == pytest.approx((whole, whole + reduce_s, whole))
