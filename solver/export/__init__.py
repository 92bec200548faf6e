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


def export_all(spec: ModelSpec, training: TrainingSpec,
               parallel: ParallelConfig) -> dict[str, Any]:
    """All three exports of a plan, as the JSON the API returns.

    Args:
        spec: the LLM architecture.
        training: batch, sequence and precision recipe.
        parallel: the plan's parallel configuration.

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
    return {
        "megatron": {"args": list(megatron.args), "env": dict(megatron.env),
                     "notes": list(megatron.notes)},
        "torchtitan": {"toml": torchtitan.toml, "notes": list(torchtitan.notes)},
        "deepspeed": {"config": deepspeed.config, "notes": list(deepspeed.notes)},
    }


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
    "megatron_args",
    "megatron_export",
    "megatron_notes",
    "torchtitan_export",
    "torchtitan_notes",
    "torchtitan_toml",
]
