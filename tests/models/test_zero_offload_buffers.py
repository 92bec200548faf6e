"""DeepSpeed's ZeRO-Offload at stages 1-2 runs gradients through per-parameter host buffers
(`TrainingSpec.offload_grad_buffers`, a trait of DeepSpeed's plans from the capability
table): their host bytes (`models.core.sharded_states.offload_grad_buffer_bytes`) and, at
stage 2, the copies around each micro-batch beyond the backward
(`models.core.step_time.runtime_traits.offload_round_trip_s`)."""

import math

import pytest

from api_schemas import ParallelConfig, TrainingSpec
from api_schemas.dtypes import DType
from models.catalog.presets import cluster_preset, model_preset
from models.core.collectives.fabric import host_link_bandwidth
from models.core.frameworks import frameworks
from models.core.memory import memory_ledger
from models.core.params import count_parameters
from models.core.sharded_states import offload_grad_buffer_bytes
from models.core.step_time import estimate_step
from models.core.step_time.runtime_traits import offload_round_trip_s
from models.core.step_time.step_terms import OFFLOAD_ROUND_TRIP
from solver.runtime_choice import with_offload_grad_buffers

SPEC = model_preset("llama-3.1-8b")
CLUSTER = cluster_preset("h100-sxm5-80gb", num_nodes=1, gpus_per_node=1)
TRAINING = TrainingSpec(global_batch_size=32, sequence_length=4096)
DEEPSPEED = TRAINING.model_copy(update={"offload_grad_buffers": True})
BUFFERS = "per-parameter gradient buffers"


def test_a_buffer_per_partition_parameter_in_the_parameter_dtype() -> None:
    # stage_1_and_2.py: zeros(param.numel(), dtype=param.dtype) per partition parameter.
    assert offload_grad_buffer_bytes(1e9, TRAINING) == 2 * 10**9
    fp32 = TRAINING.model_copy(update={"param_dtype": DType.FP32})
    assert offload_grad_buffer_bytes(1e9, fp32) == 4 * 10**9


def test_the_round_trip_is_two_copies_per_micro_batch_beyond_the_backward() -> None:
    # 8e9 bf16 parameters over a 50 GB/s host link: 0.32 s a copy; 16 micro-batches make
    # 2 x 15 / 16 = 1.875 copies each, 0.6 s, of which a 0.25 s backward hides 0.25 s.
    link = 50e9
    assert math.isclose(host_link_bandwidth(CLUSTER), link)  # the H100 node's PCIe Gen5 x16
    exposed = offload_round_trip_s(8e9, TRAINING, CLUSTER, backward_s=0.25, num_micro_batches=16)
    assert math.isclose(exposed, 1.875 * 8e9 * 2 / link - 0.25)
    assert offload_round_trip_s(8e9, TRAINING, CLUSTER, backward_s=1.0,
                                num_micro_batches=16) == 0.0
    assert offload_round_trip_s(8e9, TRAINING, CLUSTER, backward_s=0.0,
                                num_micro_batches=1) == 0.0


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_the_buffers_are_host_memory_of_zero_1_and_2_with_the_optimizer_offloaded(
        zero: int) -> None:
    parallel = ParallelConfig(zero_stage=zero, optimizer_offload_frac=1.0)
    with_buffers = memory_ledger(SPEC, DEEPSPEED, parallel, CLUSTER).stages[0]
    without = memory_ledger(SPEC, TRAINING, parallel, CLUSTER).stages[0]
    lines = [c for c in with_buffers.host_components if c.name == BUFFERS]
    if zero == 3:
        assert not lines
        assert with_buffers.host_bytes == without.host_bytes
        return
    (line,) = lines
    params = count_parameters(SPEC).total
    assert abs(line.bytes - 2 * params) <= 2 * 10**6  # one partition of DP 1: every parameter
    assert with_buffers.host_bytes == without.host_bytes + line.bytes
    assert with_buffers.total_bytes == without.total_bytes  # the GPU is unchanged
    kept = memory_ledger(SPEC, DEEPSPEED, ParallelConfig(zero_stage=zero), CLUSTER).stages[0]
    assert all(c.name != BUFFERS for c in kept.host_components)  # no offload, no buffers


def test_zero_2_books_the_round_trip_a_short_backward_cannot_hide() -> None:
    parallel = ParallelConfig(zero_stage=2, optimizer_offload_frac=1.0)
    with_buffers = estimate_step(SPEC, DEEPSPEED, parallel, CLUSTER)
    without = estimate_step(SPEC, TRAINING, parallel, CLUSTER)
    assert with_buffers.overheads_s[OFFLOAD_ROUND_TRIP] > 0
    assert OFFLOAD_ROUND_TRIP not in without.overheads_s
    assert math.isclose(with_buffers.step_time_s - without.step_time_s,
                        with_buffers.overheads_s[OFFLOAD_ROUND_TRIP], rel_tol=1e-6)
    stage1 = estimate_step(SPEC, DEEPSPEED, parallel.model_copy(update={"zero_stage": 1}),
                           CLUSTER)
    assert OFFLOAD_ROUND_TRIP not in stage1.overheads_s  # reduced and copied at the boundary


def test_deepspeed_plans_carry_the_trait_and_the_others_do_not() -> None:
    table = frameworks()
    assert table["deepspeed"].offload_grad_buffers
    assert "stage_1_and_2.py" in table["deepspeed"].offload_grad_buffers_source
    assert not table["megatron-lm"].offload_grad_buffers
    assert not table["torchtitan"].offload_grad_buffers
    assert with_offload_grad_buffers(TRAINING, table["deepspeed"]).offload_grad_buffers
    assert with_offload_grad_buffers(TRAINING, table["megatron-lm"]) is TRAINING
    assert with_offload_grad_buffers(TRAINING, None) is TRAINING
    pinned = TRAINING.model_copy(update={"offload_grad_buffers": False})
    assert with_offload_grad_buffers(pinned, table["deepspeed"]) is pinned
