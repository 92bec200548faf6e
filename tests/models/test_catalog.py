"""Catalog: GPU presets keep dense and sparse apart, node presets and model presets load."""

import pytest

from api_schemas import DType, IntraNodeTopology
from api_schemas.units import GIB
from models.catalog import (
    NODE_PRESETS,
    cluster_preset,
    gpu_ids,
    gpu_preset,
    model_ids,
    model_preset,
)
from models.errors import InvalidSpecError


def test_gpu_presets_keep_dense_and_sparse_apart() -> None:
    h100 = gpu_preset("h100-sxm5-80gb")
    assert h100.dense_peak_flop_per_s[DType.BF16] == pytest.approx(989.4e12)
    assert h100.sparse_peak_flop_per_s[DType.BF16] == pytest.approx(1978.9e12)
    assert h100.dense_peak_flop_per_s[DType.FP8] == pytest.approx(1978.9e12)
    assert h100.memory_bytes == 80 * GIB
    assert h100.sources
    assert DType.FP8 not in gpu_preset("a100-sxm4-80gb").dense_peak_flop_per_s


def test_every_gpu_preset_loads_and_tpu_is_excluded() -> None:
    ids = gpu_ids()
    assert "tpu-v5p" not in ids and len(ids) == 10
    for gid in ids:
        assert gpu_preset(gid).peak_flop_per_s(DType.BF16) > 0


def test_node_presets_cover_the_issue_list() -> None:
    gpus = {p.gpu_id for p in NODE_PRESETS.values()}
    assert {"a100-sxm4-80gb", "h100-sxm5-80gb", "h800-sxm5-80gb", "h200-sxm-141gb",
            "b200-sxm-180gb", "mi300x"} <= gpus
    assert NODE_PRESETS["mi300x-oam"].intra_node_topology == IntraNodeTopology.FULL_MESH


def test_h800_cluster_uses_deepseek_measured_links() -> None:
    cluster = cluster_preset("h800-sxm5-80gb", num_nodes=256)
    assert cluster.world_size == 2048
    assert cluster.intra_node.bandwidth_bytes_per_s == pytest.approx(160e9)
    assert cluster.inter_node.bandwidth_bytes_per_s == pytest.approx(50e9)


def test_unknown_presets_list_the_known_ones() -> None:
    with pytest.raises(InvalidSpecError, match="h100-sxm5-80gb"):
        gpu_preset("h100")
    with pytest.raises(InvalidSpecError, match="llama-3.1-8b"):
        model_preset("llama-8b")


def test_model_presets_include_fixtures_and_megatron_shapes() -> None:
    ids = model_ids()
    assert "deepseek-v3" in ids and "gpt-1008b" in ids and "gpt-175b" in ids
    assert model_preset("gpt-175b").num_layers == 96
