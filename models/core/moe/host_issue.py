"""The host side of a dropless MoE layer: what the host issues between two token-count
synchronisations, and the GPU idle when that takes longer than the GPU's work.

Owns: the synchronisation cost (`moe_host_sync_s`), the per-expert launches of the grouped
expert GEMMs (`moe_expert_launches`), the host issue time of one MoE layer forward under the
runtime's CUDA graph capture regions (`moe_host_issue_s`, `graphed_host_saving_s`) and the
GPU idle it leaves (`moe_host_idle_s`). Must not: time GEMMs or elementwise kernels (see
`models/core/compute.py`) or communication.

Mechanism (per MoE layer forward and recomputed forward): every dropless Megatron-Core
dispatcher makes the host wait on a device-to-host copy of the token counts (all-to-all:
`d2h_event.synchronize()` at `cuda_sync_point`; flex with DeepEP: `tokens_per_expert.sum()
.item()` after the dispatch; flex with HybridEP: a host sync in the dispatch unless
`moe_expert_rank_capacity_factor` bounds the buffers; allgather: `.cpu()` of the counts),
so the host cannot run ahead past one MoE layer: after each sync the GPU queue is empty and
the layer's forward takes the longer of the host's issue of everything up to the next sync
and the GPU's execution of it. Source: Megatron-Core `megatron/core/transformer/moe/
token_dispatcher.py` (`MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize`,
`_DeepepManager.get_permuted_hidden_states_by_experts`, `_HybridEPManager.setup_metadata`,
`MoEAllGatherTokenDispatcher.dispatch_postprocess`) and MoE README "CPU Overhead Bottleneck",
commit d98e8a64.
"""

from typing import TYPE_CHECKING

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.training import CudaGraphModule
from models.catalog.kernels import GEMM_LAUNCH_S

if TYPE_CHECKING:
    from models.core.compute import ComputeContext

MOE_HOST_SYNC_KERNELS = 2
"""GPU idle per MoE layer forward at the host synchronisation of the per-expert token
counts, in fixed kernel costs (`models.catalog.kernels.GEMM_LAUNCH_S` each): the device-to-host copy
of the counts, then the first kernel the host issues after it wakes (the GPU queue is empty
until then). Source: Megatron-Core `token_dispatcher.py`, `MoEAlltoAllTokenDispatcher`:
`input_splits`/`output_splits` and the tokens per local expert are copied to the host and
`d2h_event.synchronize()` runs at `cuda_sync_point` (before the EP all-to-all when EP or TP
> 1, else before the grouped GEMM, whose `m_splits` are host integers) in every forward and
recomputed forward; dropless. CUDA graphs of the router and preprocessing do not remove it:
with `moe_preprocess` captured the copy moves to `cuda_dtoh_point = "before_ep_alltoall"`,
outside the graph, and the host still waits there (commit d98e8a64). Backward reuses the
splits."""

MOE_HOST_ISSUE_S = 7.4e-3
"""Host time to issue one eager MoE layer forward between two token-count synchronisations
(no CUDA graph), apart from the per-local-expert launches of the grouped expert GEMMs
(`moe_expert_launches`, which `moe_host_issue_s` adds); the GPU idles for what exceeds the
layer's forward GPU time (`moe_host_idle_s`). It includes the recipes' router fusion,
permute fusion and grouped GEMM, which every Megatron-Bridge performance recipe sets
(`moe_router_fusion = True` in each `*_llm_pretrain.py`, `moe_permute_fusion` and
`moe_grouped_gemm` in the model providers, commit 602e88cb7 and tag 26.04-alpha.rc2), so the
rows cannot separate them: it is the host time with `TrainingSpec.moe_grouped_gemm` and
`moe_permute_fusion` on. With either off the host issues more (SequentialMLP's MLP call per
expert; the unfused permutation's separate ops and its `.tolist()` host copies), which this
constant does not add: the cost model prices those switches off on the GPU side only
(`models.core.moe.expert_gemm.local_experts_gemm_s`, `models.core.moe.permute`), a lower
bound of what they cost.
Calibrated on fewer than three rows (the predicted range of every MoE plan is widened for
it, `models.evidence.error_bands.THIN_FITS`): grid-fitted (0.1 ms steps) on one row,
`bridge-25.11-dgx-h100-qwen3-235b-a22b-256gpu` (the H100 MoE calibration row named in
research/published_runs.md, eager: its recipe sets no CUDA graph), by
`research/validate_published.py --calibrate-moe`, with the per-expert launches of that row
(4 local experts) and the wait for the slowest GPU counted (7.9 ms before that wait); every
other MoE row but the one `MOE_GRAPHABLE_HOST_S` is fitted on, and every B200 row, is held
out (`research/CALIBRATION.md` Sec. 4). Why one value per layer: the measured time per MoE
layer pass of the same model is nearly the same on H100 and B200 (Qwen3-30B-A3B 9.5 and
9.2 ms, Qwen3-235B-A22B 13.8 and 13.3 ms) while their compute differs about 2x, so the
missing time is neither FLOPs nor HBM bytes."""

MOE_GRAPHABLE_HOST_S = 2.3e-3
"""The part of `MOE_HOST_ISSUE_S` that the three regions Megatron-Core can capture in a
dropless MoE layer take when run eagerly: the next layer's attention block (`attn`), its
pre-MLP norm and router (`moe_router`) and the dispatcher's count preprocessing
(`moe_preprocess`), `GRAPHABLE_REGIONS`. A captured region is issued as one graph launch.
Calibrated on fewer than three rows (one; the predicted range of every MoE plan is widened for
it, `models.evidence.error_bands.THIN_FITS`): bisection (0.05 ms steps) on
`bridge-26.04.01-dgx-b200-qwen3-30b-a3b-8gpu`, whose recipe captures all three
(`QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_BF16_V1`: `cuda_graph_impl="transformer_engine"`,
`cuda_graph_scope=["attn", "moe_router", "moe_preprocess"]`, Megatron-Bridge tag
26.04-alpha.rc2), by `research/validate_published.py --calibrate-moe-graphs`, with
`MOE_HOST_ISSUE_S` fixed; held out: the other two rows with graphs
(`bridge-25.11-dgx-b200-qwen3-30b-a3b-8gpu`, router and preprocessing only;
`bridge-26.04.01-dgx-b200-deepseekv3-256gpu`, all three, MLA attention)."""

GRAPHABLE_REGIONS = (CudaGraphModule.ATTN, CudaGraphModule.MOE_ROUTER,
                     CudaGraphModule.MOE_PREPROCESS)
"""The capture regions of a dropless MoE layer (Megatron-Core `CudaGraphModule`: `moe` and
`mlp` capture only drop-and-pad MoE layers and dense MLPs; MoE README "CUDA Graph": without
`--moe-expert-capacity-factor` and `--moe-pad-expert-input-to-capacity` the dynamic shapes
make MoE layers uncapturable)."""

MOE_HOST_LAUNCH_S = 3.8e-6
"""Host time per kernel launch when launches are issued back to back, and per graph launch
of a captured region. Source: NVIDIA Technical Blog, "Getting Started with CUDA Graphs"
(A. Gray, 2019): 20 back-to-back launches of a 2.9 us kernel take 3.8 us each (9.6 us with
a synchronisation after each, 3.4 us as one graph), so the host issues one launch per
3.8 us. A lower bound for Transformer Engine's per-expert GEMM, which builds cuBLASLt
descriptors and queries the cuBLASLt heuristic before each `cublasLtMatmul`
(`common/gemm/cublaslt_gemm.cu`, v2.9)."""

EXPERT_GEMMS_PER_FORWARD = 2
"""Grouped linears of an expert MLP in a forward: fc1 (gate and up) and fc2, each built by
Megatron-Core's `TEGroupedMLP` with `num_gemms = num_local_experts`
(`megatron/core/transformer/moe/experts.py` at 0d8e0714cd)."""

CURRENT_SCALING_QUANTIZE_LAUNCHES = 3
"""Kernels that quantise one FP8 GEMM input of one expert under per-tensor current scaling:
amax, scale from amax, cast. Source: Transformer Engine v2.9 and v2.14
`pytorch/csrc/quantizer.cpp` (`Float8CurrentScalingQuantizer::quantize`:
`nvte_compute_amax_with_config`, `nvte_compute_scale_from_amax`, `nvte_quantize_v2`) and
`pytorch/csrc/extensions/cast.cpp` (`split_quantize` runs the quantizer of each split in turn;
its fused multi-tensor kernel serves delayed scaling only)."""

BLOCK_SCALED_QUANTIZE_LAUNCHES = 1
"""Kernels that quantise one FP8 GEMM input of one expert to MXFP8 (block scales computed in
the cast kernel): one `nvte_quantize_v2` per split (same files as
`CURRENT_SCALING_QUANTIZE_LAUNCHES`)."""


def moe_host_sync_s(spec: ModelSpec, ctx: "ComputeContext") -> float:
    """GPU idle time of one MoE layer forward at the host synchronisation of the per-expert
    token counts (`MOE_HOST_SYNC_KERNELS` fixed kernel costs); zero for a dense model.
    The metadata all-gather before it is EP traffic (`models.core.traffic.layer.expert_calls`)."""
    if spec.moe is None:
        return 0.0
    return MOE_HOST_SYNC_KERNELS * GEMM_LAUNCH_S


def expert_quantize_launches(ctx: "ComputeContext") -> int:
    """Kernels per local expert that quantise one expert GEMM input in a forward: none in
    16-bit; under FP8, one MXFP8 cast on GPUs with block-scaled formats (an FP4 peak:
    Blackwell, the Megatron-Bridge `mxfp8` recipes) and the three kernels of per-tensor
    current scaling elsewhere (the Bridge Hopper recipes, `fp8_cs`). FP4 compute is counted
    like MXFP8 (one cast per expert). Delayed scaling, whose casts of all experts run as one
    fused kernel, is not modelled."""
    if ctx.compute_dtype not in (DType.FP8, DType.FP4):
        return 0
    if DType.FP4 in ctx.gpu.dense_peak_flop_per_s:
        return BLOCK_SCALED_QUANTIZE_LAUNCHES
    return CURRENT_SCALING_QUANTIZE_LAUNCHES


def moe_expert_launches(spec: ModelSpec, ctx: "ComputeContext") -> int:
    """Kernel launches the host issues per MoE layer forward for the local experts one at a
    time: local experts x grouped linears x (one cuBLAS GEMM + the expert's input casts).

    Source: Transformer Engine v2.9 (Megatron-Bridge 25.11 pins `release_v2.9`) and v2.14
    (the 26.04 recipes' pin f031cf87): `GroupedLinear` quantises its input per expert
    (`tex.split_quantize` over `m_splits`) and `general_grouped_gemm` ->
    `nvte_multi_tensor_gemm` -> `multi_stream_cublas_gemm` loops over the experts, one
    `cublasLtMatmul` each (the CUTLASS grouped kernel only on Hopper, 16-bit, with
    `NVTE_USE_CUTLASS_GROUPED_GEMM`); Megatron-Core `TEGroupedMLP` builds fc1 and fc2 with one
    GEMM per local expert. FP8 weight casts are cached after a step's first micro-batch
    (`is_first_microbatch`) and not counted. The expert part is never inside a CUDA graph of
    a dropless layer (`GRAPHABLE_REGIONS`).
    Legend: E / ep local experts (at least 1), 2 grouped linears
    (`EXPERT_GEMMS_PER_FORWARD`), q input casts per expert (`expert_quantize_launches`)."""
    moe = spec.moe
    if moe is None:
        return 0
    local_experts = max(1, moe.num_experts // ctx.ep)
    return local_experts * EXPERT_GEMMS_PER_FORWARD * (1 + expert_quantize_launches(ctx))


def graphed_host_saving_s(ctx: "ComputeContext") -> float:
    """Host issue time one MoE layer forward saves under the runtime's CUDA graphs: each
    captured region (`ctx.cuda_graph_modules`, within `GRAPHABLE_REGIONS`) drops its eager
    host time, an equal share of `MOE_GRAPHABLE_HOST_S`, and costs one graph launch
    (`MOE_HOST_LAUNCH_S`).
    Assumes: the three regions take equal eager host time; the published rows do not
    separate them (one fitting row captures all three; the held-out 25.11 B200 Qwen3-30B-A3B
    row captures router and preprocessing only, the check of the split). Source of the
    regions and of what stays eager: Megatron-Core `transformer_config.py`
    (`cuda_graph_modules`), MoE README "CUDA Graph", commit d98e8a64."""
    captured = [m for m in GRAPHABLE_REGIONS if m in ctx.cuda_graph_modules]
    share = MOE_GRAPHABLE_HOST_S / len(GRAPHABLE_REGIONS)
    return len(captured) * (share - MOE_HOST_LAUNCH_S)


def moe_host_issue_s(spec: ModelSpec, ctx: "ComputeContext") -> float:
    """Host time to issue one MoE layer's forward, from one token-count synchronisation to
    the next: the layer's eager issue time (`MOE_HOST_ISSUE_S`, or a calibration profile's
    fitted value, `ctx.moe_host_issue_s`) less what the runtime's CUDA graphs save
    (`graphed_host_saving_s`), plus one back-to-back launch (`MOE_HOST_LAUNCH_S`) for each
    per-expert kernel (`moe_expert_launches`); zero for a dense model."""
    if spec.moe is None:
        return 0.0
    fixed = MOE_HOST_ISSUE_S if ctx.moe_host_issue_s is None else ctx.moe_host_issue_s
    eager = max(0.0, fixed - graphed_host_saving_s(ctx))
    return eager + moe_expert_launches(spec, ctx) * MOE_HOST_LAUNCH_S


def moe_host_idle_s(spec: ModelSpec, ctx: "ComputeContext", gpu_forward_s: float) -> float:
    """GPU idle of one MoE layer forward while the host issues it: the host's issue time
    (`moe_host_issue_s`) beyond the layer's forward GPU time `gpu_forward_s`.

    Mechanism: the module docstring's synchronisation; the layer's forward takes the longer
    of the host's issue of its kernels (all-to-all with host-side split sizes, local sorts,
    one GEMM launch per local expert, FP8 casts, activation, combine, the next attention
    block, router and preprocessing unless captured) and the GPU's execution of them.
    Source: Megatron-Core MoE README, "CPU Overhead Bottleneck" (gaps between GPU kernels
    because the CPU cannot launch them fast enough; remedies: CUDA graphs of attention, the
    router and the dispatcher preprocessing, a larger micro-batch, a smaller TP).
    Assumes: the host issue time follows the op count (a fixed part plus the per-expert
    launches), not the GPU or the tokens in the micro-batch;
    `gpu_forward_s` is the layer's forward compute (its all-to-all time is not counted, a
    lower bound on the GPU's work); backward reuses the host-side splits and the host runs
    ahead of it. Not part of `moe_block_times`: Megatron's MoE-layer benchmark hides host
    launch time.
    """
    return max(0.0, moe_host_issue_s(spec, ctx) - gpu_forward_s)


__all__ = [
    "BLOCK_SCALED_QUANTIZE_LAUNCHES",
    "CURRENT_SCALING_QUANTIZE_LAUNCHES",
    "EXPERT_GEMMS_PER_FORWARD",
    "GRAPHABLE_REGIONS",
    "MOE_GRAPHABLE_HOST_S",
    "MOE_HOST_ISSUE_S",
    "MOE_HOST_LAUNCH_S",
    "MOE_HOST_SYNC_KERNELS",
    "expert_quantize_launches",
    "graphed_host_saving_s",
    "moe_expert_launches",
    "moe_host_idle_s",
    "moe_host_issue_s",
    "moe_host_sync_s",
]
