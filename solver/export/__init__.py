"""Plan exporters: Megatron-LM arguments, a torchtitan job config, a DeepSpeed config.

Owns: turning one plan (model, training recipe, parallel configuration) into the settings
three training frameworks read, plus notes on what each framework cannot express. Must not:
search, validate a plan against a cluster, or size anything (that is the cost model's).
"""

from typing import Any

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from solver.export.deepspeed import (
    DEEPSPEED_KEYS,
    DeepSpeedExport,
    deepspeed_config,
    deepspeed_export,
    deepspeed_notes,
)
from solver.export.launch import Launch, build_launch
from solver.export.megatron import (
    MEGATRON_FLAGS,
    MEGATRON_VERSION,
    MegatronExport,
    megatron_args,
    megatron_export,
    megatron_notes,
)
from solver.export.torchtitan import (
    TORCHTITAN_KEYS,
    TORCHTITAN_SCHEDULES,
    TORCHTITAN_VERSION,
    TorchtitanExport,
    torchtitan_export,
    torchtitan_notes,
    torchtitan_toml,
)


def launch_json(launch: Launch) -> dict[str, Any]:
    """A launch as the wire shape of `api_schemas.exports.LaunchCommand`."""
    return {"nnodes": launch.nnodes, "nproc_per_node": launch.nproc_per_node,
            "torchrun": launch.torchrun, "srun": launch.srun, "env": dict(launch.env),
            "checked_against": dict(launch.checked_against), "requires": dict(launch.requires),
            "notes": list(launch.notes)}


def export_all(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig, *,
               gpus_per_node: int | None = None,
               rail_optimized: bool = True) -> dict[str, Any]:
    """All three exports of a plan, as the JSON the API returns.

    Args:
        spec: the LLM architecture.
        training: batch, sequence and precision recipe.
        parallel: the plan's parallel configuration.
        gpus_per_node: the cluster's GPUs per node; with it each export carries its launch
            (`solver.export.launch`), without it none.
        rail_optimized: whether the cluster's fabric is rail-optimised (the launch's NCCL
            settings).

    Returns:
        {"megatron": {"args": [...], "env": {...}, "notes": [...]},
         "torchtitan": {"toml": "...", "notes": [...]},
         "deepspeed": {"config": {...}, "notes": [...]}}; a plain dictionary because it is
        the wire shape.

    Raises:
        InvalidSpecError: the batch does not divide into micro-batches, or the layer split
            does not add up.
    """
    megatron = megatron_export(spec, training, parallel)
    torchtitan = torchtitan_export(spec, training, parallel)
    deepspeed = deepspeed_export(spec, training, parallel)
    out: dict[str, Any] = {
        "megatron": {"args": list(megatron.args), "env": dict(megatron.env),
                     "notes": list(megatron.notes)},
        "torchtitan": {"toml": torchtitan.toml, "notes": list(torchtitan.notes)},
        "deepspeed": {"config": deepspeed.config, "notes": list(deepspeed.notes)},
    }
    if gpus_per_node is not None:
        for name in out:
            launch = build_launch(name, spec, training, parallel, gpus_per_node=gpus_per_node,
                                  rail_optimized=rail_optimized, args=list(megatron.args),
                                  megatron_env=dict(megatron.env))
            out[name]["launch"] = launch_json(launch)
            if name == "torchtitan":
                out[name] |= {"model_name": launch.model.get("name"),
                              "model_flavor": launch.model.get("flavour"),
                              "model_args": launch.model.get("args", {})}
    return out


__all__ = [
    "DEEPSPEED_KEYS",
    "MEGATRON_FLAGS",
    "MEGATRON_VERSION",
    "TORCHTITAN_KEYS",
    "TORCHTITAN_SCHEDULES",
    "TORCHTITAN_VERSION",
    "DeepSpeedExport",
    "MegatronExport",
    "TorchtitanExport",
    "deepspeed_config",
    "deepspeed_export",
    "deepspeed_notes",
    "export_all",
    "launch_json",
    "megatron_args",
    "megatron_export",
    "megatron_notes",
    "torchtitan_export",
    "torchtitan_notes",
    "torchtitan_toml",
]
