"""DeepSpeed config: batch arithmetic, precision, ZeRO, AutoTP/AutoEP gating, notes."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_export_cases import CASES, case

from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from solver.export import DEEPSPEED_KEYS, deepspeed_config, deepspeed_notes, export_all


def _has_key(value: object, key: str) -> bool:
    if isinstance(value, dict):
        return key in value or any(_has_key(child, key) for child in value.values())
    return False


@pytest.mark.parametrize("name", sorted(CASES))
def test_batch_is_micro_times_accumulation_times_dp(name: str) -> None:
    _, training, parallel = CASES[name]
    config = deepspeed_config(*CASES[name])
    assert config["train_batch_size"] == training.global_batch_size
    assert config["train_micro_batch_size_per_gpu"] == parallel.micro_batch_size
    assert (config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"]
            * parallel.dp == config["train_batch_size"])


@settings(max_examples=60, deadline=None)
@given(mbs=st.sampled_from([1, 2, 4]), dp=st.sampled_from([1, 2, 8, 24]),
       steps=st.integers(1, 64), pp=st.sampled_from([1, 2, 4]))
def test_batch_arithmetic_holds_for_any_divisible_batch(mbs: int, dp: int, steps: int,
                                                       pp: int) -> None:
    spec = case("llama-3.1-8b")[0]
    training = TrainingSpec(global_batch_size=mbs * dp * steps, sequence_length=2048)
    config = deepspeed_config(spec, training, ParallelConfig(dp=dp, pp=pp, micro_batch_size=mbs))
    assert config["gradient_accumulation_steps"] == steps
    assert config["train_batch_size"] == mbs * steps * dp


@pytest.mark.parametrize("name", sorted(CASES))
def test_never_writes_optimizer_or_parameter_offload(name: str) -> None:
    config = deepspeed_config(*CASES[name])
    assert not _has_key(config, "offload_optimizer")
    assert not _has_key(config, "offload_param")
    json.dumps(config)


def test_autotp_and_autoep_only_when_degrees_exceed_one() -> None:
    dense = deepspeed_config(*case("llama-3.1-8b", gbs=64, dp=8))
    assert "tensor_parallel" not in dense and "expert_parallel" not in dense
    spec, training, parallel = CASES["mixtral-zb-h1"]
    config = deepspeed_config(spec, training, parallel)
    assert config["tensor_parallel"] == {"autotp_size": 2}
    assert config["expert_parallel"] == {"enabled": True, "autoep_size": 8,
                                         "score_func": "softmax"}
    notes = deepspeed_notes(spec, training, parallel)
    assert any("AutoTP" in note and "0.16.4" in note for note in notes)
    assert any("AutoEP" in note and "0.19.2" in note for note in notes)
    assert any("cannot yet be combined" in note for note in notes)
    assert any("expert_tensor_parallel_size=1" in note for note in notes)


def test_precision_and_zero_stage() -> None:
    config = deepspeed_config(*CASES["gpt2-gpipe-fp16"])
    assert config["fp16"] == {"enabled": True} and "bf16" not in config
    assert config["zero_optimization"]["stage"] == 1
    bf16 = deepspeed_config(*CASES["llama405b-tp8-pp16-vpp2"])
    assert bf16["bf16"] == {"enabled": True}
    assert bf16["data_types"] == {"grad_accum_dtype": "fp32"}
    spec, training, parallel = case("llama-3.1-8b", gbs=64, dp=8,
                                    training={"master_dtype": "bf16",
                                              "optimizer_state_dtype": "bf16"})
    assert deepspeed_config(spec, training, parallel)["bf16"] == {
        "enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}


def test_pipeline_with_zero2_and_other_schedules_are_notes() -> None:
    notes = deepspeed_notes(*CASES["mixtral-zb-h1"])
    assert any("rejects ZeRO-2 and ZeRO-3" in note for note in notes)
    assert any("schedule 'zb_h1'" in note for note in notes)
    assert any("PipelineModule(num_stages=4" in note for note in notes)


def test_activation_checkpointing_block_follows_full_recompute() -> None:
    spec, training, parallel = CASES["llama70b-1f1b-full"]
    block = deepspeed_config(spec, training, parallel)["activation_checkpointing"]
    assert block["number_checkpoints"] == 20  # 80 layers over 4 stages
    assert block["cpu_checkpointing"] is False
    assert "activation_checkpointing" not in deepspeed_config(*CASES["mixtral-zb-h1"])
    selective = deepspeed_notes(*CASES["kimi-k2-interleaved"])
    assert any("selective (module-level) recompute" in note for note in selective)


def test_written_keys_stay_in_the_vocabulary() -> None:
    for name in CASES:
        config = deepspeed_config(*CASES[name])
        for key, value in config.items():
            names = [f"{key}.{child}" for child in value] if isinstance(value, dict) else [key]
            assert set(names) <= DEEPSPEED_KEYS, names


def test_export_all_bundles_the_three_exports() -> None:
    exported = export_all(*CASES["deepseek-v3-dualpipe"])
    assert exported["deepspeed"]["config"] == deepspeed_config(*CASES["deepseek-v3-dualpipe"])
    assert exported["megatron"]["args"][0] == "--num-layers"
    assert exported["torchtitan"]["toml"].startswith("# torchtitan job config")
