"""Pipeline ZeRO-2's step time: chunk evictions, their traffic and exposed time."""

import pytest

from api_schemas import ParallelConfig, PipelineSchedule, TrainingSpec
from models.catalog.presets import cluster_preset, model_preset
from models.core.pipeline import OpKind, generate_program
from models.core.step_time import estimate_step
from models.core.step_time.step_terms import HOST_GRADIENTS
from models.core.traffic.data import GRADIENT_BUFFER_SLOTS, chunk_evictions

S = PipelineSchedule


def counted_evictions(schedule: PipelineSchedule, p: int, m: int, v: int, rank: int) -> int:
    """Walk the rank's generated backward ops with two least-recently-used gradient slots:
    a chunk that finds no slot evicts one; the slots still full at the end drain too."""
    program = generate_program(schedule, num_stages=p, num_micro_batches=m, num_chunks=v)
    slots: list[int] = []
    evictions = 0
    start, end = program.rank_offsets[rank], program.rank_offsets[rank + 1]
    for row in range(start, end):
        if program.kind[row] not in (OpKind.B, OpKind.BW):
            continue
        chunk = int(program.placement.stage_chunk[0, program.stage[row]])
        if chunk in slots:
            slots.remove(chunk)
        elif len(slots) == GRADIENT_BUFFER_SLOTS:
            slots.pop(0)
            evictions += 1
        slots.append(chunk)
    return evictions + len(slots)


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 4), (4, 16, 3), (2, 8, 4), (4, 8, 2),
                                           (8, 32, 4)])
def test_evictions_match_the_interleaved_schedule_with_two_buffer_slots(p: int, m: int,
                                                                        v: int) -> None:
    """The stated relation: with more than two chunks a rank drains about (m / p) x v chunk
    buffers per step; with two, each chunk once."""
    parallel = ParallelConfig(pp=p, vpp=v, schedule=S.INTERLEAVED_1F1B,
                              gradient_host_shards=True)
    expected = chunk_evictions(parallel, m)
    assert expected == (v * m // p if v > 2 else v)
    for rank in range(p):
        assert counted_evictions(S.INTERLEAVED_1F1B, p, m, v, rank) == expected


MIXTRAL = model_preset("mixtral-8x7b")
TRAIN = TrainingSpec(global_batch_size=256, sequence_length=4096)
CLUSTER = cluster_preset("h100-sxm5-80gb", num_nodes=8)


def _estimate(vpp: int, host: bool, training: TrainingSpec = TRAIN):
    parallel = ParallelConfig(pp=4, dp=16, ep=8, vpp=vpp, schedule=S.INTERLEAVED_1F1B,
                              gradient_host_shards=host)
    return estimate_step(MIXTRAL, training, parallel, CLUSTER)


def test_pipeline_zero2_is_a_named_step_time_term_and_the_breakdown_adds_up() -> None:
    on, off = _estimate(4, True), _estimate(4, False)
    assert on.overheads_s[HOST_GRADIENTS] > 0
    assert HOST_GRADIENTS not in off.overheads_s
    assert sum(on.breakdown_s.values()) == pytest.approx(on.step_time_s, rel=1e-9)
    assert on.step_time_s > off.step_time_s
    # The once-per-step gradient reduce-scatter of ZeRO-1 is replaced, not counted twice.
    assert on.exposed_comm_s.get("dp", 0.0) < off.exposed_comm_s["dp"]


def test_a_slower_host_link_costs_more_and_overlap_is_bounded_by_the_drains() -> None:
    from models.core.collectives import fabric_of
    from models.core.layout import pipeline_layout
    from models.core.rank_states import micro_batch_count
    from models.core.step_time import axis_groups
    from models.core.step_time.host_gradients import host_gradient_cost
    from models.core.step_time.stage import stage_times
    from models.core.traffic.context import StepContext
    from models.core.traffic.data import CHUNK_REDUCE, dp_items
    from models.core.traffic.weights import stage_weights

    parallel = ParallelConfig(pp=4, dp=16, ep=8, vpp=4, schedule=S.INTERLEAVED_1F1B,
                              gradient_host_shards=True)
    m = micro_batch_count(TRAIN, parallel)
    groups = axis_groups(parallel, gpus_per_node=CLUSTER.gpus_per_node)
    held = stage_weights(MIXTRAL, parallel)[1]

    def cost(cluster):  # type: ignore[no-untyped-def]
        fabric = fabric_of(cluster)
        layouts = pipeline_layout(MIXTRAL, parallel)
        st = stage_times(MIXTRAL, TRAIN, parallel, cluster, layouts, m, fabric, groups)[1]
        ctx = StepContext(model=MIXTRAL, training=TRAIN, parallel=parallel, fabric=fabric,
                          mesh=groups.mesh, stage=held, num_micro_batches=m,
                          pp_scatter_gather=False)
        items = tuple(dp_items(ctx))
        reduces = [i for i in items if i.name.endswith(CHUNK_REDUCE)]
        # Dense gradients over DP x CP, expert gradients over expert-DP; one call per bucket
        # per eviction; no once-per-step gradient reduce-scatter beside them.
        assert len(reduces) == 2 and all(i.calls_per_step % 16 == 0 for i in reduces)
        assert not any(i.name.endswith("grad_reduce_scatter") for i in items)
        return host_gradient_cost(TRAIN, parallel, cluster, held, items, st.chunk_times, m)

    fast = cost(CLUSTER)
    slow = cost(CLUSTER.model_copy(update={
        "pcie_bandwidth_bytes_per_s": CLUSTER.pcie_bandwidth_bytes_per_s / 8}))
    assert fast is not None and slow is not None
    assert fast.evictions == 16
    # Each visit copies the rank's whole shard; the upload is one shard.
    assert fast.device_to_host_bytes == pytest.approx(4 * fast.upload_bytes, rel=1e-6)
    assert slow.device_to_host_s == pytest.approx(8 * fast.device_to_host_s, rel=1e-9)
    assert slow.exposed_s > fast.exposed_s
    assert fast.upload_s <= fast.exposed_s <= fast.drain_s + fast.upload_s
