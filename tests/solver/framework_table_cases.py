"""Small representative plans, one per feature combination the capability table
(`models/data/frameworks.json`) speaks about, for `test_framework_table.py`.

Each combination is a tiny plan (8 to 32 ranks, so the frameworks' validation builds its
process groups on a fake process group quickly) that turns on one combination: a pipeline
schedule with or without virtual stages, a context-parallel kind on an attention kind, a
ZeRO stage with or without a pipeline, FP8 with or without MoE, expert parallelism with
TP or CP, a recompute kind, a runtime feature (overlaps, the DeepEP dispatcher), a model
the framework treats specially. The same combination is built for every framework, with
that framework's usual sharding unless the combination names one (`BASE`): the distributed
optimizer (ZeRO-1) for Megatron-LM and DeepSpeed, FSDP2 (ZeRO-3) for torchtitan, which has
no ZeRO-1.
"""

from typing import Any

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import ParallelConfig, StagePolicy
from api_schemas.training import TrainingSpec
from models.catalog.presets import model_preset

Combination = tuple[ModelSpec, TrainingSpec, ParallelConfig]

BASE: dict[str, dict[str, Any]] = {
    "megatron-lm": {"zero_stage": 1},
    "deepspeed": {"zero_stage": 1},
    "torchtitan": {"zero_stage": 3, "fsdp": True},
}
"""Each framework's usual sharding, used where a combination does not name one."""

DENSE = "llama-3.1-8b"  # GQA: 32 query heads, 8 KV heads, 32 layers
MLA = "deepseek-v2-lite"  # MLA, MoE (64 experts), 27 layers
WINDOW = "gpt-oss-20b"  # sliding-window layers with attention sinks, MoE (32 experts)
CHUNKED = "llama-4-scout-17b-16e"  # chunked attention (NoPE layers), MoE (16 experts)
MOE = "olmoe-1b-7b-0924"  # MHA, 64 experts, 16 layers
FEW_KV = "qwen2.5-3b"  # 2 KV heads: a Ulysses degree of 4 would need copies of them
QWEN3 = "qwen3-30b-a3b"
FP8 = {"compute_dtype": "fp8"}

_SPECS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {}


def _add(name: str, preset: str, training: dict[str, Any] | None = None,
         **parallel: Any) -> None:
    assert name not in _SPECS, name
    _SPECS[name] = (preset, training or {}, parallel)


# Pipeline schedules, with and without virtual stages, even and uneven layer splits.
_add("pp/1f1b", DENSE, pp=2, dp=4)
_add("pp/1f1b-few-micro-batches", DENSE, pp=4, dp=2, micro_batch_size=16)  # m = 2 < 4
_add("pp/interleaved_1f1b", DENSE, pp=2, dp=4, vpp=2, schedule="interleaved_1f1b")
_add("pp/interleaved_1f1b-pp4", DENSE, pp=4, dp=2, vpp=2, schedule="interleaved_1f1b")
_add("pp/gpipe", DENSE, pp=2, dp=4, schedule="gpipe")
_add("pp/zb_h1", DENSE, pp=2, dp=4, schedule="zb_h1")
_add("pp/zbv", DENSE, pp=2, dp=4, vpp=2, schedule="zbv")
_add("pp/dualpipev", MOE, pp=2, dp=4, ep=4, vpp=2, schedule="dualpipev")
_add("pp/dualpipev-recompute", MOE, pp=2, dp=4, ep=4, vpp=2, schedule="dualpipev",
     recompute="full")
_add("pp/uneven", DENSE, pp=2, dp=4, layers_per_stage=(15, 17))
_add("pp/uneven-middle", DENSE, pp=4, dp=2, layers_per_stage=(7, 9, 8, 8))
# Tensor parallelism with and without sequence parallelism.
_add("tp/sp", DENSE, tp=2, dp=4, sequence_parallel=True)
_add("tp/no-sp", DENSE, tp=2, dp=4, sequence_parallel=False)
_add("tp/sp-pp", DENSE, tp=2, pp=2, dp=2, sequence_parallel=True)
# Context-parallel kinds x attention kinds.
for _kind, _extra in (("ring", {}), ("ulysses", {}), ("all_gather", {}),
                      ("usp", {"cp": 4, "ulysses_degree": 2})):
    _cp = {"cp": 2, "cp_kind": _kind, **_extra}
    _dp = 8 // _cp["cp"]
    _add(f"cp/{_kind}-gqa", DENSE, dp=_dp, **_cp)
    _add(f"cp/{_kind}-mla", MLA, dp=_dp, ep=2, **_cp)
    _add(f"cp/{_kind}-sliding-window", WINDOW, dp=_dp, ep=2, **_cp)
    _add(f"cp/{_kind}-chunked", CHUNKED, dp=_dp, ep=2, **_cp)
_add("cp/ring-tp", DENSE, tp=2, dp=2, cp=2, cp_kind="ring", sequence_parallel=True)
_add("cp/ulysses-tp", DENSE, tp=2, dp=2, cp=2, cp_kind="ulysses", sequence_parallel=True)
_add("cp/ring-pp", DENSE, pp=2, dp=2, cp=2, cp_kind="ring")
_add("cp/ulysses-pp", DENSE, pp=2, dp=2, cp=2, cp_kind="ulysses")
_add("cp/ulysses-kv-replicated", FEW_KV, dp=2, cp=4, cp_kind="ulysses")
# ZeRO stages with and without a pipeline.
for _stage in (0, 1, 2, 3):
    _zero = {"zero_stage": _stage, "fsdp": _stage == 3}
    _add(f"zero/{_stage}", DENSE, dp=8, **_zero)
    _add(f"zero/{_stage}-pp", DENSE, pp=2, dp=4, **_zero)
    _add(f"zero/{_stage}-tp", DENSE, tp=2, dp=4, sequence_parallel=True, **_zero)
# FP8 recipes with and without MoE, with and without FP8 weights, with a pipeline.
_add("fp8/dense", DENSE, FP8, dp=8)
_add("fp8/dense-fp8-weights", DENSE, {**FP8, "fp8_weight_storage": "fp8_only"}, dp=8)
_add("fp8/dense-tp", DENSE, FP8, tp=2, dp=4, sequence_parallel=True)
_add("fp8/dense-pp", DENSE, FP8, pp=2, dp=4)
_add("fp8/moe", MOE, FP8, dp=8, ep=4)
_add("fp8/moe-pp", MOE, FP8, pp=2, dp=4, ep=4)
_add("fp8/moe-tp", MOE, FP8, tp=2, dp=4, ep=4, sequence_parallel=True)
_add("fp8/moe-cp", MOE, FP8, dp=4, cp=2, ep=8, cp_kind="ring")
# Expert parallelism alone and with TP, CP, expert TP and a pipeline.
_add("ep/alone", MOE, dp=8, ep=8)
_add("ep/pp", MOE, pp=2, dp=4, ep=4)
_add("ep/tp", MOE, tp=2, dp=4, ep=4, sequence_parallel=True)
_add("ep/tp-no-sp", MOE, tp=2, dp=4, ep=4, sequence_parallel=False)
_add("ep/tp-pp", MOE, tp=2, pp=2, dp=2, ep=2, sequence_parallel=True)
_add("ep/cp", MOE, dp=4, cp=2, ep=8, cp_kind="ring")
_add("ep/cp-ulysses", MOE, dp=4, cp=2, ep=8, cp_kind="ulysses")
_add("ep/etp", MOE, tp=2, dp=4, ep=4, etp=2, sequence_parallel=True)
_add("ep/zero3-ulysses", MOE, dp=4, cp=2, ep=8, cp_kind="ulysses", zero_stage=3, fsdp=True)
_add("ep/zero3", MOE, dp=8, ep=8, zero_stage=3, fsdp=True)
_add("moe/no-ep", MOE, dp=8)
# Recompute kinds.
_add("recompute/selective", DENSE, dp=8, recompute="selective")
_add("recompute/selective-modules", MOE, dp=8, ep=8, recompute="selective",
     recompute_modules=["core_attn", "moe_act", "layernorm"])
_add("recompute/full", DENSE, dp=8, recompute="full")
_add("recompute/full-pp", DENSE, pp=2, dp=4, recompute="full")
_add("recompute/full-layers", DENSE, pp=2, dp=4, recompute={"full_layers": 4})
_add("recompute/full-layers+selective", DENSE, pp=2, dp=4,
     recompute={"full_layers": 4, "others": "selective"})
_add("recompute/per-stage", DENSE, pp=2, dp=4,
     stage_policies=[StagePolicy(recompute="full"), StagePolicy()])
# Runtime features: overlaps and the MoE dispatcher.
_add("runtime/no-overlap-grad-reduce", DENSE, {"overlap_grad_reduce": False}, dp=8)
_add("runtime/overlap-tp-comm", DENSE, {"overlap_tp_comm": True}, tp=2, dp=4,
     sequence_parallel=True)
_add("runtime/overlap-ep-comm", MOE, {"overlap_ep_comm": True}, dp=8, ep=8)
_add("runtime/overlap-ep-comm-interleaved", MOE, {"overlap_ep_comm": True}, pp=2, dp=4, ep=4,
     vpp=2, schedule="interleaved_1f1b")
_add("runtime/overlap-ep-comm-1f1b", MOE, {"overlap_ep_comm": True}, pp=2, dp=4, ep=4)
_add("runtime/overlap-ep-comm-full-recompute", MOE, {"overlap_ep_comm": True}, dp=8, ep=8,
     recompute="full")
_add("runtime/deepep", MOE, {"moe_dispatcher": "deepep"}, dp=8, ep=8)
_add("runtime/deepep-mla", MLA, {"moe_dispatcher": "deepep"}, dp=8, ep=8)
_add("runtime/deepep-qwen3", QWEN3, {"moe_dispatcher": "deepep"}, dp=8, ep=8)
_add("runtime/deepep-etp", MOE, {"moe_dispatcher": "deepep"}, tp=2, dp=4, ep=4, etp=2,
     sequence_parallel=True)
# Models a framework treats specially.
_add("model/qwen3-pp", QWEN3, pp=2, dp=4, ep=4)
_add("model/sliding-window-pp", WINDOW, pp=2, dp=4, ep=4)
_add("model/mla-pp", MLA, pp=3, dp=2, ep=2)

COMBINATIONS: tuple[str, ...] = tuple(_SPECS)


def combination(name: str, framework: str) -> Combination:
    """The combination's plan as built for `framework` (its usual sharding where the
    combination names none)."""
    preset, training, parallel = _SPECS[name]
    spec = model_preset(preset)
    parallel = {**BASE[framework], **parallel} if "zero_stage" not in parallel else parallel
    recipe = TrainingSpec(global_batch_size=64, sequence_length=4096, **training)
    return spec, recipe, ParallelConfig.model_validate(parallel)


__all__ = ["BASE", "COMBINATIONS", "Combination", "combination"]
