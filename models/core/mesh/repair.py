"""Concrete valid alternatives for a mesh problem.

Owns: turning a finding into a whole configuration that passes every error rule (and no
longer triggers the finding's own rule): first by applying the finding's fix and then the
fixes of whatever errors remain (a short repair loop), and, if that stalls, by a bounded
search over nearby degrees that changes as few fields as possible. Must not: define rules.
"""

import logging
from itertools import combinations, product

from api_schemas import ContextParallelKind, PipelineSchedule
from models.core.mesh.candidates import (
    Candidate,
    Finding,
    MeshContext,
    Severity,
    balanced_layers,
    distance,
    divisors,
    rebalanced,
    with_changes,
)
from models.core.mesh.rules import findings

logger = logging.getLogger(__name__)

MAX_REPAIR_STEPS = 12
"""Fix-and-recheck rounds before the search takes over (each round fixes one error)."""
MAX_SEARCH_FIELDS = 3
"""The search changes at most this many degrees at once (dp always follows)."""


def find_alternative(ctx: MeshContext, cand: Candidate, finding: Finding) -> Candidate | None:
    """A valid candidate that no longer triggers `finding.rule`, close to `cand`; or None."""
    current = finding.fix(ctx, cand)
    for _ in range(MAX_REPAIR_STEPS):
        if current is None:
            break
        blocking = _blocking(ctx, current, finding.rule)
        if not blocking:
            return current
        current = blocking[0].fix(ctx, current)
    return _search(ctx, cand, finding.rule)


def _blocking(ctx: MeshContext, cand: Candidate, rule: str) -> list[Finding]:
    return [f for f in findings(ctx, cand) if f.severity == Severity.ERROR or f.rule == rule]


def _search(ctx: MeshContext, cand: Candidate, rule: str) -> Candidate | None:
    """Nearest valid candidate changing 1..MAX_SEARCH_FIELDS degrees (dp rebalanced)."""
    options = _options(ctx, cand)
    names = list(options)
    for width in range(1, MAX_SEARCH_FIELDS + 1):
        found: list[Candidate] = []
        for fields in combinations(names, width):
            for values in product(*(options[f] for f in fields)):
                trial = _trial(ctx, cand, dict(zip(fields, values, strict=True)))
                if trial is not None and not _blocking(ctx, trial, rule):
                    found.append(trial)
        if found:
            return min(found, key=lambda c: distance(cand.parallel, c.parallel))
    logger.debug("no alternative within %d changed degrees for rule %s",
                 MAX_SEARCH_FIELDS, rule)
    return None


def _options(ctx: MeshContext, cand: Candidate) -> dict[str, list[int]]:
    p, world = cand.parallel, ctx.world_size
    near = divisors(world)
    return {
        "tp": [d for d in near if d != p.tp and d <= max(p.tp, ctx.gpus_per_node)],
        "pp": [d for d in near if d != p.pp and d <= ctx.max_pp],
        "cp": [d for d in divisors(p.cp) if d != p.cp],
        "ep": [d for d in divisors(p.ep) if d != p.ep],
        "etp": [d for d in divisors(p.etp) if d != p.etp],
        "micro_batch_size": [d for d in divisors(p.micro_batch_size)
                             if d != p.micro_batch_size],
    }


def _trial(ctx: MeshContext, cand: Candidate, changes: dict[str, int]) -> Candidate | None:
    degrees = {k: v for k, v in changes.items() if k in ("tp", "cp", "pp")}
    others = {k: v for k, v in changes.items() if k not in degrees}
    trial = rebalanced(ctx, cand, **degrees)
    if trial is None:
        return None
    p = trial.parallel
    extra: dict[str, object] = dict(others, num_micro_batches=None)
    layers = ctx.model.num_layers if ctx.model is not None else None
    if layers is not None and layers % (p.pp * p.vpp):
        split = balanced_layers(layers, p.pp, p.vpp)
        if split is None:
            extra.update(schedule=PipelineSchedule.ONE_F_ONE_B, vpp=1,
                         layers_per_stage=balanced_layers(layers, p.pp))
        else:
            extra["layers_per_stage"] = split
    if p.cp_kind == ContextParallelKind.USP and p.ulysses_degree and p.cp % p.ulysses_degree:
        extra["ulysses_degree"] = 1
    return with_changes(trial, **extra)


__all__ = ["MAX_REPAIR_STEPS", "MAX_SEARCH_FIELDS", "find_alternative"]
