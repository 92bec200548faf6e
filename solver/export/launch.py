"""What a launch needs beyond a framework's config: the launcher lines, the environment and
the releases the export was checked against.

Owns: the node shape of a launch (nodes x processes per node = the plan's GPUs), the
torchrun line (static rendezvous: `--nnodes`, `--nproc-per-node`, `--node-rank`,
`--master-addr`, `--master-port`) and its Slurm `srun` form, the environment each plan
relies on (the allocator setting the memory margin assumes, NCCL settings the cost model
assumes, Megatron-LM's `CUDA_DEVICE_MAX_CONNECTIONS`), the torchtitan model name and flavour
(or the model arguments a new flavour needs), the framework releases each export was
checked against and the further packages a launch needs (torchao for torchtitan's FP8, with
the releases that have what it imports). Must not: write a framework's own config
(the `megatron`, `torchtitan` and `deepspeed` modules do) or size anything.

Sources: PyTorch `torch/distributed/run.py` (torchrun options; 29500 is its default
`--master-port`); Slurm `srun` (`--nodes`, `--ntasks-per-node`, `--gpus-per-node`,
`--export`; `SLURM_NODEID`, `SLURM_JOB_NODELIST`, `scontrol show hostnames`); torchtitan
v0.2.2 `run_train.sh` (`-m torchtitan.train --job.config_file`) and `torchtitan/models/*/
__init__.py` (the flavours); DeepSpeed `deepspeed.add_config_arguments` (`--deepspeed`,
`--deepspeed_config`).
"""

import math
import shlex
from dataclasses import dataclass, field
from typing import Any

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.core.runtime_memory import NCCL_BUFFER_BYTES
from models.evidence.memory_margin import EXPANDABLE_SEGMENTS_ENV

MASTER_PORT = 29500
"""torchrun's default `--master-port`."""

CHECKED_AGAINST: dict[str, dict[str, str]] = {
    "megatron": {"megatron-core": "0.16.1", "torch": "2.13.0"},
    "torchtitan": {"torchtitan": "0.2.2", "torch": "2.13.0"},
    "deepspeed": {"deepspeed": "0.19.8", "torch": "2.13.0"},
}
"""The releases each export is checked against in CI (`tests/solver/framework_checks.py`,
`tests/solver/torchtitan_loader.py`: the framework's own config parsing and validation on a
CPU build of torch, not a GPU run)."""

TORCHAO_MOE_FLOAT8 = ("0.12.0", "0.16.0")
"""The torchao releases with `torchao.prototype.moe_training.conversion_utils.
MoETrainingConfig`, which torchtitan v0.2.2's `quantize.grouped_mm.float8` converter imports
(`components/quantization/float8.py: Float8GroupedMMConverter.convert`; its `job_config.py`
asks for "the torchao nightly build"): present from torchao 0.12.0 (2025-07-14) to 0.16.0
(2026-02-05), removed in 0.17.0 (2026-03-25), whose `moe_training/config.py` has
`Float8TrainingOpConfig` instead. Read from pytorch/ao's release tags."""

TORCHAO_FLOAT8_RECIPES = "0.9.0"
"""The first torchao with `Float8LinearConfig.from_recipe_name`, which torchtitan v0.2.2
needs for a `recipe_name` (its float8 converter's own warning)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Flavour:
    """One model flavour of torchtitan v0.2.2's registry, by its defining sizes."""

    name: str
    flavour: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_experts: int
    """Routed experts per MoE layer (0: dense)."""


TORCHTITAN_FLAVOURS: tuple[Flavour, ...] = (
    Flavour(name="llama3", flavour="8B", hidden_size=4096, num_layers=32, num_heads=32,
            num_experts=0),
    Flavour(name="llama3", flavour="70B", hidden_size=8192, num_layers=80, num_heads=64,
            num_experts=0),
    Flavour(name="llama3", flavour="405B", hidden_size=16384, num_layers=126, num_heads=128,
            num_experts=0),
    Flavour(name="deepseek_v3", flavour="16B", hidden_size=2048, num_layers=27, num_heads=16,
            num_experts=64),
    Flavour(name="deepseek_v3", flavour="236B", hidden_size=5120, num_layers=60,
            num_heads=128, num_experts=160),
    Flavour(name="deepseek_v3", flavour="671B", hidden_size=7168, num_layers=61,
            num_heads=128, num_experts=256),
    Flavour(name="qwen3", flavour="0.6B", hidden_size=1024, num_layers=28, num_heads=16,
            num_experts=0),
    Flavour(name="qwen3", flavour="1.7B", hidden_size=2048, num_layers=28, num_heads=16,
            num_experts=0),
    Flavour(name="qwen3", flavour="4B", hidden_size=2560, num_layers=36, num_heads=32,
            num_experts=0),
    Flavour(name="qwen3", flavour="8B", hidden_size=4096, num_layers=36, num_heads=32,
            num_experts=0),
    Flavour(name="qwen3", flavour="14B", hidden_size=5120, num_layers=40, num_heads=40,
            num_experts=0),
    Flavour(name="qwen3", flavour="32B", hidden_size=5120, num_layers=64, num_heads=64,
            num_experts=0),
    Flavour(name="qwen3", flavour="30B-A3B", hidden_size=2048, num_layers=48, num_heads=32,
            num_experts=128),
    Flavour(name="qwen3", flavour="235B-A22B", hidden_size=4096, num_layers=94,
            num_heads=64, num_experts=128),
    Flavour(name="gpt_oss", flavour="20b", hidden_size=2880, num_layers=24, num_heads=64,
            num_experts=32),
    Flavour(name="gpt_oss", flavour="120b", hidden_size=2880, num_layers=36, num_heads=64,
            num_experts=128),
    Flavour(name="llama4", flavour="17bx16e", hidden_size=5120, num_layers=48, num_heads=40,
            num_experts=16),
    Flavour(name="llama4", flavour="17bx128e", hidden_size=5120, num_layers=48,
            num_heads=40, num_experts=128),
)
"""torchtitan v0.2.2's registered flavours (`torchtitan/models/<name>/__init__.py`) with
the sizes that tell them apart; variants that change only the attention kernel (`_flex`,
`_varlen`, `_irope`) are left out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """How to start one export on the plan's GPUs."""

    nnodes: int
    nproc_per_node: int
    torchrun: str
    """One node's command; every node runs it with its own NODE_RANK and the first node's
    address as MASTER_ADDR."""
    srun: str
    """The Slurm form: one `srun` that starts torchrun once per node."""
    env: dict[str, str]
    checked_against: dict[str, str]
    """The releases CI checks the export against (the framework's own parsing)."""
    requires: dict[str, str] = field(default_factory=dict)
    """Further packages the launch needs, with the releases that have what it uses."""
    notes: tuple[str, ...] = ()
    model: dict[str, Any] = field(default_factory=dict)
    """torchtitan only: `name` and `flavour` of a registered flavour, or `args` for one to
    register."""


def node_shape(world_size: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, processes per node) with nodes x processes = `world_size`: full nodes where
    the GPUs fill them, one partial node below a node's GPUs, otherwise the largest common
    divisor per node (torchrun starts the same number of processes on every node)."""
    if world_size <= gpus_per_node:
        return 1, world_size
    per_node = math.gcd(world_size, gpus_per_node)
    return world_size // per_node, per_node


def launch_env(framework: str, parallel: ParallelConfig, *, nnodes: int,
               rail_optimized: bool, megatron_env: dict[str, str]) -> dict[str, str]:
    """The environment a plan relies on.

    `PYTORCH_ALLOC_CONF` (and `PYTORCH_CUDA_ALLOC_CONF`, its name before PyTorch 2.9)
    `=expandable_segments:True`: the memory margin is sized on
    measured peaks that ran with it (`models.evidence.memory_margin.EXPANDABLE_SEGMENTS_ENV`).
    `NCCL_BUFFSIZE=4194304`: NCCL's default, which the ledger's communicator buffers assume
    (`models.core.runtime_memory.NCCL_BUFFER_BYTES`); pinned so a site default does not change
    them. `NCCL_PXN_DISABLE=0` with expert parallelism across rail-optimised nodes: the
    all-to-all time assumes PXN (`models.core.collectives.hierarchical`, NCCL 2.12+ default).
    Megatron-LM adds its own (`megatron.megatron_env`: `CUDA_DEVICE_MAX_CONNECTIONS`)."""
    env = dict(EXPANDABLE_SEGMENTS_ENV)
    env["NCCL_BUFFSIZE"] = str(NCCL_BUFFER_BYTES)
    if parallel.ep > 1 and nnodes > 1 and rail_optimized:
        env["NCCL_PXN_DISABLE"] = "0"
    if framework == "megatron":
        env.update(megatron_env)
    return env


def torchtitan_model(spec: ModelSpec) -> dict[str, Any]:
    """The torchtitan v0.2.2 model of a spec: a registered flavour matched on hidden size,
    layers, query heads and routed experts, or the arguments a new flavour needs."""
    experts = spec.moe.num_experts if spec.moe is not None else 0
    for f in TORCHTITAN_FLAVOURS:
        if (f.hidden_size, f.num_layers, f.num_heads, f.num_experts) == (
                spec.hidden_size, spec.num_layers, spec.num_attention_heads, experts):
            return {"name": f.name, "flavour": f.flavour}
    args: dict[str, Any] = {
        "dim": spec.hidden_size, "n_layers": spec.num_layers,
        "n_heads": spec.num_attention_heads,
        "n_kv_heads": spec.num_kv_heads or spec.num_attention_heads,
        "vocab_size": spec.vocab_size, "ffn_hidden_size": spec.ffn_hidden_size}
    if spec.moe is not None:
        args |= {"num_experts": spec.moe.num_experts, "top_k": spec.moe.top_k,
                 "moe_inter_dim": spec.moe.expert_ffn_hidden_size}
    return {"args": args}


def _program(framework: str, args: list[str], model: dict[str, Any]) -> list[str]:
    if framework == "megatron":
        return ["pretrain_gpt.py", *args]
    if framework == "torchtitan":
        program = ["-m", "torchtitan.train", "--job.config_file", "torchtitan.toml"]
        if "name" in model:
            program += ["--model.name", model["name"], "--model.flavor", model["flavour"]]
        return program
    return ["$TRAIN_SCRIPT", "--deepspeed", "--deepspeed_config", "ds_config.json"]


def _join(tokens: list[str]) -> str:
    """Shell words, leaving `$VAR` and `${VAR:-x}` words to the shell (double quotes)."""
    return " ".join(f'"{t}"' if t.startswith("$") else shlex.quote(t) for t in tokens)


def build_launch(framework: str, spec: ModelSpec, training: TrainingSpec,
                 parallel: ParallelConfig, *, gpus_per_node: int, rail_optimized: bool,
                 args: list[str] | None = None,
                 megatron_env: dict[str, str] | None = None) -> Launch:
    """The launch of one export ('megatron', 'torchtitan' or 'deepspeed').

    Args:
        framework: the export's key in `PlanExports`.
        spec: the LLM architecture (torchtitan's model name and flavour).
        training: the recipe (torchao releases for FP8 under torchtitan).
        parallel: the plan (GPUs, expert parallelism).
        gpus_per_node: the cluster's GPUs per node.
        rail_optimized: whether the fabric is rail-optimised (PXN).
        args: Megatron-LM's argv (the program's arguments in the command line).
        megatron_env: Megatron-LM's own environment (`megatron.megatron_env`).
    """
    nnodes, nproc = node_shape(parallel.world_size, gpus_per_node)
    env = launch_env(framework, parallel, nnodes=nnodes, rail_optimized=rail_optimized,
                     megatron_env=megatron_env or {})
    model = torchtitan_model(spec) if framework == "torchtitan" else {}
    program = _program(framework, list(args or []), model)
    torchrun, srun = _commands(nnodes, nproc, program, env)
    notes = [f"run the torchrun line on each of the {nnodes} node(s) with NODE_RANK 0.."
             f"{nnodes - 1} and MASTER_ADDR the address of node 0, after exporting the "
             "environment block; the srun line does both under Slurm"]
    more, requires = _framework_notes(framework, spec, training, model)
    notes += more
    return Launch(nnodes=nnodes, nproc_per_node=nproc, torchrun=torchrun, srun=srun, env=env,
                  checked_against=dict(CHECKED_AGAINST[framework]), requires=requires,
                  notes=tuple(notes), model=model)


def _commands(nnodes: int, nproc: int, program: list[str],
              env: dict[str, str]) -> tuple[str, str]:
    """(the torchrun line of one node, the Slurm `srun` line that starts it on every node)."""
    shape = ["--nnodes", str(nnodes), "--nproc-per-node", str(nproc)]
    torchrun = _join(["torchrun", *shape, "--node-rank", "${NODE_RANK:-0}",
                      "--master-addr", "${MASTER_ADDR:-localhost}",
                      "--master-port", str(MASTER_PORT), *program])
    first_host = '"$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"'
    inner = " ".join([_join(["torchrun", *shape, "--node-rank", "$SLURM_NODEID"]),
                      "--master-addr", first_host, "--master-port", str(MASTER_PORT),
                      _join(program)])
    exported = ",".join(["ALL", *(f"{k}={v}" for k, v in env.items())])
    srun = " ".join([
        "srun", "--nodes", str(nnodes), "--ntasks-per-node", "1", "--gpus-per-node",
        str(nproc), f"--export={exported}", "bash", "-c", shlex.quote(inner)])
    return torchrun, srun


def _framework_notes(framework: str, spec: ModelSpec, training: TrainingSpec,
                     model: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """(the notes on the framework's own part of the launch, the further packages it needs)."""
    notes: list[str] = []
    requires: dict[str, str] = {}
    if framework == "megatron":
        notes.append("pretrain_gpt.py is Megatron-LM's training script (not on a package "
                     "index): the arguments follow Megatron-LM core_v0.14.0 and are checked "
                     "with megatron-core 0.16.1's config classes; add the data, tokenizer and "
                     "checkpoint arguments")
    elif framework == "torchtitan":
        notes.append("save the toml text as torchtitan.toml; torchtitan 0.2.2 is the last "
                     "release that reads TOML job configs")
        if "args" in model:
            notes.append("no torchtitan 0.2.2 flavour has this model's sizes: register a "
                         "flavour with the model arguments given (model.args) and pass it "
                         "with --model.name and --model.flavor")
        if training.compute_dtype == DType.FP8:
            requires["torchao"] = f">={TORCHAO_FLOAT8_RECIPES}"
            if spec.moe is not None:
                low, high = TORCHAO_MOE_FLOAT8
                requires["torchao"] = f">={low},<={high}"
                notes.append(
                    f"FP8 grouped expert GEMMs (quantize.grouped_mm.float8): torchtitan 0.2.2 "
                    f"imports torchao's MoETrainingConfig, in torchao {low} to {high} and "
                    "removed in 0.17.0; its docs ask for a torchao nightly, but torchao "
                    f"{high} is the newest release that has it, so no unreleased version "
                    "is needed (read from the sources, not run on a GPU)")
    else:
        notes.append("a DeepSpeed config runs inside your own training script "
                     "(deepspeed.initialize with this config): set TRAIN_SCRIPT to it and save "
                     "the config as ds_config.json")
    return notes, requires


__all__ = [
    "CHECKED_AGAINST",
    "MASTER_PORT",
    "TORCHAO_FLOAT8_RECIPES",
    "TORCHAO_MOE_FLOAT8",
    "TORCHTITAN_FLAVOURS",
    "Flavour",
    "Launch",
    "build_launch",
    "launch_env",
    "node_shape",
    "torchtitan_model",
]
