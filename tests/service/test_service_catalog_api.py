"""The catalog, Hugging Face ingestion and the memory lab over HTTP."""

from typing import Any

import httpx
import pytest

from api_schemas.plan import MemoryReport
from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE, EvaluateRequest
from models.catalog.presets import gpu_ids, hf_preset_config, model_ids
from service.routes.catalog import FROM_HF_EXAMPLE
from solver import memory_report


def test_gpu_catalog_lists_every_preset_and_node(client: httpx.Client) -> None:
    body = client.get("/v1/catalog/gpus").json()
    assert [gpu["id"] for gpu in body["gpus"]] == gpu_ids()
    h100 = next(gpu for gpu in body["gpus"] if gpu["id"] == "h100-sxm5-80gb")
    assert h100["memory_bytes"] == 80 * 2**30
    assert body["default_node"]["h800-sxm5-80gb"] == "hgx-h800"
    h800_node = next(node for node in body["nodes"] if node["id"] == "hgx-h800")
    assert h800_node["intra_node_bandwidth_bytes_per_s"] == pytest.approx(160e9)


def test_the_k3_scale_preset_is_listed_as_assumed_with_its_assumptions(
        client: httpx.Client) -> None:
    from models.catalog.assumed_presets import K3_SCALE_ASSUMPTIONS, K3_SCALE_ID

    models = {entry["id"]: entry for entry in client.get("/v1/catalog/models").json()["models"]}
    entry = models[K3_SCALE_ID]
    assert entry["source"] == "assumed"
    assert entry["assumptions"] == list(K3_SCALE_ASSUMPTIONS)
    # Kimi K3: 2.8T total parameters (research ledger Sec. 11).
    assert entry["num_parameters"] == pytest.approx(2.8e12, rel=0.01)
    assert models["gpt3-175b" if "gpt3-175b" in models else "llama-3.1-8b"]["assumptions"] == []


def test_model_catalog_carries_parameter_counts(client: httpx.Client) -> None:
    models = {entry["id"]: entry for entry in client.get("/v1/catalog/models").json()["models"]}
    assert sorted(models) == sorted(model_ids())
    v3 = models["deepseek-v3"]
    # DeepSeek-V3: 671B total, 37B activated per token, MTP module reported apart.
    assert v3["num_parameters"] == pytest.approx(671e9, rel=0.01)
    assert v3["num_activated_parameters"] == pytest.approx(37e9, rel=0.03)
    assert v3["num_mtp_parameters"] > 0
    assert models["gpt-175b"]["source"] == "megatron_gpt"
    assert models["llama-3.1-405b"]["num_parameters"] == pytest.approx(405e9, rel=0.01)
    scout = models["llama-4-scout-17b-16e"]
    # Llama 4 model card: 109B total for the multimodal checkpoint.
    assert scout["num_parameters"] + scout["num_vision_parameters"] == pytest.approx(
        109e9, rel=0.005)
    assert models["llama-3.1-405b"]["num_vision_parameters"] == 0


def test_from_hf_reads_a_config(client: httpx.Client) -> None:
    response = client.post("/v1/models/from-hf", json=FROM_HF_EXAMPLE)
    assert response.status_code == 200
    body = response.json()
    assert body["model_type"] == "llama"
    assert body["spec"]["num_layers"] == 32 and body["spec"]["name"] == "llama-3.1-8b"
    assert body["num_parameters"] == pytest.approx(8.03e9, rel=0.01)
    assert body["num_parameters"] == body["num_activated_parameters"]
    assert body["num_mtp_parameters"] == 0


def test_from_hf_of_a_packaged_moe_config(client: httpx.Client) -> None:
    body = client.post("/v1/models/from-hf",
                       json={"config": hf_preset_config("mixtral-8x7b")}).json()
    assert body["num_parameters"] == pytest.approx(46.7e9, rel=0.01)
    assert body["num_activated_parameters"] == pytest.approx(12.9e9, rel=0.01)


@pytest.mark.parametrize(("config", "code", "loc"), [
    ({"model_type": "llama"}, "invalid-spec", ["body", "config"]),
    ({**FROM_HF_EXAMPLE["config"], "num_hidden_layers": 10**9}, "invalid-request",
     ["body", "config", "num_hidden_layers"]),
])
def test_from_hf_errors(client: httpx.Client, config: dict[str, Any], code: str,
                        loc: list[str]) -> None:
    response = client.post("/v1/models/from-hf", json={"config": config})
    assert response.status_code == 422
    assert response.json()["code"] == code
    assert response.json()["errors"][0]["loc"] == loc


def test_from_hf_rejects_a_non_object(client: httpx.Client) -> None:
    response = client.post("/v1/models/from-hf", json={"config": [1, 2]})
    assert response.json()["errors"][0]["loc"] == ["body", "config"]


def test_memory_ledger_is_the_library_answer(client: httpx.Client) -> None:
    response = client.post("/v1/ledger/memory", json=EVALUATE_REQUEST_EXAMPLE)
    assert response.status_code == 200
    report = MemoryReport.model_validate(response.json())
    expected = memory_report(EvaluateRequest.model_validate(EVALUATE_REQUEST_EXAMPLE))
    assert report == expected
    assert report.peak_bytes == max(stage.total_bytes for stage in report.stages)
    assert report.fits == (report.peak_bytes <= report.capacity_bytes)
    assert len(report.stages) == EVALUATE_REQUEST_EXAMPLE["parallel"]["pp"]


@pytest.mark.parametrize(("parallel", "field"), [
    ({"tp": 8, "pp": 1024, "dp": 2}, ["parallel", "pp"]),
    ({"tp": 8, "pp": 16, "dp": 1, "micro_batch_size": 1}, ["parallel", "num_micro_batches"]),
    ({"tp": 1024, "pp": 128, "dp": 1}, ["parallel"]),
])
def test_memory_ledger_bounds(client: httpx.Client, parallel: dict[str, Any],
                              field: list[str]) -> None:
    body = {**EVALUATE_REQUEST_EXAMPLE, "parallel": parallel,
            "training": {"global_batch_size": 16384, "sequence_length": 4096}}
    response = client.post("/v1/ledger/memory", json=body)
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["body", *field]


def test_from_hf_inconsistent_derived_spec_is_invalid_spec(client: httpx.Client) -> None:
    # top_k above the expert count passes the config reader but not the MoE schema.
    config = {**hf_preset_config("mixtral-8x7b"), "num_experts_per_tok": 10}
    response = client.post("/v1/models/from-hf", json={"config": config})
    assert response.status_code == 422
    assert response.json()["code"] == "invalid-spec"
    assert "top_k=10" in response.json()["detail"]


@pytest.mark.parametrize("layers", [1e9, "1000000", 10**7])
def test_from_hf_layer_bound_sees_coercible_values(client: httpx.Client, layers: Any) -> None:
    config = {**FROM_HF_EXAMPLE["config"], "num_hidden_layers": layers}
    response = client.post("/v1/models/from-hf", json={"config": config})
    assert response.status_code == 422
    assert "ATLAS_MAX_LAYERS" in response.json()["detail"]


def test_degenerate_hardware_is_rejected_with_its_field(client: httpx.Client) -> None:
    body = {**EVALUATE_REQUEST_EXAMPLE,
            "cluster": {**EVALUATE_REQUEST_EXAMPLE["cluster"], "hbm_bandwidth_bytes_per_s": 0}}
    for path in ("/v1/ledger/memory", "/v1/evaluate"):
        response = client.post(path, json=body)
        assert response.status_code == 422
        problem = response.json()
        assert problem["code"] == "invalid-request", problem
        assert "hbm_bandwidth_bytes_per_s" in str(problem), problem
