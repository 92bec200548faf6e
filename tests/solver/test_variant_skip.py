"""A candidate's framework variants are folded into one answer (`evaluate_for_targets`)
without evaluating a variant whose result cannot change it: the answer stays the fold of
every variant's `evaluate_candidate`, and `evaluation_floor_s` is what the skip trusts
(where it reaches the cutoff, the evaluation simulates no plan and bounds any fitting
variant at least as high). A variant that a memory-freeing feature dominates
(`solver.variant_race.freed_memory_pairs`) is evaluated only where it can still decide
something."""

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
from solver import targets, variant_race
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
from solver.variant_race import FREED_MEMORY_FIELDS, freed_memory_pairs

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
    evaluate = variant_race.evaluate_unsettled

    def counted(cand: PlanCandidate, **kwargs: Any) -> object:
        evaluated.append(cand)
        return evaluate(cand, **kwargs)

    monkeypatch.setattr(variant_race, "evaluate_unsettled", counted)
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


OPEN = Constraints(framework="any", allow_fp8_activations=True, allow_offload=True,
                   allow_remote_offload=True)


def _open_problem() -> tuple[ModelSpec, ClusterSpec, TrainingSpec, Constraints,
                             list[MeshCandidate]]:
    """DeepSeek-V3 on 2,048 H800 (the planner benchmark's FP8 recipe) with every mechanism
    open, narrowed as `solver.plan` narrows it (the memory-efficient norm is then a
    choice), and 16 meshes near the open search's optimum (15.9 s) and far from it."""
    from api_schemas.parallel import PipelineSchedule
    from solver.planner import hardware_constraints
    from solver.targets import target_constraints

    spec = model_preset("deepseek-v3")
    cluster = cluster_preset("h800-sxm5-80gb", num_nodes=256)
    training = TrainingSpec(global_batch_size=15360, sequence_length=4096, compute_dtype="fp8",
                            optimizer="adamw", optimizer_state_dtype="bf16",
                            moe_keep_expert_outputs=False)
    meshes = []
    for tp, pp, ep, mbs in ((2, 2, 128, 3), (2, 2, 64, 3), (4, 2, 64, 5), (2, 4, 32, 3),
                            (1, 4, 64, 1), (2, 2, 32, 5), (4, 2, 128, 10), (1, 2, 64, 3)):
        dp = 2048 // (tp * pp)
        for schedule, vpp in ((PipelineSchedule.INTERLEAVED_1F1B, 4),
                              (PipelineSchedule.DUALPIPEV, 2)):
            meshes.append(MeshCandidate(tp=tp, pp=pp, dp=dp, cp=1, ep=ep, etp=1, vpp=vpp,
                                        micro_batch_size=mbs,
                                        num_micro_batches=15360 // (dp * mbs),
                                        schedule=schedule, sequence_parallel=tp > 1))
    constraints = target_constraints(hardware_constraints(OPEN, cluster, training))
    return spec, cluster, training, constraints, meshes


def test_a_memory_freeing_feature_pairs_variants_that_differ_by_it_alone() -> None:
    """Under target 'any' each DeepSeek-V3 candidate is tried with the memory-efficient norm
    off and on; each pair differs in that field only, the variant without it first."""
    spec, _, training, constraints, meshes = _open_problem()
    paired = 0
    for c in meshes:
        variants = candidate_variants(spec, training, c, constraints)
        pairs = freed_memory_pairs(variants)
        for off, on in pairs.items():
            a, b = variants[off].training, variants[on].training
            differ = {k for k in a.__dict__ if a.__dict__[k] != b.__dict__[k]}
            assert off < on and differ == {"memory_efficient_norm"} <= set(FREED_MEMORY_FIELDS)
            assert b.memory_efficient_norm and a.memory_efficient_norm is False
        unpaired = [v for i, v in enumerate(variants)
                    if i not in pairs and i not in pairs.values()]
        assert all(v.training.memory_efficient_norm is not True for v in unpaired)
        paired += len(pairs)
    assert paired >= 2 * len(meshes)


def test_a_dominated_partner_is_evaluated_only_where_it_can_decide(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On the 16 DeepSeek-V3 meshes under no cutoff and under the open search's optimum:
    the same plan, step time and recipe as the fold of every variant (so the variant
    without the norm wins where its plan is as fast); without a plan, a bound at the
    cutoff or above and at most the fastest plan's step. Most variants without the norm
    are not evaluated."""
    spec, cluster, training, constraints, meshes = _open_problem()
    off_calls = [0]
    evaluate = variant_race.evaluate_unsettled

    def counted(cand: PlanCandidate, **kwargs: Any) -> object:
        off_calls[0] += cand.training.memory_efficient_norm is False
        return evaluate(cand, **kwargs)

    monkeypatch.setattr(variant_race, "evaluate_unsettled", counted)
    off_won = dominated = off_variants = 0
    for c in meshes:
        variants = candidate_variants(spec, training, c, constraints)
        fastest = _every_variant(spec, training, cluster, c, variants, math.inf)
        for cutoff in (math.inf, 15.95):
            expected = _every_variant(spec, training, cluster, c, variants, cutoff)
            off_variants += len(freed_memory_pairs(variants))
            got = evaluate_for_targets(spec, training, cluster, c, constraints,
                                       step_cutoff_s=cutoff, variants=variants)
            if isinstance(expected, ScoredPlan):
                assert isinstance(got, ScoredPlan), (c.key, cutoff)
                assert (got.estimate.step_time_s, got.parallel, got.training) == (
                    expected.estimate.step_time_s, expected.parallel, expected.training)
                off_won += expected.training.memory_efficient_norm is False
            elif isinstance(expected, Dominated):
                assert isinstance(got, Dominated), (c.key, cutoff)
                dominated += 1
                assert cutoff <= got.bound_s
                if isinstance(fastest, ScoredPlan):
                    assert got.bound_s <= fastest.estimate.step_time_s
            else:
                assert got == expected, (c.key, cutoff)
    assert off_won >= 3 and dominated >= 3, (off_won, dominated)
    # 31 of 96 here; evaluated wherever its partner leaves it something to decide, 53.
    assert off_calls[0] <= 0.4 * off_variants, (off_calls[0], off_variants)
