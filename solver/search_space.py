"""The stated search space: each range the planner limits, what it searched for this request
and whether that was every legal value, so that "optimal" means optimal over a space the
response names.

Owns: `search_limits`, a description of the limits `solver/space.py`, `solver/planner.py`,
`solver/candidate_eval.py` and `solver/targets.py` apply. Must not: enumerate candidates or
change the limits (it reads the same constants).
"""

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.plan import PlanStatus, SearchLimit
from api_schemas.requests import Constraints, Objective
from api_schemas.training import TrainingSpec
from models.core.layer_kinds import has_routed_experts
from models.core.mesh.candidates import divisors
from solver.space import MAX_PIPELINED_MICRO_BATCHES, MAX_VPP, MIN_SEQUENCE_FOR_CP


def _micro_batch(constraints: Constraints) -> SearchLimit:
    pinned = constraints.micro_batch_size is not None
    searched = ("the pinned values" if pinned else
                "every divisor of global_batch / dp (a mesh's larger micro-batches are "
                "pruned once its memory bound exceeds the capacity)")
    return SearchLimit(name="micro_batch_size", searched=searched, complete=True)


def _vpp(spec: ModelSpec, constraints: Constraints) -> SearchLimit:
    pinned = constraints.vpp is not None
    most = spec.num_layers // 2  # layers per rank at pp = 2, the most chunks possible
    searched = ("the pinned values" if pinned else
                f"interleaved 1F1B: 2..{MAX_VPP} chunks per rank (each chunk at least one "
                "layer); ZB-V and DualPipeV: 2")
    if not pinned and most > MAX_VPP:
        searched += f"; not searched: {MAX_VPP + 1}..{most} chunks (pin constraints.vpp)"
    return SearchLimit(name="vpp", searched=searched, complete=pinned or most <= MAX_VPP)


def _tp(spec: ModelSpec, cluster: ClusterSpec, constraints: Constraints) -> SearchLimit:
    pinned = constraints.tp is not None
    heads = spec.num_attention_heads
    beyond = [d for d in divisors(heads) if cluster.gpus_per_node < d <= cluster.world_size]
    searched = ("the pinned values" if pinned else
                f"divisors of the {heads} heads compatible with the KV heads, within a node "
                f"(<= {cluster.gpus_per_node})")
    if beyond and not pinned:
        searched += f"; not searched: node-crossing {beyond[:4]} (pin constraints.tp)"
    return SearchLimit(name="tp", searched=searched, complete=pinned or not beyond)


def _cp(training: TrainingSpec, constraints: Constraints) -> SearchLimit:
    pinned = constraints.cp is not None
    short = training.sequence_length < MIN_SEQUENCE_FOR_CP
    searched = ("the pinned values" if pinned else
                "divisors of the sequence up to 64 with at least 128 tokens per rank"
                + (f"; cp = 1 only, as the sequence is shorter than {MIN_SEQUENCE_FOR_CP} "
                   "(pin constraints.cp to search more)" if short else ""))
    return SearchLimit(name="cp", searched=searched, complete=pinned)


def search_limits(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                  constraints: Constraints, objective: Objective) -> list[SearchLimit]:
    """Every limited range of the search for this request, with whether it was complete."""
    out = [_micro_batch(constraints),
           SearchLimit(name="num_micro_batches", searched="global_batch / (micro_batch_size x "
                       f"dp), implied by the micro-batch size; on a pipeline (pp > 1) at most "
                       f"{MAX_PIPELINED_MICRO_BATCHES}",
                       complete=training.global_batch_size <= MAX_PIPELINED_MICRO_BATCHES),
           _vpp(spec, constraints), _tp(spec, cluster, constraints), _cp(training, constraints)]
    if has_routed_experts(spec):
        out.append(SearchLimit(name="etp", searched="1 (pin constraints.etp to search 1 and "
                               "tp)" if constraints.etp is None else "1 and tp",
                               complete=constraints.etp is not None))
    out.append(SearchLimit(
        name="sequence_parallel", searched="on whenever tp > 1 (it dominates plain TP under "
        "the model) unless pinned", complete=constraints.sequence_parallel is not None))
    extra = [name for name, allowed in (
        ("Pipeline ZeRO-2 (with ZeRO-1)", constraints.allow_gradient_host_shards
         and not constraints.gradient_host_shards),
        ("remote activation offload (where the cheapest rung does not fit)",
         constraints.allow_remote_offload)) if allowed]
    out.append(SearchLimit(
        name="activation_policy", searched="per ZeRO stage, the first fitting rung of the "
        "ladder none < selective < +FP8 storage < +offload < full recompute of the first k "
        "layers < full (what the target expresses)"
        + (f", also with {' and with '.join(extra)}" if extra else "")
        + "; per-stage policies refined on the chosen mesh only", complete=False))
    out.append(SearchLimit(
        name="layers_per_stage", searched="even split during the search; lighter first and "
        "last ranks tried on the chosen mesh only", complete=False))
    if objective in (Objective.MIN_GPUS, Objective.COST_PER_TOKEN):
        out.append(SearchLimit(name="world_size", searched=f"whole nodes of "
                               f"{cluster.gpus_per_node} GPUs up to the cluster, plus 1, 2 and "
                               "4 GPUs", complete=False))
    target = constraints.framework or "any released framework"
    out.append(SearchLimit(name="framework", searched=f"what {target} runs "
                           "(constraints.framework)", complete=True))
    return out


def space_note(limits: list[SearchLimit], status: PlanStatus, gap: float | None) -> str:
    """One sentence saying over which space the answer was searched and what it proves
    there: optimal, within a proven gap (the time limit cut the search), or nothing (the
    limit fell while the candidates were still being listed, so no bound covers the rest)."""
    partial = [limit.name for limit in limits if not limit.complete]
    space = ("the complete space" if not partial else
             "the stated space (solver.space); ranges limited: " + ", ".join(partial))
    if status == PlanStatus.OPTIMAL:
        return f"Optimal over {space}."
    if status == PlanStatus.FEASIBLE and gap is not None:
        return (f"Not proven optimal: the time limit cut the search; the plan is within "
                f"{gap:.1%} of the proven bound over {space}.")
    if status == PlanStatus.FEASIBLE:
        return ("Not proven optimal: the time limit fell while the candidates were still "
                "being listed, so no bound is proven (raise solver.time_limit_s); the best "
                f"plan found over {space}.")
    return f"Searched over {space}."


__all__ = ["search_limits", "space_note"]
