"""POST /v1/models/from-hf with the families added for the Hub's top decoders: nested
multimodal configs, their bounds, and refusals that say which fields are missing where."""

import httpx

from models.catalog.presets import hf_preset_config, model_preset
from models.core.params import count_parameters


def test_nested_llama_4_config_is_read_and_counted(client: httpx.Client) -> None:
    config = hf_preset_config("llama-4-maverick-17b-128e")
    response = client.post("/v1/models/from-hf", json={"config": config})
    assert response.status_code == 200
    body = response.json()
    assert body["model_type"] == "llama4_text"
    expected = count_parameters(model_preset("llama-4-maverick-17b-128e"))
    assert body["num_parameters"] == expected.total
    assert any("text_config" in note for note in body["notes"])


def test_llama_4_scout_reports_its_vision_tower_apart(client: httpx.Client) -> None:
    body = client.post("/v1/models/from-hf",
                       json={"config": hf_preset_config("llama-4-scout-17b-16e")}).json()
    # Hugging Face Hub safetensors total of meta-llama/Llama-4-Scout-17B-16E-Instruct.
    assert body["num_parameters"] + body["num_vision_parameters"] == 108_641_793_536
    assert body["num_vision_parameters"] > 0
    assert any("num_vision_parameters" in note for note in body["notes"])
    text_only = dict(hf_preset_config("llama-4-scout-17b-16e"))
    del text_only["vision_config"]
    plain = client.post("/v1/models/from-hf", json={"config": text_only}).json()
    assert plain["num_vision_parameters"] == 0
    assert any("not counted" in note for note in plain["notes"])


def test_nested_layer_count_is_bounded_before_reading(client: httpx.Client) -> None:
    config = hf_preset_config("gemma-3-27b-it")
    nested = {**config, "text_config": {**config["text_config"], "num_hidden_layers": 10**7}}
    response = client.post("/v1/models/from-hf", json={"config": nested})
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["body", "config", "text_config",
                                                    "num_hidden_layers"]


def test_unknown_family_is_refused_with_the_missing_fields(client: httpx.Client) -> None:
    config = {"model_type": "new_vlm", "text_config": {"hidden_size": 4096}}
    response = client.post("/v1/models/from-hf", json={"config": config})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert response.json()["code"] == "invalid-spec"
    assert "'text_config.num_hidden_layers'" in detail and "'text_config.vocab_size'" in detail
