"""The MoE grouped GEMM and permute fusion as runtime features: which frameworks have them,
what turning each off costs, the flags the exports set, and why a plan leaves one off."""

import dataclasses
import functools

import pytest

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    ParallelConfig,
    PipelineSchedule,
    PlanRequest,
    PlanResponse,
    SolverLimits,
    TrainingSpec,
)
from models.catalog.kernels import (
    GEMM_TILE,
    gemm_time_s,
    grouped_gemm_time_s,
    memory_bound_time_s,
)
from models.catalog.presets import cluster_preset, model_preset
from models.core.compute import ELEMENTWISE_BACKWARD_RATIO, ComputeContext, moe_block_times
from models.core.frameworks import frameworks
from models.core.moe.permute import unfused_permute_extra_bytes
from models.core.runtime_features import MOE_GROUPED_GEMM, MOE_PERMUTE_FUSION
from models.core.step_time import estimate_step
from solver import plan
from solver.export import deepspeed_config, megatron_args, megatron_notes, torchtitan_notes
from solver.runtime_choice import runtime_options, with_rules
from solver.space import MeshCandidate

MIXTRAL_MESH = MeshCandidate(tp=2, pp=1, dp=16, cp=1, ep=4, etp=1, vpp=1, micro_batch_size=1,
                             num_micro_batches=32, schedule=PipelineSchedule.ONE_F_ONE_B,
                             sequence_parallel=True)
RECIPE = TrainingSpec(global_batch_size=512, sequence_length=4096)


def test_megatron_has_both_torchtitan_and_deepspeed_only_the_grouped_gemm() -> None:
    """Megatron-LM core_v0.14.0 has both switches (the fusion needs Transformer Engine 2.1,
    as its `transformer_config.py` says); torchtitan v0.2.2 always runs torch._grouped_mm
    (no job-config key) and DeepSpeed's AutoEP switches it with use_grouped_mm; both permute
    tokens unfused, so neither has the fusion."""
    tables = {fid: fw.features for fid, fw in frameworks().items()}
    assert tables["megatron-lm"][MOE_GROUPED_GEMM].how.startswith("--moe-grouped-gemm")
    assert tables["megatron-lm"][MOE_PERMUTE_FUSION].how.startswith("--moe-permute-fusion")
    assert "Transformer Engine >= 2.1" in tables["megatron-lm"][MOE_PERMUTE_FUSION].how
    assert tables["torchtitan"][MOE_GROUPED_GEMM].how.startswith("default, no job-config key")
    assert tables["deepspeed"][MOE_GROUPED_GEMM].how.startswith("expert_parallel.use_grouped_mm")
    assert tables["deepspeed"][MOE_GROUPED_GEMM].since == "0.19.2"
    assert MOE_PERMUTE_FUSION not in tables["torchtitan"]
    assert MOE_PERMUTE_FUSION not in tables["deepspeed"]


def test_the_search_takes_them_where_offered_without_a_branch() -> None:
    spec = model_preset("mixtral-8x7b")
    options = {fid: runtime_options(spec, RECIPE, MIXTRAL_MESH, fw)
               for fid, fw in frameworks().items()}
    assert {(o.moe_grouped_gemm, o.moe_permute_fusion) for o in options["megatron-lm"]} == {
        (True, True)}
    for fid in ("torchtitan", "deepspeed"):
        assert {(o.moe_grouped_gemm, o.moe_permute_fusion) for o in options[fid]} == {
            (True, False)}, fid
    # Time-only features add no branch: the options are those of the memory-trading ones.
    assert len(options["megatron-lm"]) == 4
    # A dense model has nothing to group or permute.
    (dense,) = runtime_options(model_preset("llama-3.1-8b"), RECIPE, MIXTRAL_MESH,
                               frameworks()["torchtitan"])
    assert dense.moe_grouped_gemm is False and dense.moe_permute_fusion is False


def _ctx(**update: object) -> ComputeContext:
    ctx = ComputeContext(gpu=cluster_preset("h100-sxm5-80gb", num_nodes=1).gpu, seq_len=4096,
                         micro_batch_size=1, tp=2, ep=4, sequence_parallel=True)
    return dataclasses.replace(ctx, **update)


def test_grouped_gemm_off_costs_the_per_expert_loop_minus_the_grouped_launch() -> None:
    """Mixtral 8x7B at TP 2, EP 4: 2 local experts, 4096 tokens x top-2 / TP 2 / 2 experts =
    2048 rows each (a whole number of tiles), h = 4096, expert width 14336 (SwiGLU: 28672
    up)."""
    spec = model_preset("mixtral-8x7b")
    on, off = _ctx(), _ctx(moe_grouped_gemm=False)
    extra = moe_block_times(spec, off).total_s - moe_block_times(spec, on).total_s
    m, h, f, groups = 2048, 4096, 14336, 2
    assert m % GEMM_TILE == 0
    expected = 0.0
    for n, k in ((2 * f, h), (h, f)):
        for a, b, c in ((m, n, k), (m, k, n), (k, n, m)):  # forward, input and weight grads
            loop = groups * gemm_time_s(a, b, c, gpu=on.gpu, dtype=on.compute_dtype,
                                        profile=on.kernel_profile)
            expected += loop - grouped_gemm_time_s(groups, a, b, c, gpu=on.gpu,
                                                   dtype=on.compute_dtype,
                                                   profile=on.kernel_profile)
    assert extra > 0
    assert extra == pytest.approx(expected, rel=1e-12)


def test_permute_fusion_off_costs_the_unfused_bytes_at_the_memory_bound_model() -> None:
    """Per routed assignment one more read and write of a 16-bit hidden row, and per token
    the zero fill of the output: 4096 tokens x top-2 / TP 2 = 4096 assignments at h = 4096
    move 4096 x 8192 x 1.5 bytes more in forward, twice that in backward."""
    spec = model_preset("mixtral-8x7b")
    extra_bytes = unfused_permute_extra_bytes(assignments=4096, top_k=2, hidden_size=4096)
    assert extra_bytes == 4096 * 8192 * 1.5
    on, off = _ctx(), _ctx(moe_permute_fusion=False)
    extra = moe_block_times(spec, off).total_s - moe_block_times(spec, on).total_s
    assert extra > 0
    assert extra == pytest.approx(
        (1 + ELEMENTWISE_BACKWARD_RATIO) * memory_bound_time_s(extra_bytes, gpu=on.gpu),
        rel=1e-9)


def test_unset_reads_as_on_so_published_recipes_keep_their_time() -> None:
    spec = model_preset("mixtral-8x7b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=4)
    parallel = ParallelConfig(tp=2, dp=16, ep=4, sequence_parallel=True)

    def step(**fields: object) -> float:
        recipe = RECIPE.model_copy(update=fields)
        return estimate_step(spec, recipe, parallel, cluster).step_time_s

    assert step() == step(moe_grouped_gemm=True, moe_permute_fusion=True)
    assert step() < step(moe_grouped_gemm=False) < step(moe_grouped_gemm=False,
                                                         moe_permute_fusion=False)
    assert step() < step(moe_permute_fusion=False)


@pytest.mark.parametrize("grouped,fused", [(True, True), (False, True), (True, False),
                                           (False, False)])
def test_exports_set_the_flags_from_the_choice(grouped: bool, fused: bool) -> None:
    spec = model_preset("mixtral-8x7b")
    recipe = RECIPE.model_copy(update={"moe_grouped_gemm": grouped,
                                       "moe_permute_fusion": fused})
    parallel = ParallelConfig(tp=2, dp=16, ep=4, sequence_parallel=True)
    args = megatron_args(spec, recipe, parallel)
    assert ("--moe-grouped-gemm" in args) == grouped
    assert ("--moe-permute-fusion" in args) == fused
    expert = deepspeed_config(spec, recipe, parallel)["expert_parallel"]
    assert expert.get("use_grouped_mm", True) == grouped
    assert any("use_grouped_mm" in note
               for note in torchtitan_notes(spec, recipe, parallel)) == (not grouped)


def test_a_rule_fixes_the_field() -> None:
    fixed = with_rules(RECIPE, {"moe_grouped_gemm": "forbidden",
                                "moe_permute_fusion": "required"})
    assert fixed.moe_grouped_gemm is False and fixed.moe_permute_fusion is True


LIMITS = SolverLimits(time_limit_s=60, top_k=0, num_workers=1)


@functools.cache
def _mixtral(framework: str, **fields: object) -> PlanResponse:
    return plan(PlanRequest(model=ModelPreset(preset="mixtral-8x7b"),
                            cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=4),
                            training=RECIPE.model_copy(update=fields),
                            constraints=Constraints(framework=framework), solver=LIMITS))


def test_the_plan_states_them_and_why_one_is_off() -> None:
    megatron = {use.feature: use for use in _mixtral("megatron-lm").runtime_features}
    for name, flag in ((MOE_GROUPED_GEMM, "--moe-grouped-gemm"),
                       (MOE_PERMUTE_FUSION, "--moe-permute-fusion")):
        assert megatron[name].on and megatron[name].decided_by == "planner"
        assert megatron[name].flags["megatron-lm"].startswith(flag)
    titan = {use.feature: use for use in _mixtral("torchtitan").runtime_features}
    assert titan[MOE_GROUPED_GEMM].on
    assert not titan[MOE_PERMUTE_FUSION].on
    assert titan[MOE_PERMUTE_FUSION].why_not == "not offered by torchtitan"


def test_a_recipe_that_fixes_the_grouped_gemm_off_is_planned_and_exported_with_it_off() -> None:
    """Why not moe_grouped_gemm: the request fixed it off; the plan prices the per-expert
    loop (slower than the same configuration with it on) and exports no flag for it."""
    response = _mixtral("megatron-lm", moe_grouped_gemm=False)
    assert response.parallel is not None and response.exports.megatron is not None
    use = {u.feature: u for u in response.runtime_features}[MOE_GROUPED_GEMM]
    assert not use.on and use.decided_by == "request"
    assert use.why_not == "fixed off by the request"
    assert "--moe-grouped-gemm" not in response.exports.megatron.args
    assert "--moe-permute-fusion" in response.exports.megatron.args
    free = _mixtral("megatron-lm")
    assert response.time is not None and free.time is not None
    assert response.time.step_time_s >= free.time.step_time_s
    # Priced off: with two experts per rank the loop is slower than the grouped GEMM (with
    # one per rank, as an EP of 8 gives Mixtral, the two are the same GEMM).
    spec = model_preset("mixtral-8x7b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=4)
    parallel = response.parallel.model_copy(update={"ep": 4})
    off = RECIPE.model_copy(update={"moe_grouped_gemm": False})
    on = RECIPE.model_copy(update={"moe_grouped_gemm": True})
    off_step = estimate_step(spec, off, parallel, cluster).step_time_s
    assert off_step > estimate_step(spec, on, parallel, cluster).step_time_s


def test_megatron_recomputes_the_expert_activation_only_with_the_grouped_gemm() -> None:
    spec = model_preset("mixtral-8x7b")
    parallel = ParallelConfig(tp=2, dp=16, ep=4, sequence_parallel=True, recompute="selective",
                              recompute_modules=["core_attn", "moe_act"])
    on = megatron_args(spec, RECIPE, parallel)
    assert on[on.index("--recompute-modules") + 1:][:2] == ["core_attn", "moe_act"]
    off = RECIPE.model_copy(update={"moe_grouped_gemm": False})
    args = megatron_args(spec, off, parallel)
    assert "moe_act" not in args and "core_attn" in args
    assert any("'moe_act' dropped" in note for note in megatron_notes(spec, off, parallel))
