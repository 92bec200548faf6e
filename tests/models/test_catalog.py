"""Catalog: GPU presets keep dense and sparse apart, node presets and model presets load."""

import json
from typing import Any

import pytest

from api_schemas import ClusterInput, DType, GpuSpec, IntraNodeTopology
from api_schemas.units import GIB
from models.catalog.kernels import profile_for
from models.catalog.presets import (
    DATA_DIR,
    DEFAULT_NODE_FOR_GPU,
    NODE_LINK_FIELDS,
    NODE_PRESETS,
    POWER_CLOCK_EXPONENT,
    cluster_preset,
    gpu_ids,
    gpu_preset,
    model_ids,
    model_preset,
    power_limited_clock_ratio,
)
from models.catalog.resolve import resolve_cluster
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
    assert "tpu-v5p" not in ids and len(ids) == 12
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


def _hardware_json() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA_DIR / "hardware.json").read_text())
    return loaded


def test_nodes_take_their_links_from_the_accelerator_records() -> None:
    records = {r["id"]: r for r in _hardware_json()["accelerators"]}
    for node in NODE_PRESETS.values():
        for gpu_id in node.gpu_ids:
            rec = records[gpu_id]
            assert node.gpus_per_node == rec["scale_up"]["domain_size"], node.id
            assert node.nvlink_bidirectional_bytes_per_s == rec["scale_up"]["bandwidth_gb_s"] * 1e9
            assert node.nic_bits_per_s == rec["typical_node"]["nic_gbps_per_accelerator"] * 1e9
        assert DEFAULT_NODE_FOR_GPU[node.gpu_id] == node.id
    assert set(DEFAULT_NODE_FOR_GPU) == set(gpu_ids())


def test_gb200_node_is_the_72_gpu_nvlink_domain_not_the_4_gpu_tray() -> None:
    # hardware.json: GB200 NVL72 scale_up.domain_size 72; a compute tray holds 4 GPUs.
    records = {r["id"]: r for r in _hardware_json()["accelerators"]}
    assert records["gb200-nvl72"]["typical_node"]["gpus_per_node"] == 4
    assert NODE_PRESETS["gb200-nvl72"].gpus_per_node == 72
    assert cluster_preset("gb200-nvl72", num_nodes=2).world_size == 144


def test_mi355x_links_are_its_own_not_the_mi300x_ones() -> None:
    # hardware.json: MI355X 7 links x 153.6 GB/s = 1075.2 GB/s bidirectional per GPU.
    cluster = cluster_preset("mi355x", num_nodes=1)
    assert cluster.intra_node.bandwidth_bytes_per_s == pytest.approx(1075.2e9 / 2 * 0.8)
    assert cluster.intra_node_topology == IntraNodeTopology.FULL_MESH
    assert cluster_preset("mi300x", num_nodes=1).intra_node.bandwidth_bytes_per_s == \
        pytest.approx(896e9 / 2 * 0.8)


_CUSTOM = GpuSpec(id="x1000", name="Custom X1000", memory_bytes=96 * GIB,
                  hbm_bandwidth_bytes_per_s=4e12, dense_peak_flop_per_s={DType.BF16: 1e15})


def test_a_gpu_without_a_node_preset_must_give_its_links() -> None:
    with pytest.raises(InvalidSpecError) as err:
        resolve_cluster(ClusterInput(gpu=_CUSTOM, num_nodes=2))
    for field in NODE_LINK_FIELDS:
        assert field in err.value.detail
    assert err.value.diagnostics == {"missing": list(NODE_LINK_FIELDS)}
    with pytest.raises(InvalidSpecError, match="inter_node_bandwidth_bytes_per_s"):
        resolve_cluster(ClusterInput(gpu=_CUSTOM, num_nodes=2, gpus_per_node=4,
                                     intra_node_bandwidth_bytes_per_s=300e9))
    cluster = resolve_cluster(ClusterInput(gpu=_CUSTOM, num_nodes=2, gpus_per_node=4,
                                           intra_node_bandwidth_bytes_per_s=300e9,
                                           inter_node_bandwidth_bytes_per_s=40e9))
    assert cluster.world_size == 8
    assert cluster.intra_node.bandwidth_bytes_per_s == 300e9
    assert cluster.inter_node.bandwidth_bytes_per_s == 40e9
    named = resolve_cluster(ClusterInput(gpu=_CUSTOM, num_nodes=1, node="hgx-h100"))
    assert named.gpus_per_node == 8


def test_an_unknown_gpu_family_has_no_kernel_profile() -> None:
    with pytest.raises(InvalidSpecError, match="cluster.gpu.id") as err:
        profile_for(_CUSTOM)
    assert "h100" in err.value.detail
    assert profile_for(gpu_preset("h200-sxm-141gb")).family == "hopper"
    assert profile_for(gpu_preset("mi355x")).family == "cdna4"
    assert profile_for(gpu_preset("mi355x")).num_sms == 256
    assert profile_for(gpu_preset("mi325x")).family == "cdna3"


def test_power_limit_relation_reproduces_the_h100_nvl_datasheet_peak() -> None:
    # NVIDIA H100 datasheet: NVL 1,671 BF16 TFLOPS (sparse) at 400 W, SXM5 1,979 at 700 W,
    # same GH100 die and 132 SMs. The cube-root relation is checked on it, not fitted.
    sxm, nvl = gpu_preset("h100-sxm5-80gb"), gpu_preset("h100-nvl-94gb")
    assert nvl.dense_peak_flop_per_s[DType.BF16] == pytest.approx(835.5e12)
    assert nvl.sparse_peak_flop_per_s[DType.BF16] == pytest.approx(1671e12)
    assert nvl.hbm_bandwidth_bytes_per_s == pytest.approx(3.9e12)
    datasheet = nvl.peak_flop_per_s(DType.BF16) / sxm.peak_flop_per_s(DType.BF16)
    relation = power_limited_clock_ratio(400, 700)
    assert relation == pytest.approx((400 / 700) ** POWER_CLOCK_EXPONENT)
    assert relation == pytest.approx(datasheet, rel=0.02)
    assert power_limited_clock_ratio(800, 700) == 1.0


def test_500w_hbm2e_h100_is_the_sxm5_part_at_a_power_limited_clock() -> None:
    # torchtitan benchmarks/llama3_h100_202412: 96GB HBM2e, 2.4 TB/s, default 500 W limit,
    # peak "between SXM and NVL".
    sxm, capped = gpu_preset("h100-sxm5-80gb"), gpu_preset("h100-sxm5-96gb-500w")
    scale = (500 / 700) ** (1 / 3)
    for dtype in (DType.BF16, DType.FP8, DType.TF32):
        assert capped.dense_peak_flop_per_s[dtype] == pytest.approx(
            sxm.dense_peak_flop_per_s[dtype] * scale)
    assert 835.5e12 < capped.peak_flop_per_s(DType.BF16) < sxm.peak_flop_per_s(DType.BF16)
    assert capped.hbm_bandwidth_bytes_per_s == pytest.approx(2.4e12)
    assert capped.memory_bytes == 96 * GIB and capped.tdp_watts == 500
    assert profile_for(capped).family == "hopper"
    cluster = cluster_preset("h100-sxm5-96gb-500w", num_nodes=2)
    assert cluster.gpus_per_node == 8
    assert cluster.inter_node.bandwidth_bytes_per_s == pytest.approx(50e9)
    assert cluster_preset("h100-nvl-94gb", num_nodes=4).gpus_per_node == 2
