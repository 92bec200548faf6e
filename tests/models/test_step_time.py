"""Step time: the exact makespan extrapolation, overlap rules and the composed breakdown."""

import random

import pytest

from api_schemas import ClusterSpec, ParallelConfig, PipelineSchedule, TrainingSpec
from models.catalog.presets import cluster_preset, model_preset
from models.core.pipeline import OpDurations, simulate_makespan
from models.core.step_time import compiled_schedule, estimate_step, pipeline_makespan

S = PipelineSchedule


@pytest.mark.parametrize(("schedule", "p", "v"), [
    (S.ONE_F_ONE_B, 4, 1), (S.INTERLEAVED_1F1B, 4, 2), (S.ZB_H1, 4, 1), (S.ZB_H2, 4, 1),
    (S.DUALPIPE, 4, 1), (S.DUALPIPEV, 4, 2), (S.ZBV, 4, 2), (S.GPIPE, 4, 1)])
def test_extrapolated_makespan_equals_the_full_simulation(schedule: PipelineSchedule, p: int,
                                                          v: int) -> None:
    rng = random.Random(7)
    stages = {S.DUALPIPE: p, S.ZBV: 2 * p, S.DUALPIPEV: 2 * p}.get(schedule, p * v)
    durations = OpDurations(forward_s=tuple(rng.uniform(0.5, 1.5) for _ in range(stages)),
                            backward_input_s=tuple(rng.uniform(0.5, 2) for _ in range(stages)),
                            backward_weight_s=tuple(rng.uniform(0.2, 1) for _ in range(stages)))
    m = 16 * p
    full = simulate_makespan(compiled_schedule(schedule, p, m, v), durations,
                             p2p_latency_s=0.05)
    fast = pipeline_makespan(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                             durations=durations, p2p_latency_s=0.05)
    assert fast == pytest.approx(full, rel=1e-9)


@pytest.mark.parametrize(("schedule", "p", "v"), [
    (S.ONE_F_ONE_B, 4, 1), (S.INTERLEAVED_1F1B, 4, 3), (S.ZB_H2, 4, 1), (S.DUALPIPE, 4, 1),
    (S.DUALPIPEV, 4, 2), (S.ZBV, 4, 2), (S.CHIMERA, 4, 1)])
def test_rank_work_is_the_sum_of_each_ranks_op_durations(schedule: PipelineSchedule, p: int,
                                                         v: int) -> None:
    from models.core.pipeline.simulator import op_durations, rank_work_s

    rng = random.Random(3)
    stages = {S.DUALPIPE: p, S.ZBV: 2 * p, S.DUALPIPEV: 2 * p, S.CHIMERA: p}.get(schedule,
                                                                                p * v)
    durations = OpDurations(forward_s=tuple(rng.uniform(0.5, 1.5) for _ in range(stages)),
                            backward_input_s=tuple(rng.uniform(0.5, 2) for _ in range(stages)),
                            backward_weight_s=tuple(rng.uniform(0.2, 1) for _ in range(stages)))
    compiled = compiled_schedule(schedule, p, 4 * p, v)
    rows = op_durations(compiled, durations)
    offsets = compiled.offsets
    by_rows = [float(rows[offsets[r]:offsets[r + 1]].sum()) for r in range(p)]
    for _ in range(2):  # built, then read from the program
        assert rank_work_s(compiled, durations).tolist() == pytest.approx(by_rows, rel=1e-12)


def test_a_bubble_still_shrinking_at_the_sampled_lengths_is_simulated_in_full() -> None:
    # Mixtral 8x7B's ZB-V stage times on 8 ranks (TP8, two micro-batches per step of
    # 256 x 4096 tokens, 128 micro-batches): the last virtual stage, on rank 0, carries the
    # head. At 32, 48 and 64 micro-batches the makespans are affine, but rank 0 is still
    # idle at first and that idle shrinks by the same amount per period; the line through
    # them, extended to 128, fell to 6.543 s, below rank 0's own work (6.588 s).
    heavy = (0.016257849521083702, 0.006130405684268858, 0.004214244473443864)
    light = (0.01563004728888889, 0.0055024896941715815, 0.003733164629308751)
    durations = OpDurations(forward_s=(light[0],) * 15 + (heavy[0],),
                            backward_input_s=(light[1],) * 15 + (heavy[1],),
                            backward_weight_s=(light[2],) * 15 + (heavy[2],))
    full = simulate_makespan(compiled_schedule(S.ZBV, 8, 128, 2), durations)
    fast = pipeline_makespan(S.ZBV, num_stages=8, num_micro_batches=128, num_chunks=2,
                             durations=durations, p2p_latency_s=0.0)
    rank0_work = 128 * (sum(heavy) + sum(light))
    assert fast == pytest.approx(full, rel=1e-9)
    assert fast >= rank0_work


LLAMA = model_preset("llama-3.1-8b")
TRAIN = TrainingSpec(global_batch_size=64, sequence_length=4096)
CLUSTER = cluster_preset("h100-sxm5-80gb", num_nodes=2)


def test_breakdown_adds_up_and_throughput_follows_from_the_step() -> None:
    est = estimate_step(LLAMA, TRAIN, ParallelConfig(tp=2, pp=2, dp=4, sequence_parallel=True),
                        CLUSTER)
    assert est.step_time_s == pytest.approx(
        est.pipeline_makespan_s + est.optimizer_s + est.exposed_comm_s.get("dp", 0.0) * 0
        + (est.step_time_s - est.pipeline_makespan_s - est.optimizer_s), rel=1e-12)
    assert est.tokens_per_s == pytest.approx(64 * 4096 / est.step_time_s)
    assert 0 < est.mfu < 1 and est.hfu >= est.mfu
    assert est.bubble_s > 0 and est.compute_s > 0


def test_overlapped_gradient_reduction_is_not_slower() -> None:
    parallel = ParallelConfig(tp=1, pp=1, dp=16)
    overlapped = estimate_step(LLAMA, TRAIN, parallel, CLUSTER)
    serial = estimate_step(LLAMA, TRAIN.model_copy(update={"overlap_grad_reduce": False}),
                           parallel, CLUSTER)
    assert serial.step_time_s > overlapped.step_time_s
    assert serial.exposed_comm_s["dp"] > overlapped.exposed_comm_s.get("dp", 0.0)


def test_tensor_parallelism_across_nodes_exposes_slower_collectives() -> None:
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=2)
    inside = estimate_step(LLAMA, TRAIN, ParallelConfig(tp=8, dp=2, sequence_parallel=True),
                           cluster)
    across = estimate_step(LLAMA, TRAIN, ParallelConfig(tp=16, dp=1, sequence_parallel=True)
                           if LLAMA.num_attention_heads % 16 == 0 else
                           ParallelConfig(tp=8, dp=2), cluster)
    assert across.exposed_comm_s["tp"] > inside.exposed_comm_s["tp"]


def test_full_recompute_adds_a_forward_and_counts_in_hardware_flops() -> None:
    base = ParallelConfig(tp=2, pp=1, dp=8, sequence_parallel=True)
    plain = estimate_step(LLAMA, TRAIN, base, CLUSTER)
    full = estimate_step(LLAMA, TRAIN, base.model_copy(update={"recompute": "full"}), CLUSTER)
    assert full.step_time_s > plain.step_time_s
    assert full.recompute_s > 0 and plain.recompute_s == 0
    assert full.model_flop == plain.model_flop and full.hardware_flop > plain.hardware_flop


def test_dualpipe_hides_expert_all_to_all() -> None:
    spec = model_preset("mixtral-8x7b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=4)
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    base = ParallelConfig(pp=4, dp=8, ep=8, zero_stage=3)
    one_f = estimate_step(spec, training, base, cluster)
    dual = estimate_step(spec, training, base.model_copy(update={"schedule": "dualpipe"}),
                         cluster)
    assert one_f.exposed_comm_s.get("ep", 0.0) > dual.exposed_comm_s.get("ep", 0.0)


def test_node_limited_routing_cuts_expert_all_to_all_time() -> None:
    # DeepSeek-V3 routes each token to at most 4 nodes (n_group 8, topk_group 4); the same
    # model routed without the limit sends more copies over the NICs with DeepEP's
    # per-node dispatch. Megatron's alltoall dispatcher sends one row per assignment, so
    # the limit saves nothing there.
    from api_schemas.architecture import MoESpec
    from models.core.collectives import fabric_of
    from models.core.step_time import axis_groups, expert_all_to_all_s

    spec = model_preset("deepseek-v3")
    assert spec.moe is not None
    unlimited = spec.model_copy(update={"moe": spec.moe.model_copy(
        update={"num_expert_groups": 1, "topk_groups": 1})})
    assert isinstance(unlimited.moe, MoESpec)
    cluster = cluster_preset("h800-sxm5-80gb", num_nodes=8)
    training = TrainingSpec(global_batch_size=64, sequence_length=4096,
                            moe_dispatcher="deepep")
    parallel = ParallelConfig(dp=64, ep=64)
    groups = axis_groups(parallel, gpus_per_node=8)
    assert groups["ep"].size == 64 and groups["ep"].ranks_per_node == 8
    limited_s = expert_all_to_all_s(spec, training, parallel, groups, fabric_of(cluster))
    free_s = expert_all_to_all_s(unlimited, training, parallel, groups, fabric_of(cluster))
    assert limited_s < free_s
    alltoall = training.model_copy(update={"moe_dispatcher": "alltoall"})
    assert expert_all_to_all_s(spec, alltoall, parallel, groups, fabric_of(cluster)) == \
        pytest.approx(expert_all_to_all_s(unlimited, alltoall, parallel, groups,
                                          fabric_of(cluster)))


def _free_links(cluster_name: str, num_nodes: int) -> ClusterSpec:
    """The cluster with every link infinitely fast (1e30 B/s) and without latency."""
    from api_schemas import LinkSpec

    cluster = cluster_preset(cluster_name, num_nodes=num_nodes)
    free = LinkSpec(bandwidth_bytes_per_s=1e30, latency_s=0.0)
    return cluster.model_copy(update={"intra_node": free, "inter_node": free,
                                      "pcie_bandwidth_bytes_per_s": 1e30})


_SHAPES = [(S.GPIPE, 1), (S.ONE_F_ONE_B, 1), (S.INTERLEAVED_1F1B, 2), (S.ZB_H1, 1),
           (S.ZB_H2, 1), (S.ZBV, 2), (S.DUALPIPE, 1), (S.DUALPIPEV, 2)]


@pytest.mark.parametrize(("schedule", "vpp"), _SHAPES)
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_breakdown_sums_to_the_step_for_every_schedule_and_recompute(
        schedule: PipelineSchedule, vpp: int, recompute: str) -> None:
    parallel = ParallelConfig(tp=2, pp=4, dp=2, vpp=vpp, schedule=schedule, zero_stage=1,
                              sequence_parallel=True, recompute=recompute)
    est = estimate_step(LLAMA, TRAIN, parallel, CLUSTER)
    assert sum(est.breakdown_s.values()) == pytest.approx(est.step_time_s, rel=1e-9)
    assert all(t >= -1e-9 * est.step_time_s for t in est.breakdown_s.values())
    assert est.bubble_s > 0
    if recompute == "full":
        # Each recomputed TP collective is booked once, under TP, never inside recompute.
        plain = estimate_step(LLAMA, TRAIN, parallel.model_copy(update={"recompute": "none"}),
                              CLUSTER)
        assert est.exposed_comm_s["tp"] == pytest.approx(1.5 * plain.exposed_comm_s["tp"],
                                                         rel=1e-9)


@pytest.mark.parametrize(("schedule", "vpp"), _SHAPES)
def test_with_infinite_bandwidth_nothing_is_exposed_and_idle_time_is_bubble(
        schedule: PipelineSchedule, vpp: int) -> None:
    spec = model_preset("mixtral-8x7b")
    cluster = _free_links("h100-sxm5-80gb", 4)
    parallel = ParallelConfig(tp=2, pp=4, dp=4, ep=4, vpp=vpp, schedule=schedule,
                              zero_stage=3, sequence_parallel=True, recompute="full")
    est = estimate_step(spec, TrainingSpec(global_batch_size=64, sequence_length=4096),
                        parallel, cluster)
    assert all(t == pytest.approx(0.0, abs=1e-12) for t in est.exposed_comm_s.values())
    assert est.step_time_s == pytest.approx(est.compute_s + est.recompute_s + est.bubble_s
                                            + est.optimizer_s + sum(est.overheads_s.values()),
                                            rel=1e-9)
    assert est.bubble_s > 0


def test_mfu_counts_causal_attention_and_reports_the_full_attention_figure() -> None:
    # At 128K context the attention core dominates: the full-matrix convention (Megatron-LM,
    # PaLM) counts about twice the score/value FLOPs the causal kernels perform.
    long = TrainingSpec(global_batch_size=8, sequence_length=131072)
    est = estimate_step(LLAMA, long, ParallelConfig(tp=8, cp=2, sequence_parallel=True),
                        CLUSTER)
    assert est.mfu_full_attention > 1.4 * est.mfu
    short = estimate_step(LLAMA, TRAIN, ParallelConfig(tp=2, dp=8, sequence_parallel=True),
                          CLUSTER)
    assert 1.0 < short.mfu_full_attention / short.mfu < 1.2


def test_all_gather_across_nodes_pays_one_latency_round_per_rank() -> None:
    """NCCL runs all-gather across nodes as one ring: n - 1 rounds, so a small shard's
    gather grows with the group even though its bytes do not."""
    from models.core.collectives import Collective, collective_cost, fabric_of

    fabric = fabric_of(cluster_preset("h100-sxm5-80gb", num_nodes=128))
    times = [collective_cost(Collective.ALL_GATHER, num_ranks=n, message_bytes=2**20,
                             fabric=fabric, ranks_per_node=8).time_s for n in (64, 256, 1024)]
    assert times[0] < times[1] < times[2]
    assert times[2] - times[1] == pytest.approx(768 * 5e-6, rel=0.05)


def test_zero3_throughput_falls_as_the_sharding_group_grows_at_fixed_batch() -> None:
    """Strong scaling of FSDP (ZeRO-3 over every GPU) at a fixed global batch: per-GPU work
    per step shrinks while each layer's gathers keep their bytes and gain latency rounds."""
    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=1024, sequence_length=4096)
    rates = []
    for nodes in (8, 32, 128):
        cluster = cluster_preset("h100-sxm5-80gb", num_nodes=nodes)
        est = estimate_step(spec, training, ParallelConfig(dp=8 * nodes, zero_stage=3),
                            cluster)
        rates.append((est.tokens_per_s / cluster.world_size, est.exposed_comm_s.get("dp", 0.0)))
    assert rates[0][0] >= rates[1][0] > 1.5 * rates[2][0]
    assert rates[2][1] > rates[1][1]


def test_offload_and_fp8_storage_are_never_free() -> None:
    base = ParallelConfig(tp=2, dp=8, sequence_parallel=True, recompute="selective")
    plain = estimate_step(LLAMA, TRAIN, base, CLUSTER)
    fp8 = estimate_step(LLAMA, TRAIN, base.model_copy(update={"fp8_activations": True}),
                        CLUSTER)
    assert fp8.step_time_s > plain.step_time_s
    assert fp8.overheads_s["fp8 activation casts"] > 0
    slow_host = CLUSTER.model_copy(update={"pcie_bandwidth_bytes_per_s": 1e9})
    offload = estimate_step(LLAMA, TRAIN,
                            base.model_copy(update={"activation_offload_frac": 0.5}), slow_host)
    assert offload.offload_stall_s > 0 and offload.step_time_s > plain.step_time_s


def test_per_step_terms_are_named_and_add_to_the_step() -> None:
    est = estimate_step(LLAMA, TRAIN, ParallelConfig(tp=2, pp=2, dp=4, sequence_parallel=True),
                        CLUSTER)
    assert {"grad-norm all-reduce", "loss all-reduce", "grad-norm and clipping"} <= set(
        est.overheads_s)
    assert all(t > 0 for t in est.overheads_s.values())
    assert est.step_time_s == pytest.approx(
        est.pipeline_makespan_s + est.optimizer_s + sum(est.overheads_s.values())
        - est.overheads_s.get("fp8 activation casts", 0.0)
        + est.exposed_comm_s.get("dp", 0.0), rel=1e-9)


def test_fp8_activation_storage_follows_the_recipe_unless_asked() -> None:
    from api_schemas import Constraints, DType
    from solver.planner import hardware_constraints

    bf16 = TrainingSpec(global_batch_size=64, sequence_length=4096)
    fp8 = bf16.model_copy(update={"compute_dtype": DType.FP8})
    assert hardware_constraints(Constraints(), CLUSTER, bf16).allow_fp8_activations is False
    assert hardware_constraints(Constraints(), CLUSTER, fp8).allow_fp8_activations is True
    asked = Constraints(allow_fp8_activations=True)
    assert hardware_constraints(asked, CLUSTER, bf16).allow_fp8_activations is True


def test_zero3_step_pays_its_prefetch_fill_and_drain_once() -> None:
    """FSDP's first gather of a step and its last reduce-scatter have no compute to hide
    behind (arXiv:2304.11277 Sec. 3.3): with compute hiding every per-layer call, the
    exposed DP time of a ZeRO-3 step is one forward gather plus one reduce-scatter call."""
    from models.core.step_time.exposure import zero3_fill_drain_s
    from models.core.traffic import step_traffic

    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=64, sequence_length=16384)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    parallel = ParallelConfig(dp=8, zero_stage=3, fsdp=True)
    zero3 = estimate_step(spec, training, parallel, cluster)
    items = step_traffic(spec, training=training, parallel=parallel, cluster=cluster).items
    zero3_items = [i for i in items if "zero3" in i.name]
    fill_drain = sum(zero3_fill_drain_s(i) for i in zero3_items)
    gather = next(i for i in zero3_items if i.name.endswith("forward.param_all_gather"))
    scatter = next(i for i in zero3_items if i.name.endswith("grad_reduce_scatter"))
    assert fill_drain == pytest.approx(gather.time_per_call_s + scatter.time_per_call_s)
    assert 0 < fill_drain < sum(i.time_per_step_s for i in zero3_items) / 100
    assert zero3.exposed_comm_s["dp"] == pytest.approx(fill_drain, rel=1e-9)
    # Sharding parameters too never shortens the step on the same mesh.
    zero2 = estimate_step(spec, training, ParallelConfig(dp=8, zero_stage=2), cluster)
    assert zero3.step_time_s >= zero2.step_time_s


def test_offloaded_optimizer_states_cost_a_cpu_step_and_an_upload() -> None:
    """ZeRO-Offload (arXiv:2101.06840 Sec. 4.1): the CPU updates the offloaded share of the
    states, bounded by the node's DRAM bandwidth shared by its GPUs, and copies the updated
    weights back over the host link."""
    from api_schemas.dtypes import DType
    from models.core.step_time.step_terms import host_optimizer_s

    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    steps = [estimate_step(spec, training, ParallelConfig(dp=8, zero_stage=1,
                                                          optimizer_offload_frac=f), cluster)
             for f in (0.0, 0.5, 1.0)]
    host = [e.overheads_s.get("CPU optimizer (offloaded states)", 0.0) for e in steps]
    assert host[0] == 0.0 and host[2] == pytest.approx(2 * host[1])
    assert steps[0].step_time_s < steps[1].step_time_s < steps[2].step_time_s
    assert steps[2].optimizer_s == 0.0 < steps[0].optimizer_s
    # 1e9 parameters of bf16-weight / fp32-master Adam: 2 x 12 + 4 + 2 = 30 bytes each of
    # host traffic at 614.4 / 8 GB/s, plus 2 bytes each up at 50 GB/s.
    fp32_grads = training.model_copy(update={"grad_dtype": DType.FP32})
    assert host_optimizer_s(1e9, fp32_grads, cluster) == pytest.approx(
        30e9 / (614.4e9 / 8) + 2e9 / 50e9, rel=1e-9)


def test_grace_blackwell_reaches_host_memory_over_nvlink_c2c() -> None:
    gb200 = cluster_preset("gb200-nvl72", num_nodes=1)
    h100 = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    assert gb200.pcie_bandwidth_bytes_per_s == 225e9 > 4 * h100.pcie_bandwidth_bytes_per_s
    assert gb200.host_memory_bandwidth_bytes_per_s == 18.4e12


def test_all_gather_context_parallelism_gathers_kv_on_the_critical_path() -> None:
    """Llama 3 (arXiv:2407.21783 Sec. 3.3.2): K and V of the whole sequence are all-gathered
    before attention, exposed but small under GQA; dK and dV are reduce-scattered."""
    from models.core.frameworks import runs_on
    from models.core.traffic import step_traffic
    from solver.export.megatron import megatron_args

    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=8, sequence_length=131072)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=4)
    ring = ParallelConfig(tp=8, cp=4, sequence_parallel=True, recompute="full")
    gathered = ParallelConfig(tp=8, cp=4, sequence_parallel=True, recompute="full",
                              cp_kind="all_gather")
    items = [i for i in step_traffic(spec, training=training, parallel=gathered,
                                     cluster=cluster).items if i.axis.value == "cp"]
    # Per rank: 131072 tokens x 1 KV head (8 / TP 8) x (128 + 128) x 2 bytes.
    assert {i.message_bytes for i in items} == {131072 * 1 * 256 * 2}
    assert {i.collective.value for i in items} == {"all_gather", "reduce_scatter"}
    slow = estimate_step(spec, training, gathered, cluster)
    fast = estimate_step(spec, training, ring, cluster)
    assert slow.exposed_comm_s["cp"] > 0 and "cp" not in fast.exposed_comm_s
    args = megatron_args(spec, training, gathered)
    assert args[args.index("--cp-comm-type") + 1] == "all_gather"
    assert {fit.framework for fit in runs_on(spec, training, gathered)} == {"megatron-lm"}


def test_a_stage_time_at_another_rank_is_its_replace_of_the_rank() -> None:
    """`StageTime.at_rank` names every field: it equals `dataclasses.replace` of the rank on a
    record whose fields all differ from their defaults."""
    import dataclasses

    from models.core.compute import OpTimes
    from models.core.step_time.stage import StageTime

    values = {f.name: 0.5 + i for i, f in enumerate(dataclasses.fields(StageTime))}
    values.update(stage=1, chunk_times=(OpTimes(forward_s=1.0),), exposed_comm_s={"tp": 2.0})
    stage = StageTime(**values)
    assert stage.at_rank(3) == dataclasses.replace(stage, stage=3)
