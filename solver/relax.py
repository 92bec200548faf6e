"""Relaxations of an infeasible planning request: the smallest changes that make a plan
exist (more GPUs, ZeRO-3, FP8 storage, offload, a shorter sequence, no pins).

Owns: re-running the search on each relaxed request with a short time limit and describing
the first plan found. Must not: change the request it was given.
"""

import math
import time
from dataclasses import dataclass

from api_schemas.requests import Constraints, PlanRequest, SolverLimits
from api_schemas.units import MIN_TIME_LIMIT_S
from models.params import count_parameters
from models.precision import state_bytes_per_param
from models.resolve import resolve_cluster, resolve_model
from solver.explain import describe_parallel
from solver.planner import search

RELAXATION_TIME_LIMIT_S = 2.0
"""Search time allowed for each relaxation tried."""


def nodes_for_states(request: PlanRequest) -> int:
    """Fewest nodes whose GPUs can hold the model states fully sharded (ZeRO-3): a lower
    bound on the cluster any plan needs, rounded up to a power of two."""
    spec = resolve_model(request.model).spec
    cluster = resolve_cluster(request.cluster)
    counts = count_parameters(spec)
    states = (counts.total + counts.mtp_total) * state_bytes_per_param(request.training).total
    gpus = math.ceil(states / cluster.capacity_bytes)
    nodes = max(1, math.ceil(gpus / cluster.gpus_per_node))
    return 1 << (nodes - 1).bit_length()


def _variants(request: PlanRequest) -> list[tuple[str, PlanRequest]]:
    c, cluster, training = request.constraints, request.cluster, request.training
    out = []
    for nodes in sorted({cluster.num_nodes * 2, 2 * nodes_for_states(request),
                         4 * nodes_for_states(request)}):
        if nodes > cluster.num_nodes:
            out.append((f"{nodes} nodes instead of {cluster.num_nodes}",
                        request.model_copy(update={"cluster": cluster.model_copy(
                            update={"num_nodes": nodes})})))
    open_constraints = Constraints(allow_fp8_activations=True, allow_offload=True,
                                   max_gpus=c.max_gpus, target_tokens_per_s=c.target_tokens_per_s,
                                   gpu_hour_price=c.gpu_hour_price)
    if c != open_constraints:
        out.append(("drop the pins and forbidden values (ZeRO-3, FP8 storage and offload "
                    "allowed)", request.model_copy(update={"constraints": open_constraints})))
    if training.sequence_length >= 256:
        out.append((f"sequence length {training.sequence_length // 2}",
                    request.model_copy(update={"training": training.model_copy(
                        update={"sequence_length": training.sequence_length // 2})})))
    return out


@dataclass(frozen=True, slots=True)
class Relaxations:
    """What the relaxation search found."""

    found: list[str]
    """Each relaxation that yields a plan, with that plan's layout and step time."""
    not_tried: list[str]
    """Relaxations skipped because the request's time limit had passed."""


def relaxations(request: PlanRequest, *, deadline: float | None = None) -> Relaxations:
    """Each relaxation that yields a plan, with the plan's layout and speed (for more nodes,
    only the smallest count that works). Each search gets at most `RELAXATION_TIME_LIMIT_S`
    and none starts after `deadline` (a `time.perf_counter()` value)."""
    out: list[str] = []
    not_tried: list[str] = []
    more_nodes_found = False
    for label, relaxed in _variants(request):
        if more_nodes_found and "nodes instead of" in label:
            continue
        budget_s = RELAXATION_TIME_LIMIT_S
        if deadline is not None:
            budget_s = min(budget_s, deadline - time.perf_counter())
        if budget_s < MIN_TIME_LIMIT_S:
            not_tried.append(label)
            continue
        limits = SolverLimits(time_limit_s=budget_s, top_k=0,
                              num_workers=request.solver.num_workers)
        spec = resolve_model(relaxed.model).spec
        result = search(spec, relaxed.training, resolve_cluster(relaxed.cluster),
                        constraints=relaxed.constraints, objective=relaxed.objective,
                        limits=limits)
        if result.best is not None:
            est = result.best.estimate
            out.append(f"{label}: {describe_parallel(result.best.parallel)} at "
                       f"{est.step_time_s:.2f} s per step")
            more_nodes_found = more_nodes_found or "nodes instead of" in label
    return Relaxations(found=out, not_tried=not_tried)


__all__ = ["RELAXATION_TIME_LIMIT_S", "Relaxations", "relaxations"]
