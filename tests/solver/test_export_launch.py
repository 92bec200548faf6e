"""Launch blocks of the exports: node shape, launcher lines, environment, torchtitan model
flavour and the releases a launch needs (`solver/export/launch.py`)."""

import shlex

import pytest

from api_schemas import ParallelConfig, TrainingSpec
from api_schemas.exports import PlanExports
from models.catalog.presets import model_preset
from solver.export import export_all
from solver.export.launch import TORCHAO_MOE_FLOAT8, build_launch, node_shape, torchtitan_model


@pytest.mark.parametrize(("world", "per_node", "shape"), [
    (64, 8, (8, 8)),    # full nodes
    (4, 8, (1, 4)),     # part of one node
    (12, 8, (3, 4)),    # more than a node, not whole nodes: 4 per node on 3 nodes
    (16384, 8, (2048, 8)),
])
def test_node_shape_starts_exactly_the_plans_gpus(world: int, per_node: int,
                                                  shape: tuple[int, int]) -> None:
    nodes, procs = node_shape(world, per_node)
    assert (nodes, procs) == shape and nodes * procs == world and procs <= per_node


@pytest.mark.parametrize(("preset", "name", "flavour"), [
    ("llama-3.1-8b", "llama3", "8B"),
    ("llama-3.1-70b", "llama3", "70B"),
    ("llama-3.1-405b", "llama3", "405B"),
    ("deepseek-v3", "deepseek_v3", "671B"),
])
def test_torchtitan_flavours_match_the_registry_sizes(preset: str, name: str,
                                                      flavour: str) -> None:
    # torchtitan v0.2.2 torchtitan/models/llama3/__init__.py: 70B is dim 8192, 80 layers, 64
    # heads; deepseek_v3/__init__.py: 671B is dim 7168, 61 layers, 128 heads, 256 experts.
    assert torchtitan_model(model_preset(preset)) == {"name": name, "flavour": flavour}


def test_a_model_without_a_flavour_gets_its_model_arguments() -> None:
    spec = model_preset("gpt2")
    model = torchtitan_model(spec)
    assert "name" not in model
    assert model["args"]["dim"] == spec.hidden_size == 768
    assert model["args"]["n_layers"] == spec.num_layers == 12
    launch = build_launch("torchtitan", spec, TrainingSpec(global_batch_size=8,
                          sequence_length=1024), ParallelConfig(dp=8),
                          gpus_per_node=8, rail_optimized=True)
    assert "--model.name" not in shlex.split(launch.torchrun)
    assert any("register a flavour" in note for note in launch.notes)


def test_torchtitan_fp8_moe_names_the_torchao_releases_it_needs() -> None:
    """torchtitan v0.2.2's float8 grouped GEMMs import torchao's MoETrainingConfig: in
    torchao 0.12.0-0.16.0, gone in 0.17.0."""
    spec = model_preset("deepseek-v3")
    training = TrainingSpec(global_batch_size=1024, sequence_length=4096, compute_dtype="fp8")
    parallel = ParallelConfig(dp=64, ep=64)
    launch = build_launch("torchtitan", spec, training, parallel, gpus_per_node=8,
                          rail_optimized=True)
    low, high = TORCHAO_MOE_FLOAT8
    assert (low, high) == ("0.12.0", "0.16.0")
    assert launch.requires == {"torchao": f">={low},<={high}"}
    assert launch.checked_against["torchtitan"] == "0.2.2"
    assert launch.env["NCCL_PXN_DISABLE"] == "0"  # expert all-to-all across rail-optimised nodes
    dense = build_launch("torchtitan", model_preset("llama-3.1-8b"), training,
                         ParallelConfig(dp=8), gpus_per_node=8, rail_optimized=True)
    assert dense.requires == {"torchao": ">=0.9.0"} and "NCCL_PXN_DISABLE" not in dense.env


def test_exports_carry_the_launch_on_the_wire_and_megatron_keeps_its_environment() -> None:
    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    parallel = ParallelConfig(tp=2, dp=8)
    exports = PlanExports.model_validate(export_all(spec, training, parallel, gpus_per_node=8))
    assert exports.megatron is not None and exports.megatron.launch is not None
    assert exports.megatron.launch.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    words = shlex.split(exports.megatron.launch.torchrun)
    program = words.index("pretrain_gpt.py")
    assert words[program + 1:] == list(exports.megatron.args)
    assert exports.torchtitan is not None
    assert (exports.torchtitan.model_name, exports.torchtitan.model_flavor) == ("llama3", "8B")
    assert exports.deepspeed is not None and exports.deepspeed.launch is not None
    assert "--deepspeed_config" in shlex.split(exports.deepspeed.launch.torchrun)
    bare = PlanExports.model_validate(export_all(spec, training, parallel))
    assert bare.megatron is not None and bare.megatron.launch is None
