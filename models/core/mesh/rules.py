"""The registry of mesh rules, in the order they are reported.

Owns: the tuple of rule functions, `findings` (every rule on a candidate), `errors` (only
the verdicts that make a candidate unusable) and `admits` (whether a partial configuration
passes a chosen subset of rules), which the search space, evaluate and the mesh lab all
call, so each rule exists once. Must not: build alternatives (`repair.py`) or raise
(`validation.py`).
"""

from collections.abc import Callable, Iterable
from typing import Any

from api_schemas import ModelSpec, ParallelConfig, TrainingSpec
from models.core.mesh.candidates import Candidate, Finding, MeshContext, Severity
from models.core.mesh.layout import DEFAULT_ORDER
from models.core.mesh.rules_pipeline import (
    batch_divisible,
    cp_divides_sequence,
    dualpipe_even_micro_batches,
    dualpipe_even_pp,
    layers_split,
    micro_batches_vs_pp,
    moe_tp_needs_sequence_parallel,
    pp_at_most_layers,
    schedule_needs_pp,
    sequence_parallel,
)
from models.core.mesh.rules_shape import (
    ep_divides_experts,
    ep_needs_moe,
    etp_divides_expert_ffn,
    expert_fold,
    expert_pp_order,
    order_names,
    tp_crosses_nodes,
    tp_divides_ffn,
    tp_divides_heads,
    tp_kv_heads,
    ulysses_heads,
    world_size,
)

Rule = Callable[[MeshContext, Candidate], Finding | None]

RULES: tuple[Rule, ...] = (
    order_names, world_size, tp_divides_heads, tp_kv_heads, tp_divides_ffn, ep_needs_moe,
    ep_divides_experts, expert_fold, etp_divides_expert_ffn, expert_pp_order, ulysses_heads,
    pp_at_most_layers, layers_split, schedule_needs_pp, dualpipe_even_pp, batch_divisible,
    dualpipe_even_micro_batches, micro_batches_vs_pp, cp_divides_sequence, sequence_parallel,
    moe_tp_needs_sequence_parallel, tp_crosses_nodes,
)
MODEL_RULES: frozenset[Rule] = frozenset({
    tp_divides_heads, tp_kv_heads, tp_divides_ffn, ep_needs_moe, ep_divides_experts,
    etp_divides_expert_ffn, ulysses_heads, pp_at_most_layers, layers_split,
    moe_tp_needs_sequence_parallel,
})
"""Rules that read the model; they are skipped when none is given."""
WARNING_ONLY_RULES: frozenset[Rule] = frozenset({micro_batches_vs_pp, tp_crosses_nodes})
"""Rules that only ever warn; `errors` does not run them."""

TP_RULES: tuple[Rule, ...] = (tp_divides_heads, tp_kv_heads, tp_divides_ffn)
"""What a tensor-parallel degree must satisfy on its own (heads, KV heads, FFN width)."""
CP_RULES: tuple[Rule, ...] = (ulysses_heads, cp_divides_sequence)
"""What a context-parallel degree and kind must satisfy with a given TP degree."""
EXPERT_RULES: tuple[Rule, ...] = (ep_needs_moe, ep_divides_experts, expert_fold,
                                  etp_divides_expert_ffn)
"""What the expert mesh (ep, etp) must satisfy with the dense degrees of a stage."""

PIPELINE_RULES: tuple[Rule, ...] = (layers_split, schedule_needs_pp, dualpipe_even_pp,
                                    batch_divisible, dualpipe_even_micro_batches)
"""The error rules that read only `PIPELINE_FIELDS` of a configuration (and the context)."""
PIPELINE_FIELDS: tuple[str, ...] = ("pp", "vpp", "schedule", "layers_per_stage",
                                    "micro_batch_size", "dp", "num_micro_batches")
SHAPE_FIELDS: tuple[str, ...] = ("tp", "cp", "cp_kind", "ulysses_degree", "pp", "dp", "ep",
                                 "etp", "sequence_parallel")
"""What every other error rule (`SHAPE_RULES`) reads of a configuration in the default rank
order. A configuration has no error exactly when `admits` passes it under both groups with
each group's fields alone; the search checks each group once per distinct value of its
fields (tests/models/test_mesh_validation.py checks the field sets rule by rule)."""

_DEFAULT_PARALLEL = ParallelConfig()
_ERROR_RULES = tuple(r for r in RULES if r not in WARNING_ONLY_RULES)
_ERROR_RULES_WITHOUT_MODEL = tuple(r for r in _ERROR_RULES if r not in MODEL_RULES)
SHAPE_RULES: tuple[Rule, ...] = tuple(r for r in _ERROR_RULES if r not in PIPELINE_RULES)
"""The error rules besides `PIPELINE_RULES`; they read only `SHAPE_FIELDS` and the order."""


def findings(ctx: MeshContext, cand: Candidate) -> list[Finding]:
    """Every rule's finding on a candidate, errors and warnings, in registry order."""
    return [f for rule in _applicable(ctx, RULES) if (f := rule(ctx, cand)) is not None]


def errors(ctx: MeshContext, cand: Candidate) -> list[Finding]:
    """Only the findings that make the candidate unusable, in registry order."""
    rules = _ERROR_RULES if ctx.model is not None else _ERROR_RULES_WITHOUT_MODEL
    return [f for rule in rules
            if (f := rule(ctx, cand)) is not None and f.severity == Severity.ERROR]


def admits(ctx: MeshContext, rules: Iterable[Rule], **fields: Any) -> bool:
    """True when none of `rules` finds an error in the configuration that sets `fields`
    and leaves every other field at its default (how the search prunes one axis before it
    builds whole candidates; the whole candidate is then checked by `errors`). The fields
    are not re-validated: the caller passes well-formed degrees."""
    cand = Candidate(parallel=_DEFAULT_PARALLEL.model_copy(update=fields), order=DEFAULT_ORDER)
    return not any((f := rule(ctx, cand)) is not None and f.severity == Severity.ERROR
                   for rule in _applicable(ctx, tuple(rules)))


def rule_errors(parallel: ParallelConfig, *, model: ModelSpec | None, num_nodes: int,
                gpus_per_node: int, training: TrainingSpec | None = None,
                order: str = DEFAULT_ORDER) -> list[Finding]:
    """`errors` of one configuration on a cluster, without building alternatives."""
    ctx = MeshContext(model=model, num_nodes=num_nodes, gpus_per_node=gpus_per_node,
                      training=training)
    return errors(ctx, Candidate(parallel=parallel, order=order))


def _applicable(ctx: MeshContext, rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    return rules if ctx.model is not None else tuple(r for r in rules if r not in MODEL_RULES)


__all__ = [
    "CP_RULES",
    "EXPERT_RULES",
    "MODEL_RULES",
    "PIPELINE_FIELDS",
    "PIPELINE_RULES",
    "RULES",
    "SHAPE_FIELDS",
    "SHAPE_RULES",
    "TP_RULES",
    "WARNING_ONLY_RULES",
    "Rule",
    "admits",
    "errors",
    "findings",
    "rule_errors",
]
