"""The terms that set one MoE plan's expert parallelism apart from another's: tokens per
local expert and the grouped-GEMM efficiency they give, and the expert weights ZeRO-3 / FSDP
gathers per pass.

Owns: these per-configuration figures, read from the same functions the step time uses
(`models.core.compute.routed_assignments`, `models.catalog.kernels.grouped_gemm_time_s`,
`models.core.traffic.layer.zero3_unit_calls`' message sizes). Must not: time a step or decide
between plans (`solver/expert_parallel.py` compares two).
"""

import math
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.catalog.kernels import GEMM_TILE, grouped_gemm_time_s, profile_for
from models.core.compute import routed_assignments
from models.core.layer_kinds import mlp_kind
from models.core.mesh.layout import expert_data_parallel_size
from models.core.params import layer_params
from models.core.step_time.stage import compute_context


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpertTerms:
    """One configuration's expert-side figures."""

    local_experts: int
    tokens_per_expert: float
    """Token-expert assignments each local expert computes per micro-batch (busiest rank)."""
    grouped_gemm_efficiency: float
    """Achieved share of the GPU's peak in the experts' up projection at that token count
    (wave quantisation, launch cost and weight traffic of `grouped_gemm_time_s`)."""
    zero3_expert_gather_bytes_per_pass: int
    """Bytes of routed-expert weights one rank receives to gather one MoE layer for one
    pass (forward, or backward with its recomputation) under ZeRO-3 / FSDP: the rank's
    experts' weights x (edp - 1) / edp; 0 without ZeRO-3 or expert sharding."""
    zero3_expert_gather_bytes_per_step: int
    """The same over a step: two passes per micro-batch on every MoE layer of the rank, or
    one pass per step where units stay gathered after forward (`fsdp_reshard_after_forward`
    false, `models.core.traffic.layer.zero3_unit_calls`)."""


def expert_terms(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                 cluster: ClusterSpec) -> ExpertTerms | None:
    """The expert-side figures of a configuration (None for a dense model).

    Source: the grouped-GEMM model of `models.catalog.kernels.grouped_gemm_time_s` (MegaBlocks,
    arXiv:2211.15841 Sec. 5: efficiency falls with the tokens per expert) at the per-expert
    token count of `models.core.compute.moe_gemms`; ZeRO-3 gathers of `models.core.traffic.layer.
    zero3_unit_calls` (ZeRO arXiv:1910.02054 Sec. 7.2.2: parameters gathered before forward
    and again before backward). Recomputation shares the backward gather: PyTorch FSDP2's
    pre-forward hook returns without unsharding while the unit is in its pre-backward state
    (`torch/distributed/fsdp/_fully_shard/_fsdp_state.py: _pre_forward`), so a recomputed
    forward runs on the weights the backward gathered.
    Legend: edp = tp x cp x dp / (ep x etp), the replicas of each expert shard.
    """
    moe = spec.moe
    if moe is None:
        return None
    ctx = compute_context(training, parallel, cluster)
    local = max(1, moe.num_experts // parallel.ep)
    per_expert = routed_assignments(spec, ctx) / local
    padded = math.ceil(per_expert / GEMM_TILE) * GEMM_TILE
    n = mlp_kind(spec).up_matrices * moe.expert_ffn_hidden_size // parallel.etp
    k = spec.hidden_size
    dtype = training.compute_dtype
    seconds = grouped_gemm_time_s(local, int(padded), n, k, gpu=cluster.gpu, dtype=dtype,
                                  profile=profile_for(cluster.gpu))
    useful = 2.0 * local * per_expert * n * k
    peak = cluster.gpu.peak_flop_per_s(dtype)
    efficiency = useful / (seconds * peak) if seconds > 0 else 0.0
    per_pass = 0
    moe_index = next((i for i in range(spec.num_layers) if spec.is_moe_layer(i)), None)
    edp = expert_data_parallel_size(parallel)
    if parallel.zero_stage == 3 and edp > 1 and moe_index is not None:
        rank_experts = -(-layer_params(spec, moe_index).routed_experts
                         // (parallel.ep * parallel.etp))
        per_pass = rank_experts * int(training.param_dtype.num_bytes) * (edp - 1) // edp
    moe_layers = sum(1 for i in range(spec.num_layers) if spec.is_moe_layer(i))
    m = training.global_batch_size // (parallel.micro_batch_size * parallel.dp)
    passes = 2 * m if parallel.fsdp_reshard_after_forward else 1
    per_step = per_pass * passes * math.ceil(moe_layers / parallel.pp)
    return ExpertTerms(local_experts=local, tokens_per_expert=per_expert,
                       grouped_gemm_efficiency=efficiency,
                       zero3_expert_gather_bytes_per_pass=per_pass,
                       zero3_expert_gather_bytes_per_step=per_step)


__all__ = ["ExpertTerms", "expert_terms"]
