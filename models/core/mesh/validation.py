"""Mesh validation: every problem with its rule, values and a valid alternative.

Owns: the public entry points `mesh_problems` (errors and warnings, each with a concrete
valid alternative configuration) and `validate_mesh` (raises on errors). Must not: define
rules (`rules_shape.py`, `rules_pipeline.py`) or build process groups (`layout.py`).
"""

import dataclasses
from dataclasses import dataclass

from api_schemas import ModelSpec, ParallelConfig, TrainingSpec
from models.core.mesh.candidates import Candidate, MeshContext, Severity, describe_change
from models.core.mesh.layout import DEFAULT_ORDER
from models.core.mesh.repair import find_alternative
from models.core.mesh.rules import findings
from models.errors import InvalidSpecError


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshAlternative:
    """A configuration that passes every error rule, and what changed to get there."""

    parallel: ParallelConfig
    order: str
    change: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshProblem:
    """One violated rule: its id, severity, field, message, values and an alternative."""

    rule: str
    severity: Severity
    field: str
    message: str
    values: dict[str, int | str | bool] = dataclasses.field(default_factory=dict)
    alternative: MeshAlternative | None = None

    @property
    def detail(self) -> str:
        """The message, the rule id and the alternative in one sentence."""
        if self.alternative is None:
            fix = ("no configuration of these degrees on this cluster passes every rule; "
                   "change the cluster size or the batch")
        else:
            fix = f"a valid alternative: {self.alternative.change}"
        return f"[{self.rule}] {self.message}; {fix}"


def mesh_problems(parallel: ParallelConfig, *, model: ModelSpec | None, num_nodes: int,
                  gpus_per_node: int, training: TrainingSpec | None = None,
                  order: str = DEFAULT_ORDER) -> tuple[MeshProblem, ...]:
    """Every error and warning of a mesh, each with a concrete valid alternative.

    Args:
        parallel: The degrees, schedule and batch split to check.
        model: The LLM architecture (heads, KV heads, widths, layers, experts); None skips
            the rules that need it.
        num_nodes: Nodes in the cluster.
        gpus_per_node: GPUs per node (the scale-up domain).
        training: The recipe; without it, batch and sequence rules are skipped.
        order: Rank order of the mesh axes, Megatron style ('tp-cp-ep-dp-pp').

    Returns:
        Problems in rule order; empty when the mesh is valid and raises no warning.
    """
    ctx = MeshContext(model=model, num_nodes=num_nodes, gpus_per_node=gpus_per_node,
                      training=training)
    cand = Candidate(parallel=parallel, order=order)
    problems = []
    for found in findings(ctx, cand):
        fixed = find_alternative(ctx, cand, found)
        alternative = None if fixed is None else MeshAlternative(
            parallel=fixed.parallel, order=fixed.order, change=describe_change(cand, fixed))
        problems.append(MeshProblem(rule=found.rule, severity=found.severity,
                                    field=found.field, message=found.message,
                                    values=found.values, alternative=alternative))
    return tuple(problems)


def validate_mesh(parallel: ParallelConfig, *, model: ModelSpec | None, num_nodes: int,
                  gpus_per_node: int, training: TrainingSpec | None = None,
                  order: str = DEFAULT_ORDER) -> tuple[MeshProblem, ...]:
    """Check a mesh; raise on errors, return the warnings.

    Args: as `mesh_problems`.

    Returns:
        The warnings (a valid mesh may still have them).

    Raises:
        InvalidSpecError: at least one error; the message lists every error with its rule
            and alternative, `field` names the first, `diagnostics` holds them all.
    """
    problems = mesh_problems(parallel, model=model, num_nodes=num_nodes,
                             gpus_per_node=gpus_per_node, training=training, order=order)
    bad = [p for p in problems if p.severity == Severity.ERROR]
    if bad:
        raise InvalidSpecError(
            " | ".join(p.detail for p in bad), field=bad[0].field,
            diagnostics={"problems": [
                {"rule": p.rule, "field": p.field, "values": p.values,
                 "alternative": None if p.alternative is None else p.alternative.change}
                for p in bad]})
    return tuple(p for p in problems if p.severity == Severity.WARNING)


__all__ = ["MeshAlternative", "MeshProblem", "mesh_problems", "validate_mesh"]
