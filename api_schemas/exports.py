"""The exports of a plan, one typed object per training framework.

Owns: the wire shapes of the Megatron-LM arguments, the torchtitan job config and the
DeepSpeed config a plan carries, each with the notes on what the framework cannot express
and its launch (launcher lines, environment, the releases it was checked against).
Must not: build them (`solver/export/` does).
"""

from typing import Annotated, Any

from pydantic import Field

from api_schemas._base import ResultModel


class LaunchCommand(ResultModel):
    """How to start an export on the plan's GPUs: launcher lines, environment, releases."""

    nnodes: int = Field(description="Nodes to start (nnodes x nproc_per_node = the plan's "
                        "GPUs).", examples=[8])
    nproc_per_node: int = Field(description="Processes (GPUs) per node.", examples=[8])
    torchrun: str = Field(description="One node's torchrun command (static rendezvous): run "
                          "it on every node with NODE_RANK set and MASTER_ADDR the first "
                          "node's address, after exporting `env`.",
                          examples=['torchrun --nnodes 8 --nproc-per-node 8 --node-rank '
                                    '"${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" '
                                    '--master-port 29500 pretrain_gpt.py ...'])
    srun: str = Field(description="The Slurm form: one srun that exports `env` and starts "
                      "torchrun once per node, node rank from SLURM_NODEID and the master "
                      "from the job's first host.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables "
                                "the plan relies on (allocator, NCCL, CUDA settings).",
                                examples=[{"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}])
    checked_against: dict[str, str] = Field(
        default_factory=dict, description="Package -> the exact release the export is "
        "checked against (the framework's own parsing and validation).",
        examples=[{"megatron-core": "0.16.1"}])
    requires: dict[str, str] = Field(
        default_factory=dict, description="Further packages the launch needs -> the releases "
        "that have what it uses.", examples=[{"torchao": ">=0.12.0,<=0.16.0"}])
    notes: list[str] = Field(default_factory=list, description="What to do by hand.")


ExportLaunch = Annotated[LaunchCommand | None, Field(
    description="How to launch it (absent when exported without a cluster).")]
"""The `launch` of every framework's export."""


class MegatronExport(ResultModel):
    """Megatron-LM command-line arguments."""

    args: list[str] = Field(description="pretrain_gpt.py arguments, one flag or value each.",
                            examples=[["--tensor-model-parallel-size", "8"]])
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables the launch needs, e.g. "
        "CUDA_DEVICE_MAX_CONNECTIONS=1 where tensor- or context-parallel communication must "
        "overlap compute.", examples=[{"CUDA_DEVICE_MAX_CONNECTIONS": "1"}])
    notes: list[str] = Field(default_factory=list, description="What the arguments cannot "
                             "express or assume.")
    launch: ExportLaunch = None


class TorchtitanExport(ResultModel):
    """A torchtitan job configuration."""

    toml: str = Field(description="The job config as TOML text.",
                      examples=["[parallelism]\ntensor_parallel_degree = 8\n"])
    notes: list[str] = Field(default_factory=list, description="What the config cannot "
                             "express or assume.")
    model_name: str | None = Field(default=None, description="torchtitan's model name "
                                   "(--model.name) when a registered flavour has the model's "
                                   "sizes.", examples=["llama3"])
    model_flavor: str | None = Field(default=None, description="Its flavour "
                                     "(--model.flavor).", examples=["70B"])
    model_args: dict[str, Any] = Field(default_factory=dict, description="Otherwise the "
                                       "model arguments a new flavour needs.")
    launch: ExportLaunch = None


class DeepSpeedExport(ResultModel):
    """A DeepSpeed configuration."""

    config: dict[str, Any] = Field(description="The DeepSpeed JSON config (DeepSpeed's own "
                                   "schema).", examples=[{"zero_optimization": {"stage": 1}}])
    notes: list[str] = Field(default_factory=list, description="What the config cannot "
                             "express or assume.")
    launch: ExportLaunch = None


class PlanExports(ResultModel):
    """The plan in each framework's vocabulary; a framework is absent when not exported."""

    megatron: MegatronExport | None = Field(default=None, description="Megatron-LM arguments.")
    torchtitan: TorchtitanExport | None = Field(default=None, description="torchtitan TOML.")
    deepspeed: DeepSpeedExport | None = Field(default=None, description="DeepSpeed JSON.")


__all__ = ["DeepSpeedExport", "ExportLaunch", "LaunchCommand", "MegatronExport", "PlanExports",
           "TorchtitanExport"]
