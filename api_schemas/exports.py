"""The exports of a plan, one typed object per training framework.

Owns: the wire shapes of the Megatron-LM arguments, the torchtitan job config and the
DeepSpeed config a plan carries, each with the notes on what the framework cannot express.
Must not: build them (`solver/export/` does).
"""

from typing import Any

from pydantic import Field

from api_schemas._base import ResultModel


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


class TorchtitanExport(ResultModel):
    """A torchtitan job configuration."""

    toml: str = Field(description="The job config as TOML text.",
                      examples=["[parallelism]\ntensor_parallel_degree = 8\n"])
    notes: list[str] = Field(default_factory=list, description="What the config cannot "
                             "express or assume.")


class DeepSpeedExport(ResultModel):
    """A DeepSpeed configuration."""

    config: dict[str, Any] = Field(description="The DeepSpeed JSON config (DeepSpeed's own "
                                   "schema).", examples=[{"zero_optimization": {"stage": 1}}])
    notes: list[str] = Field(default_factory=list, description="What the config cannot "
                             "express or assume.")


class PlanExports(ResultModel):
    """The plan in each framework's vocabulary; a framework is absent when not exported."""

    megatron: MegatronExport | None = Field(default=None, description="Megatron-LM arguments.")
    torchtitan: TorchtitanExport | None = Field(default=None, description="torchtitan TOML.")
    deepspeed: DeepSpeedExport | None = Field(default=None, description="DeepSpeed JSON.")


__all__ = ["DeepSpeedExport", "MegatronExport", "PlanExports", "TorchtitanExport"]
