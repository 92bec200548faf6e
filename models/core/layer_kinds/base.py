"""The shapes of a layer-kind record: what every kind of token mixer, MLP and norm declares.

Owns: the record types (`AttentionRecord`, `LinearAttentionRecord`, `MlpRecord`,
`NormRecord`) and the neutral values they return (`GemmShape`, `StoredTerm`), which the cost
model turns into its own timed GEMMs and ledger tensors. Must not: hold any kind's numbers
(each kind's record lives in its own module) or import the cost model (the records sit
below `models.core.compute`, `models.core.activations` and `models.core.params`, which ask them).
"""

from dataclasses import dataclass
from typing import Protocol

from api_schemas.architecture import LinearAttentionSpec, ModelSpec
from api_schemas.parallel import RecomputeModule


@dataclass(frozen=True, slots=True)
class GemmShape:
    """One rank-local matrix multiply (m x k) @ (k x n), and the recompute module that
    rebuilds it (None: only full recomputation does)."""

    m: int
    n: int
    k: int
    module: RecomputeModule | None = None


@dataclass(frozen=True, slots=True)
class StoredTerm:
    """One activation tensor a layer kind keeps for backward: its ledger name, bytes per
    token on one rank, and the recompute modules that drop it."""

    name: str
    bytes_per_token: float
    dropped_by: tuple[RecomputeModule, ...] = ()


class AttentionRecord(Protocol):
    """A softmax-attention kind (MHA, GQA, MLA): everything the cost model asks of it."""

    @property
    def recompute_modules(self) -> tuple[RecomputeModule, ...]:
        """Cheap-to-rebuild modules only this kind has (MLA: its up-projections)."""
        ...

    @property
    def framework_features(self) -> frozenset[str]:
        """Feature names the framework support tables key on (`models.core.frameworks`)."""
        ...

    @property
    def shards_kv_heads(self) -> bool:
        """True when tensor parallelism splits separate KV heads (the tp-divides-kv rule)."""
        ...

    def params(self, spec: ModelSpec, *, matrices_only: bool) -> int:
        """Weights of one attention block (`matrices_only`: GEMM weights only)."""
        ...

    def extra_matrix_sizes(self, spec: ModelSpec) -> list[int]:
        """Elements of this kind's own 2-D weights beyond h x a d (for the largest one)."""
        ...

    def head_dims(self, spec: ModelSpec) -> tuple[int, int]:
        """(d_qk, d_v) per head of the attention core."""
        ...

    def local_kv_heads(self, spec: ModelSpec, tp: int) -> int:
        """KV heads of the attention core on one of `tp` ranks."""
        ...

    def gemm_shapes(self, spec: ModelSpec, *, tokens: int, tp: int) -> list[GemmShape]:
        """Rank-local GEMMs of the block (Megatron column/row parallel split)."""
        ...

    def op_sac_gemm_shapes(self, spec: ModelSpec, *, tokens: int, tp: int) -> list[GemmShape]:
        """The block's matmuls in torchtitan's call order (none for a non-Llama block)."""
        ...

    def stored_terms(self, spec: ModelSpec, *, tp: float, replicated_divisor: float,
                     activation_bytes: float) -> list[StoredTerm]:
        """Projection tensors kept for backward between the block's input and its output
        projection's input."""
        ...

    def kv_cache_elements(self, spec: ModelSpec) -> int:
        """KV-cache elements of one token in one layer, unsharded."""
        ...

    def kv_cache_split_by_tp(self) -> bool:
        """True when tensor parallelism splits the KV cache (by KV heads)."""
        ...

    def megatron_args(self, spec: ModelSpec) -> list[str]:
        """Megatron-LM core_v0.14.0 arguments that declare this attention."""
        ...


class LinearAttentionRecord(Protocol):
    """A linear-attention kind (KDA, gated delta rule): its gates, which are what differs."""

    @property
    def kernel_efficiency(self) -> float:
        """Fraction of dense BF16 peak the chunkwise kernel reaches."""
        ...

    def gate_weights(self, spec: ModelSpec, la: LinearAttentionSpec) -> tuple[int, int]:
        """(matrix, vector) weights of the gates and of what else the kind adds to q, k, v,
        o and the short convolutions."""
        ...

    def gate_gemm_shapes(self, spec: ModelSpec, la: LinearAttentionSpec, *, tokens: int,
                         heads: int) -> list[tuple[int, int, int]]:
        """(m, n, k) of the gates' GEMMs on one rank of `heads` local heads."""
        ...

    def extra_stored_terms(self, la: LinearAttentionSpec, *, activation_bytes: float
                           ) -> list[StoredTerm]:
        """Tensors only this kind keeps for backward (none are rebuilt by the core)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class MlpRecord:
    """A dense MLP kind: its matrices and the elementwise activation between them."""

    name: str
    """The activation's name in the elementwise-kernel table (`models.core.compute`)."""
    up_matrices: int
    """Up-side matrices (h x f each): 2 for a gated MLP (gate and up), 1 for GELU."""
    eager_product: bool
    """True when an eager implementation multiplies the activation by the up output as a
    separate autograd op, which keeps the activation output too (`models.core.activations`)."""
    megatron_args: tuple[str, ...]
    """Megatron-LM core_v0.14.0 arguments that select this MLP."""

    @property
    def matrices(self) -> int:
        """All matrices of one MLP: the up side plus the down projection."""
        return self.up_matrices + 1

    def params(self, spec: ModelSpec, width: int, *, matrices_only: bool) -> int:
        """Weights of one MLP of intermediate `width`: `matrices` x h f; biases (f + h)
        when `linear_bias` and not `matrices_only`."""
        h = spec.hidden_size
        biases = (width + h) if spec.linear_bias and not matrices_only else 0
        return self.matrices * h * width + biases


@dataclass(frozen=True, slots=True, kw_only=True)
class MlpBlockParams:
    """Weights of one layer's MLP block by component (`models.core.params.LayerParams` adds the
    token mixer and the norms)."""

    dense_mlp: int
    """The dense MLP (0 on an MoE layer)."""
    router: int
    """Router (gate) matrix and routing bias (MoE layers)."""
    shared_experts: int
    """All shared experts and the shared-expert gate (MoE layers)."""
    routed_expert_each: int
    """One routed expert (MoE layers)."""
    num_routed_experts: int
    top_k: int


class MlpBlockRecord(Protocol):
    """A layer's MLP block (a dense MLP or the mixture of experts) built from the model's
    MLP kind."""

    @property
    def recompute_modules(self) -> tuple[RecomputeModule, ...]:
        """Recompute modules only this block has (MoE: the experts, their activation, the
        shared experts)."""
        ...

    @property
    def cheap_recompute_modules(self) -> tuple[RecomputeModule, ...]:
        """Of those, the ones cheap to rebuild (Kimi K2 Sec. 2.4: the expert activation)."""
        ...

    def params(self, spec: ModelSpec, mlp: MlpRecord) -> MlpBlockParams:
        """Weights of the block by component."""
        ...

    def forward_matrix_weights(self, spec: ModelSpec, mlp: MlpRecord) -> int:
        """GEMM weights one token passes through in a forward (router and activated experts
        only, for MoE)."""
        ...

    def largest_matrix(self, spec: ModelSpec) -> int:
        """Elements of the block's largest 2-D weight."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class NormRecord:
    """A normalisation kind: its weights per feature and how frameworks name it."""

    params_per_feature: int
    """Weights per normalised feature: 2 (scale, bias), 1 (scale) or 0."""
    megatron_name: str
    """Megatron-LM `--normalization` value."""
    megatron_note: str | None = None
    """Why the Megatron-LM layer differs from this one, when it does."""


__all__ = ["AttentionRecord", "GemmShape", "LinearAttentionRecord", "MlpBlockParams",
           "MlpBlockRecord", "MlpRecord", "NormRecord", "StoredTerm"]
