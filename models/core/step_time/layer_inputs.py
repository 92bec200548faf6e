"""The record a layer's step-time parts are kept under: every input they read besides the
model, the recipe and the cluster.

Owns: `TimingKind` (what sets one layer's times apart from another's of the same model),
`LayerPartsInputs` (the record: the layer's timing kind, whether the schedule hides expert
all-to-alls, and each configuration field the parts read, named one by one) and
`UNREAD_FIELDS` (the configuration fields they never read). Every configuration field is in
exactly one of the two (`tests/solver/test_candidate_object.py`), so a new field is placed
before the parts can be kept. Must not: compute a part (`models.core.step_time.stage`).
"""

from typing import NamedTuple

from api_schemas.parallel import ContextParallelKind, ParallelConfig

TimingKind = tuple[bool, bool, int | None, int | None]
"""What sets a layer's times apart from another's of the same model
(`models.core.step_time.timing_kinds.timing_kind`)."""

UNREAD_FIELDS = frozenset({"recompute", "recompute_modules", "fp8_activations",
                           "activation_offload_frac", "stage_policies", "layers_per_stage",
                           "layers_per_virtual_stage", "vpp", "microbatch_group_size",
                           "num_micro_batches", "schedule"})
"""The configuration fields a layer's parts never read: the activation policy, the layer
split and the schedule's shape (the parts are computed per layer and micro-batch, without a
policy); of the schedule, only whether it hides expert all-to-alls, which the record holds
(`models.core.step_time.exposure.ep_overlapped`)."""


class LayerPartsInputs(NamedTuple):
    """Every input of one layer's parts (`models.core.step_time.stage.layer_parts`) but the
    model, recipe and cluster: layers and configurations alike in these take the same
    compute, exposed collectives, ZeRO-3 traffic and copy kernels."""

    kind: TimingKind
    ep_overlapped: bool
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    etp: int
    micro_batch_size: int
    zero_stage: int
    fsdp: bool
    fsdp_reshard_after_forward: bool
    norm_saves_output: bool
    sequence_parallel_saves_gathered: bool
    fsdp_defer_grad_sync: bool
    optimizer_offload_frac: float
    gradient_host_shards: bool
    remote_activation_offload: bool
    sequence_parallel: bool
    cp_kind: ContextParallelKind
    ulysses_degree: int | None

    @classmethod
    def of(cls, kind: TimingKind, ep_overlapped: bool,
           parallel: ParallelConfig) -> "LayerPartsInputs":
        """The record of a layer of timing kind `kind` under `parallel`."""
        p = parallel
        # Built as a tuple: the generated `__new__` costs a Python call per record.
        return tuple.__new__(cls, (
            kind, ep_overlapped, p.tp, p.pp, p.dp, p.cp, p.ep, p.etp, p.micro_batch_size,
            p.zero_stage, p.fsdp, p.fsdp_reshard_after_forward, p.norm_saves_output,
            p.sequence_parallel_saves_gathered, p.fsdp_defer_grad_sync,
            p.optimizer_offload_frac, p.gradient_host_shards, p.remote_activation_offload,
            p.sequence_parallel, p.cp_kind, p.ulysses_degree))


__all__ = ["UNREAD_FIELDS", "LayerPartsInputs", "TimingKind"]
