"""Plans the exporter tests share, and the checks every exporter must pass on all of them.

Other `test_export_*` files import `CASES` and `case` from here.
"""

import json
import tomllib

import pytest

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import ParallelConfig, StagePolicy
from api_schemas.training import TrainingSpec
from models.catalog.presets import model_preset
from solver.export import (
    DEEPSPEED_KEYS,
    MEGATRON_FLAGS,
    TORCHTITAN_KEYS,
    export_all,
)

Case = tuple[ModelSpec, TrainingSpec, ParallelConfig]


def case(preset: str, *, gbs: int = 1024, seq: int = 4096, training: dict | None = None,
         **parallel: object) -> Case:
    """A (spec, training, parallel) triple from a preset and keyword overrides."""
    spec = model_preset(preset)
    recipe = TrainingSpec(global_batch_size=gbs, sequence_length=seq, **(training or {}))
    return spec, recipe, ParallelConfig.model_validate(parallel)


CASES: dict[str, Case] = {
    "llama405b-tp8-pp16-vpp2": case("llama-3.1-405b", gbs=2048, seq=8192, tp=8, pp=16, dp=16,
                                    vpp=2, schedule="interleaved_1f1b", sequence_parallel=True,
                                    zero_stage=1, recompute="selective"),
    "llama70b-1f1b-full": case("llama-3.1-70b", tp=4, pp=4, dp=8, recompute="full",
                               zero_stage=0, training={"overlap_tp_comm": True}),
    "llama8b-zero3-fsdp": case("llama-3.1-8b", gbs=256, dp=64, zero_stage=3, fsdp=True,
                               cp=2, cp_kind="usp", ulysses_degree=2),
    "deepseek-v3-dualpipe": case("deepseek-v3", gbs=8192, pp=16, dp=128, ep=64,
                                 schedule="dualpipe", zero_stage=1,
                                 training={"compute_dtype": "fp8",
                                           "fp8_weight_storage": "fp8_only",
                                           "optimizer_state_dtype": "bf16"}),
    "deepseek-v3-zbv-fulllayers": case("deepseek-v3", gbs=4096, pp=8, dp=64, ep=32, vpp=2,
                                       schedule="zbv", recompute={"full_layers": 3},
                                       fp8_activations=True, activation_offload_frac=0.5),
    "kimi-k2-interleaved": case("kimi-k2-instruct", gbs=4096, tp=2, pp=8, dp=32, ep=32, vpp=2,
                                schedule="interleaved_1f1b", sequence_parallel=True,
                                recompute="selective",
                                recompute_modules=["layernorm", "mla_up_proj", "moe_act"]),
    "mixtral-zb-h1": case("mixtral-8x7b", gbs=512, tp=2, pp=4, dp=8, ep=8, etp=2,
                          schedule="zb_h1", zero_stage=2, sequence_parallel=True),
    "qwen3-zb-h2-uneven": case("qwen3-235b-a22b", gbs=512, pp=4, dp=16, ep=16,
                               schedule="zb_h2", layers_per_stage=(22, 24, 24, 24)),
    "gpt2-gpipe-fp16": case("gpt2", gbs=64, seq=1024, pp=2, dp=4, schedule="gpipe",
                            training={"param_dtype": "fp16", "grad_dtype": "fp16"}),
    "neox-stage-policies": case("gpt-neox-20b", gbs=256, seq=2048, tp=2, pp=4, dp=4,
                                stage_policies=[StagePolicy(recompute="full"),
                                                StagePolicy(recompute="selective"),
                                                StagePolicy(), StagePolicy()],
                                gradient_host_shards=True),
    "olmoe-dualpipev-ulysses": case("olmoe-1b-7b-0924", gbs=256, pp=2, dp=8, cp=2, ep=8,
                                    vpp=2, schedule="dualpipev", cp_kind="ulysses",
                                    training={"optimizer": "muon", "master_dtype": None}),
}


def _dotted_keys(table: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            keys |= _dotted_keys(value, f"{name}.")
        else:
            keys.add(name)
    return keys


@pytest.mark.parametrize("name", sorted(CASES))
def test_export_all_speaks_only_each_vocabulary(name: str) -> None:
    exported = export_all(*CASES[name])
    assert set(exported) == {"megatron", "torchtitan", "deepspeed"}
    flags = [token for token in exported["megatron"]["args"] if token.startswith("--")]
    assert flags and set(flags) <= MEGATRON_FLAGS
    parsed = tomllib.loads(exported["torchtitan"]["toml"])
    assert _dotted_keys(parsed) <= TORCHTITAN_KEYS
    assert _dotted_keys(exported["deepspeed"]["config"]) <= DEEPSPEED_KEYS
    json.dumps(exported)  # the wire shape is plain JSON


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_note_is_a_sentence_without_flags_of_its_own(name: str) -> None:
    exported = export_all(*CASES[name])
    for framework in ("megatron", "torchtitan", "deepspeed"):
        notes = exported[framework]["notes"]
        assert all(isinstance(note, str) and len(note) > 20 for note in notes)
        assert len(set(notes)) == len(notes), f"{framework} repeats a note"
