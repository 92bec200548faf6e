"""The rank-ledger memo shared by the configurations of one mesh that a caller probes.

Owns: `LedgerMemo` and the input records its tables are keyed by (`StatesInputs`,
`ActivationInputs`): each record carries exactly the inputs of the piece it keys, so a memo
hit returns the very piece a fresh computation would; and the memoised sums a memory probe
reads (`state_sums`, `runtime_sums`). Must not: define a ledger term (`models.core.rank_states`,
`models.core.rank_activations`, `models.core.runtime_memory`), judge a ledger
(`models.core.memory`) or bound one (`models.core.memory_floors`).
"""

from dataclasses import dataclass, field
from typing import NamedTuple

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import (
    ParallelConfig,
)
from api_schemas.training import TrainingSpec
from models.core.layout import StageLayout
from models.core.ledger_items import MemoryComponent, RankParameters
from models.core.rank_activations import ActivationInputs, ActivationParts
from models.core.rank_states import StateParts, chunk_weight_kinds, state_parts
from models.core.runtime_features import RUNTIME_FEATURES
from models.core.runtime_memory import (
    RuntimeInputs,
    runtime_items,
)
from models.core.search_memo import kept


class StatesInputs(NamedTuple):
    """Every input of a rank's model states (`state_parts`) but the model and recipe. The
    layout enters by its layers' weight kinds per chunk and its embeddings, heads and MTP
    modules, not by its rank or layer indices: every term reads a layer through the first
    layer of its kind (`rank_parameters`, the chunk's MoE counts), and layers of one weight
    kind hold the same parameters, so ranks alike in these share their states."""

    weight_kinds: tuple[tuple[tuple[bool, bool], ...], ...]
    num_embeddings: int
    num_heads: int
    num_mtp_modules: int
    tp: int
    cp: int
    dp: int
    ep: int
    etp: int
    zero_stage: int
    fsdp: bool
    fsdp_reshard_after_forward: bool
    fsdp_defer_grad_sync: bool
    optimizer_offload_frac: float
    gradient_host_shards: int

    @classmethod
    def of(cls, spec: ModelSpec, parallel: ParallelConfig, layout: StageLayout,
           memo: "LedgerMemo | None" = None) -> "StatesInputs":
        """The record of rank `layout.rank` of `parallel` (its weight kinds read from
        `memo` where given)."""
        # Built as a tuple: the generated `__new__` costs a Python call per record.
        return tuple.__new__(cls, (
            layout_weight_kinds(spec, layout, memo), layout.num_embeddings, layout.num_heads,
            layout.num_mtp_modules, parallel.tp, parallel.cp, parallel.dp, parallel.ep,
            parallel.etp, parallel.zero_stage, parallel.fsdp,
            parallel.fsdp_reshard_after_forward, parallel.fsdp_defer_grad_sync,
            parallel.optimizer_offload_frac, parallel.gradient_host_shards))


@dataclass(slots=True)
class LedgerMemo:
    """Rank-ledger pieces shared by the configurations of one mesh that a caller probes one
    after another (the ZeRO stages and activation policies of one candidate), for one model
    and recipe (`spec`, `training`: a memo given with others is ignored).

    The model states of a rank depend on its layers and its ZeRO and offload settings, not
    on the activation policy; its activations depend on its policy and layers, not on the
    ZeRO stage; its runtime items, the allocator's share of the activations aside, depend
    on neither policy. Each piece is kept under its input record (`StatesInputs`,
    `models.core.rank_activations.ActivationInputs`,
    `models.core.runtime_memory.RuntimeInputs`), which holds every field it reads, so a memo
    hit returns the very components a fresh computation would."""

    spec: ModelSpec
    training: TrainingSpec
    states: dict[StatesInputs, StateParts] = field(default_factory=dict)
    activations: dict[ActivationInputs, ActivationParts] = field(default_factory=dict)
    weight_kinds: dict[tuple[tuple[int, ...], ...], tuple[tuple[tuple[bool, bool], ...], ...]] = (
        field(default_factory=dict))
    """Layer weight kinds (`chunk_weight_kinds`) of each chunk tuple (no hash of the spec)."""
    runtime: dict[RuntimeInputs, tuple[list[MemoryComponent], int]] = field(
        default_factory=dict)
    """Runtime items but the fragmentation share, by `RuntimeInputs`."""
    state_sums: dict[StatesInputs, tuple[RankParameters, int, int]] = field(
        default_factory=dict)
    """Parameter groups and the GPU and host bytes of the model states and EMA, by the
    same record as `states` (what a memory probe reads of them)."""
    activation_sums: dict[ActivationInputs, tuple[int, int, int]] = field(
        default_factory=dict)
    """GPU and host activation bytes and the `STORED_ACTIVATIONS` line, by the same record
    as `activations`."""
    runtime_sums: dict[RuntimeInputs, tuple[int, int]] = field(default_factory=dict)
    """The listed runtime items' bytes and the transient bytes, by `RuntimeInputs`."""

    recipes: dict[TrainingSpec, "LedgerMemo"] = field(default_factory=dict)
    """The memos of the same model under other recipes (`for_recipe`), by the whole recipe."""
    state_tables: dict[TrainingSpec, tuple[dict[StatesInputs, StateParts],
                                           dict[StatesInputs, tuple[RankParameters, int, int]]]
                       ] = field(default_factory=dict)
    """The `states` and `state_sums` tables of this memo and of the memos it keeps for other
    recipes, by the recipe with its state-free fields cleared (`states_recipe`): recipes
    that differ in those alone share one pair of tables."""

    def serves(self, spec: ModelSpec, training: TrainingSpec) -> bool:
        """Whether this memo was made for exactly these inputs (identity, not equality)."""
        return self.spec is spec and self.training is training

    def for_recipe(self, spec: ModelSpec, training: TrainingSpec) -> "LedgerMemo | None":
        """This memo where it serves `training`, else the one it keeps for that recipe (a
        framework variant's: its runtime features decided); None for another model."""
        if self.serves(spec, training):
            return self
        if self.spec is not spec:
            return None
        kept = self.recipes.get(training)
        if kept is None or kept.training is not training:
            kept = self.recipes[training] = LedgerMemo(spec=spec, training=training)
            if not self.state_tables:
                self.state_tables[states_recipe(self.training)] = (self.states,
                                                                   self.state_sums)
            tables = self.state_tables.setdefault(states_recipe(training),
                                                  (kept.states, kept.state_sums))
            kept.states, kept.state_sums = tables
        return kept


STATE_FREE_FIELDS = (*(feature.field for feature in RUNTIME_FEATURES), "pipe_engine_p2p")
"""Recipe fields no model-state term reads (`models.core.rank_states.state_parts`: the
precision, optimizer, EMA and batch fields only): the runtime features, which change step
times, runtime buffers (DeepEP) and stored activations (the memory-efficient norm, the EP
overlap's extra micro-batch) but not the weights, gradients and optimizer states, and the
pipeline engine's transfers. tests/models/test_ledger_memo.py checks that each leaves the
states unchanged."""


def states_recipe(training: TrainingSpec) -> TrainingSpec:
    """`training` with its `STATE_FREE_FIELDS` cleared: the part of a recipe that a rank's
    model states read."""
    return training.model_copy(update=dict.fromkeys(STATE_FREE_FIELDS))


def layout_weight_kinds(spec: ModelSpec, layout: StageLayout, memo: LedgerMemo | None
                         ) -> tuple[tuple[tuple[bool, bool], ...], ...]:
    """`chunk_weight_kinds` of a rank's chunks, read from `memo` where given (no hash of
    the spec)."""
    kinds = memo.weight_kinds.get(layout.chunks) if memo is not None else None
    if kinds is None:
        kinds = chunk_weight_kinds(spec, layout.chunks)
        if memo is not None:
            memo.weight_kinds[layout.chunks] = kinds
    return kinds


def state_sums(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                layout: StageLayout, memo: LedgerMemo) -> tuple[RankParameters, int, int]:
    """A rank's parameter groups and its model states' GPU and host bytes (EMA included),
    from `memo` where it has them."""
    key = StatesInputs.of(spec, parallel, layout, memo)

    def state_sums() -> tuple[RankParameters, int, int]:
        groups, states, host_states, ema_gpu, ema_host = kept(
            memo.states, key, lambda: state_parts(spec, training, parallel, layout))
        return (groups, sum([c.bytes for c in states]) + sum([c.bytes for c in ema_gpu]),
                sum([c.bytes for c in host_states]) + sum([c.bytes for c in ema_host]))

    return kept(memo.state_sums, key, state_sums)


def runtime_sums(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                  groups: RankParameters, memo: LedgerMemo) -> tuple[int, int]:
    """A rank's listed runtime bytes and its transient bytes, from `memo` where it has
    them."""
    items_key = RuntimeInputs.of(parallel, groups)

    def runtime_sums() -> tuple[int, int]:
        listed, transient = kept(memo.runtime, items_key,
                                      lambda: runtime_items(spec, training, parallel, groups))
        return sum([c.bytes for c in listed]), transient

    return kept(memo.runtime_sums, items_key, runtime_sums)


__all__ = [
    "LedgerMemo",
    "StatesInputs",
    "STATE_FREE_FIELDS",
    "layout_weight_kinds",
    "runtime_sums",
    "state_sums",
    "states_recipe",
]
