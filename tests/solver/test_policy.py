"""The per-stage policy CP-SAT subproblem: fits every stage, is proven optimal, and spends
recomputation only where memory binds."""

from api_schemas import Constraints, FullLayers, ParallelConfig, RecomputeMode, TrainingSpec
from models.catalog.presets import cluster_preset, model_preset
from models.core.memory import memory_ledger
from models.core.step_time import estimate_step
from solver.candidate_eval import layer_split_options
from solver.cpsat import SolverConfig, SolveStatus
from solver.policy import choose_stage_policies, policy_options

SPEC = model_preset("llama-3.1-70b")
TRAIN = TrainingSpec(global_batch_size=256, sequence_length=8192)
CONFIG = SolverConfig(max_time_s=10, num_workers=1, random_seed=0)


def _setting(nodes: int = 4) -> tuple[ParallelConfig, object]:
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=nodes)
    parallel = ParallelConfig(tp=4, pp=8, dp=nodes * 8 // 32, sequence_parallel=True,
                              zero_stage=1)
    return parallel, cluster


def test_policy_fits_every_stage_and_is_proven_optimal() -> None:
    parallel, cluster = _setting()
    assert not memory_ledger(SPEC, TRAIN, parallel, cluster).fits  # plain 1F1B overflows
    result = choose_stage_policies(SPEC, TRAIN, parallel, cluster,
                                   policy_options(SPEC, Constraints(allow_offload=False,
                                                                    allow_fp8_activations=False)),
                                   CONFIG)
    assert result is not None and result.status == SolveStatus.OPTIMAL
    assert memory_ledger(SPEC, TRAIN, result.parallel, cluster).fits


def test_later_stages_recompute_no_more_than_earlier_ones() -> None:
    # 1F1B keeps p - d micro-batches on stage d, so memory binds hardest on stage 0.
    parallel, cluster = _setting()
    result = choose_stage_policies(SPEC, TRAIN, parallel, cluster,
                                   policy_options(SPEC, Constraints(allow_offload=False,
                                                                    allow_fp8_activations=False)),
                                   CONFIG)
    assert result is not None and result.parallel.stage_policies is not None

    def recomputed(policy: object) -> int:
        rc = policy.recompute  # type: ignore[attr-defined]
        return rc.full_layers if isinstance(rc, FullLayers) else (
            100 if rc == RecomputeMode.FULL else 0)

    counts = [recomputed(p) for p in result.parallel.stage_policies]
    assert counts == sorted(counts, reverse=True), counts


def test_policy_is_not_slower_than_uniform_full_recompute() -> None:
    parallel, cluster = _setting()
    result = choose_stage_policies(SPEC, TRAIN, parallel, cluster,
                                   policy_options(SPEC, Constraints()), CONFIG)
    assert result is not None
    full = parallel.model_copy(update={"recompute": RecomputeMode.FULL})
    assert memory_ledger(SPEC, TRAIN, full, cluster).fits
    assert (estimate_step(SPEC, TRAIN, result.parallel, cluster).step_time_s
            <= estimate_step(SPEC, TRAIN, full, cluster).step_time_s)


def test_no_policy_when_nothing_can_fit() -> None:
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    parallel = ParallelConfig(tp=8, pp=1, dp=1, sequence_parallel=True, zero_stage=1)
    training = TRAIN.model_copy(update={"global_batch_size": 8})
    assert choose_stage_policies(SPEC, training, parallel, cluster,
                                 policy_options(SPEC, Constraints()), CONFIG) is None


def test_layer_split_options_lighten_first_and_last_ranks() -> None:
    from solver.candidate_eval import layer_split_options

    options = layer_split_options(model_preset("llama-3.1-405b"), ParallelConfig(pp=16))
    assert options[0] is None
    lighter = options[1]
    assert lighter is not None and sum(lighter) == 126
    assert lighter[0] == lighter[-1] == 6 and max(lighter) == 9


def test_refinement_never_returns_a_slower_or_overflowing_plan() -> None:
    from solver.candidate_eval import evaluate_candidate, refine_policies
    from solver.space import candidate_meshes

    parallel, cluster = _setting()
    mesh = next(c for c in candidate_meshes(SPEC, TRAIN, world_size=32, gpus_per_node=8,
                                             constraints=Constraints(tp=4, pp=8, vpp=1,
                                                                     schedule="1f1b")))
    plan = evaluate_candidate(SPEC, TRAIN, cluster, mesh, Constraints())
    refined = refine_policies(SPEC, TRAIN, cluster, plan, Constraints(), CONFIG)
    assert refined.ledger.fits
    assert refined.estimate.step_time_s <= plan.estimate.step_time_s


def _remote_setting() -> tuple[object, TrainingSpec, ParallelConfig, object]:
    """Llama 3.1 70B at 16K tokens, TP8 x PP8, two interleaved chunks: stage 0 holds 23
    micro-batch x chunk units in flight and is over the capacity without a saving policy."""
    spec = model_preset("llama-3.1-70b")
    training = TrainingSpec(global_batch_size=64, sequence_length=16384)
    parallel = ParallelConfig(tp=8, pp=8, dp=1, vpp=2, schedule="interleaved_1f1b",
                              sequence_parallel=True, zero_stage=1)
    return spec, training, parallel, cluster_preset("h100-sxm5-80gb", num_nodes=8,
                                                    gpus_per_node=8)


def test_with_remote_offload_the_subproblem_moves_bytes_instead_of_recomputing() -> None:
    """C6-C8: with lighter first and last ranks (the refinement's second split) stages 1-2
    are over the capacity; they keep part of their stored activations in the other stages'
    spare memory rather than recomputing; the exact ledger of the chosen plan fits with the
    flag on and not without it, and its step carries the remote term and is faster. On
    either split the subproblem's own optimum is never worse with remote offload allowed
    (its solutions without any moved byte are still there)."""
    spec, training, parallel, cluster = _remote_setting()
    options = policy_options(spec, Constraints(allow_offload=False))
    config = SolverConfig(max_time_s=30, num_workers=1)
    splits = layer_split_options(spec, parallel)
    assert splits[1] == (9, 11, 11, 10, 10, 10, 10, 9)
    for split in splits:
        base = parallel.model_copy(update={"layers_per_stage": split})
        local = choose_stage_policies(spec, training, base, cluster, options, config)
        moved = choose_stage_policies(spec, training, base, cluster, options, config,
                                      remote=True)
        assert local is not None and moved is not None
        assert local.bottleneck_s is not None and moved.bottleneck_s is not None
        assert moved.bottleneck_s <= local.bottleneck_s
        assert not local.parallel.remote_activation_offload
        assert any(local.parallel.policy_of(r).recompute != RecomputeMode.NONE
                   for r in range(8))
    assert moved.parallel.remote_activation_offload
    assert all(moved.parallel.policy_of(r).recompute == RecomputeMode.NONE for r in range(8))
    ledger = memory_ledger(spec, training, moved.parallel, cluster)
    assert ledger.fits and sum(s.remote_sent_bytes for s in ledger.stages) > 0
    without = memory_ledger(spec, training, moved.parallel.model_copy(
        update={"remote_activation_offload": False}), cluster)
    assert not without.fits
    step = estimate_step(spec, training, moved.parallel, cluster)
    assert step.overheads_s["remote activation offload"] > 0
    assert step.step_time_s < estimate_step(spec, training, local.parallel, cluster).step_time_s


def test_remote_offload_costs_the_subproblem_time_on_a_slow_link() -> None:
    """On a 0.1 GB/s NIC the moved bytes cannot hide: on the split where a fast link moves
    them (above), the subproblem recomputes instead."""
    spec, training, parallel, cluster = _remote_setting()
    parallel = parallel.model_copy(update={"layers_per_stage": (9, 11, 11, 10, 10, 10, 10, 9)})
    slow = cluster.model_copy(update={"inter_node": cluster.inter_node.model_copy(
        update={"bandwidth_bytes_per_s": 1e8})})
    options = policy_options(spec, Constraints(allow_offload=False))
    chosen = choose_stage_policies(spec, training, parallel, slow, options,
                                   SolverConfig(max_time_s=30, num_workers=1), remote=True)
    assert chosen is not None and not chosen.parallel.remote_activation_offload
