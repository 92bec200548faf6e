"""A candidate's framework variants are folded into one answer (`evaluate_for_targets`)
without evaluating a variant whose result cannot change it: the answer stays the fold of
every variant's `evaluate_candidate`, and `evaluation_floor_s` is what the skip trusts
(where it reaches the cutoff, the evaluation simulates no plan and bounds any fitting
variant at least as high)."""

import dataclasses
import math
import random
from typing import Any

import pytest

from api_schemas import Constraints, RecomputeMode, TrainingSpec
from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from models.catalog.presets import cluster_preset, model_preset
from models.core.ledger_memo import LedgerMemo
from solver import targets
from solver.candidate import PlanCandidate
from solver.candidate_eval import (
    Dominated,
    Rejection,
    ScoredPlan,
    evaluate_candidate,
    evaluate_plan_candidate,
    evaluation_floor_s,
)
from solver.space import MeshCandidate, candidate_meshes
from solver.targets import Variant, candidate_variants, evaluate_for_targets

CUTOFF_SHARES = (0.9, 0.97, 1.0, 1.03, 1.2)
"""Cutoffs tried per candidate, as shares of its value (below it, at it and above it)."""


def _every_variant(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                   c: MeshCandidate, variants: list[Variant], cutoff_s: float
                   ) -> ScoredPlan | Rejection | Dominated:
    """The fold with every variant evaluated, in order (the answer's definition): the best
    plan, else the fitting variant of the least bound, else the rejection nearest a plan
    (least GPU or host excess, rejections by a rule last, the first on ties)."""
    best: ScoredPlan | None = None
    other: Rejection | Dominated | None = None
    rejected: list[Rejection] = []
    for variant in variants:
        result = evaluate_candidate(spec, variant.training, cluster, c, variant.constraints,
                                    step_cutoff_s=cutoff_s, caps=variant.caps)
        if isinstance(result, ScoredPlan):
            result = dataclasses.replace(result, training=variant.training)
            if best is None or result.estimate.step_time_s < best.estimate.step_time_s:
                best = result
                cutoff_s = min(cutoff_s, result.estimate.step_time_s)
        elif other is None or (isinstance(result, Dominated) and (
                not isinstance(other, Dominated) or result.bound_s < other.bound_s)):
            other = result
        if isinstance(result, Rejection):
            rejected.append(result)
    if best is not None:
        return best
    if isinstance(other, Dominated) or not rejected:
        return other  # type: ignore[return-value]
    return min(rejected, key=lambda r: (r.stage is None, r.excess_bytes))


def _problem(sequence: int = 4096) -> tuple[ModelSpec, TrainingSpec, ClusterSpec,
                                            list[MeshCandidate]]:
    """DeepSeek-V2-Lite on 16 H100: MoE candidates with several runtime variants each
    (DeepEP and the EP overlap on and off, per released framework); at 32k tokens many
    fit nowhere."""
    spec = model_preset("deepseek-v2-lite")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=2)
    training = TrainingSpec(global_batch_size=64, sequence_length=sequence)
    meshes = candidate_meshes(spec, training, world_size=cluster.world_size, gpus_per_node=8,
                              constraints=Constraints())
    return spec, training, cluster, random.Random(7).sample(meshes, min(24, len(meshes)))


def test_skipping_variants_keeps_the_fold_of_every_variant(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each candidate's variants in their order and reversed (a slower or higher-bounded
    variant first), under cutoffs below, at and above its value: the answer is the fold of
    every variant's evaluation, and some variants are not evaluated."""
    spec, training, cluster, meshes = _problem()
    evaluated = []
    evaluate = targets.evaluate_unsettled

    def counted(cand: PlanCandidate, **kwargs: Any) -> object:
        evaluated.append(cand)
        return evaluate(cand, **kwargs)

    monkeypatch.setattr(targets, "evaluate_unsettled", counted)
    offered = compared = 0
    for c in meshes:
        variants = candidate_variants(spec, training, c, Constraints())
        value = _every_variant(spec, training, cluster, c, variants, math.inf)
        if len(variants) < 2 or not isinstance(value, ScoredPlan):
            continue
        for order in (variants, variants[::-1]):
            for share in CUTOFF_SHARES:
                cutoff = value.estimate.step_time_s * share
                expected = _every_variant(spec, training, cluster, c, order, cutoff)
                got = evaluate_for_targets(spec, training, cluster, c, Constraints(),
                                           step_cutoff_s=cutoff, variants=order,
                                           memo=LedgerMemo(spec=spec, training=training))
                assert got == expected, (c.key, share)
                compared += 1
                offered += len(order)
    assert compared >= 40 and len(evaluated) < offered - 20, (compared, len(evaluated),
                                                               offered)


def test_a_rejection_read_late_is_the_one_every_variant_gives() -> None:
    """Where no variant fits, the answer is the rejection nearest a plan with its binding
    stage and bytes (each read from its variant's ledger only once no variant fits)."""
    spec, training, cluster, meshes = _problem(32768)
    rejected = 0
    for c in meshes:
        variants = candidate_variants(spec, training, c, Constraints())
        if not variants:
            continue
        for cutoff in (math.inf, 1.0):
            expected = _every_variant(spec, training, cluster, c, variants, cutoff)
            got = evaluate_for_targets(spec, training, cluster, c, Constraints(),
                                       step_cutoff_s=cutoff, variants=variants)
            assert got == expected, c.key
            rejected += isinstance(got, Rejection) and got.over_bytes > 0
    assert rejected >= 4, rejected


def test_a_floor_at_the_cutoff_means_no_plan_and_no_lower_bound() -> None:
    spec, training, cluster, meshes = _problem()
    reached = 0
    for c in meshes:
        for variant in candidate_variants(spec, training, c, Constraints()):
            value = evaluate_candidate(spec, variant.training, cluster, c,
                                       variant.constraints, caps=variant.caps)
            if not isinstance(value, ScoredPlan):
                continue
            for share in CUTOFF_SHARES:
                cutoff = value.estimate.step_time_s * share
                floors = {0: cutoff * 0.5, 3: cutoff * share}
                for zero3_s in (0.0, cutoff):
                    cand = PlanCandidate.of(spec, variant.training, cluster, c,
                                            variant.constraints, variant.caps)
                    floor_s = evaluation_floor_s(cand, step_cutoff_s=cutoff,
                                                 zero3_bound_s=zero3_s, zero_floors_s=floors)
                    if floor_s < cutoff:
                        continue
                    reached += 1
                    result = evaluate_plan_candidate(cand, step_cutoff_s=cutoff,
                                                     zero3_bound_s=zero3_s,
                                                     zero_floors_s=floors)
                    assert not isinstance(result, ScoredPlan), (c.key, share)
                    if isinstance(result, Dominated):
                        assert result.bound_s >= floor_s, (c.key, share)
    assert reached >= 10, reached


def test_a_pinned_policy_gives_no_floor_below_a_skipped_stage() -> None:
    """A pinned activation policy is bounded by its own step-time bound only: a probed stage
    of it gives no floor (minus infinity), so its variant is always evaluated."""
    spec, training, cluster, meshes = _problem()
    constraints = Constraints(recompute=RecomputeMode.FULL)
    c = meshes[0]
    for variant in targets.candidate_variants(spec, training, c, constraints):
        cand = PlanCandidate.of(spec, variant.training, cluster, c, variant.constraints,
                                variant.caps)
        assert cand.pinned
        assert evaluation_floor_s(cand, step_cutoff_s=1.0, zero3_bound_s=0.0,
                                  zero_floors_s=None) == -math.inf
