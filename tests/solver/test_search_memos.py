"""The memos the search shares across candidates, ranks and policies change no value."""

import random
from typing import Any

from api_schemas import (
    ClusterSpec,
    Constraints,
    FullLayers,
    ModelSpec,
    ParallelConfig,
    PipelineSchedule,
    TrainingSpec,
)
from api_schemas.parallel import RecomputeMode, StagePolicy
from models.catalog.presets import cluster_preset, model_preset
from models.core.collectives import fabric_of
from models.core.layout import pipeline_layout
from models.core.ledger_memo import LedgerMemo
from models.core.rank_states import micro_batch_count
from models.core.step_time import WorkTable, axis_groups, work_table
from models.core.step_time.stage import layer_parts_memo, stage_time
from solver.candidate_eval import Dominated, Rejection, ScoredPlan, evaluate_candidate
from solver.space import candidate_meshes


def _outcome(result: ScoredPlan | Rejection | Dominated) -> tuple[object, ...]:
    if isinstance(result, Rejection):
        return ("rejected", result.reason, result.stage, result.over_bytes)
    if isinstance(result, Dominated):
        return ("dominated", result.bound_s)
    return ("plan", result.parallel, result.estimate.step_time_s, result.ledger)


def test_a_ledger_memo_shared_by_every_candidate_leaves_each_evaluation_unchanged() -> None:
    # A search passes one memo to every candidate; each value, dismissal (with its bound)
    # and rejection must be the one a fresh evaluation gives, whatever was probed before.
    spec = model_preset("deepseek-v3")
    cluster = cluster_preset("h800-sxm5-80gb", num_nodes=32)
    training = TrainingSpec(global_batch_size=1024, sequence_length=4096, compute_dtype="fp8")
    candidates = candidate_meshes(spec, training, world_size=cluster.world_size,
                                  gpus_per_node=8, constraints=Constraints())
    memo = LedgerMemo(spec=spec, training=training)
    sample = random.Random(5).sample(candidates, 12)
    kinds = set()
    for cutoff in (float("inf"), 30.0):
        for c in sample:
            shared = evaluate_candidate(spec, training, cluster, c, Constraints(),
                                        step_cutoff_s=cutoff, memo=memo)
            fresh = evaluate_candidate(spec, training, cluster, c, Constraints(),
                                       step_cutoff_s=cutoff)
            assert _outcome(shared) == _outcome(fresh), c.key
            kinds.add(_outcome(fresh)[0])
    assert memo.states and memo.activations and memo.runtime
    assert "plan" in kinds


def test_layer_parts_kept_across_ranks_and_policies_give_the_same_stage_times() -> None:
    # The per-layer compute, exposure and ZeRO-3 terms are kept per layer kind, whether the
    # schedule hides expert all-to-alls and the configuration's other non-policy fields:
    # every rank's times under any policy and schedule equal those computed afresh, after
    # the memo was filled by other policies, schedules and ZeRO stages.
    spec = model_preset("deepseek-v3")
    cluster = cluster_preset("h800-sxm5-80gb", num_nodes=32)
    training = TrainingSpec(global_batch_size=1024, sequence_length=4096)
    memo = layer_parts_memo(spec, training, cluster)
    for schedule, vpp in ((PipelineSchedule.INTERLEAVED_1F1B, 2), (PipelineSchedule.DUALPIPEV, 2),
                          (PipelineSchedule.ONE_F_ONE_B, 1)):
        base = ParallelConfig(pp=8, dp=32, ep=16, schedule=schedule, vpp=vpp)
        _check_stage_times(spec, training, cluster, base, memo)
    # Dense and MoE layers under two ZeRO timings (3 and 0-2), expert all-to-alls hidden
    # (DualPipeV) or not.
    assert len(memo) >= 8


def _check_stage_times(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                       base: ParallelConfig,
                       memo: dict[tuple[object, ...], Any]) -> None:
    policies: list[dict[str, object]] = [
        {}, {"recompute": RecomputeMode.SELECTIVE},
        {"recompute": FullLayers(full_layers=2, others="selective"), "fp8_activations": True},
        {"stage_policies": tuple(StagePolicy(recompute=RecomputeMode.FULL if r % 2 else
                                             RecomputeMode.NONE) for r in range(8))}]
    for zero in (3, 1):
        for policy in policies:
            parallel = base.model_copy(update={"zero_stage": zero, **policy})
            m = micro_batch_count(training, parallel)
            fabric = fabric_of(cluster)
            groups = axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
            for layout in pipeline_layout(spec, parallel):
                kept = stage_time(spec, training, parallel, cluster, layout,
                                  num_micro_batches=m, fabric=fabric, groups=groups,
                                  layer_memo=memo)
                fresh = stage_time(spec, training, parallel, cluster, layout,
                                   num_micro_batches=m, fabric=fabric, groups=groups)
                assert kept == fresh, (base.schedule, zero, policy, layout.rank)


def _reference_bound(table: WorkTable, parallel: ParallelConfig, more: bool) -> float:
    """`WorkTable.bound_s` spelt out rank by rank and layer kind by layer kind, each rank's
    policy on its own."""
    best = 0.0
    for rank, (busy, prefixes) in enumerate(zip(table.busy_s, table.kind_prefix, strict=True)):
        policy = parallel.policy_of(rank)
        size = len(prefixes[0]) - 1
        added = 0.0
        for prefix, full, layer in zip(prefixes, table.full_s, table.layers, strict=True):
            count = prefix[-1]
            selective = layer.recompute_s(policy.recompute_modules)
            if isinstance(policy.recompute, FullLayers):
                head = prefix[min(size, policy.recompute.full_layers)]
                rest = selective if policy.recompute.others == "selective" else 0.0
                if more:
                    rest = min(rest, full)
                added += head * full + (count - head) * rest
            elif policy.recompute == RecomputeMode.FULL:
                added += count * full
            elif policy.recompute == RecomputeMode.SELECTIVE:
                added += count * selective
        best = max(best, busy + table.crossings * added)
    return best


def test_work_bound_computes_each_rank_shape_once_with_the_same_value() -> None:
    # Ranks of one size and MoE count whose dense layer sits first on one and last on the
    # other (layers 0 and 15 dense, two ranks of eight) must still differ under
    # recomputation of their first k layers.
    deepseek = model_preset("deepseek-v3")
    assert deepseek.moe is not None
    spec = deepseek.model_copy(update={"num_layers": 16, "num_mtp_layers": 0,
                                       "moe": deepseek.moe.model_copy(update={
                                           "first_dense_layers": 0,
                                           "dense_layer_indices": (0, 15)})})
    cluster = cluster_preset("h800-sxm5-80gb", num_nodes=32)
    training = TrainingSpec(global_batch_size=1024, sequence_length=4096)
    plain = ParallelConfig(pp=2, dp=128, ep=16)
    table = work_table(spec, training, plain, cluster)
    uniform = [{"recompute": mode} for mode in RecomputeMode] + [
        {"recompute": FullLayers(full_layers=k, others=others)}
        for k in (0, 1, 2, 9) for others in ("none", "selective")]
    mixed = {"stage_policies": (StagePolicy(recompute=RecomputeMode.SELECTIVE),
                                StagePolicy(recompute=FullLayers(full_layers=3,
                                                                 others="selective")))}
    for policy in [*uniform, mixed]:
        parallel = plain.model_copy(update=policy)
        for more in (False, True):
            assert table.bound_s(parallel, more_full_layers=more) == _reference_bound(
                table, parallel, more), (policy, more)


def test_memory_probes_sum_the_same_bytes_as_the_ledger_lines() -> None:
    # A probe with a memo sums a rank's parts without building its ledger lines: GPU and
    # host totals and the stored layer activations (what remote offload may move) must be
    # the ledger's to the byte, with offloaded activations (host bytes), an unfused loss
    # (the reserved logits block) and ZeRO-3 buffers among the terms.
    from models.core.memory import _rank_bytes, stage_memory
    from models.core.rank_activations import STORED_ACTIVATIONS

    spec = model_preset("llama-3.1-8b")
    for fused in (True, False):
        training = TrainingSpec(global_batch_size=64, sequence_length=4096,
                                fused_cross_entropy=fused)
        memo = LedgerMemo(spec=spec, training=training)
        for zero, policy in ((1, {}), (3, {"recompute": RecomputeMode.SELECTIVE,
                                           "activation_offload_frac": 0.5}),
                             (2, {"recompute": FullLayers(full_layers=2)})):
            parallel = ParallelConfig(tp=2, pp=2, dp=4, zero_stage=zero, **policy)
            m = micro_batch_count(training, parallel)
            for layout in pipeline_layout(spec, parallel):
                stage = stage_memory(spec, training, parallel, layout, num_micro_batches=m)
                stored = sum(c.bytes for c in stage.components if c.name == STORED_ACTIVATIONS)
                assert stored > 0
                assert _rank_bytes(spec, training, parallel, layout, m, memo) == (
                    stage.total_bytes, stage.host_bytes, stored), (fused, zero, layout.rank)
                assert (stage.host_bytes > 0) == ("activation_offload_frac" in policy)


def test_candidate_lists_are_kept_only_when_complete_and_per_constraints() -> None:
    from solver import space

    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    space._MESHES.clear()
    cut = space.candidate_meshes(spec, training, world_size=16, gpus_per_node=8,
                                 constraints=Constraints(), deadline=0.0)
    assert cut == [] and not space._MESHES  # past the deadline: partial, not kept
    full = space.candidate_meshes(spec, training, world_size=16, gpus_per_node=8,
                                  constraints=Constraints())
    assert full and len(space._MESHES) == 1
    again = space.candidate_meshes(spec, training, world_size=16, gpus_per_node=8,
                                   constraints=Constraints(), deadline=0.0)
    assert again == full and again is not full
    pinned = space.candidate_meshes(spec, training, world_size=16, gpus_per_node=8,
                                    constraints=Constraints(tp=2))
    assert pinned and all(c.tp == 2 for c in pinned) and len(pinned) < len(full)
    assert len(space._MESHES) == 2


def test_zero3_bound_kept_per_core_and_degrees_equals_a_fresh_one() -> None:
    from solver.bounds import BoundTables

    spec = model_preset("deepseek-v3")
    cluster = cluster_preset("h800-sxm5-80gb", num_nodes=32)
    training = TrainingSpec(global_batch_size=1024, sequence_length=4096)
    candidates = candidate_meshes(spec, training, world_size=cluster.world_size,
                                  gpus_per_node=8, constraints=Constraints())
    shared = BoundTables(spec, training, cluster)
    # The sample drawn before 1F1B pipelines of fewer micro-batches than stages were listed.
    sample = random.Random(9).sample(
        [c for c in candidates if c.schedule != PipelineSchedule.ONE_F_ONE_B
         or c.num_micro_batches >= c.pp], 40)
    kept = [shared.zero3_time_bound_s(c) for c in sample]
    assert [BoundTables(spec, training, cluster).zero3_time_bound_s(c)
            for c in sample] == kept
    assert len(shared._zero3_cache) < len(sample)  # candidates shared a core and degrees


def test_core_times_kept_across_cluster_sizes_are_the_ones_each_size_computes() -> None:
    # The bounds' core times are kept on the search memo by recipe and the cluster without
    # its node count, so a sweep's sizes and a request's later searches share them: a core
    # first computed for a candidate on 8 nodes must be the one a 16-node candidate with
    # the same core computes itself.
    from models.core.search_memo import search_memo
    from solver.bounds import BoundTables, CoreInputs

    spec = model_preset("deepseek-v3")
    training = TrainingSpec(global_batch_size=1024, sequence_length=4096, compute_dtype="fp8")
    small = cluster_preset("h800-sxm5-80gb", num_nodes=8)
    large = cluster_preset("h800-sxm5-80gb", num_nodes=16)
    with search_memo():
        first = BoundTables(spec, training, small)
        second = BoundTables(spec, training, large)
        assert second._core_cache is first._core_cache
        for c in candidate_meshes(spec, training, world_size=small.world_size,
                                  gpus_per_node=8, constraints=Constraints()):
            first.core(c)
        from_small = set(first._core_cache)
        served = 0
        for c in candidate_meshes(spec, training, world_size=large.world_size,
                                  gpus_per_node=8, constraints=Constraints()):
            # Counted only where the core was kept from the 8-node candidates, not from an
            # earlier 16-node one.
            served += CoreInputs.of(c, training) in from_small
            assert second.core(c) == second._compute_core(c), c.key
        assert from_small and served > 0
        other = BoundTables(spec, training.model_copy(update={"sequence_length": 2048}), large)
        assert other._core_cache is not first._core_cache
