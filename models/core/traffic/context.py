"""What every traffic rule needs to know about one step on one pipeline stage.

Owns: `StepContext` (specs, fabric, mesh, the chosen stage, micro-batches per step, the
activation element size, tokens per rank) and the per-head dimensions of attention that
the CP rules send (GQA and MLA). Must not: produce traffic items.
"""

from dataclasses import dataclass

from api_schemas import (
    DType,
    FullLayers,
    ModelSpec,
    ParallelConfig,
    RecomputeMode,
    TrainingSpec,
)
from models.core.collectives import Fabric
from models.core.layer_kinds import attention_kind
from models.core.mesh import AxisPlacement, DeviceMesh, GroupKind
from models.core.traffic.weights import StageWeights, model_copies


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerTrafficContext:
    """The inputs of the per-layer traffic rules: specs, fabric and the mesh's groups."""

    model: ModelSpec
    training: TrainingSpec
    parallel: ParallelConfig
    fabric: Fabric
    mesh: DeviceMesh

    @property
    def activation_bytes(self) -> int:
        """Bytes of one activation element on the wire (see `activation_element_bytes`)."""
        return activation_element_bytes(self.training)

    @property
    def tokens_per_rank(self) -> int:
        """Tokens of one micro-batch on one CP rank: b * s / cp."""
        p = self.parallel
        return p.micro_batch_size * self.training.sequence_length // p.cp


@dataclass(frozen=True, slots=True, kw_only=True)
class StepContext(LayerTrafficContext):
    """The inputs of the traffic rules for one stage of one step: the per-layer inputs plus
    the stage, its micro-batches and the pipeline's scatter/gather."""

    stage: StageWeights
    num_micro_batches: int
    pp_scatter_gather: bool

    @property
    def layer(self) -> LayerTrafficContext:
        """The per-layer view of this context (the context itself, read as one)."""
        return self

    def passes(self, layers: int) -> int:
        """Layer executions per step for `layers` held layers: each micro-batch runs every
        held layer once, except under DualPipe, where it runs one of the two copies."""
        return layers * self.num_micro_batches // model_copies(self.parallel)

    @property
    def recomputed_layers(self) -> int:
        """Layers of this stage whose forward (and its collectives) runs again in backward."""
        policy = self.parallel.policy_of(self.stage.stage).recompute
        if isinstance(policy, FullLayers):
            return min(policy.full_layers, self.stage.num_layers)
        return self.stage.num_layers if policy == RecomputeMode.FULL else 0


def group_placement(mesh: DeviceMesh, kind: GroupKind) -> AxisPlacement:
    """`mesh.placement(kind)` (the mesh keeps it: computed once per mesh)."""
    return mesh.placement(kind)


def split_group_placement(mesh: DeviceMesh, kind: GroupKind, inner: int
                          ) -> tuple[AxisPlacement, AxisPlacement]:
    """`mesh.split_placement(kind, inner)` (the mesh keeps it: computed once per mesh)."""
    return mesh.split_placement(kind, inner)


def activation_element_bytes(training: TrainingSpec) -> int:
    """Bytes per activation element exchanged between ranks.

    Assumes: activations travel in the 16-bit training format (bf16/fp16) also under FP8
    compute (Transformer Engine casts to FP8 inside the GEMMs; TP/CP/PP exchanges stay
    16-bit); fp32/tf32 compute exchanges 4-byte values.
    """
    if training.compute_dtype in (DType.FP32, DType.TF32):
        return 4
    return 2


@dataclass(frozen=True, slots=True, kw_only=True)
class HeadDims:
    """Heads per TP rank and the per-head widths of q/k and v."""

    q_heads: int
    kv_heads: int
    qk_dim: int
    v_dim: int


def head_dims(model: ModelSpec, tp: int) -> HeadDims:
    """Attention heads on one TP rank and their widths, as exchanged by CP.

    Source: GQA keeps g KV heads of width d (Ainslie et al. 2023, arXiv:2305.13245); MLA's
    attention core works on up-projected per-head keys of width d_nope + d_rope and values of
    width d_v for all a heads (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1), which is what
    Megatron's CP exchanges for MLA.
    Legend: a = num_attention_heads, g = num_kv_heads, t = tp.
    Assumes: with g < t each rank keeps one (replicated) KV head.
    """
    q_heads = max(1, model.num_attention_heads // tp)
    record = attention_kind(model)
    qk_dim, v_dim = record.head_dims(model)
    return HeadDims(q_heads=q_heads, kv_heads=record.local_kv_heads(model, tp), qk_dim=qk_dim,
                    v_dim=v_dim)


__all__ = ["HeadDims", "LayerTrafficContext", "StepContext", "activation_element_bytes",
           "group_placement", "head_dims", "split_group_placement"]
