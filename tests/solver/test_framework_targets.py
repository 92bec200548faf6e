"""Framework targets: the capability tables are complete and cited, the search explores only
what the target runs, every plan lists the frameworks that run it, and 'any' names where
each extra feature comes from."""

import functools

import pytest

from api_schemas import (
    ClusterInput,
    Constraints,
    ContextParallelKind,
    ModelPreset,
    ModelSpec,
    ParallelConfig,
    PlanRequest,
    PlanResponse,
    PlanStatus,
    SolverLimits,
    TrainingSpec,
)
from models.catalog.presets import model_preset
from models.core.frameworks import (
    RELEASED,
    blockers,
    extension_origins,
    frameworks,
    plan_features,
    runs_on,
    version_key,
)
from solver import plan
from solver.export.megatron import megatron_env

LIMITS = SolverLimits(time_limit_s=60, top_k=0, num_workers=1)
"""Generous: each search completes on its own in seconds; a loaded host must not stop one
short (the tests check what the completed search proves)."""

PROBLEMS: dict[str, PlanRequest] = {
    "dense-70b": PlanRequest(model=ModelPreset(preset="llama-3.1-70b"),
                             cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=8),
                             training=TrainingSpec(global_batch_size=512, sequence_length=8192),
                             solver=LIMITS),
    "moe-mixtral": PlanRequest(model=ModelPreset(preset="mixtral-8x7b"),
                               cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=4),
                               training=TrainingSpec(global_batch_size=512,
                                                     sequence_length=4096),
                               solver=LIMITS),
    "long-8b": PlanRequest(model=ModelPreset(preset="llama-3.1-8b"),
                           cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=2),
                           training=TrainingSpec(global_batch_size=16, sequence_length=65536),
                           solver=LIMITS),
}
TARGETS = [*RELEASED, "any", None]


@functools.cache
def _planned(problem: str, target: str | None) -> PlanResponse:
    request = PROBLEMS[problem]
    return plan(request.model_copy(update={"constraints": Constraints(framework=target)}))


def test_every_capability_is_cited_with_a_release() -> None:
    for fw in frameworks().values():
        assert fw.source and version_key(fw.reference_release)
        for name, feature in fw.features.items():
            assert feature.how, name
            assert version_key(feature.since) <= version_key(fw.reference_release), name
        for rule in fw.forbidden:
            assert rule.reason and rule.source
    assert all(origin for origin in extension_origins().values())


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: str(t))
@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_a_plan_runs_on_its_target(problem: str, target: str | None) -> None:
    response = _planned(problem, target)
    assert response.status in (PlanStatus.OPTIMAL, PlanStatus.FEASIBLE)
    assert response.parallel is not None
    assert response.framework_target == (target or "released")
    fits = {fit.framework for fit in response.runs_on}
    if target in RELEASED:
        assert target in fits
    elif target is None:
        assert fits, "the default target gives a plan a released framework runs"
    if target != "any":
        assert response.extensions == []
    for fit in response.runs_on:
        assert version_key(fit.version) == max(map(version_key, fit.features.values()))


def test_any_admits_the_seed_systems_and_names_their_origin() -> None:
    request = PlanRequest(model=ModelPreset(preset="llama-3.1-8b"),
                          cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=1),
                          training=TrainingSpec(global_batch_size=64, sequence_length=16384),
                          solver=SolverLimits(time_limit_s=120, top_k=0, num_workers=1))
    response = plan(request.model_copy(update={"constraints": Constraints(framework="any")}))
    released = plan(request)
    assert response.status == released.status == PlanStatus.OPTIMAL
    assert response.time is not None and released.time is not None
    # A larger space can only help under the same cost model.
    assert response.time.step_time_s <= released.time.step_time_s
    for extension in response.extensions:
        assert extension.origin
        assert not any(extension.feature in fw.features for fw in frameworks().values())


def test_megatron_target_never_gets_a_schedule_megatron_cannot_run() -> None:
    spec = model_preset("llama-3.1-70b")
    training = TrainingSpec(global_batch_size=512, sequence_length=8192)
    megatron = frameworks()["megatron-lm"]
    for schedule in ("zb_h1", "zb_h2", "zbv", "dualpipe", "dualpipev", "gpipe"):
        vpp = 2 if schedule in ("zbv", "dualpipev") else 1
        parallel = ParallelConfig(tp=8, pp=4, dp=2, vpp=vpp, schedule=schedule,
                                  sequence_parallel=True)
        assert blockers(megatron, plan_features(spec, training, parallel)), schedule
    response = plan(PROBLEMS["dense-70b"].model_copy(update={"constraints": Constraints(
        framework="megatron-lm", pp=[2, 4])}))
    assert response.parallel is not None and response.parallel.pp > 1
    assert response.parallel.schedule in ("1f1b", "interleaved_1f1b")


def test_deepspeed_pipelines_keep_zero_at_most_1_and_torchtitan_has_no_zero_1() -> None:
    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    piped = {fit.framework for fit in runs_on(spec, training, ParallelConfig(pp=2, dp=4,
                                                                           zero_stage=2))}
    assert "deepspeed" not in piped
    piped_zero1 = {fit.framework for fit in runs_on(spec, training, ParallelConfig(
        pp=2, dp=4, zero_stage=1))}
    assert piped_zero1 == {"megatron-lm", "deepspeed"}
    flat = {fit.framework for fit in runs_on(spec, training, ParallelConfig(dp=8, zero_stage=1))}
    assert flat == {"megatron-lm", "deepspeed"}


def test_deepspeed_holds_fp32_gradients_over_16bit_weights_only_in_an_optimizer_wrapper() -> None:
    """DeepSpeed 0.19.8 refuses ZeRO stage 0 with bf16 weights and fp32 gradient
    accumulation (`_do_optimizer_sanity_check`: no wrapper holds the mix); ZeRO-1 runs it
    through BF16Optimizer, and ZeRO-0 with bf16 gradients runs. Megatron-LM runs all three."""
    spec = model_preset("llama-3.1-8b")
    fp32_grads = TrainingSpec(global_batch_size=64, sequence_length=4096)
    bf16_grads = fp32_grads.model_copy(update={"grad_dtype": "bf16"})
    assert fp32_grads.param_dtype == "bf16" and fp32_grads.grad_dtype == "fp32"

    def runners(training: TrainingSpec, zero: int) -> set[str]:
        return {fit.framework for fit in runs_on(spec, training, ParallelConfig(
            pp=2, dp=4, zero_stage=zero))}

    assert "precision:fp32_grads_over_16bit" in plan_features(
        spec, fp32_grads, ParallelConfig(pp=2, dp=4))
    assert "precision:fp32_grads_over_16bit" not in plan_features(
        spec, bf16_grads, ParallelConfig(pp=2, dp=4))
    assert runners(fp32_grads, 0) == {"megatron-lm"}
    assert runners(fp32_grads, 1) == runners(bf16_grads, 0) == {"megatron-lm", "deepspeed"}
    reasons = blockers(frameworks()["deepspeed"], plan_features(
        spec, fp32_grads, ParallelConfig(pp=2, dp=4, zero_stage=0)))
    assert any("grad_accum_dtype" in reason for reason in reasons)


def test_megatron_fsdp_is_never_offered_with_a_pipeline() -> None:
    """Megatron-LM shards gradients or weights only through Megatron FSDP, which its
    standard path runs without pipeline parallelism (Megatron-LM PR #6081): ZeRO-2 and
    ZeRO-3 with PP > 1 are not Megatron-LM plans; ZeRO-1 (distributed optimizer) with PP,
    and ZeRO-2/3 without PP, are."""
    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    megatron = frameworks()["megatron-lm"]
    for zero, fsdp in ((2, False), (3, False), (3, True)):
        piped = plan_features(spec, training, ParallelConfig(pp=2, dp=4, zero_stage=zero,
                                                             fsdp=fsdp))
        assert any("mutually exclusive" in b for b in blockers(megatron, piped)), (zero, fsdp)
        flat = plan_features(spec, training, ParallelConfig(dp=8, zero_stage=zero, fsdp=fsdp))
        assert not blockers(megatron, flat), (zero, fsdp)


def test_a_version_bound_excludes_later_features() -> None:
    spec = model_preset("mixtral-8x7b")
    training = TrainingSpec(global_batch_size=512, sequence_length=4096)
    parallel = ParallelConfig(tp=2, dp=16, ep=8, sequence_parallel=True, recompute="selective",
                              recompute_modules=("core_attn", "moe_act"))
    features = plan_features(spec, training, parallel)
    megatron = frameworks()["megatron-lm"]
    assert blockers(megatron, features, max_version="core_v0.14.0") == []
    assert any("needs Megatron-LM core_v0.12.0" in b
               for b in blockers(megatron, features, max_version="core_v0.11.0"))
    request = PROBLEMS["moe-mixtral"].model_copy(update={"constraints": Constraints(
        framework="megatron-lm", framework_version="core_v0.14.0")})
    response = plan(request)
    assert "megatron-lm" in {fit.framework for fit in response.runs_on}


def test_a_version_needs_a_named_framework() -> None:
    with pytest.raises(ValueError, match="framework_version needs"):
        Constraints(framework_version="0.19.8")


@pytest.mark.parametrize(("parallel", "value"), [
    (ParallelConfig(tp=8, dp=2), "1"),
    (ParallelConfig(cp=2, dp=8), "1"),
    (ParallelConfig(tp=2, dp=8, zero_stage=3, fsdp=True), "8"),
    (ParallelConfig(dp=16, zero_stage=2), "8"),
    (ParallelConfig(dp=16), None),
])
def test_megatron_launch_sets_cuda_device_max_connections(parallel: ParallelConfig,
                                                          value: str | None) -> None:
    assert megatron_env(parallel).get("CUDA_DEVICE_MAX_CONNECTIONS") == value


def test_attention_sinks_under_context_parallelism_need_the_all_to_all_split() -> None:
    # Transformer Engine 2.9 / 2.14 get_attention_backend: a learnable softmax offset runs on
    # the fused cuDNN kernel only, and under context parallelism only with cp_comm_type a2a.
    spec = model_preset("gpt-oss-20b")
    assert spec.attention_sinks
    training = TrainingSpec(global_batch_size=16, sequence_length=32768)
    megatron = frameworks()["megatron-lm"]

    def megatron_blocks(model: ModelSpec, kind: ContextParallelKind) -> list[str]:
        parallel = ParallelConfig(dp=2, cp=4, ep=2, cp_kind=kind)
        return blockers(megatron, plan_features(model, training, parallel))

    assert any("attention sinks" in b for b in megatron_blocks(spec, ContextParallelKind.RING))
    assert any("attention sinks" in b
               for b in megatron_blocks(spec, ContextParallelKind.ALL_GATHER))
    assert megatron_blocks(spec, ContextParallelKind.ULYSSES) == []
    plain = spec.model_copy(update={"attention_sinks": False, "sliding_window": None,
                                    "sliding_window_layers": None})
    assert megatron_blocks(plain, ContextParallelKind.RING) == []


def _cp_blockers(framework: str, model: ModelSpec, kind: ContextParallelKind) -> list[str]:
    training = TrainingSpec(global_batch_size=16, sequence_length=32768)
    parallel = ParallelConfig(dp=2, cp=4, ep=2 if model.moe else 1, cp_kind=kind,
                              ulysses_degree=2 if kind == ContextParallelKind.USP else None)
    return blockers(frameworks()[framework], plan_features(model, training, parallel))


def test_sliding_windows_under_megatron_context_parallelism_need_a2a_or_all_gather() -> None:
    # Transformer Engine 2.9 / 2.14 attn_forward_func_with_cp asserts that a window runs only
    # with cp_comm_type a2a or all_gather.
    spec = model_preset("gemma-2-9b")
    assert spec.sliding_window is not None and not spec.attention_sinks
    for kind in (ContextParallelKind.RING, ContextParallelKind.USP):
        assert any("sliding-window" in b for b in _cp_blockers("megatron-lm", spec, kind)), kind
    for kind in (ContextParallelKind.ULYSSES, ContextParallelKind.ALL_GATHER):
        assert _cp_blockers("megatron-lm", spec, kind) == [], kind
    unwindowed = spec.model_copy(update={"sliding_window": None, "sliding_window_layers": None})
    assert _cp_blockers("megatron-lm", unwindowed, ContextParallelKind.RING) == []


def test_mla_under_megatron_context_parallelism_needs_the_ring() -> None:
    # The same function asserts that query-key heads wider than value heads (MLA) run only
    # with cp_comm_type p2p or a2a+p2p.
    spec = model_preset("deepseek-v2-lite")
    for kind in (ContextParallelKind.ULYSSES, ContextParallelKind.ALL_GATHER):
        assert any("MLA" in b for b in _cp_blockers("megatron-lm", spec, kind)), kind
    for kind in (ContextParallelKind.RING, ContextParallelKind.USP):
        assert not any("MLA" in b for b in _cp_blockers("megatron-lm", spec, kind)), kind
    assert not any("MLA" in b for b in _cp_blockers(
        "megatron-lm", model_preset("llama-3.1-8b"), ContextParallelKind.ULYSSES))


@pytest.mark.parametrize(("preset", "words"), [
    ("gemma-2-9b", "sliding-window"), ("llama-4-scout-17b-16e", "chunked attention")])
def test_torchtitan_context_parallelism_refuses_window_and_chunk_masks(preset: str,
                                                                       words: str) -> None:
    # torchtitan v0.2.2: gpt-oss (its only windowed model) refuses context parallelism, and
    # Llama 4's chunked flavours run FlexAttention, which its arguments refuse under CP.
    spec = model_preset(preset)
    assert any(words in b for b in _cp_blockers("torchtitan", spec, ContextParallelKind.RING))
    plain = model_preset("llama-3.1-8b")
    assert not any("context parallelism" in b
                   for b in _cp_blockers("torchtitan", plain, ContextParallelKind.RING))


def test_usp_with_a_trivial_group_is_judged_as_the_kind_that_runs() -> None:
    # Transformer Engine switches a2a+p2p to a2a (ring group of one rank) or p2p (Ulysses
    # group of one rank) and checks that type.
    mla, windowed = model_preset("deepseek-v2-lite"), model_preset("gemma-2-9b")
    training = TrainingSpec(global_batch_size=16, sequence_length=32768)

    def megatron_blocks(model: ModelSpec, ulysses: int) -> list[str]:
        parallel = ParallelConfig(dp=2, cp=4, ep=2 if model.moe else 1,
                                  cp_kind=ContextParallelKind.USP, ulysses_degree=ulysses)
        return blockers(frameworks()["megatron-lm"], plan_features(model, training, parallel))

    assert any("MLA" in b for b in megatron_blocks(mla, 4))
    assert not any("MLA" in b for b in megatron_blocks(mla, 2))
    assert not any("sliding-window" in b for b in megatron_blocks(windowed, 4))
    assert any("sliding-window" in b for b in megatron_blocks(windowed, 2))


def test_megatron_ulysses_needs_kv_heads_per_tp_rank_divisible_by_its_degree() -> None:
    # Llama 3.1 8B: 8 KV heads. TP 8 leaves one per rank, which a Ulysses degree of 2 cannot
    # split (Transformer Engine asserts; the mesh rules only warn, since the cost model can
    # charge replicated heads).
    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=16, sequence_length=32768)

    def megatron_blocks(tp: int, cp: int) -> list[str]:
        parallel = ParallelConfig(tp=tp, cp=cp, dp=1, cp_kind=ContextParallelKind.ULYSSES,
                                  sequence_parallel=tp > 1)
        return blockers(frameworks()["megatron-lm"], plan_features(spec, training, parallel))

    assert any("KV heads" in b for b in megatron_blocks(8, 2))
    assert megatron_blocks(4, 2) == []


def test_deepspeed_ulysses_needs_at_least_as_many_kv_heads_as_its_degree() -> None:
    # DeepSpeed 0.19.8 asserts on fewer KV heads than the Ulysses degree (no replication);
    # Llama 3.1 8B's 8 KV heads split over a degree of 8 but not 16.
    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=16, sequence_length=65536)

    def deepspeed_blocks(cp: int) -> list[str]:
        parallel = ParallelConfig(cp=cp, dp=1, cp_kind=ContextParallelKind.ULYSSES)
        return blockers(frameworks()["deepspeed"], plan_features(spec, training, parallel))

    assert any("KV heads" in b for b in deepspeed_blocks(16))
    assert deepspeed_blocks(8) == []
