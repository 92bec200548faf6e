"""The records of a layer's MLP block: a dense MLP, or the mixture-of-experts block (router,
shared experts, routed experts; DeepSeek-V3 arXiv:2412.19437 Sec. 2.1, Qwen2-MoE).

Owns: the block's weights by component and the GEMM weights a token passes through. Must
not: know the MLP kind (the caller passes the model's `MlpRecord`), decide which layers are
MoE (`ModelSpec.is_moe_layer`), or time the experts (`models.core.compute`, `models.core.moe`).
"""

from dataclasses import dataclass

from api_schemas.architecture import ModelSpec, MoESpec
from api_schemas.parallel import RecomputeModule
from models.core.layer_kinds.base import MlpBlockParams, MlpRecord

M = RecomputeModule


def has_routed_experts(spec: ModelSpec) -> bool:
    """True when the model carries the MoE block: an expert-parallel axis exists, and the
    expert settings, features and evidence of an MoE model apply. The one place the
    presence of `ModelSpec.moe` is read for that question."""
    return spec.moe is not None


def _moe(spec: ModelSpec) -> MoESpec:
    moe = spec.moe
    assert moe is not None, "the MoE block is chosen only for a layer that is_moe_layer"
    return moe


@dataclass(frozen=True, slots=True)
class DenseMlpBlock:
    """One MLP of `ffn_hidden_size`."""

    recompute_modules: tuple[RecomputeModule, ...] = ()
    cheap_recompute_modules: tuple[RecomputeModule, ...] = ()

    def params(self, spec: ModelSpec, mlp: MlpRecord) -> MlpBlockParams:
        """The dense MLP's weights, nothing routed."""
        return MlpBlockParams(dense_mlp=mlp.params(spec, spec.ffn_hidden_size,
                                                   matrices_only=False),
                              router=0, shared_experts=0, routed_expert_each=0,
                              num_routed_experts=0, top_k=0)

    def forward_matrix_weights(self, spec: ModelSpec, mlp: MlpRecord) -> int:
        """The MLP's matrices ([KOR22] arXiv:2205.05198 App. A)."""
        return mlp.params(spec, spec.ffn_hidden_size, matrices_only=True)

    def largest_matrix(self, spec: ModelSpec) -> int:
        """h x f."""
        return spec.hidden_size * spec.ffn_hidden_size


@dataclass(frozen=True, slots=True)
class MoeBlock:
    """Router (h x E, plus a per-expert bias when `router_bias`), shared experts of total
    width `shared_expert_ffn_hidden_size` (plus an h-wide gate when `shared_expert_gate`),
    E routed experts of `expert_ffn_hidden_size`, top-k of them per token."""

    recompute_modules: tuple[RecomputeModule, ...] = (M.MOE, M.MOE_ACT, M.SHARED_EXPERTS)
    cheap_recompute_modules: tuple[RecomputeModule, ...] = (M.MOE_ACT,)

    def params(self, spec: ModelSpec, mlp: MlpRecord) -> MlpBlockParams:
        """Router, shared experts and one routed expert's weights."""
        moe, h = _moe(spec), spec.hidden_size
        router = h * moe.num_experts + (moe.num_experts if moe.router_bias else 0)
        shared = (mlp.params(spec, moe.shared_expert_ffn_hidden_size, matrices_only=False)
                  if moe.num_shared_experts else 0)
        if moe.shared_expert_gate:
            shared += h
        return MlpBlockParams(dense_mlp=0, router=router, shared_experts=shared,
                              routed_expert_each=mlp.params(spec, moe.expert_ffn_hidden_size,
                                                            matrices_only=False),
                              num_routed_experts=moe.num_experts, top_k=moe.top_k)

    def forward_matrix_weights(self, spec: ModelSpec, mlp: MlpRecord) -> int:
        """The router, the shared experts and top-k routed experts per token."""
        moe = _moe(spec)
        weights = spec.hidden_size * moe.num_experts
        if moe.num_shared_experts:
            weights += mlp.params(spec, moe.shared_expert_ffn_hidden_size, matrices_only=True)
        weights += moe.top_k * mlp.params(spec, moe.expert_ffn_hidden_size, matrices_only=True)
        return weights

    def largest_matrix(self, spec: ModelSpec) -> int:
        """h x the widest expert (routed or all shared together)."""
        moe = _moe(spec)
        return spec.hidden_size * max(moe.expert_ffn_hidden_size,
                                      moe.shared_expert_ffn_hidden_size)


DENSE_MLP_BLOCK = DenseMlpBlock()
MOE_BLOCK = MoeBlock()

__all__ = ["DENSE_MLP_BLOCK", "MOE_BLOCK", "DenseMlpBlock", "MoeBlock", "has_routed_experts"]
