"""The memo pieces kept under a cluster without its node count (`node_free_cluster`) never
read the node count, and clusters that differ in it alone share them unchanged."""

from typing import Any

import pytest

from api_schemas import ClusterSpec, ParallelConfig, PipelineSchedule, TrainingSpec
from api_schemas.parallel import RecomputeMode
from models.catalog.presets import cluster_preset, model_preset
from models.core.collectives import fabric_of
from models.core.layout import pipeline_layout
from models.core.rank_states import micro_batch_count
from models.core.search_memo import node_free_cluster
from models.core.step_time import axis_groups
from models.core.step_time.stage import layer_parts, layer_parts_memo, stage_time, stage_times
from models.core.step_time.timing_kinds import kind_layers


class _NoNodeCount(ClusterSpec):
    """A cluster whose node count and world size cannot be read."""

    def __getattribute__(self, name: str) -> Any:
        if name in ("num_nodes", "world_size"):
            raise AssertionError(f"a piece kept without the node count read {name}")
        return super().__getattribute__(name)


_TRAINING = TrainingSpec(global_batch_size=1024, sequence_length=4096)
_CONFIGS = (
    ParallelConfig(tp=2, pp=8, dp=16, ep=16, schedule=PipelineSchedule.INTERLEAVED_1F1B,
                   vpp=2, zero_stage=1),
    ParallelConfig(tp=4, pp=4, dp=16, ep=8, schedule=PipelineSchedule.DUALPIPEV, vpp=2,
                   zero_stage=3, recompute=RecomputeMode.SELECTIVE),
    ParallelConfig(tp=8, pp=2, dp=16, ep=32, activation_offload_frac=0.5,
                   recompute=RecomputeMode.FULL),
)


def test_a_node_free_key_drops_the_node_count_and_keeps_every_other_field() -> None:
    small = cluster_preset("h800-sxm5-80gb", num_nodes=32)
    large = cluster_preset("h800-sxm5-80gb", num_nodes=64)
    assert node_free_cluster(small) == node_free_cluster(large)
    for change in ({"gpus_per_node": 4}, {"rail_optimized": False},
                   {"pcie_bandwidth_bytes_per_s": 20e9}, {"memory_margin_frac": 0.05},
                   {"inter_node": small.inter_node.model_copy(update={"latency_s": 1e-5})}):
        other = small.model_copy(update=change)
        assert node_free_cluster(other) != node_free_cluster(small), change


@pytest.mark.parametrize("parallel", _CONFIGS, ids=lambda p: f"tp{p.tp}-pp{p.pp}-ep{p.ep}")
def test_stage_times_and_layer_parts_never_read_the_node_count(parallel: ParallelConfig) -> None:
    # DeepSeek-V3 (dense and MoE layers, expert all-to-alls across nodes) on 256 GPUs: every
    # rank's stage times and every layer kind's parts, through the memo and afresh, on a
    # cluster whose node count raises when read.
    spec = model_preset("deepseek-v3")
    base = cluster_preset("h800-sxm5-80gb", num_nodes=32)
    cluster = _NoNodeCount.model_validate(base.model_dump())
    m = micro_batch_count(_TRAINING, parallel)
    fabric = fabric_of(cluster)
    groups = axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    layouts = pipeline_layout(spec, parallel)
    kept = stage_times(spec, _TRAINING, parallel, cluster, layouts, m, fabric, groups)
    fresh = [stage_time(spec, _TRAINING, parallel, cluster, layout, num_micro_batches=m,
                        fabric=fabric, groups=groups) for layout in layouts]
    assert kept == fresh
    memo = layer_parts_memo(spec, _TRAINING, cluster)
    for _, index, _ in kind_layers(spec):
        assert layer_parts(spec, _TRAINING, parallel, cluster, index, fabric=fabric,
                           groups=groups, memo=memo) == layer_parts(
            spec, _TRAINING, parallel, cluster, index, fabric=fabric, groups=groups)


def test_clusters_of_other_node_counts_share_stage_times_unchanged() -> None:
    # Kept on a 64-node cluster (the configuration uses 256 of its 512 GPUs), read on the
    # 32-node one: the same objects, equal to the 32-node cluster's own.
    spec = model_preset("deepseek-v3")
    small = cluster_preset("h800-sxm5-80gb", num_nodes=32)
    large = cluster_preset("h800-sxm5-80gb", num_nodes=64)
    parallel = _CONFIGS[0]
    m = micro_batch_count(_TRAINING, parallel)
    groups = axis_groups(parallel, gpus_per_node=8)
    layouts = pipeline_layout(spec, parallel)
    first = stage_times(spec, _TRAINING, parallel, large, layouts, m, fabric_of(large), groups)
    again = stage_times(spec, _TRAINING, parallel, small, layouts, m, fabric_of(small), groups)
    assert all(a is b for a, b in zip(first, again, strict=True))
    assert again == [stage_time(spec, _TRAINING, parallel, small, layout, num_micro_batches=m,
                                fabric=fabric_of(small), groups=groups) for layout in layouts]
    assert layer_parts_memo(spec, _TRAINING, small) is layer_parts_memo(spec, _TRAINING, large)
