"""The planner's bounds are lower bounds of the value they stand for."""

import math
import random
from typing import Any

import pytest

from api_schemas import ClusterSpec, Constraints, ModelSpec, ParallelConfig, TrainingSpec
from api_schemas.parallel import PipelineSchedule
from api_schemas.requests import DEFAULT_MEMORY_MARGIN_FRAC
from models.catalog.presets import cluster_preset, model_preset
from models.errors import InvalidSpecError
from solver.bounds import BoundTables
from solver.candidate_eval import Rejection, evaluate_candidate, plain_makespan_bound
from solver.planner import SearchResult
from solver.space import MeshCandidate, candidate_meshes


def _case(model: str, gpu: str, nodes: int, batch: int, seq: int,
          constraints: Constraints | None = None, **training_fields: Any
          ) -> tuple[ModelSpec, ClusterSpec, TrainingSpec, list[MeshCandidate]]:
    """A parametrized problem (preset, GPU, nodes, global batch, sequence, other training
    fields) and its candidate meshes on 8-GPU nodes under `constraints` (default: none)."""
    spec = model_preset(model)
    cluster = cluster_preset(gpu, num_nodes=nodes)
    training = TrainingSpec(global_batch_size=batch, sequence_length=seq, **training_fields)
    candidates = candidate_meshes(spec, training, world_size=cluster.world_size,
                                  gpus_per_node=8, constraints=constraints or Constraints())
    return spec, cluster, training, candidates


@pytest.mark.parametrize(("model", "gpu", "nodes", "batch", "seq"), [
    ("llama-3.1-8b", "h100-sxm5-80gb", 2, 64, 4096),
    ("mixtral-8x7b", "h100-sxm5-80gb", 4, 64, 4096),
    ("gpt-7.5b", "a100-sxm4-80gb", 4, 256, 2048),
    # A hybrid of KDA and MLA layers at long context (state-passing and ring CP).
    ("kimi-linear-48b-a3b-instruct", "h100-sxm5-80gb", 4, 32, 32768),
])
def test_time_and_memory_bounds_never_exceed_the_evaluated_values(model: str, gpu: str,
                                                                  nodes: int, batch: int,
                                                                  seq: int) -> None:
    spec, cluster, training, candidates = _case(model, gpu, nodes, batch, seq)
    tables = BoundTables.of_request(spec, training, cluster, Constraints())
    for c in random.Random(3).sample(candidates, min(25, len(candidates))):
        _bounds_hold(spec, training, cluster, tables, c)


def _bounds_hold(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                 tables: BoundTables, c: MeshCandidate) -> bool:
    """Check the time, plain-run and memory bounds against the candidate's evaluation;
    False where the candidate is rejected (nothing to check)."""
    result = evaluate_candidate(spec, training, cluster, c, Constraints())
    if isinstance(result, Rejection):
        return False
    value = result.estimate.step_time_s
    assert tables.time_bound_s(c) <= value * (1 + 1e-9), c.key
    assert plain_makespan_bound(spec, training, cluster, c) <= value * (1 + 1e-9), c.key
    assert tables.memory_bound_bytes(c, max_zero=3, max_offload=0.5) \
        <= result.ledger.peak_bytes, c.key
    return True


def test_bounds_hold_for_one_f_one_b_with_fewer_micro_batches_than_stages() -> None:
    """1F1B with m < p (as Megatron-LM and DeepSpeed run it): the time bound (the closed
    form (m+p-1)(F+B+W) at the lightest stage, or m times the mean work), the plain-run
    bound and the memory bound stay at or below every evaluated plan."""
    spec, cluster, training, candidates = _case("llama-3.1-8b", "h100-sxm5-80gb", 2, 8, 4096)
    few = [c for c in candidates if c.schedule == PipelineSchedule.ONE_F_ONE_B
           and c.num_micro_batches < c.pp]
    tables = BoundTables.of_request(spec, training, cluster, Constraints())
    checked = sum(_bounds_hold(spec, training, cluster, tables, c)
                  for c in random.Random(3).sample(few, min(20, len(few))))
    assert checked >= 5, checked


@pytest.mark.parametrize(("model", "nodes", "batch", "seq"), [
    ("deepseek-v2-lite", 4, 128, 4096),  # one dense layer first, then MoE layers
    ("gpt-oss-20b", 2, 64, 8192),  # sliding-window and full-attention layers alternate
])
def test_time_bound_holds_on_pipelines_of_uneven_layers(model: str, nodes: int, batch: int,
                                                        seq: int) -> None:
    """The closed form is taken at the lightest virtual stage's layer count times the mean
    layer; where layers differ in cost the cheap ones may gather on one stage, and the
    bound must still stay below the simulated makespan of every pipelined candidate."""
    constraints = Constraints(framework="any")
    spec, cluster, training, meshes = _case(model, "h100-sxm5-80gb", nodes, batch, seq,
                                            constraints)
    tables = BoundTables.of_request(spec, training, cluster, Constraints())
    candidates = [c for c in meshes if c.pp > 1]
    checked = 0
    for c in random.Random(5).sample(candidates, min(60, len(candidates))):
        result = evaluate_candidate(spec, training, cluster, c, constraints)
        if isinstance(result, Rejection):
            continue
        assert tables.time_bound_s(c) <= result.estimate.pipeline_makespan_s * (1 + 1e-9), c.key
        checked += 1
    assert checked >= 10


TIGHT_CASES = [
    # Memory-tight: many candidates need ZeRO-3 (the forced-ZeRO-3 bound applies).
    ("llama-3.1-70b", "h100-sxm5-80gb", 4, 64, 4096),
    # Few micro-batches per pipeline (the one-micro-batch chain bound dominates).
    ("gpt-7.5b", "a100-sxm4-80gb", 4, 8, 2048),
]


@pytest.mark.parametrize(("model", "gpu", "nodes", "batch", "seq"), TIGHT_CASES)
def test_forced_zero3_and_chain_bounds_never_exceed_the_evaluated_values(
        model: str, gpu: str, nodes: int, batch: int, seq: int) -> None:
    from solver.tightening import _forced_zero_stage

    spec, cluster, training, candidates = _case(model, gpu, nodes, batch, seq)
    tables = BoundTables.of_request(spec, training, cluster, Constraints())
    forced = chained = 0
    for c in random.Random(5).sample(candidates, min(60, len(candidates))):
        zero = _forced_zero_stage(tables, c, [0, 1, 2, 3], 0.5, cluster.capacity_bytes)
        result = evaluate_candidate(spec, training, cluster, c, Constraints())
        if isinstance(result, Rejection):
            continue
        value = result.estimate.step_time_s
        bound = plain_makespan_bound(spec, training, cluster, c, zero_stage=zero)
        assert bound <= value * (1 + 1e-9), c.key
        if zero == 3:
            forced += 1
            assert result.parallel.zero_stage == 3
        zero3 = evaluate_candidate(spec, training, cluster, c, Constraints(zero_stage=3))
        if not isinstance(zero3, Rejection):
            assert tables.zero3_time_bound_s(c) <= zero3.estimate.step_time_s * (1 + 1e-9), \
                c.key
        if c.pp > 1 and c.num_micro_batches < c.pp:
            chained += 1
    assert forced or chained, "the cases exercise neither bound"


@pytest.mark.parametrize(("model", "gpu", "nodes", "batch", "seq"), [
    # DP-heavy meshes on a slow fabric: the per-step tail is a large share of the step.
    ("gpt-7.5b", "a100-sxm4-80gb", 4, 256, 2048),
    ("mixtral-8x7b", "h100-sxm5-80gb", 4, 64, 4096),
])
def test_step_time_bound_is_below_the_step_and_counts_the_tail(model: str, gpu: str,
                                                               nodes: int, batch: int,
                                                               seq: int) -> None:
    """`step_time_bound` (makespan bound + the exact per-step tail) never exceeds the
    estimated step of the same configuration, and is at least the makespan bound, strictly
    above it wherever a tail is exposed."""
    from models.core.step_time import estimate_step, pipeline_makespan_bound, step_time_bound

    spec, cluster, training, candidates = _case(model, gpu, nodes, batch, seq)
    tails = 0
    for c in random.Random(11).sample(candidates, min(30, len(candidates))):
        for zero in (0, 1, 3):
            parallel = c.parallel(zero_stage=zero)
            step = estimate_step(spec, training, parallel, cluster).step_time_s
            bound = step_time_bound(spec, training, parallel, cluster)
            span = pipeline_makespan_bound(spec, training, parallel, cluster)
            assert span <= bound <= step * (1 + 1e-9), (c.key, zero)
            tails += bound > span
    assert tails, "no configuration had a per-step tail"


def test_a_dominated_candidate_is_proven_no_faster_than_the_cutoff() -> None:
    from solver.candidate_eval import Dominated, ScoredPlan

    spec, cluster, training, candidates = _case("llama-3.1-8b", "h100-sxm5-80gb", 2, 64, 4096)
    tables = BoundTables.of_request(spec, training, cluster, Constraints())
    dominated = 0
    for c in random.Random(7).sample(candidates, min(20, len(candidates))):
        exact = evaluate_candidate(spec, training, cluster, c, Constraints())
        if not isinstance(exact, ScoredPlan):
            continue
        value = exact.estimate.step_time_s
        for cutoff in (value * 0.9, value, value * 1.1):
            cut = evaluate_candidate(spec, training, cluster, c, Constraints(),
                                     step_cutoff_s=cutoff,
                                     zero3_bound_s=tables.zero3_time_bound_s(c))
            if isinstance(cut, Dominated):
                dominated += 1
                assert value >= cutoff and cut.bound_s <= value * (1 + 1e-9), c.key
            else:
                assert isinstance(cut, ScoredPlan)
                assert cut.estimate.step_time_s == value and cut.parallel == exact.parallel
    assert dominated, "no cutoff ever applied"


def test_candidates_whose_groups_straddle_nodes_are_timed_and_planned() -> None:
    # 15 nodes: a data-parallel group of 3 spreads 2 + 1 over nodes; the mesh's placement
    # times it pessimistically (every member on its own node) rather than failing.
    from api_schemas import ClusterInput, ModelPreset, PlanRequest, PlanStatus, SolverLimits
    from solver import plan

    spec, cluster, training, candidates = _case("gpt-1.7b", "a100-sxm4-80gb", 15, 240, 2048)
    tables = BoundTables.of_request(spec, training, cluster, Constraints())
    uneven = [c for c in candidates if c.dp == 3 and c.tp * c.cp == 4]
    assert uneven
    assert all(tables.zero3_time_bound_s(c) > 0 for c in uneven)
    response = plan(PlanRequest(model=ModelPreset(preset="gpt-1.7b"),
                                cluster=ClusterInput(gpu="a100-sxm4-80gb", num_nodes=15),
                                training=training, constraints=Constraints(zero_stage=3),
                                solver=SolverLimits(time_limit_s=20, top_k=2, num_workers=1)))
    assert response.status == PlanStatus.OPTIMAL


FLOOR_CASES = [
    # Dense, 16-bit compute (FP8 storage adds casts), DP-heavy on a slow fabric.
    ("gpt-7.5b", "a100-sxm4-80gb", 4, 256, 2048, "bf16"),
    # MoE with expert data parallelism: two per-step reductions.
    ("mixtral-8x7b", "h100-sxm5-80gb", 4, 64, 4096, "bf16"),
    # MoE with the host-bound expert layer, FP8 compute and an MTP module.
    ("deepseek-v3", "h800-sxm5-80gb", 32, 1024, 4096, "fp8"),
]

FLOOR_POLICIES = [
    {},
    {"recompute": "selective"},
    {"recompute": "selective", "fp8_activations": True, "activation_offload_frac": 0.5},
    {"recompute": {"full_layers": 1, "others": "selective"}, "fp8_activations": True,
     "activation_offload_frac": 0.5},
    {"recompute": "full", "activation_offload_frac": 0.5},
    {"recompute": "full", "fp8_activations": True},
]


@pytest.mark.parametrize(("model", "gpu", "nodes", "batch", "seq", "dtype"), FLOOR_CASES)
def test_step_time_floor_is_below_the_step_of_every_policy(model: str, gpu: str, nodes: int,
                                                           batch: int, seq: int,
                                                           dtype: str) -> None:
    """`step_time_floors_s` (the makespan bound plus the per-step tail at its best overlap)
    never exceeds the estimated step of any activation policy on the mesh and ZeRO stage,
    offload at the share it is given; and it rises above the makespan bound somewhere."""
    from models.core.step_time import estimate_step, pipeline_makespan_bound, step_time_floors_s
    from solver.policy import broad_selective_modules

    spec, cluster, training, candidates = _case(model, gpu, nodes, batch, seq,
                                                compute_dtype=dtype)
    modules = broad_selective_modules(spec)
    above = checked = 0
    for c in random.Random(13).sample(candidates, min(12, len(candidates))):
        plain, zero3 = (pipeline_makespan_bound(spec, training, c.parallel(zero_stage=zero),
                                                cluster) for zero in (0, 3))
        spans = {0: plain, 1: plain, 2: plain, 3: zero3}
        floors = step_time_floors_s(spec, training, c.parallel(), cluster,
                                    makespan_bounds_s=spans, max_offload=0.5)
        for zero in (0, 1, 2, 3):
            floor = floors[zero]
            above += floor > spans[zero] * (1 + 1e-6)
            for policy in FLOOR_POLICIES:
                fields = dict(policy)
                if fields.get("recompute", "none") != "none":
                    fields["recompute_modules"] = modules
                step = estimate_step(spec, training, c.parallel(zero_stage=zero, **fields),
                                     cluster).step_time_s
                assert floor <= step * (1 + 1e-9), (c.key, zero, policy)
                checked += 1
    assert checked and above, "the floor never rose above the makespan bound"


def test_step_time_floor_refuses_a_configuration_with_a_policy() -> None:
    from models.core.step_time import step_time_floors_s

    spec = model_preset("llama-3.1-8b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=2)
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    c = candidate_meshes(spec, training, world_size=16, gpus_per_node=8,
                         constraints=Constraints())[0]
    with pytest.raises(ValueError, match="without one"):
        step_time_floors_s(spec, training, c.parallel(recompute="full"), cluster,
                           makespan_bounds_s={0: 1.0})


def test_memory_bound_holds_per_zero_stage_with_an_mtp_module() -> None:
    """The memory bound at each ZeRO stage stays below the most frugal plan's ledger for a
    model whose MTP module has routed experts (they shard over EP, not only TP)."""
    from models.core.memory import memory_ledger
    from solver.ladder import ALL_POLICIES, frugal, with_policy

    spec, cluster, training, candidates = _case("deepseek-v3", "h800-sxm5-80gb", 64, 2048, 4096,
                                                compute_dtype="fp8")
    tables = BoundTables.of_request(spec, training, cluster, Constraints())
    constraints = Constraints()
    for c in random.Random(17).sample(candidates, min(15, len(candidates))):
        for zero in (0, 1, 2, 3):
            most = with_policy(c, zero, frugal(spec, constraints, None, ALL_POLICIES),
                               constraints)
            ledger = memory_ledger(spec, training, most, cluster)
            assert tables.memory_bound_bytes(c, max_zero=zero, max_offload=0.5) \
                <= ledger.peak_bytes, (c.key, zero)


@pytest.mark.parametrize(("model", "seq"), [("llama-4-scout-17b-16e", 32768),
                                            ("gemma-3-27b-it", 16384),
                                            ("qwen3-30b-a3b", 8192),
                                            ("llama-3.1-8b", 8192)])
def test_memory_bounds_count_the_head_share_and_stay_below_the_most_frugal_ledger(
        model: str, seq: int) -> None:
    """With the output head's activations (fp32 logits over a large vocabulary) in the
    bound, the memory bound and the per-policy bound stay below the most frugal plan's
    ledger at every ZeRO stage, and below the mean over its ranks; the head share is what
    tells apart a pipeline-less Llama 4 Scout at 32k tokens (26 GB of logits) from the
    capacity."""
    from models.core.memory import memory_ledger
    from solver.ladder import ALL_POLICIES, frugal, with_policy

    spec, cluster, training, candidates = _case(model, "h100-sxm5-80gb", 4, 64, seq)
    tables = BoundTables.of_request(spec, training, cluster, Constraints())
    constraints = Constraints()
    for c in random.Random(29).sample(candidates, min(12, len(candidates))):
        for zero in (1, 3):
            most = with_policy(c, zero, frugal(spec, constraints, None, ALL_POLICIES),
                               constraints)
            ledger = memory_ledger(spec, training, most, cluster)
            mean = sum(stage.total_bytes for stage in ledger.stages) / len(ledger.stages)
            assert tables.memory_bound_bytes(c, max_zero=zero, max_offload=0.0) \
                <= ledger.peak_bytes, (c.key, zero)
            assert tables.policy_memory_bound_bytes(most, c, max_zero=zero) <= mean, \
                (c.key, zero)


def test_head_in_flight_bound_equals_the_simulated_count() -> None:
    """The head's in-flight count the memory bounds use (from the schedule's traits) is the
    count the simulated program keeps on the head's chunk, for every schedule on these
    shapes: all micro-batches under GPipe, one elsewhere. (A lower bound would do; equality
    shows the traits lose nothing.)"""
    from models.core.memory_floors import head_in_flight_floor
    from models.core.pipeline.registry import SCHEDULES
    from models.core.rank_activations import in_flight_counts

    checked = set()
    for traits in SCHEDULES.values():
        for pp, vpp, m in [(2, 2, 4), (4, 2, 8), (4, 1, 12), (4, 3, 16), (8, 2, 8)]:
            try:
                c = MeshCandidate(tp=1, pp=pp, dp=1, cp=1, ep=1, etp=1, vpp=vpp,
                                  micro_batch_size=1, num_micro_batches=m,
                                  schedule=traits.schedule, sequence_parallel=False)
                profile = in_flight_counts(c.parallel(), m)
            except (InvalidSpecError, ValueError):
                continue
            simulated = max(profile.chunk_peaks_until_b[rank][chunk] for rank in range(pp)
                            for chunk in profile.last_stage_chunks[rank])
            assert head_in_flight_floor(c.schedule, pp, m) == simulated, (traits.schedule, pp,
                                                                          vpp, m)
            checked.add(traits.schedule)
    assert checked == set(SCHEDULES)


@pytest.mark.parametrize(("model", "gpu", "nodes", "batch", "seq", "dtype"), FLOOR_CASES[:2])
def test_zero_stage_floors_leave_the_value_below_the_cutoff_unchanged(
        model: str, gpu: str, nodes: int, batch: int, seq: int, dtype: str) -> None:
    """With per-ZeRO-stage floors, an evaluation returns the same plan whenever its value is
    below the cutoff, and otherwise a Dominated bound no higher than the value."""
    from models.core.step_time import pipeline_makespan_bound, step_time_floors_s
    from solver.candidate_eval import Dominated, ScoredPlan

    spec, cluster, training, candidates = _case(model, gpu, nodes, batch, seq,
                                                compute_dtype=dtype)
    skipped = 0
    for c in random.Random(19).sample(candidates, min(15, len(candidates))):
        exact = evaluate_candidate(spec, training, cluster, c, Constraints())
        if not isinstance(exact, ScoredPlan):
            continue
        span = pipeline_makespan_bound(spec, training, c.parallel(), cluster)
        floors = step_time_floors_s(spec, training, c.parallel(), cluster,
                                    makespan_bounds_s=dict.fromkeys((0, 1, 2, 3), span),
                                    max_offload=0.5)
        value = exact.estimate.step_time_s
        for cutoff in sorted({*floors.values(), value * 0.95, value, value * 1.05}):
            cut = evaluate_candidate(spec, training, cluster, c, Constraints(),
                                     step_cutoff_s=cutoff, zero_floors_s=floors)
            skipped += any(f >= cutoff for f in floors.values())
            if isinstance(cut, Dominated):
                assert value >= cutoff and cut.bound_s <= value * (1 + 1e-9), c.key
            else:
                assert isinstance(cut, ScoredPlan), c.key
                assert cut.estimate.step_time_s == value and cut.parallel == exact.parallel
    assert skipped, "no floor ever reached a cutoff"


@pytest.mark.parametrize(("model", "gpu", "nodes", "batch", "seq", "dtype"), FLOOR_CASES)
def test_recompute_bound_holds_for_the_policy_and_more_full_layers(
        model: str, gpu: str, nodes: int, batch: int, seq: int, dtype: str) -> None:
    """`policy_work_bound_s` never exceeds the step of the plan it bounds, and with
    `more_full_layers` not the step of the same policy with more first layers fully
    recomputed either."""
    from models.core.step_time import estimate_step, work_table
    from solver.policy import broad_selective_modules

    spec, cluster, training, candidates = _case(model, gpu, nodes, batch, seq,
                                                compute_dtype=dtype)
    modules = broad_selective_modules(spec)
    checked = 0
    for c in random.Random(23).sample(candidates, min(10, len(candidates))):
        for zero in (1, 3):
            table = work_table(spec, training, c.parallel(zero_stage=0 if zero < 3 else 3),
                               cluster)
            for k in (0, 1, 2):
                policy = {"recompute": {"full_layers": k, "others": "selective"},
                          "recompute_modules": modules, "activation_offload_frac": 0.5}
                bound = table.bound_s(c.parallel(zero_stage=zero, **policy),
                                      more_full_layers=True)
                for more in (k, k + 1, k + 3):
                    wider = {**policy, "recompute": {"full_layers": more, "others": "selective"}}
                    step = estimate_step(spec, training, c.parallel(zero_stage=zero, **wider),
                                         cluster).step_time_s
                    assert bound <= step * (1 + 1e-9), (c.key, zero, k, more)
                    checked += 1
            full = c.parallel(zero_stage=zero, recompute="full", recompute_modules=modules)
            assert table.bound_s(full) <= estimate_step(spec, training, full,
                                                        cluster).step_time_s * (1 + 1e-9)
    assert checked


def test_the_wait_bound_holds_for_every_plan_of_a_candidate() -> None:
    from models.core.step_time.step_terms import SLOWEST_GPU
    from solver.candidate_eval import ScoredPlan

    spec, cluster, training, candidates = _case("mixtral-8x7b", "h100-sxm5-80gb", 4, 128, 4096)
    tables = BoundTables.of_request(spec, training, cluster, Constraints())
    checked = 0
    for c in random.Random(3).sample(candidates, min(30, len(candidates))):
        scored = evaluate_candidate(spec, training, cluster, c, Constraints(allow_offload=True))
        if not isinstance(scored, ScoredPlan):
            continue
        wait = scored.estimate.overheads_s[SLOWEST_GPU]
        assert 0 < tables.wait_bound_s(c) <= wait * (1 + 1e-9), c.key
        checked += 1
    assert checked >= 5


def _check_policy_floors(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                         constraints: Constraints, candidates: list[MeshCandidate]
                         ) -> tuple[int, int]:
    """For each candidate none of whose plain plans may fit: per framework variant (its
    narrowed constraints and policy caps, as the planner evaluates it) and ZeRO stage, the
    floor of `policy_floors_s` stays at or below the best plan's step time, and the
    mean-rank memory bound of that plan's own policy below its ledger's mean. Returns
    (plans checked, floors raised above the bound without fully recomputed layers)."""
    from solver.candidate_eval import ScoredPlan, allowed_zero_stages, policy_floors_s
    from solver.targets import candidate_variants

    tables = BoundTables.of_request(spec, training, cluster, constraints)
    checked = raised = 0
    for c in candidates:
        def may_fit(parallel: ParallelConfig, c: MeshCandidate = c) -> bool:
            return tables.policy_memory_bound_bytes(parallel, c, max_zero=3) \
                <= cluster.capacity_bytes

        if may_fit(c.parallel()):
            continue
        for variant in candidate_variants(spec, training, c, constraints):
            zeros = allowed_zero_stages(variant.constraints)
            floors = policy_floors_s(spec, training, cluster, c, variant.constraints, zeros,
                                     variant.caps, may_fit)
            no_full_layers = policy_floors_s(spec, training, cluster, c, variant.constraints,
                                             zeros, variant.caps, lambda _: True)
            for zero, floor in floors.items():
                best = evaluate_candidate(
                    spec, training, cluster, c,
                    variant.constraints.model_copy(update={"zero_stage": zero}),
                    caps=variant.caps)
                if not isinstance(best, ScoredPlan):
                    continue
                assert floor <= best.estimate.step_time_s * (1 + 1e-9), \
                    (c.key, variant.framework, zero, floor, best.estimate.step_time_s)
                stages = best.ledger.stages
                mean = sum(s.total_bytes for s in stages) / len(stages)
                assert tables.policy_memory_bound_bytes(best.parallel, c, max_zero=zero) <= mean
                checked += 1
                raised += floor > no_full_layers[zero] * (1 + 1e-9)
    return checked, raised


@pytest.mark.parametrize(("model", "gpu", "nodes", "batch", "seq", "dtype"), [
    ("llama-3.1-70b", "h100-sxm5-80gb", 8, 512, 8192, "bf16"),
    ("deepseek-v3", "h800-sxm5-80gb", 32, 1024, 4096, "fp8"),
])
@pytest.mark.parametrize("constraints", [
    Constraints(framework="any"),
    Constraints(framework="any", allow_fp8_activations=True, allow_offload=True),
    Constraints()], ids=["any", "any-fp8-offload", "released-frameworks"])
def test_policy_floors_hold_where_no_plain_plan_fits(model: str, gpu: str, nodes: int,
                                                    batch: int, seq: int, dtype: str,
                                                    constraints: Constraints) -> None:
    """Where the memory bound rules out every plan with the plain policy, the floors of
    `policy_floors_s` (recomputation of at least the layers memory demands) hold for every
    framework variant (`_check_policy_floors`), and some rise above the bound without
    fully recomputed layers."""
    spec, cluster, training, meshes = _case(model, gpu, nodes, batch, seq, constraints,
                                            compute_dtype=dtype)
    # Micro-batches up to 8: the larger ones the search also enumerates hold no plan of
    # these models at this scale, and sampling them would leave few plans to check.
    candidates = [c for c in meshes if c.micro_batch_size <= 8]
    # 1F1B pipelines with fewer micro-batches than stages are checked apart (below), so the
    # sample of the others stays the one drawn before the search admitted them.
    few = [c for c in candidates if c.schedule == PipelineSchedule.ONE_F_ONE_B
           and c.num_micro_batches < c.pp]
    sample = random.Random(29).sample([c for c in candidates if c not in few],
                                      min(60, len(candidates) - len(few)))
    checked, raised = _check_policy_floors(spec, training, cluster, constraints, sample)
    # The released frameworks run DeepSeek-V3's pipelined meshes with ZeRO-0/1 only (Megatron-LM
    # has no ZeRO-2/3 with a pipeline, torchtitan no FP8 MoE with one): fewer plans to check.
    least = 2 if (model, constraints.framework) == ("deepseek-v3", None) else 4
    assert checked >= least and raised, (checked, raised)
    # The floors hold where m < p too (each assertion is inside the check).
    _check_policy_floors(spec, training, cluster, constraints,
                         random.Random(29).sample(few, min(8, len(few))))


def test_policy_floors_leave_the_selective_rung_of_megatron_lm_below_them() -> None:
    """Megatron-LM recomputes full layers without selective recomputation on the others, so
    its most frugal policy at k = 0 stores more than its selective rung: where that rung may
    fit, the floor stays at or below the plan it gives (here the ZeRO-1 plan of a PP4 mesh,
    the only stage Megatron-LM runs with a pipeline, recomputing 11 full layers with the
    selective rung on the others at 22.75 s). Optimizer offload is withdrawn: with the
    states in host memory the plain policy may fit this mesh, and the floors then stay at
    the makespan's."""
    spec = model_preset("deepseek-v3")
    cluster = cluster_preset("h800-sxm5-80gb", num_nodes=32)
    training = TrainingSpec(global_batch_size=1024, sequence_length=4096, compute_dtype="fp8")
    constraints = Constraints(framework="megatron-lm", allow_optimizer_offload=False)
    key = "tp2-pp4-dp32-cp1-ep64-etp1-v6-mbs1-interleaved_1f1b"
    candidate = next(c for c in candidate_meshes(spec, training, world_size=cluster.world_size,
                                                 gpus_per_node=8, constraints=constraints)
                     if c.key == key)
    checked, _ = _check_policy_floors(spec, training, cluster, constraints, [candidate])
    assert checked >= 1


@pytest.mark.parametrize(("model", "gpu", "nodes", "batch", "seq"), [
    # Uneven chunks (the head on the last stage) under every schedule family.
    ("mixtral-8x7b", "h100-sxm5-80gb", 8, 256, 4096),
    ("gpt-7.5b", "a100-sxm4-80gb", 4, 256, 2048),
    ("llama-3.1-70b", "h100-sxm5-80gb", 4, 64, 4096),
])
def test_plain_run_bound_lies_between_the_closed_form_and_every_plan(
        model: str, gpu: str, nodes: int, batch: int, seq: int) -> None:
    from models.core.step_time import estimate_step
    from solver.candidate_eval import plain_run_makespan

    constraints = Constraints(framework="any")
    spec, cluster, training, candidates = _case(model, gpu, nodes, batch, seq, constraints)
    policies: list[dict[str, object]] = [
        {}, {"recompute": "selective"}, {"recompute": "full"}, {"fp8_activations": True},
        {"activation_offload_frac": 0.5}, {"remote_activation_offload": True}]
    tighter = checked = 0
    schedules = set()
    for c in random.Random(11).sample(candidates, min(40, len(candidates))):
        run = {zero: plain_run_makespan(spec, training, cluster, c, zero_stage=zero)
               for zero in (0, 3)}
        closed = plain_makespan_bound(spec, training, cluster, c)
        assert closed <= run[0] * (1 + 1e-9), c.key
        tighter += run[0] > closed * (1 + 1e-6)
        schedules.add(c.schedule)
        for zero in (1, 3):
            for policy in policies:
                try:
                    est = estimate_step(spec, training, c.parallel(zero_stage=zero, **policy),
                                        cluster)
                except (InvalidSpecError, ValueError):
                    continue
                checked += 1
                assert run[0] <= est.pipeline_makespan_s * (1 + 1e-9), (c.key, zero, policy)
                if zero == 3:
                    assert run[3] <= est.pipeline_makespan_s * (1 + 1e-9), (c.key, policy)
    assert checked > 100 and tighter > 5 and len(schedules) >= 4, (checked, tighter, schedules)


def _searched_with_and_without(monkeypatch: pytest.MonkeyPatch, rule: str, spec: ModelSpec,
                               training: TrainingSpec, cluster: ClusterSpec,
                               constraints: Constraints) -> tuple[SearchResult, SearchResult]:
    """The throughput search with the tightening rule `rule`, then with the rule answering
    False; both must find the same optimal plan."""
    from api_schemas import Objective, SolverLimits
    from solver import planner, tightening

    def run() -> planner.SearchResult:
        return planner.search(spec, training, cluster, constraints=constraints,
                              objective=Objective.THROUGHPUT,
                              limits=SolverLimits(time_limit_s=120))

    with_rule = run()
    monkeypatch.setattr(tightening, rule, lambda *args: False)
    without = run()
    assert with_rule.status == without.status == "optimal"
    assert with_rule.best is not None and without.best is not None
    assert with_rule.best.parallel == without.best.parallel
    assert with_rule.best.estimate.step_time_s == without.best.estimate.step_time_s
    return with_rule, without


def test_the_plain_run_bound_spares_evaluations_and_keeps_the_optimum(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = model_preset("llama-3.1-70b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=8)
    training = TrainingSpec(global_batch_size=512, sequence_length=8192)
    constraints = Constraints(framework="any", allow_fp8_activations=True, allow_offload=True)
    with_run, without = _searched_with_and_without(monkeypatch, "add_run_floor", spec,
                                                   training, cluster, constraints)
    assert with_run.stats.evaluated < 0.8 * without.stats.evaluated, (
        with_run.stats.evaluated, without.stats.evaluated)


@pytest.mark.parametrize(("model", "seq"), [("gpt-oss-20b", 32768), ("gpt-oss-20b", 2048),
                                          ("kimi-linear-48b-a3b-instruct", 32768),
                                          ("llama-4-scout-17b-16e", 32768)])
def test_every_bound_holds_where_ranks_start_on_a_full_attention_layer(model: str,
                                                                       seq: int) -> None:
    """gpt-oss alternates 128-token windows and full attention within one MoE kind, Kimi
    Linear three KDA layers and one MLA, Llama 4 three layers chunked to 8192 tokens and one
    global. At 32k tokens the full layers cost several window
    or KDA layers, so a bound that timed a rank's layers as copies of its first layer of a
    kind would exceed the step on ranks whose first layer is a full one; at 2k the ZeRO-3
    gathers are only partly hidden, and a window layer hides less of them than a full
    one. Each bound sums layer timing kinds as `stage_time` does."""
    from models.core.layout import pipeline_layout
    from models.core.step_time import (
        estimate_step,
        pipeline_makespan_bound,
        step_time_floors_s,
        timing_kind,
        work_table,
    )
    from solver.candidate_eval import plain_run_makespan
    from solver.policy import broad_selective_modules

    spec = model_preset(model)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=4)
    training = TrainingSpec(global_batch_size=64, sequence_length=seq)
    tables = BoundTables.of_request(spec, training, cluster, Constraints())
    modules = broad_selective_modules(spec)
    first_of_moe_kind = {spec.is_moe_layer(i): timing_kind(spec, i)
                         for i in reversed(range(spec.num_layers))}

    def starts_off_kind(chunk: tuple[int, ...]) -> bool:
        return timing_kind(spec, chunk[0]) != first_of_moe_kind[spec.is_moe_layer(chunk[0])]

    candidates = [
        c for c in candidate_meshes(spec, training, world_size=cluster.world_size,
                                    gpus_per_node=8, constraints=Constraints(framework="any"))
        if c.pp > 1 and any(starts_off_kind(chunk)
                            for layout in pipeline_layout(spec, c.parallel())
                            for chunk in layout.chunks)]
    policies: list[dict[str, object]] = [
        {}, {"recompute": "selective", "recompute_modules": modules},
        {"recompute": {"full_layers": 1, "others": "selective"}, "recompute_modules": modules},
        {"recompute": "full", "recompute_modules": modules}]
    checked = 0
    for c in random.Random(17).sample(candidates, min(14, len(candidates))):
        spans = {zero: pipeline_makespan_bound(spec, training, c.parallel(zero_stage=zero),
                                               cluster) for zero in (0, 3)}
        floors = step_time_floors_s(spec, training, c.parallel(), cluster,
                                    makespan_bounds_s={0: spans[0], 1: spans[0], 3: spans[3]})
        runs = {zero: plain_run_makespan(spec, training, cluster, c, zero_stage=zero)
                for zero in (0, 3)}
        for zero in (1, 3):
            table = work_table(spec, training, c.parallel(zero_stage=0 if zero < 3 else 3),
                               cluster)
            for policy in policies:
                parallel = c.parallel(zero_stage=zero, **policy)
                estimate = estimate_step(spec, training, parallel, cluster)
                step, span = estimate.step_time_s, estimate.pipeline_makespan_s
                assert tables.time_bound_s(c) <= span * (1 + 1e-9), (c.key, zero, policy)
                assert spans[0 if zero < 3 else 3] <= span * (1 + 1e-9), (c.key, zero, policy)
                assert runs[0] <= span * (1 + 1e-9), (c.key, zero, policy)
                assert floors[zero] <= step * (1 + 1e-9), (c.key, zero, policy)
                assert table.bound_s(parallel) <= span * (1 + 1e-9), (c.key, zero, policy)
                if zero == 3:
                    assert runs[3] <= span * (1 + 1e-9), (c.key, policy)
                    assert tables.zero3_time_bound_s(c) <= span * (1 + 1e-9), (c.key, policy)
                checked += 1
    assert checked >= 40, checked


OPEN_STORAGE = Constraints(framework="any", allow_offload=True, allow_fp8_activations=True,
                           allow_remote_offload=True, allow_gradient_host_shards=True)


@pytest.mark.parametrize(("model", "nodes", "batch", "seq", "constraints", "margin"), [
    ("deepseek-v2-lite", 2, 64, 32768, Constraints(), 0.0),
    # offload, FP8, remote, Pipeline ZeRO-2
    ("deepseek-v2-lite", 2, 64, 32768, OPEN_STORAGE, 0.0),
    ("gpt-oss-20b", 2, 64, 32768, Constraints(), 0.0),
    ("llama-3.1-70b", 4, 64, 4096, OPEN_STORAGE, 0.0),
    # The request's default safety margin: the capacity every check reads is the usable
    # memory less the margin, and the bounds compare with that same capacity.
    ("llama-3.1-70b", 4, 64, 4096, OPEN_STORAGE, DEFAULT_MEMORY_MARGIN_FRAC),
    ("kimi-linear-48b-a3b-instruct", 4, 32, 32768, Constraints(), 0.0),
])
def test_rank_memory_bound_stays_below_every_probed_plan(model: str, nodes: int, batch: int,
                                                         seq: int, constraints: Constraints,
                                                         margin: float) -> None:
    """The head rank's floor under the least-storing policy stays at or below the peak of
    the candidate's least-memory plan (or, where none fits, of its most frugal ledger) and
    of its best plan, for every framework variant; with the capacity (after the safety
    margin) as its limit it lands on the same side of it; and on long sequences it rises
    above the mean-rank bound."""
    from models.core.ledger_memo import LedgerMemo
    from solver.candidate_eval import (
        allowed_zero_stages,
        least_memory_candidate,
        least_stored_policy,
    )
    from solver.targets import candidate_variants

    spec = model_preset(model)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=nodes).model_copy(
        update={"memory_margin_frac": margin})
    assert cluster.capacity_bytes == cluster.usable_bytes - cluster.memory_margin_bytes
    training = TrainingSpec(global_batch_size=batch, sequence_length=seq)
    tables = BoundTables.of_request(spec, training, cluster, constraints)
    memo = LedgerMemo(spec=spec, training=training)
    capacity = cluster.capacity_bytes
    candidates = candidate_meshes(spec, training, world_size=cluster.world_size,
                                  gpus_per_node=8, constraints=constraints)
    checked = above_mean = 0
    for c in random.Random(17).sample(candidates, min(30, len(candidates))):
        for v in candidate_variants(spec, training, c, constraints):
            zeros = allowed_zero_stages(v.constraints)
            policy = least_stored_policy(spec, v.constraints, v.caps)
            bound = tables.rank_memory_bound_bytes(c, v.constraints, zeros=zeros,
                                                   policy=policy, memo=memo)
            limited = tables.rank_memory_bound_bytes(c, v.constraints, zeros=zeros,
                                                     policy=policy, memo=memo,
                                                     limit_bytes=capacity)
            assert (limited > capacity) == (bound > capacity), c.key
            least = least_memory_candidate(spec, training, cluster, c, v.constraints,
                                           caps=v.caps)
            if isinstance(least, Rejection):
                if not least.over_bytes:
                    continue  # refused by a rule, not by memory
                assert bound <= capacity + least.over_bytes, c.key
            else:
                assert bound <= least.ledger.peak_bytes, c.key
                best = evaluate_candidate(spec, training, cluster, c, v.constraints,
                                          caps=v.caps)
                assert not isinstance(best, Rejection)
                assert bound <= best.ledger.peak_bytes, c.key
            checked += 1
            mean = tables.memory_bound_bytes(c, max_zero=max(zeros), max_offload=0.5)
            above_mean += bound > mean
    assert checked >= 12 and above_mean >= 5, (checked, above_mean)


def test_the_head_rank_refutes_a_mesh_the_mean_bound_admits() -> None:
    """DeepSeek-V3 at 32k tokens, PP 4 x CP 4 with micro-batch 4: the mean over ranks of the
    most frugal plan's memory is under the 80 GB capacity, but the rank with the output head
    keeps one micro-batch's fp32 logits and the MTP module's (129,280 x 32,768 tokens / cp x
    4 bytes each) beside a quarter of the model's states, so no plan fits."""
    from models.core.ledger_memo import LedgerMemo
    from models.core.memory import memory_ledger
    from solver.ladder import ALL_POLICIES, frugal, least_stored_policy, with_policy
    from solver.space import MeshCandidate

    spec = model_preset("deepseek-v3")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=32)
    training = TrainingSpec(global_batch_size=1024, sequence_length=32768)
    constraints = Constraints(framework="any")
    c = MeshCandidate(tp=1, pp=4, dp=16, cp=4, ep=4, etp=1, vpp=4, micro_batch_size=4,
                      num_micro_batches=16, schedule=PipelineSchedule.INTERLEAVED_1F1B,
                      sequence_parallel=False)
    tables = BoundTables.of_request(spec, training, cluster, constraints)
    capacity = cluster.capacity_bytes
    mean = tables.memory_bound_bytes(c, max_zero=3, max_offload=0.0)
    head = tables.rank_memory_bound_bytes(
        c, constraints, zeros=[0, 1, 2, 3], policy=least_stored_policy(spec, constraints),
        memo=LedgerMemo(spec=spec, training=training))
    most = memory_ledger(spec, training, with_policy(
        c, 3, frugal(spec, constraints, None, ALL_POLICIES), constraints), cluster)
    tokens = 32768 * 4 // 4  # sequence x micro-batch / cp
    logits = 2 * spec.vocab_size * tokens * 4  # fp32, the head's and the MTP module's
    assert mean < capacity < head <= most.peak_bytes
    assert head - mean > logits
    result = evaluate_candidate(spec, training, cluster, c, constraints)
    assert isinstance(result, Rejection) and result.over_bytes > 0


def test_the_rank_memory_bound_spares_evaluations_and_keeps_the_optimum(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = model_preset("deepseek-v2-lite")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=2)
    training = TrainingSpec(global_batch_size=64, sequence_length=32768)
    with_rank, without = _searched_with_and_without(monkeypatch, "_rank_memory_rules_out", spec,
                                                    training, cluster, Constraints())
    assert with_rank.stats.evaluated < without.stats.evaluated
    assert with_rank.stats.pruned_memory > without.stats.pruned_memory


def test_a_search_diving_for_its_first_plan_skips_what_the_head_rank_refutes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Diving from the start (no plan yet past a share 0 of the limit), the search evaluates
    candidates in table-bound order but still passes each through the head rank's memory
    floor first: at 32k tokens the fastest table bounds belong to meshes whose head rank
    overflows. No evaluated candidate is one the floor refutes, some are refuted before
    the first evaluation once the whole queue is listed (the listing's own dive, which
    evaluates the first candidates as they are listed, kept out), and the optimum is the one
    found without diving, with the listing's dive or without."""
    from api_schemas import Objective, SolverLimits
    from solver import planner, tightening
    from solver.search_state import SearchProblem
    from solver.targets import candidate_variants

    spec = model_preset("llama-3.1-8b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=2)
    training = TrainingSpec(global_batch_size=64, sequence_length=32768)
    rule = tightening._rank_memory_rules_out
    seen: list[SearchProblem] = []
    events: list[tuple[str, str]] = []

    def recorded_rule(problem: SearchProblem, c: MeshCandidate, variants: list) -> bool:
        seen[:] = [problem]
        refuted = rule(problem, c, variants)
        if refuted:
            events.append(("refuted", c.key))
        return refuted

    evaluate = planner.evaluate_for_targets

    def recorded_evaluation(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                            c: MeshCandidate, *args: object, **kwargs: object) -> object:
        events.append(("evaluated", c.key))
        assert seen and not rule(seen[0], c, candidate_variants(
            spec, training, c, seen[0].constraints)), c.key
        return evaluate(spec, training, cluster, c, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tightening, "_rank_memory_rules_out", recorded_rule)
    monkeypatch.setattr(planner, "evaluate_for_targets", recorded_evaluation)

    listing = planner._enqueue

    def listing_without_dive(*args: Any, **kwargs: Any) -> None:
        listing(*args, **{**kwargs, "dive_from": math.inf})

    def run(share: float, listing_dives: bool = True) -> planner.SearchResult:
        monkeypatch.setattr(planner, "NO_PLAN_DIVE_SHARE", share)
        monkeypatch.setattr(planner, "_enqueue",
                            listing if listing_dives else listing_without_dive)
        events.clear()
        return planner.search(spec, training, cluster, constraints=Constraints(),
                              objective=Objective.THROUGHPUT,
                              limits=SolverLimits(time_limit_s=120))

    diving = run(0.0, listing_dives=False)
    first = [what for what, _ in events].index("evaluated")
    assert ("refuted" in [what for what, _ in events[:first]]), events[:5]
    listed_diving = run(0.0)
    calm = run(1.0)
    assert diving.status == listed_diving.status == calm.status == "optimal"
    assert diving.best is not None and calm.best is not None and listed_diving.best is not None
    assert (diving.best.estimate.step_time_s == listed_diving.best.estimate.step_time_s
            == calm.best.estimate.step_time_s)


def test_the_rank_memory_bound_reads_each_frameworks_own_least_storing_policy() -> None:
    """DeepSeek-V2-Lite at 32k tokens on DualPipeV: of the released frameworks only
    torchtitan runs that schedule, and its table gives the schedule no activation
    recomputation, so its least-storing plan keeps every layer's activations and no plan
    fits; full recomputation, which it cannot run, would fit under the same bound."""
    from api_schemas import RecomputeMode
    from models.core.ledger_memo import LedgerMemo
    from solver.candidate_eval import allowed_zero_stages, least_stored_policy
    from solver.space import MeshCandidate
    from solver.targets import candidate_variants, evaluate_for_targets

    spec = model_preset("deepseek-v2-lite")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=2)
    training = TrainingSpec(global_batch_size=64, sequence_length=32768)
    constraints = Constraints()
    c = MeshCandidate(tp=1, pp=2, dp=8, cp=1, ep=2, etp=1, vpp=2, micro_batch_size=1,
                      num_micro_batches=8, schedule=PipelineSchedule.DUALPIPEV,
                      sequence_parallel=False)
    # One variant per runtime choice (DeepEP on and off), all torchtitan's.
    variants = candidate_variants(spec, training, c, constraints)
    assert {v.framework for v in variants} == {"torchtitan"}
    variant = variants[0]
    assert all(v.caps == variant.caps and v.constraints == variant.constraints
               for v in variants)
    policy = least_stored_policy(spec, variant.constraints, variant.caps)
    assert policy.get("recompute", RecomputeMode.NONE) == RecomputeMode.NONE
    tables = BoundTables.of_request(spec, training, cluster, Constraints())
    memo = LedgerMemo(spec=spec, training=training)
    zeros = allowed_zero_stages(variant.constraints)
    own = tables.rank_memory_bound_bytes(c, variant.constraints, zeros=zeros, policy=policy,
                                         memo=memo)
    full = tables.rank_memory_bound_bytes(c, variant.constraints, zeros=zeros,
                                          policy={**policy, "recompute": RecomputeMode.FULL},
                                          memo=memo)
    assert full < cluster.capacity_bytes < own
    result = evaluate_for_targets(spec, training, cluster, c, constraints)
    assert isinstance(result, Rejection) and result.over_bytes > 0


def test_policy_floor_without_full_layer_recomputation_is_the_most_frugal_policys() -> None:
    """Under caps with full recomputation of every layer but not of the first k (torchtitan's
    activation checkpointing), a candidate none of whose rungs fits has one plan left, the
    most frugal policy: its floor is that policy's bound, above the selective rung's (k = 0)
    and below the plan's simulated step."""
    from models.core.step_time import estimate_step
    from solver.candidate import PlanCandidate
    from solver.candidate_eval import PolicyCaps, policy_floors_s

    spec = model_preset("llama-3.1-8b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    training = TrainingSpec(global_batch_size=16, sequence_length=16384)
    constraints = Constraints(framework="any")
    caps = PolicyCaps(selective=True, broad_modules=False, full=True, full_layers=False,
                      full_layers_selective=False, per_stage=False)
    c = next(c for c in candidate_meshes(spec, training, world_size=8, gpus_per_node=8,
                                         constraints=constraints)
             if c.pp == 2 and c.tp == 2 and c.cp == 1 and c.schedule == "1f1b")
    floors = policy_floors_s(spec, training, cluster, c, constraints, [1, 3], caps,
                             lambda parallel: False)
    cand = PlanCandidate.of(spec, training, cluster, c, constraints, caps)
    for zero in (1, 3):
        most = cand.frugal(zero)
        assert most.recompute == "full"
        assert floors[zero] > cand.frugal_bound_s(zero, 0), zero
        step = estimate_step(spec, training, most, cluster, split_pipeline_idle=False)
        assert floors[zero] <= step.step_time_s * (1 + 1e-9), zero


def test_mean_state_bounds_kept_per_degrees_equal_those_of_a_fresh_table() -> None:
    """`BoundTables` keeps each candidate's averaged model states under its degrees, weight
    copies and ZeRO stage. Over every candidate of a MoE model (DualPipe's two weight copies
    among them), in turn, at every ZeRO stage, one shared table's memory bound equals a
    fresh table's: a key missing an input would hand a candidate another's states."""
    spec = model_preset("deepseek-v2-lite")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=2)
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    candidates = candidate_meshes(spec, training, world_size=16, gpus_per_node=8,
                                  constraints=Constraints())
    assert {c.schedule for c in candidates} >= {PipelineSchedule.DUALPIPE,
                                                PipelineSchedule.ONE_F_ONE_B}
    shared = BoundTables(spec, training, cluster)
    rng = random.Random(3)
    for c in rng.sample(candidates, min(400, len(candidates))):
        for zero in (3, 0, 2, 1):
            fresh = BoundTables(spec, training, cluster)
            assert shared.memory_bound_bytes(c, max_zero=zero, max_offload=0.0) == \
                fresh.memory_bound_bytes(c, max_zero=zero, max_offload=0.0), (c.key, zero)


@pytest.mark.parametrize(("model", "gpu", "nodes", "batch", "seq"), [
    ("llama-3.1-8b", "h100-sxm5-80gb", 2, 256, 4096),
    ("mixtral-8x7b", "h100-sxm5-80gb", 4, 256, 4096),
    ("gpt-7.5b", "a100-sxm4-80gb", 4, 512, 2048),
])
def test_memory_bound_never_falls_as_the_micro_batch_grows(model: str, gpu: str, nodes: int,
                                                           batch: int, seq: int) -> None:
    """The search prunes every larger micro-batch of a mesh once one exceeds the capacity
    (`solver.planner._enqueue`): that needs the memory bound non-decreasing in the
    micro-batch when every other field of the candidate is the same."""
    from solver.planner import _micro_batch_free_key

    spec, cluster, training, candidates = _case(model, gpu, nodes, batch, seq)
    tables = BoundTables.of_request(spec, training, cluster, Constraints())
    by_mesh: dict[tuple[object, ...], list[MeshCandidate]] = {}
    for c in candidates:
        by_mesh.setdefault(_micro_batch_free_key(c), []).append(c)
    compared = 0
    for group in by_mesh.values():
        group.sort(key=lambda c: c.micro_batch_size)
        for zero, offload in ((0, 0.0), (3, 0.5)):
            bounds = [tables.memory_bound_bytes(c, max_zero=zero, max_offload=offload)
                      for c in group]
            assert bounds == sorted(bounds), [c.key for c in group]
            compared += len(group) - 1
    assert compared > 50


def test_the_step_floor_holds_for_offloaded_optimizer_states_on_a_fast_host() -> None:
    """The per-ZeRO-stage floor counts the optimizer at the lesser of the GPU and the CPU
    step (`least_optimizer_s`): on a host whose memory and link outpace the GPU's HBM (an
    override), the CPU step of a plan with its states in host memory is shorter than the
    GPU step it replaces, and the floor still stays below that plan's step."""
    from models.core.step_time import estimate_step, pipeline_makespan_bound, step_time_floors_s
    from models.core.step_time.step_terms import CPU_OPTIMIZER_TERM

    spec = model_preset("llama-3.1-8b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1).model_copy(update={
        "host_memory_bandwidth_bytes_per_s": 1e16, "pcie_bandwidth_bytes_per_s": 1e15})
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    mesh = ParallelConfig(dp=8, zero_stage=1)
    plain = estimate_step(spec, training, mesh, cluster)
    offloaded = estimate_step(spec, training, mesh.model_copy(
        update={"optimizer_offload_frac": 1.0}), cluster)
    assert 0 < offloaded.overheads_s[CPU_OPTIMIZER_TERM] < plain.optimizer_s
    floors = step_time_floors_s(spec, training, mesh, cluster, makespan_bounds_s={
        1: pipeline_makespan_bound(spec, training, mesh, cluster)})
    assert floors[1] <= offloaded.step_time_s * (1 + 1e-9) < plain.step_time_s


def _deepseek_v3_problem() -> Any:
    """The search inputs of the DeepSeek-V3 benchmark problem (2,048 H800, the FP8 recipe of
    `benchmarks/bench_planner.py`), narrowed as `solver.plan` narrows them."""
    from api_schemas import Objective
    from solver.planner import _problem, hardware_constraints
    from solver.targets import target_constraints

    spec = model_preset("deepseek-v3")
    cluster = cluster_preset("h800-sxm5-80gb", num_nodes=256)
    training = TrainingSpec(global_batch_size=15360, sequence_length=4096, compute_dtype="fp8",
                            optimizer="adamw", optimizer_state_dtype="bf16",
                            moe_keep_expert_outputs=False)
    constraints = target_constraints(hardware_constraints(Constraints(), cluster, training))
    return _problem(spec, training, cluster, constraints, Objective.THROUGHPUT)


def test_the_variants_bound_lies_between_the_optimistic_bound_and_every_plan() -> None:
    """DeepSeek-V3 with EP 256: the optimistic recipe turns on runtime features that no
    framework variant of the mesh runs together, so the least of the variants' own makespan
    bounds is far above it, and still at most the makespan of the candidate's best plan
    (one variant's plan under its own recipe)."""
    from solver.candidate_eval import ScoredPlan
    from solver.targets import evaluate_for_targets
    from solver.tightening import variants_makespan_bound

    problem = _deepseek_v3_problem()
    checked = 0
    for ep, vpp in ((256, 8), (128, 8), (256, 4)):
        c = MeshCandidate(tp=2, pp=2, dp=512, cp=1, ep=ep, etp=1, vpp=vpp,
                          micro_batch_size=3, num_micro_batches=10,
                          schedule=PipelineSchedule.INTERLEAVED_1F1B, sequence_parallel=True)
        optimistic = plain_makespan_bound(problem.spec, problem.bound_training,
                                          problem.cluster, c)
        variants = variants_makespan_bound(problem, c, zero_stage=0)
        assert variants >= optimistic
        if ep == 256:
            assert variants > 1.2 * optimistic, (variants, optimistic)
        result = evaluate_for_targets(problem.spec, problem.training, problem.cluster, c,
                                      problem.constraints, variants=problem.variants(c))
        if isinstance(result, ScoredPlan):
            assert variants <= result.estimate.pipeline_makespan_s * (1 + 1e-9), c.key
            checked += 1
    assert checked >= 2


def test_the_variants_bound_spares_evaluations_and_keeps_the_optimum(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The DeepSeek-V3 benchmark search with the variants' bound and without it: the same
    optimal plan, far fewer exact evaluations with it (the recipes with the EP overlap, the
    optimistic bound's, fit on few of its meshes: 342 -> 78)."""
    from api_schemas import SolverLimits
    from solver import planner, tightening

    problem = _deepseek_v3_problem()

    def run() -> SearchResult:
        return planner.search(problem.spec, problem.training, problem.cluster,
                              constraints=problem.constraints, objective=problem.objective,
                              limits=SolverLimits(time_limit_s=120))

    with_rule = run()
    monkeypatch.setattr(tightening, "add_variants_bound", lambda *args: False)
    without = run()
    assert with_rule.status == without.status == "optimal"
    assert with_rule.best is not None and without.best is not None
    assert with_rule.best.parallel == without.best.parallel
    assert with_rule.best.estimate.step_time_s == without.best.estimate.step_time_s
    assert with_rule.stats.evaluated < 0.4 * without.stats.evaluated, (
        with_rule.stats.evaluated, without.stats.evaluated)


def test_a_recipe_left_out_for_its_memory_has_no_plan_that_fits() -> None:
    """DeepSeek-V3 on 2,048 H800: the recipes with the EP overlap cap the policy at
    selective recomputation, and on many meshes no plan of them fits. Every recipe the
    variants' bound leaves out for its memory (`_recipe_may_fit` False) is one whose
    variants the evaluation rejects, each of them for memory; some are left out."""
    from solver.outcomes import Rejection
    from solver.runtime_choice import runtime_feature_set
    from solver.targets import evaluate_for_targets
    from solver.tightening import _recipe_may_fit

    problem = _deepseek_v3_problem()
    left_out = kept = 0
    for tp, pp, mbs in ((2, 2, 3), (2, 2, 1), (4, 2, 5), (2, 1, 3), (4, 1, 6)):
        dp = 2048 // (tp * pp)
        for ep in (64, 128, 256):
            c = MeshCandidate(tp=tp, pp=pp, dp=dp, cp=1, ep=ep, etp=1,
                              vpp=8 if pp > 1 else 1, micro_batch_size=mbs,
                              num_micro_batches=15360 // (dp * mbs),
                              schedule=(PipelineSchedule.INTERLEAVED_1F1B if pp > 1
                                        else PipelineSchedule.ONE_F_ONE_B),
                              sequence_parallel=True)
            groups: dict[TrainingSpec, list[Any]] = {}
            for v in problem.variants(c):
                groups.setdefault(v.training, []).append(v)
            for recipe, variants in groups.items():
                if _recipe_may_fit(problem, c, runtime_feature_set(problem.spec, recipe, c),
                                   variants):
                    kept += 1
                    continue
                left_out += 1
                result = evaluate_for_targets(problem.spec, problem.training,
                                              problem.cluster, c, problem.constraints,
                                              variants=variants)
                assert isinstance(result, Rejection), (c.key, recipe.overlap_ep_comm)
                assert result.over_bytes > 0, (c.key, result.reason)
    assert left_out >= 5 and kept >= 5, (left_out, kept)
