"""Runtime features as choices of the search: taken per target framework, with their
prerequisites and memory, stated in the plan, exported as flags, and explained when off."""

import functools

import pytest
from plan_set import BENCHMARK_REQUESTS, benchmark_solved

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    ParallelConfig,
    PipelineSchedule,
    PlanRequest,
    PlanResponse,
    SolverLimits,
    TpOverlapEngine,
    TrainingSpec,
)
from api_schemas.parallel import RecomputeMode
from models.catalog.presets import cluster_preset, model_preset
from models.core.frameworks import frameworks
from models.core.memory import memory_ledger
from models.core.rank_activations import STORED_ACTIVATIONS
from models.core.rank_states import micro_batch_count
from models.core.runtime_features import (
    DEEPEP,
    MEMORY_EFFICIENT_NORM,
    OVERLAP_EP_COMM,
    OVERLAP_TP_COMM,
    TP_DGRAD_OVERLAP,
    deepep_buffer_bytes,
)
from models.core.step_time import estimate_step
from solver import plan
from solver.runtime_choice import runtime_options
from solver.space import MeshCandidate

LIMITS = SolverLimits(time_limit_s=60, top_k=0, num_workers=1)

DEEPSEEK_V3 = PlanRequest(
    model=ModelPreset(preset="deepseek-v3"),
    cluster=ClusterInput(gpu="h800-sxm5-80gb", num_nodes=256),
    training=TrainingSpec(global_batch_size=15360, sequence_length=4096, compute_dtype="fp8",
                          optimizer="adamw", optimizer_state_dtype="bf16"),
    constraints=Constraints(framework="megatron-lm"), solver=LIMITS)
"""DeepSeek-V3 pre-training (arXiv:2412.19437 Sec. 3.1, 4.2): 2,048 H800, 15,360 sequences
of 4K tokens, FP8."""

PUBLISHED_TOKENS_PER_GPU = 14.8e12 / (2.664e6 * 3600)
"""DeepSeek-V3 Table 1: 2.664M H800 GPU-hours of pre-training for 14.8T tokens, 1,543 tokens/s
per GPU averaged over the run."""


@functools.cache
def _planned(name: str, framework: str) -> PlanResponse:
    request = {"deepseek-v3": DEEPSEEK_V3, "mixtral": MIXTRAL}[name]
    return plan(request.model_copy(update={"constraints": Constraints(framework=framework)}))


MIXTRAL = PlanRequest(model=ModelPreset(preset="mixtral-8x7b"),
                      cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=4),
                      training=TrainingSpec(global_batch_size=512, sequence_length=4096),
                      solver=LIMITS)


def _uses(response: PlanResponse) -> dict[str, bool]:
    return {use.feature: use.on for use in response.runtime_features}


def test_deepseek_v3_on_2048_h800_reaches_the_published_rate_with_the_features_it_chose() -> None:
    """The acceptance figure: at least 0.85 x the published 1,543 tokens/s per GPU with
    Megatron-LM, from features the framework has, named in the plan and set in its export."""
    response = _planned("deepseek-v3", "megatron-lm")
    assert response.throughput is not None and response.parallel is not None
    assert PUBLISHED_TOKENS_PER_GPU == pytest.approx(1543, abs=1)
    per_gpu = response.throughput.tokens_per_s / response.world_size
    assert per_gpu >= 0.85 * PUBLISHED_TOKENS_PER_GPU
    uses = {use.feature: use for use in response.runtime_features}
    assert uses[OVERLAP_EP_COMM].on and uses[OVERLAP_EP_COMM].decided_by == "planner"
    assert "--overlap-moe-expert-parallel-comm" in uses[OVERLAP_EP_COMM].flags["megatron-lm"]
    assert response.exports.megatron is not None
    args = response.exports.megatron.args
    assert "--overlap-moe-expert-parallel-comm" in args
    # Megatron's prerequisites: a virtual pipeline when PP > 1, no full recomputation.
    assert response.parallel.pp == 1 or response.parallel.vpp > 1
    assert response.parallel.recompute != RecomputeMode.FULL
    # EP > 1 already: no EP comparison is attached.
    assert response.parallel.ep > 1 and response.expert_parallel is None
    if uses[DEEPEP].on:
        assert args[args.index("--moe-token-dispatcher-type") + 1] == "flex"
        assert "--moe-enable-deepep" in args


def test_with_the_features_fixed_off_deepseek_v3_falls_back_to_todays_figure() -> None:
    """Fixed by the request, a feature keeps its value: with every runtime feature off but
    the gradient overlap, the plan is the slower one of a fixed recipe."""
    fixed = DEEPSEEK_V3.model_copy(update={"training": DEEPSEEK_V3.training.model_copy(
        update={"overlap_ep_comm": False, "overlap_tp_comm": False,
                "moe_dispatcher": "alltoall"})})
    response = plan(fixed)
    chosen = _planned("deepseek-v3", "megatron-lm")
    assert response.throughput is not None and chosen.throughput is not None
    assert response.throughput.tokens_per_s < chosen.throughput.tokens_per_s
    uses = {use.feature: use for use in response.runtime_features}
    assert not uses[OVERLAP_EP_COMM].on and uses[OVERLAP_EP_COMM].decided_by == "request"
    assert uses[OVERLAP_EP_COMM].why_not == "fixed off by the request"
    assert response.exports.megatron is not None
    assert "--overlap-moe-expert-parallel-comm" not in response.exports.megatron.args


@pytest.mark.parametrize("framework", ["torchtitan", "deepspeed"])
def test_a_feature_the_target_lacks_is_never_chosen(framework: str) -> None:
    response = _planned("mixtral", framework)
    assert response.parallel is not None
    table = frameworks()[framework].features
    for use in response.runtime_features:
        if use.feature not in table:
            assert not use.on, use
    assert not _uses(response)[OVERLAP_EP_COMM]
    if framework == "deepspeed":
        # Why not overlap_ep_comm: DeepSpeed has no such feature.
        use = {u.feature: u for u in response.runtime_features}[OVERLAP_EP_COMM]
        assert use.why_not == "not offered by DeepSpeed"


def test_runtime_options_branch_only_on_the_features_that_cost_memory() -> None:
    """Time-only features (gradient-reduce and TP overlap) need no branch; DeepEP (its
    buffers) and the EP overlap (one more micro-batch stored) are tried on and off, and only
    where the framework offers them and the mesh meets their prerequisites."""
    spec = model_preset("mixtral-8x7b")
    training = TrainingSpec(global_batch_size=512, sequence_length=4096)
    mesh = MeshCandidate(tp=2, pp=2, dp=4, cp=1, ep=4, etp=1, vpp=2, micro_batch_size=1,
                         num_micro_batches=128, schedule=PipelineSchedule.INTERLEAVED_1F1B,
                         sequence_parallel=True)
    megatron, deepspeed = frameworks()["megatron-lm"], frameworks()["deepspeed"]
    options = runtime_options(spec, training, mesh, megatron)
    assert [(o.overlap_ep_comm, o.moe_dispatcher) for o in options] == [
        (True, "deepep"), (True, "alltoall"), (False, "deepep"), (False, "alltoall")]
    assert all(o.overlap_tp_comm and o.overlap_grad_reduce and o.tp_dgrad_overlap
               for o in options)
    # DeepEP has no configuration for 256 ranks: only the EP overlap branches there.
    wide = MeshCandidate(tp=1, pp=1, dp=256, cp=1, ep=256, etp=1, vpp=1, micro_batch_size=1,
                         num_micro_batches=2, schedule=PipelineSchedule.ONE_F_ONE_B,
                         sequence_parallel=False)
    deepseek = model_preset("deepseek-v3")
    assert [o.moe_dispatcher for o in runtime_options(deepseek, training, wide, megatron)] == [
        "alltoall", "alltoall"]
    (only,) = runtime_options(spec, training, mesh, deepspeed)
    assert not only.overlap_ep_comm and not only.overlap_tp_comm and not only.tp_dgrad_overlap
    assert only.moe_dispatcher == "alltoall"
    # Plain 1F1B with PP > 1 pairs no micro-batches: no EP overlap to try.
    plain = MeshCandidate(tp=2, pp=2, dp=4, cp=1, ep=4, etp=1, vpp=1, micro_batch_size=1,
                          num_micro_batches=128, schedule=PipelineSchedule.ONE_F_ONE_B,
                          sequence_parallel=True)
    assert [o.overlap_ep_comm for o in runtime_options(spec, training, plain, megatron)] == [
        False, False]
    # A request that fixes every feature is scored as given.
    fixed = training.model_copy(update={"overlap_ep_comm": False, "overlap_tp_comm": True,
                                        "tp_dgrad_overlap": True, "moe_dispatcher": "alltoall",
                                        "overlap_grad_reduce": True,
                                        "memory_efficient_norm": False,
                                        "moe_grouped_gemm": True, "moe_permute_fusion": True})
    assert runtime_options(spec, fixed, mesh, megatron) == (fixed,)


def test_ep_overlap_holds_one_more_micro_batch_of_a_chunk() -> None:
    """Megatron-LM core_v0.14.0 schedules.py: with the EP overlap, combined 1F1B keeps
    micro-batch i+1's forward beside micro-batch i's backward (PP 1): the stored activations
    double; the interleaved schedule runs one more warm-up forward."""
    spec = model_preset("mixtral-8x7b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=4)
    parallel = ParallelConfig(tp=1, pp=1, dp=32, ep=8, micro_batch_size=1,
                              recompute=RecomputeMode.SELECTIVE)
    base = TrainingSpec(global_batch_size=512, sequence_length=4096, overlap_ep_comm=False)
    on = base.model_copy(update={"overlap_ep_comm": True})
    assert micro_batch_count(base, parallel) == 16

    def stored(training: TrainingSpec) -> int:
        ledger = memory_ledger(spec, training, parallel, cluster)
        return sum(c.bytes for c in ledger.stages[0].components if c.name == STORED_ACTIVATIONS)

    assert stored(on) == 2 * stored(base)


def test_tp_overlap_is_chosen_only_with_sequence_parallelism() -> None:
    response = _planned("mixtral", "megatron-lm")
    assert response.parallel is not None
    use = {u.feature: u for u in response.runtime_features}[OVERLAP_TP_COMM]
    if response.parallel.tp > 1 and response.parallel.sequence_parallel:
        assert use.on
    else:
        assert not use.on and use.why_not.startswith("needs TP > 1")


def test_torchtitan_runs_the_tp_overlap_as_async_tp_and_is_not_credited_for_it() -> None:
    """torchtitan offers `overlap_tp_comm` as PyTorch's async TP (its table's
    `tp_overlap_engine` trait): its recipes carry the runtime, so a TP plan for torchtitan is
    priced as without the overlap, while Megatron-LM's keeps the userbuffers price."""
    spec = model_preset("llama-3.1-70b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=8)
    training = TrainingSpec(global_batch_size=128, sequence_length=8192)
    mesh = MeshCandidate(tp=8, pp=1, dp=8, cp=1, ep=1, etp=1, vpp=1, micro_batch_size=1,
                         num_micro_batches=16, schedule=PipelineSchedule.ONE_F_ONE_B,
                         sequence_parallel=True)
    (titan,) = runtime_options(spec, training, mesh, frameworks()["torchtitan"])
    (megatron,) = runtime_options(spec, training, mesh, frameworks()["megatron-lm"])
    assert titan.overlap_tp_comm and titan.tp_overlap_engine == TpOverlapEngine.PYTORCH_ASYNC_TP
    assert megatron.overlap_tp_comm and megatron.tp_overlap_engine is None
    parallel = ParallelConfig(tp=8, dp=8, micro_batch_size=1, sequence_parallel=True)

    def step(recipe: TrainingSpec) -> float:
        return estimate_step(spec, recipe, parallel, cluster).step_time_s

    exposed = step(titan.model_copy(update={"overlap_tp_comm": False}))
    assert step(titan) == exposed
    assert step(megatron.model_copy(update={"tp_dgrad_overlap": False})) < exposed
    # A request that names the runtime keeps it on every framework.
    named = training.model_copy(update={"tp_overlap_engine": TpOverlapEngine.USERBUFFERS})
    (kept,) = runtime_options(spec, named, mesh, frameworks()["torchtitan"])
    assert kept.tp_overlap_engine == TpOverlapEngine.USERBUFFERS
    # Without TP there is no overlap to price, and the recipe names no runtime for it.
    single = MeshCandidate(tp=1, pp=1, dp=64, cp=1, ep=1, etp=1, vpp=1, micro_batch_size=1,
                           num_micro_batches=2, schedule=PipelineSchedule.ONE_F_ONE_B,
                           sequence_parallel=False)
    (plain,) = runtime_options(spec, training, single, frameworks()["torchtitan"])
    assert not plain.overlap_tp_comm and plain.tp_overlap_engine is None


def test_a_torchtitan_tp_plan_says_its_async_tp_is_not_in_the_step_time() -> None:
    request = PlanRequest(model=ModelPreset(preset="llama-3.1-70b"),
                          cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=8),
                          training=TrainingSpec(global_batch_size=128, sequence_length=8192),
                          solver=LIMITS)

    def async_notes(framework: str) -> list[str]:
        response = plan(request.model_copy(update={"constraints": Constraints(
            framework=framework, tp=8)}))
        assert response.parallel is not None and response.parallel.sequence_parallel
        return [n for n in response.explanation.notes if "PyTorch's async TP" in n]

    (note,) = async_notes("torchtitan")
    assert "credits it nothing" in note and "+5.7% to +16.4%" in note
    assert async_notes("megatron-lm") == []


def test_tp_dgrad_overlap_is_chosen_for_megatron_and_makes_the_plan_faster() -> None:
    """Megatron-LM (3f65246911, on by default since Sep. 2021) launches each column-parallel
    input-gradient all-reduce under the weight-gradient GEMM: a TP > 1 plan for megatron-lm
    takes it (no flag: it is the default), and the same request with it forbidden is slower.
    The userbuffers overlap is forbidden so that the dgrad overlap is the one in effect."""
    request = PlanRequest(
        model=ModelPreset(preset="llama-3.1-70b"),
        cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=4),
        training=TrainingSpec(global_batch_size=256, sequence_length=4096),
        solver=LIMITS)

    def planned(rule: str) -> PlanResponse:
        return plan(request.model_copy(update={"constraints": Constraints(
            framework="megatron-lm", runtime_features={"overlap_tp_comm": "forbidden",
                                                       "tp_dgrad_overlap": rule})}))

    free, off = planned("allowed"), planned("forbidden")
    assert free.parallel is not None and free.parallel.tp > 1
    use = {u.feature: u for u in free.runtime_features}[TP_DGRAD_OVERLAP]
    assert use.on and use.decided_by == "planner" and "megatron-lm" in use.flags
    assert free.time is not None and off.time is not None
    assert free.time.step_time_s < off.time.step_time_s
    # Without the feature, the same mesh is slower.
    if off.parallel == free.parallel:
        assert not {u.feature: u for u in off.runtime_features}[TP_DGRAD_OVERLAP].on


def test_megatron_export_needs_no_flag_for_the_tp_dgrad_overlap() -> None:
    """Megatron-LM launches the column-parallel input-gradient collective under the weight-
    gradient GEMM by default: on, the export adds no argument; off, it says Megatron-LM
    cannot turn it off; the memory-efficient norm, which Megatron-LM's Transformer Engine
    path lacks, gets a note."""
    from solver.export.megatron import megatron_args, megatron_notes

    spec = model_preset("llama-3.1-70b")
    parallel = ParallelConfig(tp=8, pp=1, dp=8, micro_batch_size=1, sequence_parallel=True)
    base = TrainingSpec(global_batch_size=64, sequence_length=4096)
    on, off = (base.model_copy(update={"tp_dgrad_overlap": v}) for v in (True, False))
    assert megatron_args(spec, on, parallel) == megatron_args(spec, off, parallel)
    assert not any("tp_dgrad_overlap" in n for n in megatron_notes(spec, on, parallel))
    assert any("tp_dgrad_overlap=false" in n for n in megatron_notes(spec, off, parallel))
    lean = base.model_copy(update={"memory_efficient_norm": True})
    assert any("memory_efficient_norm=true" in n for n in megatron_notes(spec, lean, parallel))


def test_the_memory_efficient_norm_is_tried_off_first_and_only_where_offered() -> None:
    """A feature that only frees memory is tried without it first (a plan that fits as
    fast without it keeps the framework's standard path) and is offered by no released
    framework (Megatron-LM's --memory-efficient-layer-norm covers its local Apex LayerNorm,
    not Transformer Engine's norms): only target 'any' tries it."""
    spec = model_preset("llama-3.1-70b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    mesh = MeshCandidate(tp=8, pp=4, dp=2, cp=1, ep=1, etp=1, vpp=1, micro_batch_size=1,
                         num_micro_batches=32, schedule=PipelineSchedule.ONE_F_ONE_B,
                         sequence_parallel=True)
    anywhere = runtime_options(spec, training, mesh, None)
    assert [o.memory_efficient_norm for o in anywhere] == [False, True]
    for framework in frameworks().values():
        assert MEMORY_EFFICIENT_NORM not in framework.features
        assert not any(o.memory_efficient_norm
                       for o in runtime_options(spec, training, mesh, framework))
    # With it on, each layer stores two norm inputs (2 x 2h / t per token) fewer per
    # micro-batch in flight, and no time is added.
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=8)
    parallel = ParallelConfig(tp=8, pp=4, dp=2, micro_batch_size=1, sequence_parallel=True)
    off, on = (training.model_copy(update={"memory_efficient_norm": v}) for v in (False, True))

    def stored(recipe: TrainingSpec) -> int:
        ledger = memory_ledger(spec, recipe, parallel, cluster)
        return sum(c.bytes for c in ledger.stages[0].components if c.name == STORED_ACTIVATIONS)

    layers = spec.num_layers // 4
    in_flight = 4  # 1F1B: the first stage holds pp micro-batches
    assert stored(off) - stored(on) == layers * in_flight * 4096 * 2 * (2 * 8192 // 8)



EXTENSION_WORDS = ("needs a framework extension", "needs an extension",
                   "needs a model extension", "extension")


def _export_notes(response: PlanResponse, framework: str) -> tuple[str, ...]:
    exports = response.exports
    found = {"megatron-lm": exports.megatron, "torchtitan": exports.torchtitan,
             "deepspeed": exports.deepspeed}[framework]
    return found.notes if found is not None else ()


def _check_runs_on_agrees_with_notes(response: PlanResponse) -> None:
    for fit in response.runs_on:
        needing = [n for n in _export_notes(response, fit.framework)
                   if any(word in n for word in EXTENSION_WORDS)]
        assert not needing, (fit.framework, needing)


def test_deepseek_v3_runs_on_megatron_lm_with_no_extension_note() -> None:
    response = _planned("deepseek-v3", "megatron-lm")
    assert [fit.framework for fit in response.runs_on] == ["megatron-lm"]
    _check_runs_on_agrees_with_notes(response)


@pytest.mark.slow
def test_every_benchmark_plan_runs_only_where_its_export_needs_no_extension() -> None:
    """`benchmarks/bench_planner.py`'s problems at their defaults: a framework in runs_on has
    an export with no note saying the plan needs an extension."""
    for label in BENCHMARK_REQUESTS:
        response = benchmark_solved(label)
        assert response.parallel is not None, label
        assert response.runs_on, label
        _check_runs_on_agrees_with_notes(response)


def test_ep_overlap_pairs_micro_batches_without_a_pipeline() -> None:
    """Megatron-LM core_v0.14.0 `forward_backward_no_pipelining` with the EP overlap runs
    combined 1F1B (micro-batch i+1's forward beside i's backward): credited at PP 1 with two
    or more micro-batches, not with one, and not on plain 1F1B with PP > 1."""
    from models.core.step_time.exposure import ep_overlapped

    on = TrainingSpec(global_batch_size=64, sequence_length=4096, overlap_ep_comm=True)
    assert ep_overlapped(ParallelConfig(dp=8, ep=8), on)
    assert not ep_overlapped(ParallelConfig(dp=8, ep=8, micro_batch_size=8), on)
    assert not ep_overlapped(ParallelConfig(dp=8, ep=8),
                             on.model_copy(update={"overlap_ep_comm": False}))
    assert not ep_overlapped(ParallelConfig(pp=2, dp=4, ep=4), on)
    assert ep_overlapped(ParallelConfig(pp=2, dp=4, ep=4, vpp=2,
                                        schedule=PipelineSchedule.INTERLEAVED_1F1B), on)


def test_constraints_rule_on_runtime_features_as_the_recipe_fields_do() -> None:
    """`constraints.runtime_features` (the API contract's allowed / required / forbidden):
    forbidden keeps a feature off where the planner would take it, required fixes it on,
    and a rule that contradicts a fixed recipe field is refused."""
    from models.errors import InvalidSpecError
    from solver.runtime_choice import with_rules

    free = _planned("mixtral", "megatron-lm")
    taken = [u.feature for u in free.runtime_features
             if u.on and u.feature not in ("overlap_grad_reduce", TP_DGRAD_OVERLAP)]
    assert taken, "the case needs a feature the planner takes"
    feature = taken[0]
    flag = {DEEPEP: "--moe-enable-deepep", OVERLAP_TP_COMM: "--tp-comm-overlap",
            OVERLAP_EP_COMM: "--overlap-moe-expert-parallel-comm"}[feature]
    assert free.exports.megatron is not None and flag in free.exports.megatron.args
    name = "moe_dispatcher" if feature == DEEPEP else feature
    ruled = plan(MIXTRAL.model_copy(update={"constraints": Constraints(
        framework="megatron-lm", runtime_features={name: "forbidden"})}))
    uses = {u.feature: u for u in ruled.runtime_features}
    assert not uses[feature].on and uses[feature].decided_by == "request"
    assert ruled.exports.megatron is not None
    assert flag not in ruled.exports.megatron.args
    required = with_rules(TrainingSpec(global_batch_size=8, sequence_length=8),
                          {"overlap_ep_comm": "required", "overlap_tp_comm": "allowed"})
    assert required.overlap_ep_comm is True and required.overlap_tp_comm is None
    with pytest.raises(InvalidSpecError, match="contradicts"):
        with_rules(TrainingSpec(global_batch_size=8, sequence_length=8, overlap_ep_comm=False),
                   {"overlap_ep_comm": "required"})


def test_deepep_buffers_are_the_size_megatron_asks_deepep_for() -> None:
    """Megatron-LM core_v0.14.0 `fused_a2a.get_buffer` with DeepEP's legacy size hints: at
    EP 8 and hidden 4,096 (hidden bytes 8,192), 10 channels x 8 NVLink ranks x (5 int32 +
    256 tokens x (8,192 + 2,056) bytes), rounded up to 128 = 209,880,704 bytes; across nodes
    an RDMA buffer is added, and the ledger carries the line when the plan uses DeepEP."""
    assert deepep_buffer_bytes(4096, 8) == 209_880_704
    assert deepep_buffer_bytes(4096, 1) == 0
    assert deepep_buffer_bytes(7168, 64) > deepep_buffer_bytes(7168, 8)
    spec = model_preset("mixtral-8x7b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=4)
    parallel = ParallelConfig(tp=1, pp=1, dp=32, ep=8, recompute=RecomputeMode.SELECTIVE)
    deepep = TrainingSpec(global_batch_size=512, sequence_length=4096, moe_dispatcher="deepep")
    nccl = deepep.model_copy(update={"moe_dispatcher": "alltoall"})

    def line(training: TrainingSpec) -> int:
        ledger = memory_ledger(spec, training, parallel, cluster)
        return sum(c.bytes for c in ledger.stages[0].components if c.name == "DeepEP buffers")

    assert line(deepep) == deepep_buffer_bytes(spec.hidden_size, 8) and line(nccl) == 0
