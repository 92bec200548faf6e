"""The RL memory seesaw: KV bytes per token, the rollout's KV pool, the checkpoint engine's
weight update, the reference model in the gradient buffers, and the phases of one
colocated iteration."""

import math

import pytest

from api_schemas.rl_seesaw import RL_SEESAW_EXAMPLE, RlSeesawRequest
from models.catalog.presets import model_preset
from models.core.params import count_parameters
from models.labs.rl_seesaw import (
    UpdateLinks,
    broadcast_bandwidth,
    checkpoint_engine_update,
    kv_bytes_per_token_per_gpu,
    kv_bytes_per_token_per_layer,
    kv_pool,
    reference_weights,
    state_transfer_s,
)
from models.labs.rl_seesaw_report import rl_seesaw_report

GB = 1e9
H800_LINKS = UpdateLinks(host_link_bytes_per_s=50 * GB, intra_node_bytes_per_s=160 * GB,
                         inter_node_bytes_per_s=50 * GB, hbm_bytes_per_s=3350 * GB)


def test_mla_caches_nine_halves_of_a_head_per_layer_as_deepseek_v2_table_1() -> None:
    """DeepSeek-V2 Table 1: MLA caches (d_c + d_h^R) = (9/2) d_h elements per token and
    layer (d_c = 4 d_h = 512, d_h^R = d_h / 2 = 64), the cache of GQA with 2.25 groups."""
    spec = model_preset("deepseek-v2")
    head_dim = 128
    assert kv_bytes_per_token_per_layer(spec, 1.0) == 4.5 * head_dim
    assert kv_bytes_per_token_per_layer(spec, 1.0) == 2 * 2.25 * head_dim
    # An MLA latent is not split over tensor-parallel ranks: every rank caches all of it.
    assert kv_bytes_per_token_per_gpu(spec, 2.0, tp=8, pp=1) == 60 * 576 * 2


def test_gqa_cache_is_two_heads_per_group_and_shards_over_tp_until_one_head() -> None:
    """DeepSeek-V2 Table 1: GQA caches 2 n_g d_h l elements per token; Llama 3.1 70B
    (n_g = 8, d_h = 128, l = 80) in BF16: 327,680 bytes (320 KiB) per token. vLLM gives a
    tensor-parallel rank max(1, n_g / tp) heads."""
    spec = model_preset("llama-3.1-70b")
    assert kv_bytes_per_token_per_layer(spec, 2.0) * spec.num_layers == 327_680
    assert kv_bytes_per_token_per_gpu(spec, 2.0, tp=1, pp=1) == 327_680
    assert kv_bytes_per_token_per_gpu(spec, 2.0, tp=4, pp=1) == 327_680 / 4
    assert kv_bytes_per_token_per_gpu(spec, 2.0, tp=8, pp=1) == 327_680 / 8
    # Beyond one head per rank the heads are replicated, not split further.
    assert kv_bytes_per_token_per_gpu(spec, 2.0, tp=16, pp=1) == 327_680 / 8
    assert kv_bytes_per_token_per_gpu(spec, 2.0, tp=8, pp=2) == 327_680 / 16


def test_kv_pool_is_the_engine_budget_less_weights_in_whole_contexts() -> None:
    pool = kv_pool(capacity_bytes=80 * 10**9, gpu_memory_utilization=0.9,
                   weight_bytes_per_gpu=40 * 10**9, resident_bytes=10**9,
                   bytes_per_token_per_gpu=1000.0, context_length=1_000_000,
                   external_pool_bytes_per_gpu=100 * 10**9, host_link_bytes_per_s=50 * GB)
    assert pool.gpu_pool_bytes == 72 * 10**9 - 41 * 10**9
    assert pool.gpu_pool_tokens == 31_000_000
    assert pool.active_contexts == 31
    assert pool.parked_contexts == 100
    assert pool.prefetch_s == pytest.approx(10**9 / (50 * GB))
    # Write-back writes only the 100 parked contexts; write-through every block of all 131.
    assert pool.write_back_bytes_per_gpu == 100 * 10**9
    assert pool.write_through_bytes_per_gpu == 131 * 10**9
    full = kv_pool(capacity_bytes=80 * 10**9, gpu_memory_utilization=0.9,
                   weight_bytes_per_gpu=80 * 10**9, resident_bytes=0,
                   bytes_per_token_per_gpu=1000.0, context_length=10,
                   external_pool_bytes_per_gpu=0, host_link_bytes_per_s=50 * GB)
    assert full.gpu_pool_bytes == 0 and full.active_contexts == 0


def _k2_update() -> tuple[float, float]:
    """Kimi K2's FP8 weights (one byte per parameter) on 256 H800s in TP16 instances."""
    update = checkpoint_engine_update(
        weight_bytes=count_parameters(model_preset("kimi-k2-instruct")).total,
        bucket_bytes=2 * 2**30, instance_gpus=16, num_nodes=32, gpus_per_node=8,
        links=H800_LINKS)
    return update.serial_s, update.pipelined_s


def test_checkpoint_engine_updates_kimi_k2_within_the_reported_30_seconds() -> None:
    """Kimi K2 (arXiv:2507.20534): a full parameter update of the 1T model takes under 30 s.
    Its FP8 weights (one byte per parameter, 1.026e12 bytes) on 256 H800s (PCIe Gen5 host
    links, 160 GB/s NVLink, 50 GB/s NICs): the bucket-by-bucket engine takes about 27 s,
    and the H2D copies alone 20.5 s, against 21.50 s that the checkpoint-engine README
    measured for Kimi-K2-Instruct (FP8) on 256 H20s (also PCIe Gen5 hosts)."""
    serial, pipelined = _k2_update()
    assert serial < 30.0
    assert 1.026e12 / (50 * GB) <= pipelined < serial
    assert pipelined == pytest.approx(21.50, rel=0.10)


def test_broadcast_moves_instance_size_times_the_least_volume() -> None:
    """Kimi K2: the broadcast sends more than a resharding transfer would need (every GPU
    receives the full weights where its shard is 1/instance of them)."""
    update = checkpoint_engine_update(
        weight_bytes=10**12, bucket_bytes=2**30, instance_gpus=16, num_nodes=4,
        gpus_per_node=8, links=H800_LINKS)
    assert update.received_bytes_per_gpu == 16 * update.needed_bytes_per_gpu
    assert update.num_buckets == math.ceil(10**12 / 2**30)
    assert update.h2d_s == pytest.approx(10**12 / (50 * GB))
    assert update.broadcast_s == pytest.approx(10**12 / (160 * GB))
    assert update.serial_s == pytest.approx(update.h2d_s + update.broadcast_s + update.reload_s)


def test_broadcast_bandwidth_is_nvlink_in_a_node_and_the_rails_across_nodes() -> None:
    assert broadcast_bandwidth(num_nodes=1, intra_node_bytes_per_s=160 * GB,
                               inter_node_bytes_per_s=50 * GB, gpus_per_node=8) == 160 * GB
    assert broadcast_bandwidth(num_nodes=2, intra_node_bytes_per_s=160 * GB,
                               inter_node_bytes_per_s=12.5 * GB, gpus_per_node=8) == 100 * GB


def test_reference_weights_fit_a_gradient_slot_when_parameters_are_no_wider() -> None:
    """Kimi K3: the reference model's weights are materialised in the policy's FP32
    gradient buffers. Under Pipeline ZeRO-2 a slot holds one chunk's FP32 gradients, so one
    chunk's BF16 weights fit with room to spare; FP32 weights over BF16 gradients do not."""
    chunked = reference_weights(weight_bytes=8 * 10**9, gradient_buffer_bytes=4 * 10**9,
                                chunk_slots=True, param_bytes=2.0, grad_bytes=4.0, reuse=True,
                                host_link_bytes_per_s=50 * GB)
    assert chunked.fits_in_gradient_buffer and chunked.extra_gpu_bytes == 0
    assert chunked.h2d_s == pytest.approx(8 * 10**9 / (50 * GB))
    separate = reference_weights(weight_bytes=8 * 10**9, gradient_buffer_bytes=4 * 10**9,
                                 chunk_slots=True, param_bytes=2.0, grad_bytes=4.0,
                                 reuse=False, host_link_bytes_per_s=50 * GB)
    assert separate.extra_gpu_bytes == 2 * 10**9  # two chunks' BF16 weights
    wide = reference_weights(weight_bytes=8 * 10**9, gradient_buffer_bytes=4 * 10**9,
                             chunk_slots=True, param_bytes=4.0, grad_bytes=2.0, reuse=True,
                             host_link_bytes_per_s=50 * GB)
    assert not wide.fits_in_gradient_buffer and wide.extra_gpu_bytes > 0
    stage = reference_weights(weight_bytes=10 * 10**9, gradient_buffer_bytes=20 * 10**9,
                              chunk_slots=False, param_bytes=2.0, grad_bytes=4.0, reuse=True,
                              host_link_bytes_per_s=50 * GB)
    assert stage.fits_in_gradient_buffer and stage.slot == "stage"
    sharded = reference_weights(weight_bytes=10 * 10**9, gradient_buffer_bytes=5 * 10**9,
                                chunk_slots=False, param_bytes=2.0, grad_bytes=4.0, reuse=True,
                                host_link_bytes_per_s=50 * GB)
    assert not sharded.fits_in_gradient_buffer and sharded.extra_gpu_bytes == 10 * 10**9


def test_nvme_offload_is_bounded_by_the_node_drives_shared_by_its_gpus() -> None:
    assert state_transfer_s(bytes_per_gpu=50 * 10**9, gpus_per_node=8,
                            host_link_bytes_per_s=50 * GB,
                            nvme_bytes_per_s_per_node=None) == pytest.approx(1.0)
    assert state_transfer_s(bytes_per_gpu=50 * 10**9, gpus_per_node=8,
                            host_link_bytes_per_s=50 * GB,
                            nvme_bytes_per_s_per_node=20 * GB) == pytest.approx(20.0)


def _request(**rollout: object) -> RlSeesawRequest:
    doc = {**RL_SEESAW_EXAMPLE, "rollout": {**RL_SEESAW_EXAMPLE["rollout"], **rollout}}
    return RlSeesawRequest.model_validate(doc)


def test_phases_follow_the_iteration_and_their_totals_are_their_components() -> None:
    report = rl_seesaw_report(_request())
    assert [p.name for p in report.phases] == ["rollout", "reference_forward", "train",
                                              "weight_sync"]
    for phase in report.phases:
        assert phase.gpu_bytes == sum(c.bytes for c in phase.components)
        assert phase.host_bytes_per_gpu == sum(c.bytes for c in phase.host_components)
    train = next(p for p in report.phases if p.name == "train")
    rollout = next(p for p in report.phases if p.name == "rollout")
    # The rollout gets the GPU up to the engine's budget; training states are in host memory.
    assert rollout.gpu_bytes <= math.floor(report.capacity_bytes * 0.9)
    assert any(c.name == "training states (offloaded)" for c in rollout.host_components)
    assert not any(c.kind == "optimizer" for c in rollout.components)
    assert any(c.kind == "optimizer" for c in train.components)
    assert report.transition_s == pytest.approx(sum(t.seconds for t in report.transitions))
    # The example uses Pipeline ZeRO-2: the reference weights go chunk by chunk into its two
    # gradient slots and add nothing to the GPU.
    assert report.reference.slot == "chunk" and report.reference.extra_gpu_bytes == 0
    reference = next(p for p in report.phases if p.name == "reference_forward")
    assert reference.gpu_bytes < train.gpu_bytes
    assert report.checkpoint_engine.received_bytes_per_gpu == (
        16 * report.checkpoint_engine.needed_bytes_per_gpu)


def test_one_million_token_context_needs_the_external_pool_on_k2_tp16() -> None:
    """Kimi K3 keeps 1M-token contexts in an external write-back pool: on 16 H800s of FP8
    Kimi K2 a 1M-token context's KV (61 layers x 576 BF16 elements per GPU, 70 GB) exceeds
    the GPU pool, so no context decodes from the GPU alone; moving the training states to
    NVMe frees the host DRAM the pool parks idle contexts in."""
    host = rl_seesaw_report(_request(context_length=1_048_576, external_kv_pool=True))
    assert host.kv_cache.bytes_per_token_per_gpu == 61 * 576 * 2
    assert host.kv_cache.active_contexts == 0
    nvme = rl_seesaw_report(_request(context_length=1_048_576, external_kv_pool=True,
                                     offload_tier="nvme", nvme_bandwidth_bytes_per_s=2e10))
    assert (nvme.kv_cache.external_pool_bytes_per_gpu
            > host.kv_cache.external_pool_bytes_per_gpu)
    assert nvme.kv_cache.parked_contexts >= host.kv_cache.parked_contexts
    # No context fits the GPU: every context is parked, so write-back and write-through
    # write the same bytes; with room on the GPU write-back writes less.
    assert nvme.kv_cache.write_back_bytes_per_gpu == nvme.kv_cache.write_through_bytes_per_gpu
    short = rl_seesaw_report(_request(context_length=32_768, external_kv_pool=True))
    assert short.kv_cache.active_contexts > 0 and short.kv_cache.parked_contexts > 0
    assert short.kv_cache.write_back_bytes_per_gpu < short.kv_cache.write_through_bytes_per_gpu
    offload = next(t for t in nvme.transitions if t.name.startswith("offload"))
    assert "NVMe" in offload.link
    assert offload.seconds > next(t for t in host.transitions
                                  if t.name.startswith("offload")).seconds
    assert any("NVMe bandwidth" in a for a in nvme.assumptions)


def test_without_gradient_buffer_reuse_the_reference_costs_gpu_memory() -> None:
    reused = rl_seesaw_report(_request())
    separate = rl_seesaw_report(_request(reuse_gradient_buffer=False))
    phase = {r.name: r for r in reused.phases}["reference_forward"]
    phase_separate = {r.name: r for r in separate.phases}["reference_forward"]
    assert phase_separate.gpu_bytes - phase.gpu_bytes == separate.reference.extra_gpu_bytes > 0


def test_nvme_tier_needs_its_bandwidth() -> None:
    with pytest.raises(ValueError, match="nvme_bandwidth_bytes_per_s"):
        _request(offload_tier="nvme")
