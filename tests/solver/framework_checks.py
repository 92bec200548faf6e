"""The frameworks' own validation at pinned releases, for the export tests: megatron-core
0.16.1 for the Megatron-LM arguments and DeepSpeed 0.19.8 for the DeepSpeed config
(torchtitan 0.2.2 has its own helper, `torchtitan_loader.py`).

Both need torch. `.ci/run` installs them for CPU in a separate virtual environment
(`.venv-frameworks`: torch 2.13.0's CPU build, `megatron-core==0.16.1` without its
dependencies, `deepspeed==0.19.8` built from its sdist with `DS_BUILD_OPS=0` and
`--no-build-isolation`) and runs the framework tests there; elsewhere they skip with the
reason `missing()` gives.

Megatron-LM: its argument parser (`megatron/training/arguments.py`) is not on a package
registry, so `megatron_check` reads the exported argv itself and builds megatron-core's
configs from it the way Megatron-LM's `core_transformer_config_from_args` does: every flag
whose name (dashes to underscores) is a field of megatron-core's `TransformerConfig` (or
`MLATransformerConfig`), `DistributedDataParallelConfig` or `OptimizerConfig` is passed to
it, a few are renamed as Megatron-LM renames them (`--num-experts` -> `num_moe_experts`,
`--decoder-first-pipeline-num-layers` -> `num_layers_in_first_pipeline_stage`, ...), and
the dataclasses' own `__post_init__` validation runs (the rules of Megatron-LM's
`validate_args` itself are not run). Then
`parallel_state.initialize_model_parallel` builds every process group on a fake process
group (torch's "fake" backend) of the plan's world size, and megatron-core's
num-microbatches calculator splits the global batch over the data-parallel size it
derived. Flags that are neither config fields nor read by those steps are listed in
`MEGATRON_MODEL_FLAGS`; any other flag fails the check.

DeepSpeed: `deepspeed_check` feeds the config to `deepspeed.runtime.config.DeepSpeedConfig`
on a fake process group of the plan's world size, with the mpu DeepSpeed itself would use
for the mesh (see the function), and runs the pipeline engine's ZeRO check and the AutoEP
validation the engine runs at start-up (`validate_autoep_config`) with the same sizes.

Transformer Engine is GPU-only: where megatron-core asks for its version (FP8 MoE checks),
the check answers with `TE_VERSION`, the oldest release megatron-core 0.16.1's `dev` extra
accepts; where it asks whether TE's fused MoE permutation imported (`--moe-permute-fusion`,
TE >= 2.1), the check answers yes, as that release has it.
"""

import contextlib
import dataclasses
import importlib.metadata
import io
import warnings
from collections.abc import Iterator
from typing import Any

MEGATRON_CORE = "0.16.1"
DEEPSPEED = "0.19.8"
TORCH = "2.13.0"
TE_VERSION = "2.9.0"
"""Transformer Engine version reported to megatron-core's version checks (the lower bound of
megatron-core 0.16.1's `transformer-engine` requirement)."""

MEGATRON_RENAMES: dict[str, str] = {
    "num_experts": "num_moe_experts",
    "decoder_first_pipeline_num_layers": "num_layers_in_first_pipeline_stage",
    "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage",
    "fp8_format": "fp8",
    "fp8_param_gather": "fp8_param",
    "microbatch_group_size_per_virtual_pipeline_stage": "microbatch_group_size_per_vp_stage",
}
"""Megatron-LM flags whose `TransformerConfig` field has another name."""

MEGATRON_MODEL_FLAGS: frozenset[str] = frozenset({
    # read by the model builder, the tokenizer or the checkpointer, not by a config class
    "seq_length", "max_position_embeddings", "position_embedding_type", "vocab_size",
    "make_vocab_size_divisible_by", "untie_embeddings_and_output_weights", "rotary_base",
    "ckpt_format",
    # turned into config fields below (swiglu, biases, GQA, virtual stages, dtypes)
    "swiglu", "disable_bias_linear", "group_query_attention",
    "num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
    "no_gradient_accumulation_fusion", "use_torch_fsdp2",
    # read by the num-microbatches calculator
    "micro_batch_size", "global_batch_size", "rampup_batch_size",
})
"""Megatron-LM flags that are not fields of megatron-core's config classes."""


def installed(package: str) -> str | None:
    """The installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def missing(*pins: tuple[str, str]) -> str | None:
    """Why the pinned packages cannot be used here (None when they all can)."""
    wrong = [f"{name} {want} (found {installed(name)})" for name, want in pins
             if (installed(name) or "").split("+")[0] != want]
    if not wrong:
        return None
    return (f"needs {', '.join(wrong)}; .ci/run installs them for CPU in .venv-frameworks "
            "(see tests/solver/framework_checks.py)")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The frameworks warn on import and on CPU (no Transformer Engine, no CUDA) and print
    their process grids; none of that says anything about the export."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def fake_world(world_size: int) -> Iterator[None]:
    """torch.distributed initialised on the fake backend with `world_size` ranks (this
    process is rank 0); collectives return at once, groups are real objects."""
    with _quiet():
        import torch.distributed as dist
        from torch.testing._internal.distributed.fake_pg import FakeStore

    assert not dist.is_initialized()
    dist.init_process_group(backend="fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def parse_argv(args: list[str]) -> dict[str, Any]:
    """Exported argv tokens as {flag with underscores: value}: True for a bare switch, an
    int, float or string for one value, a list for several."""
    out: dict[str, Any] = {}
    index = 0
    while index < len(args):
        flag = args[index]
        assert flag.startswith("--"), f"value without a flag: {flag!r}"
        values = []
        index += 1
        while index < len(args) and not args[index].startswith("--"):
            values.append(_number(args[index]))
            index += 1
        name = flag[2:].replace("-", "_")
        assert name not in out, f"{flag} given twice"
        out[name] = True if not values else values[0] if len(values) == 1 else values
    return out


def _number(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MegatronResult:
    """What megatron-core made of an export."""

    config: Any
    """The validated `TransformerConfig` (or `MLATransformerConfig`)."""
    ddp: Any
    """The validated `DistributedDataParallelConfig`."""
    optimizer: Any
    """The validated `OptimizerConfig` (None when the export names no optimizer)."""
    tp: int
    pp: int
    vpp: int
    cp: int
    ep: int
    etp: int
    dp: int
    """Data-parallel size of `parallel_state` (without context parallelism)."""
    micro_batch_size: int
    num_micro_batches: int


def _moe_layer_freq(value: Any) -> Any:
    """Megatron-LM's `--moe-layer-freq` type: an int, or a Python list expression such as
    '([0]*1+[1]*60)'."""
    if isinstance(value, int):
        return value
    pattern = str(value)
    assert set(pattern) <= set("[]()0123456789*+, "), pattern
    return eval(pattern, {"__builtins__": {}})  # noqa: S307 - digits, brackets and * + only


def _config_kwargs(flags: dict[str, Any], fields: set[str]) -> dict[str, Any]:
    """`TransformerConfig` arguments of the parsed flags, as Megatron-LM derives them."""
    import torch
    import torch.nn.functional as functional

    kwargs: dict[str, Any] = {}
    for name, value in flags.items():
        field = MEGATRON_RENAMES.get(name, name)
        if field in fields:
            kwargs[field] = value
    if "recompute_modules" in kwargs and isinstance(kwargs["recompute_modules"], str):
        kwargs["recompute_modules"] = [kwargs["recompute_modules"]]
    if "hierarchical_context_parallel_sizes" in kwargs:
        kwargs["hierarchical_context_parallel_sizes"] = list(
            kwargs["hierarchical_context_parallel_sizes"])
    if "moe_layer_freq" in kwargs:
        kwargs["moe_layer_freq"] = _moe_layer_freq(kwargs["moe_layer_freq"])
    if flags.get("swiglu"):
        kwargs["gated_linear_unit"] = True
        kwargs["activation_func"] = functional.silu
    kwargs["add_bias_linear"] = not flags.get("disable_bias_linear", False)
    if not flags.get("group_query_attention"):
        kwargs.pop("num_query_groups", None)
    kwargs["gradient_accumulation_fusion"] = not flags.get("no_gradient_accumulation_fusion")
    dtype = (torch.bfloat16 if flags.get("bf16") else torch.float16 if flags.get("fp16")
             else torch.float32)
    kwargs["params_dtype"] = dtype
    kwargs["pipeline_dtype"] = dtype
    kwargs["deallocate_pipeline_outputs"] = True
    kwargs["virtual_pipeline_model_parallel_size"] = _virtual_stages(flags)
    return kwargs


def _virtual_stages(flags: dict[str, Any]) -> int | None:
    """Virtual stages per pipeline rank as Megatron-LM's `validate_args` derives them from
    `--num-layers-per-virtual-pipeline-stage` (layer slots per rank / layers per virtual
    stage, the embedding and loss counted when their account-for flags are given) or takes
    them from `--num-virtual-stages-per-pipeline-rank`; None without either (a layout
    string states them itself)."""
    per_stage = flags.get("num_layers_per_virtual_pipeline_stage")
    stages = flags.get("num_virtual_stages_per_pipeline_rank")
    assert per_stage is None or stages is None, "both virtual-stage flags given"
    if stages is not None:
        return int(stages)
    if per_stage is None:
        return None
    pp = int(flags.get("pipeline_model_parallel_size", 1))
    slots = int(flags["num_layers"]) + bool(flags.get("account_for_embedding_in_pipeline_split")) \
        + bool(flags.get("account_for_loss_in_pipeline_split"))
    assert slots % pp == 0, f"{slots} layer slots do not split over {pp} pipeline ranks"
    assert (slots // pp) % per_stage == 0, (
        f"{slots // pp} layer slots per rank are not a multiple of {per_stage} per virtual stage")
    return slots // pp // int(per_stage)


TE_PERMUTATION = ("fused_permute", "fused_permute_with_probs", "fused_sort_chunks_by_index",
                  "fused_sort_chunks_by_index_with_probs", "fused_unpermute")
"""The Transformer Engine kernels megatron-core 0.16.1's `TransformerConfig.__post_init__`
imports from `megatron/core/transformer/moe/moe_utils.py` when `moe_permute_fusion` is set
(it raises 'fused permutation is not available' when one is missing)."""


@contextlib.contextmanager
def _te_permutation() -> Iterator[None]:
    """The fused permutation kernels present in megatron-core's `moe_utils` while the
    configuration is built (without TE the module defines none of them)."""
    from megatron.core.transformer.moe import moe_utils

    missing = {name: name in vars(moe_utils) for name in TE_PERMUTATION
               if getattr(moe_utils, name, None) is None}
    for name in missing:
        setattr(moe_utils, name, object())
    try:
        yield
    finally:
        for name, defined in missing.items():
            if defined:
                setattr(moe_utils, name, None)
            else:
                delattr(moe_utils, name)


def megatron_check(args: list[str], world_size: int) -> MegatronResult:
    """Validate exported Megatron-LM arguments with megatron-core and a `world_size`-rank
    fake process group (raises what megatron-core raises)."""
    with _quiet():
        import torch
        from megatron.core import parallel_state
        from megatron.core import utils as core_utils
        from megatron.core.distributed import DistributedDataParallelConfig
        from megatron.core.num_microbatches_calculator import (
            destroy_num_microbatches_calculator,
            get_num_microbatches,
            init_num_microbatches_calculator,
        )
        from megatron.core.optimizer import OptimizerConfig
        from megatron.core.transformer import TransformerConfig
        from megatron.core.transformer.transformer_config import MLATransformerConfig
        from packaging.version import Version

    flags = parse_argv(args)
    config_class = MLATransformerConfig if flags.get("multi_latent_attention") else \
        TransformerConfig
    config_fields = {f.name for f in dataclasses.fields(config_class)}
    ddp_fields = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    optimizer_fields = {f.name for f in dataclasses.fields(OptimizerConfig)}
    unknown = [name for name in flags if MEGATRON_RENAMES.get(name, name) not in
               config_fields | ddp_fields | optimizer_fields | MEGATRON_MODEL_FLAGS]
    assert not unknown, f"flags no check reads: {unknown}"

    core_utils._te_version = Version(TE_VERSION)
    with _quiet(), _te_permutation():
        config = config_class(**_config_kwargs(flags, config_fields))
        ddp = DistributedDataParallelConfig(**{
            name: value for name, value in flags.items() if name in ddp_fields})
        optimizer = None
        if "optimizer" in flags:
            dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
                      "fp8": torch.uint8}
            optimizer_kwargs = {name: dtypes.get(value, value) if name.endswith("_dtype")
                                else value for name, value in flags.items()
                                if name in optimizer_fields}
            optimizer_kwargs["params_dtype"] = config.params_dtype
            optimizer = OptimizerConfig(**optimizer_kwargs)

    vpp = config.virtual_pipeline_model_parallel_size
    with fake_world(world_size):
        try:
            with _quiet():
                parallel_state.initialize_model_parallel(
                    tensor_model_parallel_size=config.tensor_model_parallel_size,
                    pipeline_model_parallel_size=config.pipeline_model_parallel_size,
                    virtual_pipeline_model_parallel_size=vpp,
                    context_parallel_size=config.context_parallel_size,
                    hierarchical_context_parallel_sizes=config.hierarchical_context_parallel_sizes,
                    expert_model_parallel_size=config.expert_model_parallel_size,
                    expert_tensor_parallel_size=config.expert_tensor_parallel_size,
                    num_distributed_optimizer_instances=ddp.num_distributed_optimizer_instances,
                    create_gloo_process_groups=False)
            dp = parallel_state.get_data_parallel_world_size()
            result = dict(
                tp=parallel_state.get_tensor_model_parallel_world_size(),
                pp=parallel_state.get_pipeline_model_parallel_world_size(),
                vpp=parallel_state.get_virtual_pipeline_model_parallel_world_size() or 1,
                cp=parallel_state.get_context_parallel_world_size(),
                ep=parallel_state.get_expert_model_parallel_world_size(),
                etp=parallel_state.get_expert_tensor_parallel_world_size(), dp=dp)
            init_num_microbatches_calculator(
                rank=0, rampup_batch_size=flags.get("rampup_batch_size"),
                global_batch_size=int(flags["global_batch_size"]),
                micro_batch_size=int(flags["micro_batch_size"]), data_parallel_size=dp)
            try:
                num_micro_batches = get_num_microbatches()
            finally:
                destroy_num_microbatches_calculator()
        finally:
            parallel_state.destroy_model_parallel()
    return MegatronResult(config=config, ddp=ddp, optimizer=optimizer,
                          micro_batch_size=int(flags["micro_batch_size"]),
                          num_micro_batches=num_micro_batches, **result)



class DeepSpeedUnsupported(ValueError):
    """A mesh DeepSpeed 0.19.8 has no process-group layout for (Ulysses sequence parallelism
    together with pipeline or AutoTP ranks): there is no mpu to hand its config."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeepSpeedResult:
    """What DeepSpeed made of an export."""

    config: Any
    """The validated `DeepSpeedConfig`."""
    dp: int
    """The data-parallel size DeepSpeed's batch arithmetic used."""
    optimizer_wrapper: str | None = None
    """The optimizer wrapper DeepSpeed's engine takes for the config (`_optimizer_check`):
    'bf16' for BF16_Optimizer, 'zero_optimization' for its ZeRO optimizer, None for the
    basic optimizer."""


def _reset_deepspeed_groups() -> None:
    from deepspeed.runtime.sequence_parallel import parallel_state_sp
    from deepspeed.utils import groups

    for name in ("_TENSOR_MODEL_PARALLEL_GROUP", "_MODEL_PARALLEL_GROUP", "_DATA_PARALLEL_GROUP"):
        setattr(groups, name, None)
    parallel_state_sp._release_sequence_parallel_groups()


def deepspeed_check(config: dict[str, Any], world_size: int, *, pp: int, tp: int,
                    cp: int) -> DeepSpeedResult:
    """Validate an exported DeepSpeed config with DeepSpeed's own config classes on a
    `world_size`-rank fake process group (raises what DeepSpeed raises).

    The mpu is the one DeepSpeed itself would use for the mesh: the `PipelineParallelGrid`
    a `PipelineModule` builds (pipeline x AutoTP x data) when pp > 1, the AutoTP groups
    the engine builds (`groups._init_tp_mesh_device`) when only tp > 1, DeepSpeed-Ulysses'
    sequence-parallel state when only cp > 1, none (every rank data-parallel) otherwise.
    The engine's optimizer-wrapper check (`_optimizer_check`), the pipeline engine's ZeRO
    check and the AutoEP start-up checks (with the engine's AutoEP + ZeRO-3 check,
    `_validate_zero3_moe_compatibility`) run on the same sizes.
    """
    with _quiet():
        import deepspeed.comm as ds_dist
        import deepspeed.comm.torch as ds_torch_backend
        from deepspeed.module_inject.auto_ep_config import validate_autoep_config
        from deepspeed.runtime.config import DeepSpeedConfig
        from deepspeed.runtime.pipe.topology import (
            PipelineParallelGrid,
            PipeModelDataParallelTopology,
        )
        from deepspeed.runtime.sequence_parallel import parallel_state_sp
        from deepspeed.runtime.zero.config import ZeroStageEnum
        from deepspeed.utils import groups
        from deepspeed.utils.bwc import bwc_tensor_model_parallel_world_size

    if cp > 1 and (pp > 1 or tp > 1):
        raise DeepSpeedUnsupported(
            f"cp={cp} with pp={pp}, tp={tp}: DeepSpeed 0.19.8 has no grid that combines "
            "Ulysses sequence parallelism with pipeline or AutoTP ranks")
    with fake_world(world_size):
        _reset_deepspeed_groups()
        try:
            with _quiet():
                # The CPU accelerator's shared-memory collectives are a C++ extension that
                # deepspeed.comm compiles on first use; reading a config never runs a
                # collective, so none is built.
                ds_torch_backend.build_shm_op = lambda: None
                ds_dist.init_distributed(dist_backend="fake", verbose=False)
                mpu: Any = None
                user_mpu: Any = None
                if pp > 1:
                    mpu = user_mpu = PipelineParallelGrid(topology=PipeModelDataParallelTopology(
                        num_pp=pp, num_mp=tp, num_dp=world_size // (pp * tp)))
                elif tp > 1:
                    groups._init_tp_mesh_device(tensor_model_parallel_size=tp)
                    mpu = groups
                elif cp > 1:
                    parallel_state_sp.initialize_sequence_parallel(cp)
                    mpu = parallel_state_sp
                parsed = DeepSpeedConfig(dict(config), mpu=mpu)
                wrapper = _optimizer_check(parsed, pp=pp)
            if pp > 1:
                # deepspeed/runtime/pipe/engine.py, PipelineEngine.__init__
                assert parsed.zero_optimization_stage < ZeroStageEnum.gradients, \
                    "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
            autoep = parsed.expert_parallel_config
            if autoep is not None and autoep.enabled:
                # deepspeed/runtime/engine.py, DeepSpeedEngine._configure_expert_parallel
                if bwc_tensor_model_parallel_world_size(user_mpu) != 1:
                    raise ValueError("AutoEP does not currently support tensor model "
                                     "parallelism from mpu")
                validate_autoep_config(autoep, world_size, pp, tp, cp,
                                       zero_stage=int(parsed.zero_optimization_stage),
                                       mpu=user_mpu)
                # deepspeed/runtime/engine.py, DeepSpeedEngine._validate_zero3_moe_compatibility
                if parsed.zero_optimization_stage == ZeroStageEnum.weights and cp > 1:
                    raise AssertionError("AutoEP with ZeRO Stage 3 does not support sequence "
                                         f"parallelism yet (sequence_parallel_size={cp}).")
        finally:
            _reset_deepspeed_groups()
    return DeepSpeedResult(config=parsed, dp=int(parsed.world_size), optimizer_wrapper=wrapper)


def _optimizer_check(parsed: Any, *, pp: int) -> str | None:
    """DeepSpeed 0.19.8's choice of optimizer wrapper for the config
    (`DeepSpeedEngine._do_optimizer_sanity_check`, run unbound on a stand-in engine that
    answers from the parsed config through the engine's own accessors), returned as the
    engine names it ('bf16' is BF16_Optimizer): it raises where the precision,
    gradient-accumulation dtype and ZeRO stage have no wrapper, as the engine's start-up
    does before it builds any optimizer."""
    import types

    import torch
    from deepspeed.runtime.engine import DeepSpeedEngine

    engine: Any = types.SimpleNamespace(_config=parsed, global_rank=0,
                                        pipeline_parallelism=pp > 1)
    for name in ("fp16_enabled", "bfloat16_enabled", "get_data_types", "zero_optimization",
                 "zero_optimization_stage", "zero_cpu_offload", "zero_allow_untested_optimizer",
                 "zero_compute_grad_norm"):
        setattr(engine, name, types.MethodType(getattr(DeepSpeedEngine, name), engine))
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
    wrapper = DeepSpeedEngine._do_optimizer_sanity_check(engine, optimizer)
    return None if wrapper is None else str(wrapper)


def _stub_absent_modules() -> None:
    """Stand-ins for packages torchtitan's model packages import at import time but that
    validation never uses, where they are absent: `datasets`, `torchdata`, `tokenizers` and
    `tensorboard` (its dataloader, tokenizer and metrics builders; torchtitan is installed
    without its dependencies, see `torchtitan_loader.py`), and torchtitan's MoE permutation
    kernel module
    (`models/core/moe/kernels.py`, Triton code, GPU-only, never run here) where Triton is
    absent."""
    import importlib.machinery
    import importlib.util
    import sys
    import types

    names: dict[str, dict[str, Any]] = {
        "datasets": {"Dataset": type("Dataset", (), {}), "load_dataset": None},
        "datasets.distributed": {"split_dataset_by_node": None},
        "tokenizers": {"AddedToken": type("AddedToken", (), {}),
                       "Tokenizer": type("Tokenizer", (), {})},
        "torchdata": {},
        "torchdata.stateful_dataloader": {
            "StatefulDataLoader": type("StatefulDataLoader", (), {})},
        "torch.utils.tensorboard": {"SummaryWriter": type("SummaryWriter", (), {})},
        "torchtitan.models.moe.kernels": {"generate_permute_indices": None,
                                          "fill_indices_wrapper": None},
    }
    present = {name: name in sys.modules or importlib.util.find_spec(name) is not None
               for name in ("datasets", "torchdata", "tokenizers", "triton", "tensorboard")}
    for module, attributes in names.items():
        needed = {"torchtitan": "triton", "torch": "tensorboard"}.get(
            module.split(".")[0], module.split(".")[0])
        if module in sys.modules or present[needed]:
            continue
        stub = types.ModuleType(module)
        stub.__spec__ = importlib.machinery.ModuleSpec(module, None, is_package=True)
        stub.__path__ = []
        for attribute, value in attributes.items():
            setattr(stub, attribute, value)
        sys.modules[module] = stub
        parent, _, child = module.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, stub)


def _real_torchtitan_packages() -> None:
    """Forget torchtitan's modules when `torchtitan_loader` registered its packages by path
    (stand-ins without `__file__`, made when torch was absent or before this ran), so the
    next import runs the packages' own `__init__` files."""
    import sys

    root = sys.modules.get("torchtitan")
    if root is None or getattr(root, "__file__", None) is not None:
        return
    for name in [m for m in sys.modules if m == "torchtitan" or m.startswith("torchtitan.")]:
        del sys.modules[name]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TorchtitanResult:
    """What torchtitan made of an export."""

    job_config: Any
    """The `JobConfig` torchtitan's loader built."""
    model: str | None
    """The registered model (train spec) the export names, None for a model-args block."""
    gradient_accumulation_steps: int


def torchtitan_check(spec: Any, training: Any, parallel: Any) -> TorchtitanResult:
    """Validate a plan's torchtitan export with torchtitan 0.2.2's own code, in the order
    `train.py` runs it (raises what torchtitan raises):

    - the job-config loader (`torchtitan_loader.check_torchtitan`, which also reads back the
      plan's degrees, schedule, micro-batch and recompute mode);
    - `ParallelDims` (`_validate`) and its device mesh (`build_mesh`) on a fake process group
      of the plan's world size, then the batch arithmetic `Trainer.__init__` asserts;
    - the model registry: `get_train_spec` for a registered model; a pipeline needs the train
      spec's `pipelining_fn` (`Trainer.__init__` raises "does not support pipelining"); the
      flavour's model arguments run `update_from_config` (context-parallel and attention
      limits); the parallelize functions' attention check for CP (`attn_type` must be
      'sdpa');
    - the pipeline: `torch.distributed.pipelining.get_schedule_class` for the schedule name,
      `get_dual_pipe_v_flag` (EP + DualPipeV + activation checkpointing);
    - float8 MoE: `Float8GroupedMMConverter`'s limits (no PP, no CP). Its SM89 check is
      GPU-only and is answered 'yes' here, as `TE_VERSION` answers megatron-core.
    """
    from torchtitan_loader import check_torchtitan

    from solver.export.launch import torchtitan_model

    with _quiet():
        # torchtitan's packages themselves, not the loader's path-only stand-ins (torch is
        # here, and the model registry needs the packages' own __init__ files)
        _real_torchtitan_packages()
        _stub_absent_modules()
        import torchtitan.config
        import torchtitan.tools  # noqa: F401

        job_config = check_torchtitan(spec.name, training, parallel)
        from torch.distributed.pipelining.schedules import get_schedule_class
        from torchtitan.distributed.dual_pipe_v import get_dual_pipe_v_flag
        from torchtitan.distributed.parallel_dims import ParallelDims
    p = job_config.parallelism
    world_size = parallel.world_size
    with fake_world(world_size), _quiet():
        dims = ParallelDims(dp_shard=p.data_parallel_shard_degree,
                            dp_replicate=p.data_parallel_replicate_degree,
                            cp=p.context_parallel_degree, tp=p.tensor_parallel_degree,
                            pp=p.pipeline_parallel_degree, ep=p.expert_parallel_degree,
                            etp=p.expert_tensor_parallel_degree, world_size=world_size)
        dims.build_mesh()
        batch_degree = dims.dp_replicate * dims.dp_shard
        global_batch = job_config.training.global_batch_size
        local_batch = job_config.training.local_batch_size
        if global_batch < 0:
            global_batch = local_batch * batch_degree
        # torchtitan/train.py, Trainer.__init__
        assert global_batch % (local_batch * batch_degree) == 0, (
            "global batch size must be multiple of local batch size times data-parallel "
            "degree")
        if dims.pp_enabled:
            get_schedule_class(p.pipeline_parallel_schedule)
        get_dual_pipe_v_flag(job_config, dims)
        registered = torchtitan_model(spec)
        model = registered.get("name")
        if model is not None:
            from torchtitan.protocols.train_spec import get_train_spec

            train_spec = get_train_spec(model)
            if dims.pp_enabled and not train_spec.pipelining_fn:
                # torchtitan/train.py, Trainer.__init__
                raise RuntimeError(f"Pipeline Parallel is enabled but {model} does not "
                                   "support pipelining")
            model_args = train_spec.model_args[registered["flavour"]]
            model_args.update_from_config(job_config)
            attn_type = getattr(model_args, "attn_type", "sdpa")
            if dims.cp_enabled and attn_type != "sdpa":
                # models/{llama3,llama4,deepseek_v3,qwen3}/infra/parallelize.py
                raise NotImplementedError(
                    f"Context Parallel only supports SDPA attention. Got attn_type='{attn_type}'")
        if "quantize.grouped_mm.float8" in job_config.model.converters:
            from torchtitan.components.quantization import float8 as float8_module

            capability = float8_module.has_cuda_capability
            float8_module.has_cuda_capability = lambda major, minor: True
            try:
                float8_module.Float8GroupedMMConverter(job_config, dims)
            finally:
                float8_module.has_cuda_capability = capability
    return TorchtitanResult(job_config=job_config, model=model,
                            gradient_accumulation_steps=global_batch // (
                                local_batch * batch_degree))


__all__ = [
    "DEEPSPEED",
    "DeepSpeedResult",
    "DeepSpeedUnsupported",
    "deepspeed_check",
    "MEGATRON_CORE",
    "MEGATRON_MODEL_FLAGS",
    "MEGATRON_RENAMES",
    "TE_VERSION",
    "TORCH",
    "MegatronResult",
    "fake_world",
    "installed",
    "megatron_check",
    "missing",
    "parse_argv",
    "TorchtitanResult",
    "torchtitan_check",
]
