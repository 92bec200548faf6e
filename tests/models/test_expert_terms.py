"""The expert-side terms of an MoE plan, and the ZeRO-3 / FSDP audit: every expert a rank
holds is gathered for each pass over the expert-DP group's own links."""

import pytest

from api_schemas import ParallelConfig, TrainingSpec
from models.catalog.presets import cluster_preset, model_preset
from models.core.collectives import fabric_of
from models.core.expert_terms import expert_terms
from models.core.params import layer_params
from models.core.step_time.exposure import zero3_layer_copy_s
from models.core.step_time.groups import axis_groups
from models.core.traffic.layer import zero3_unit_calls

SPEC = model_preset("mixtral-8x7b")
CLUSTER = cluster_preset("h100-sxm5-80gb", num_nodes=4)
TRAINING = TrainingSpec(global_batch_size=512, sequence_length=4096)


def test_more_expert_parallelism_gives_each_local_expert_more_tokens() -> None:
    """With EP the all-to-all keeps each rank's assignments, spread over E / ep experts:
    tokens per expert grow by ep (Mixtral: 4,096 tokens x top-2 / 8 experts = 1,024 at
    EP 1), and the grouped GEMM runs closer to peak."""
    one = expert_terms(SPEC, TRAINING, ParallelConfig(dp=32, ep=1), CLUSTER)
    eight = expert_terms(SPEC, TRAINING, ParallelConfig(dp=32, ep=8), CLUSTER)
    assert one is not None and eight is not None
    assert one.local_experts == 8 and eight.local_experts == 1
    assert one.tokens_per_expert == pytest.approx(4096 * 2 / 8)
    assert eight.tokens_per_expert == pytest.approx(8 * one.tokens_per_expert)
    assert 0 < one.grouped_gemm_efficiency < eight.grouped_gemm_efficiency <= 1


def test_zero3_gathers_every_expert_a_rank_holds_for_each_pass() -> None:
    """ZeRO arXiv:1910.02054 Sec. 7.2.2: the weights are gathered before forward and again
    before backward (recomputation shares the backward gather in FSDP2), per micro-batch;
    the routed experts over the expert-DP group."""
    parallel = ParallelConfig(dp=32, ep=8, zero_stage=3)
    routed = layer_params(SPEC, 0).routed_experts
    terms = expert_terms(SPEC, TRAINING, parallel, CLUSTER)
    assert terms is not None
    edp = 32 // 8
    per_rank = routed // 8 * 2  # bf16 weights of the rank's expert
    assert terms.zero3_expert_gather_bytes_per_pass == per_rank * (edp - 1) // edp
    micro_batches = 512 // 32
    assert terms.zero3_expert_gather_bytes_per_step == (
        terms.zero3_expert_gather_bytes_per_pass * 2 * micro_batches * SPEC.num_layers)
    groups = axis_groups(parallel, gpus_per_node=8)
    lctx = groups.layer_context(SPEC, TRAINING, parallel, fabric_of(CLUSTER))
    calls = zero3_unit_calls(lctx, dense_params=0, expert_params=routed // 8)
    gathers = {c.name: c for c in calls if "param_all_gather" in c.name}
    assert set(gathers) == {"edp.zero3.forward.param_all_gather",
                            "edp.zero3.backward.param_all_gather"}
    assert all(c.time_s > 0 for c in gathers.values())
    without = expert_terms(SPEC, TRAINING, ParallelConfig(dp=32, ep=8, zero_stage=1), CLUSTER)
    assert without is not None and without.zero3_expert_gather_bytes_per_step == 0


def test_experts_kept_gathered_after_forward_are_gathered_once_per_step() -> None:
    """Without resharding after forward (Llama 3 arXiv:2407.21783 Sec. 3.3.2; FSDP2's
    `reshard_after_forward=False`) a unit stays gathered to the end of the step: the traffic
    model has one gather per unit and step, and the expert terms count the same."""
    parallel = ParallelConfig(dp=32, ep=8, zero_stage=3, fsdp=True,
                              fsdp_reshard_after_forward=False)
    terms = expert_terms(SPEC, TRAINING, parallel, CLUSTER)
    assert terms is not None and terms.zero3_expert_gather_bytes_per_pass > 0
    assert terms.zero3_expert_gather_bytes_per_step == (
        terms.zero3_expert_gather_bytes_per_pass * SPEC.num_layers)


def test_experts_sharded_over_tensor_ranks_are_gathered_without_data_parallelism() -> None:
    """The expert-DP group folds the TP ranks in (edp = tp x cp x dp / (ep x etp)): with
    TP 8, EP 2 and no data parallelism each expert shard has four replicas, so ZeRO-3
    shards and gathers the experts even where it has no dense weights to shard."""
    parallel = ParallelConfig(tp=8, dp=1, ep=2, zero_stage=3, sequence_parallel=True)
    forward, backward = zero3_layer_copy_s(SPEC, 0, TRAINING, parallel, CLUSTER.gpu)
    assert forward > 0 and backward > 0
    terms = expert_terms(SPEC, TRAINING, parallel, CLUSTER)
    assert terms is not None and terms.zero3_expert_gather_bytes_per_pass > 0
