"""The capability table (`models/data/frameworks.json`) against the frameworks' own
validation, combination by combination.

For every combination of `framework_table_cases.COMBINATIONS` (schedules with and without
virtual stages, context-parallel kinds x attention kinds, ZeRO stage x pipeline, FP8 x MoE,
EP with TP or CP, recompute kinds, overlaps and the DeepEP dispatcher, models a framework
treats specially) and every framework, a small plan is built, exported and handed to that
framework's validation at its pinned release (`framework_checks.py`):

- Megatron-LM: megatron-core 0.16.1's config classes (`TransformerConfig`,
  `DistributedDataParallelConfig`, `OptimizerConfig` `__post_init__`), its process groups on
  a fake process group and its num-microbatches calculator;
- DeepSpeed: 0.19.8's `DeepSpeedConfig` with DeepSpeed's own mpu for the mesh (none for
  Ulysses with PP or AutoTP), the pipeline engine's ZeRO check and the AutoEP start-up
  checks (with AutoEP + ZeRO-3 + sequence parallelism);
- torchtitan: 0.2.2's job-config loader, `ParallelDims` and its device mesh on a fake
  process group, the schedule class, the DualPipeV + EP + activation-checkpointing check,
  the train-spec registry (a model without a pipelining function refuses PP, as `train.py`
  does), the model arguments' `update_from_config` and the parallelize functions' SDPA-only
  rule for CP, and the float8 MoE converter's limits.

The rule: a framework the table lists (no blocker: every feature in its table, no forbidden
combination) must accept the export. A framework the table does not list may reject it
(confirmation) or accept it; the latter is "table stricter than the framework" and needs a
reason on record: a missing feature the framework's configuration cannot express
(`UNSEEN`), or a forbidden rule the validation here does not execute (`UNCHECKED`: run-time
kernel assertions, model code, pairs the framework does not test), each rule with its own
cited source in the table. Where the export rather than the table is at fault, the
combination is an expected failure (`EXPORT_GAPS`).

Megatron-Bridge (`megatron-bridge` 0.3.1 on PyPI) is not used. Its wheel is pure Python and
downloads in seconds, but its configuration validation
(`megatron.bridge.training.config.ConfigContainer.validate`) cannot be imported without
Transformer Engine: `config.py` imports `megatron.bridge.models` (the whole model zoo, with
transformers, rich, omegaconf and hydra) and `megatron.bridge.peft`, whose `lora_layers.py`
runs `import transformer_engine.pytorch` at import time; the package requires
`transformer-engine[core_cu13,pytorch]`, `mamba-ssm`, `causal-conv1d` and
`nvidia-resiliency-ext`, CUDA builds this CPU environment does not have (tried with
0.3.1: `pip install --no-deps` plus transformers, omegaconf, hydra-core and rich, then the
import stops at `transformer_engine`). Its checks that concern the table (communication
overlap, Megatron FSDP, context parallelism) go through the megatron-core config classes
checked here.

Needs torch, megatron-core, DeepSpeed and torchtitan at the pinned releases, which `.ci/run`
installs in `.venv-frameworks`; elsewhere each framework's tests skip with the reason.
"""

import pytest
from framework_checks import (
    DEEPSPEED,
    MEGATRON_CORE,
    TORCH,
    DeepSpeedUnsupported,
    deepspeed_check,
    megatron_check,
    missing,
    torchtitan_check,
)
from framework_table_cases import COMBINATIONS, combination
from torchtitan_loader import PINNED as TORCHTITAN
from torchtitan_loader import installed as torchtitan_installed

from models.core.frameworks import blockers, capabilities, frameworks, plan_features
from solver.export import deepspeed_config, megatron_export

FRAMEWORKS = ("megatron-lm", "torchtitan", "deepspeed")

_MISSING: dict[str, str | None] = {
    "megatron-lm": missing(("torch", TORCH), ("megatron-core", MEGATRON_CORE)),
    "deepspeed": missing(("torch", TORCH), ("deepspeed", DEEPSPEED)),
    "torchtitan": missing(("torch", TORCH)) or (
        None if torchtitan_installed() == TORCHTITAN else
        f"needs torchtitan {TORCHTITAN} (found {torchtitan_installed()}); .ci/run installs it"),
}

_NO_KEY = "its configuration has no setting for it, so the check cannot see it"

UNSEEN: dict[str, dict[str, str]] = {
    "megatron-lm": {
        "schedule:gpipe": "megatron-core 0.16.1 schedules.py get_forward_backward_func offers "
                          "no pipelining, 1F1B and interleaved 1F1B only; other schedules "
                          "export as those",
        "schedule:zb_h1": "as schedule:gpipe", "schedule:zbv": "as schedule:gpipe",
        "schedule:dualpipev": "as schedule:gpipe",
        "recompute:full_layers+selective": "one --recompute-granularity per run",
        "recompute:per_stage": "one recompute setting for every pipeline rank",
    },
    "deepspeed": {
        **{f"schedule:{name}": "PipelineEngine runs TrainSchedule (1F1B) only; " + _NO_KEY
           for name in ("interleaved_1f1b", "gpipe", "zb_h1", "zbv", "dualpipev")},
        "uneven_layers": "PipelineModule's partition_method (uniform, parameters, type:) "
                         "states no per-stage layer counts; " + _NO_KEY,
        "uneven_layers:middle": "as uneven_layers",
        "sequence_parallel": "AutoTP has no sequence-parallel norms; " + _NO_KEY,
        "cp:ring": "DeepSpeed's context parallelism is Ulysses (deepspeed/sequence/layer.py, "
                   "model code); " + _NO_KEY,
        "cp:all_gather": "as cp:ring", "cp:usp": "as cp:ring",
        "fsdp": "ZeRO-3 partitions parameters without FSDP's per-block units; " + _NO_KEY,
        "fp8_compute": "no FP8 training recipe in 0.19.8's config (FP8 is Transformer Engine "
                       "model code); " + _NO_KEY,
        "fp8_weight_storage": "as fp8_compute",
        "etp": "AutoEP has no expert tensor parallelism; " + _NO_KEY,
        "recompute:selective": "activation_checkpointing checkpoints whole layers "
                               "(deepspeed.checkpointing.checkpoint in model code)",
        "recompute:selective_modules": "as recompute:selective",
        "recompute:full_layers+selective": "as recompute:selective",
        "recompute:per_stage": "one activation_checkpointing setting for every stage",
        "overlap_tp_comm": _NO_KEY, "overlap_ep_comm": _NO_KEY,
        "moe_dispatcher:deepep": _NO_KEY,
    },
    "torchtitan": {
        "tp_without_sp": "torchtitan's TP plans always shard the norms (sequence parallel); "
                         + _NO_KEY,
        "cp:ulysses": "torchtitan v0.2.2's context parallelism is ring attention "
                      "(context_parallel_rotate_method only changes how K/V rotate); "
                      "the export states the degree alone",
        "cp:all_gather": "as cp:ulysses", "cp:usp": "as cp:ulysses",
        "zero:1": "FSDP2 or DDP only; the export states the shard degree alone",
        "zero:2": "as zero:1",
        "recompute:selective_modules": "selective checkpointing picks torchtitan's own op "
                                       "list or a layer period, not modules",
        "recompute:full_layers": "activation_checkpoint has no 'first N layers' setting",
        "recompute:full_layers+selective": "as recompute:full_layers",
        "recompute:per_stage": "one activation_checkpoint setting for every stage",
        "overlap_ep_comm": _NO_KEY,
        "schedule:1f1b:few_micro_batches": "torch's Schedule1F1B.__init__ raises for fewer "
                                           "micro-batches than stages; the check here looks "
                                           "the class up (get_schedule_class) without "
                                           "building it",
    },
}
"""Features a framework's table lacks whose absence its validation here cannot see, with
why: an export of a plan using one is accepted, and the table is right to refuse it."""

UNCHECKED: dict[str, dict[frozenset[str], str]] = {
    "megatron-lm": {
        frozenset({"fsdp", "pp"}): "untested pair (PR #6081); the config classes accept it",
        frozenset({"zero:2", "pp"}): "as fsdp with pp",
        frozenset({"zero:3", "pp"}): "as fsdp with pp",
        **{frozenset({model, f"cp:{kind}"}): "Transformer Engine's attention kernels assert "
           "at run time (GPU only)"
           for model, kinds in (("model:attention_sinks", ("ring", "usp", "all_gather")),
                                ("model:sliding_window", ("ring", "usp")),
                                ("model:mla", ("ulysses", "all_gather")))
           for kind in kinds},
        frozenset({"mesh:ulysses_kv_replicated"}): "Transformer Engine's a2a context "
                                                   "parallelism asserts at run time (GPU only)",
    },
    "deepspeed": {
        frozenset({"mesh:ulysses_kv_replicated"}): "DeepSpeed-Ulysses asserts in "
                                                   "deepspeed/sequence/layer.py at run time",
    },
    "torchtitan": {
        frozenset({"zero:0", "mesh:multi_dim"}): "the models' parallelize functions raise; "
                                                 "they need a model and are not run here",
        frozenset({"model:chunked_attention", "cp:ring"}): "Llama 4's flavours are not "
                                                           "matched by the exported model",
        frozenset({"moe_dispatcher:deepep", "etp"}): "raised in the parallelize functions",
        frozenset({"moe_dispatcher:deepep", "model:qwen3"}): "silently ignored, not raised",
        frozenset({"moe_dispatcher:deepep", "model:sliding_window"}): "silently ignored, "
                                                                     "not raised",
    },
}
"""Forbidden rules of the table that the validation run here does not execute (run-time
kernel checks, model code, untested pairs), with why; each rule's own reason and source are
in the table."""

EXPORT_GAPS: dict[tuple[str, str], str] = {}
"""Combinations whose export (not the table) a framework rejects: expected failures, so a
fixed exporter shows up here."""


def _explained(framework: str, features: frozenset[str]) -> list[str]:
    """Why the table refuses `framework` for a plan with `features` although the check here
    accepts its export (empty: no reason on record)."""
    table = frameworks()[framework]
    out = [f"{f}: {UNSEEN[framework][f]}" for f in sorted(capabilities(features))
           if f not in table.features and f in UNSEEN[framework]]
    out += [f"{sorted(rule.features)}: {UNCHECKED[framework][rule.features]}"
            for rule in table.forbidden if rule.features <= features
            and rule.features in UNCHECKED[framework]]
    return out


def _check(framework: str, name: str) -> None:
    """Run `framework`'s validation on the combination's export (raises what it raises)."""
    spec, training, parallel = combination(name, framework)
    world = parallel.world_size
    if framework == "megatron-lm":
        args = list(megatron_export(spec, training, parallel).args)
        if training.overlap_ep_comm and parallel.ep > 1 and \
                "--overlap-moe-expert-parallel-comm" not in args:
            # The exporter leaves the flag out where megatron-core refuses it (with a note);
            # the table's rules about it are checked with the flag given.
            args.append("--overlap-moe-expert-parallel-comm")
        megatron_check(args, world)
    elif framework == "deepspeed":
        deepspeed_check(deepspeed_config(spec, training, parallel), world, pp=parallel.pp,
                        tp=parallel.tp, cp=parallel.cp)
    else:
        torchtitan_check(spec, training, parallel)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", COMBINATIONS)
def test_the_table_lists_a_framework_only_where_it_accepts(name: str, framework: str) -> None:
    reason = _MISSING[framework]
    if reason is not None:
        pytest.skip(f"{framework}: {reason}")
    if (framework, name) in EXPORT_GAPS:
        if _rejects(framework, name) is None:
            pytest.fail(f"{framework} accepts {name} now: drop it from EXPORT_GAPS")
        pytest.xfail(EXPORT_GAPS[framework, name])
    spec, training, parallel = combination(name, framework)
    features = plan_features(spec, training, parallel)
    why_not = blockers(frameworks()[framework], features)
    error = _rejects(framework, name)
    if error is not None:
        assert why_not, (f"the table lists {framework} for {name}, but {framework} rejects "
                         f"it: {error}")
        return
    if why_not:
        assert _explained(framework, features), (
            f"table stricter than the framework: {framework} accepts {name}, which the table "
            f"refuses ({'; '.join(why_not)}); cite why in UNSEEN or UNCHECKED, or list it")


def _rejects(framework: str, name: str) -> str | None:
    """What `framework` says against the combination's export (None: it accepts it)."""
    try:
        _check(framework, name)
    except (AssertionError, ValueError, TypeError, RuntimeError, NotImplementedError,
            DeepSpeedUnsupported) as error:
        return f"{type(error).__name__}: {error}"
    return None


def test_every_reason_on_record_names_the_table() -> None:
    """UNSEEN names only features a framework's table lacks, UNCHECKED only its forbidden
    rules: a feature added to a table or a rule removed takes its excuse with it."""
    for framework, features in UNSEEN.items():
        table = frameworks()[framework]
        assert not set(features) & set(table.features), framework
    for framework, rules in UNCHECKED.items():
        known = {rule.features for rule in frameworks()[framework].forbidden}
        assert set(rules) <= known, (framework, set(rules) - known)
