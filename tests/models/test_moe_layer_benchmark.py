"""The MoE block against Megatron-LM's own MoE-layer benchmark (nothing fitted on it).

Source: NVIDIA/Megatron-LM `tests/functional_tests/test_cases/common/moe_perf/baseline.json`
(commit cf39a4ddcf, 2025-12-16) with the cases of `test_cases.py` and the harness of
`__main__.py` in the same folder: one `MoELayer` (TE grouped GEMM, fused permute and router,
force-balanced routing) on 8 H100s, TP 1, EP 8, sequence 4096, micro-batch 1; CUDA-event
forward and backward times averaged over the measured iterations. The harness does not pass
`moe_shared_expert_intermediate_size` to the layer, so the DeepSeek proxy has no shared
expert. The alltoall rows use `MoEAlltoAllTokenDispatcher`; the DeepEP rows the flex
dispatcher with DeepEP.
"""

import pytest

from api_schemas import (
    DType,
    MlpKind,
    ModelSpec,
    MoeDispatcher,
    MoESpec,
    NormKind,
    ParallelConfig,
    TrainingSpec,
)
from models.catalog.presets import cluster_preset
from models.core.collectives import fabric_of
from models.core.compute import ComputeContext, moe_block_times
from models.core.step_time import axis_groups
from models.core.traffic.items import Phase
from models.core.traffic.layer import expert_calls

MEASURED_MS = {  # (proxy, dispatcher, precision): (forward, backward), baseline.json
    ("mixtral", "alltoall", "bf16"): (4.327, 7.684),
    ("mixtral", "alltoall", "fp8"): (3.788, 6.618),
    ("deepseek", "alltoall", "bf16"): (7.119, 10.483),
    ("deepseek", "alltoall", "fp8"): (7.609, 10.126),
    ("deepseek", "deepep", "bf16"): (5.682, 9.055),
    ("deepseek", "deepep", "fp8"): (6.035, 8.602),
}

CLUSTER = cluster_preset("h100-sxm5-80gb", num_nodes=1)


def _proxy(name: str) -> ModelSpec:
    if name == "mixtral":
        h, moe = 4096, MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=14336)
    else:
        h, moe = 7168, MoESpec(num_experts=32, top_k=8, expert_ffn_hidden_size=2048,
                               num_expert_groups=8, topk_groups=4)
    return ModelSpec(name=f"{name}-proxy", num_layers=1, hidden_size=h, num_attention_heads=8,
                     ffn_hidden_size=4 * h, mlp=MlpKind.SWIGLU, norm=NormKind.RMSNORM,
                     vocab_size=32000, moe=moe)


def model_ms(name: str, dispatcher: str, precision: str) -> tuple[float, float]:
    """(forward, backward) of the MoE block plus its dispatch and combine, in ms."""
    spec = _proxy(name)
    dtype = DType.FP8 if precision == "fp8" else DType.BF16
    ctx = ComputeContext(gpu=CLUSTER.gpu, seq_len=4096, micro_batch_size=1, ep=8,
                         compute_dtype=dtype, moe_dispatcher=MoeDispatcher(dispatcher))
    block = moe_block_times(spec, ctx)
    training = TrainingSpec(global_batch_size=8, sequence_length=4096, compute_dtype=dtype,
                            moe_dispatcher=dispatcher)
    parallel = ParallelConfig(dp=8, ep=8)
    lctx = axis_groups(parallel, gpus_per_node=8).layer_context(spec, training, parallel,
                                                                fabric_of(CLUSTER))
    calls = expert_calls(lctx)
    comm_f = sum(c.time_s for c in calls if c.phase == Phase.FORWARD)
    comm_b = sum(c.time_s for c in calls if c.phase == Phase.BACKWARD)
    return (1e3 * (block.forward_s + comm_f),
            1e3 * (block.backward_input_s + block.backward_weight_s + comm_b))


@pytest.mark.parametrize("case", sorted(MEASURED_MS))
def test_moe_layer_forward_plus_backward_within_50_percent(case: tuple[str, str, str]) -> None:
    """Forward + backward of each benchmark case within 50% of the measured time. Today
    (research/CALIBRATION.md Sec. 4): BF16 +39..43% (the Hopper step-level eta of 0.61,
    refitted with the Megatron-LM README's stated TP overlap and the wait for the slowest GPU,
    is further below what an isolated MoE layer's GEMMs reach than the former 0.66, which gave
    +31..36%), FP8 +6..+10%."""
    f, b = model_ms(*case)
    measured = sum(MEASURED_MS[case])
    assert abs((f + b) / measured - 1) <= 0.50


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_deepep_beats_alltoall_as_measured(precision: str) -> None:
    """DeepEP's per-rank-deduplicated dispatch is faster than Megatron's per-assignment
    all-to-all on the DeepSeek proxy, in the benchmark and in the model."""
    measured = {d: sum(MEASURED_MS["deepseek", d, precision]) for d in ("alltoall", "deepep")}
    modelled = {d: sum(model_ms("deepseek", d, precision)) for d in ("alltoall", "deepep")}
    assert measured["deepep"] < measured["alltoall"]
    assert modelled["deepep"] < modelled["alltoall"]


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_alltoall_costs_over_deepep_what_the_benchmark_measures(precision: str) -> None:
    """The DeepSeek proxy's alltoall layer is measured 2.9 ms (BF16) and 3.1 ms (FP8) slower
    than its DeepEP layer (forward + backward). The model's difference (NCCL all-to-all of
    every assignment, and the alltoall dispatcher's two extra sorts by local expert) is
    within 25% of it: 3.4 and 3.1 ms; without the sorts it was 1.4 and 1.0 ms."""
    measured = (sum(MEASURED_MS[("deepseek", "alltoall", precision)])
                - sum(MEASURED_MS[("deepseek", "deepep", precision)]))
    model = (sum(model_ms("deepseek", "alltoall", precision))
             - sum(model_ms("deepseek", "deepep", precision)))
    assert model == pytest.approx(measured, rel=0.25)
