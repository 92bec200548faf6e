"""The registry of mesh rules, in the order they are reported.

Owns: the tuple of rule functions and `findings`, which runs them all on a candidate.
Must not: build alternatives (`repair.py`) or raise (`validation.py`).
"""

import logging
from collections.abc import Callable

from models.mesh.candidates import Candidate, Finding, MeshContext, Severity
from models.mesh.rules_pipeline import (
    batch_divisible,
    cp_divides_sequence,
    dualpipe_even_micro_batches,
    dualpipe_even_pp,
    layers_split,
    micro_batches_vs_pp,
    pp_at_most_layers,
    schedule_needs_pp,
    sequence_parallel,
)
from models.mesh.rules_shape import (
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

logger = logging.getLogger(__name__)

Rule = Callable[[MeshContext, Candidate], Finding | None]

RULES: tuple[Rule, ...] = (
    order_names, world_size, tp_divides_heads, tp_kv_heads, tp_divides_ffn, ep_needs_moe,
    ep_divides_experts, expert_fold, etp_divides_expert_ffn, expert_pp_order, ulysses_heads,
    pp_at_most_layers, layers_split, schedule_needs_pp, dualpipe_even_pp, batch_divisible,
    dualpipe_even_micro_batches, micro_batches_vs_pp, cp_divides_sequence, sequence_parallel,
    tp_crosses_nodes,
)
MODEL_RULES: frozenset[Rule] = frozenset({
    tp_divides_heads, tp_kv_heads, tp_divides_ffn, ep_needs_moe, ep_divides_experts,
    etp_divides_expert_ffn, ulysses_heads, pp_at_most_layers, layers_split,
})
"""Rules that read the model; they are skipped when none is given."""


def findings(ctx: MeshContext, cand: Candidate) -> list[Finding]:
    """Every rule's finding on a candidate, errors and warnings, in registry order."""
    rules = RULES if ctx.model is not None else tuple(r for r in RULES if r not in MODEL_RULES)
    return [f for rule in rules if (f := rule(ctx, cand)) is not None]


def errors(ctx: MeshContext, cand: Candidate) -> list[Finding]:
    """Only the findings that make the candidate unusable."""
    return [f for f in findings(ctx, cand) if f.severity == Severity.ERROR]


__all__ = ["MODEL_RULES", "RULES", "Rule", "errors", "findings"]
