"""Fewest GPUs reaching a tokens/s target: the search finishes with a proof, says when the
target is out of reach (with what the space does reach), and never calls running out of time
a proof of infeasibility."""

import functools
import math

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    Objective,
    PlanRequest,
    PlanStatus,
    SolverLimits,
    TrainingSpec,
)
from api_schemas.requests import ModelInput
from models.catalog.presets import cluster_preset, model_preset
from solver import plan
from solver.candidate_eval import Rejection
from solver.planner import hardware_constraints, objective_world_sizes, search
from solver.space import candidate_meshes
from solver.targets import admits_mesh, evaluate_for_targets, target_constraints
from tests.solver.test_planner_parity import TINY_DENSE

TINY_PINS = {"micro_batch_size": [1, 2], "pp": [1, 2]}
TINY_TRAINING = TrainingSpec(global_batch_size=64, sequence_length=2048)


@functools.cache
def _fastest_by_brute_force() -> float:
    """The highest tokens/s of any plan of the tiny problem on any allowed GPU count."""
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=2, gpus_per_node=8)
    constraints = target_constraints(hardware_constraints(Constraints(**TINY_PINS), cluster,
                                                          TINY_TRAINING))
    best = 0.0
    for world in objective_world_sizes(cluster, constraints, Objective.MIN_GPUS):
        for c in candidate_meshes(TINY_DENSE, TINY_TRAINING, world_size=world,
                                  gpus_per_node=8, constraints=constraints):
            if not admits_mesh(TINY_DENSE, TINY_TRAINING, c, constraints):
                continue
            scored = evaluate_for_targets(TINY_DENSE, TINY_TRAINING, cluster, c, constraints)
            if not isinstance(scored, Rejection):
                best = max(best, scored.estimate.tokens_per_s)
    return best


def _tiny_request(target: float, time_limit_s: float = 60.0) -> PlanRequest:
    model: ModelInput = TINY_DENSE
    limits = (SolverLimits(time_limit_s=time_limit_s, top_k=0, num_workers=1)
              if time_limit_s >= 0.1 else
              SolverLimits.model_construct(time_limit_s=time_limit_s, top_k=0, num_workers=1))
    return PlanRequest(model=model, cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=2),
                       training=TINY_TRAINING, objective=Objective.MIN_GPUS,
                       constraints=Constraints(**TINY_PINS, target_tokens_per_s=target),
                       solver=limits)


def test_an_unreachable_target_is_proven_so_with_the_fastest_plan_of_the_space() -> None:
    fastest = _fastest_by_brute_force()
    target = 1.2 * fastest  # out of reach, yet below the cluster's peak-FLOP/s bound
    response = plan(_tiny_request(target))
    assert response.status == PlanStatus.INFEASIBLE
    assert response.solver is not None and response.solver.unexamined == 0
    assert "no plan reaches the target" in response.explanation.summary
    changes = [r for r in response.explanation.relaxation_details
               if r.change == "target_tokens_per_s"]
    assert len(changes) == 1
    change = changes[0]
    assert change.from_value == target
    assert change.to_value == math.floor(fastest)
    assert change.minimal and change.parallel is not None
    # The relaxed target is met: the same request with it has a plan.
    met = plan(_tiny_request(float(change.to_value)))
    assert met.status == PlanStatus.OPTIMAL
    assert met.throughput is not None and met.throughput.tokens_per_s >= change.to_value


def test_the_search_ceiling_bounds_every_plan_of_the_space() -> None:
    fastest = _fastest_by_brute_force()
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=2, gpus_per_node=8)
    result = search(TINY_DENSE, TINY_TRAINING, cluster,
                    constraints=Constraints(**TINY_PINS, target_tokens_per_s=1.05 * fastest),
                    objective=Objective.MIN_GPUS,
                    limits=SolverLimits(time_limit_s=60, num_workers=1))
    assert result.status == PlanStatus.INFEASIBLE and result.best is None
    assert result.reach_ceiling is not None and result.reach_ceiling >= fastest
    if result.fastest_missed is not None:
        assert result.fastest_missed.estimate.tokens_per_s <= fastest


def test_out_of_time_with_a_target_is_unknown_not_infeasible() -> None:
    response = plan(_tiny_request(1e5, time_limit_s=1e-6))
    assert response.status == PlanStatus.UNKNOWN
    assert response.solver is not None
    assert 0 < response.solver.unexamined <= response.solver.candidates
    assert "within the time limit" in response.explanation.summary


def test_fewest_gpus_reaching_half_of_512_h100s_finishes_with_a_proof() -> None:
    # The benchmark problem (benchmarks/bench_objectives.py): half the throughput of the
    # fastest plan on 512 H100s.
    target = 296_993.0
    request = PlanRequest(model=ModelPreset(preset="llama-3.1-70b"),
                          cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=64),
                          training=TrainingSpec(global_batch_size=2048, sequence_length=8192),
                          objective=Objective.MIN_GPUS,
                          constraints=Constraints(target_tokens_per_s=target),
                          solver=SolverLimits(time_limit_s=120, top_k=0, num_workers=1))
    response = plan(request)
    assert response.status == PlanStatus.OPTIMAL
    assert response.solver is not None and response.solver.unexamined == 0
    assert response.throughput is not None and response.throughput.tokens_per_s >= target
    assert 64 < response.world_size < 512
    # Capped one node below the answer, the search proves the target out of reach, with a
    # ceiling under it.
    capped = Constraints(target_tokens_per_s=target, max_gpus=response.world_size - 8)
    result = search(model_preset("llama-3.1-70b"), request.training,
                    cluster_preset("h100-sxm5-80gb", num_nodes=64, gpus_per_node=8),
                    constraints=capped, objective=Objective.MIN_GPUS,
                    limits=SolverLimits(time_limit_s=120, num_workers=1))
    assert result.status == PlanStatus.INFEASIBLE
    assert result.reach_ceiling is not None and result.reach_ceiling < target
