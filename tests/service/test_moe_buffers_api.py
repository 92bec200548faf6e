"""POST /v1/moe/buffers: DeepEP-style worst-case receive buffer against MoonEP's fixed one."""

import httpx

from models.core.moe.balance import receive_buffer_rows

LAYER = {"tokens_per_rank": 8192, "top_k": 8, "ep_size": 64, "experts_per_rank": 4,
         "hidden_size": 7168, "bytes_per_elem": 2, "token_padding": 128}


def test_buffers_are_the_cost_model_sizes(client: httpx.Client) -> None:
    answer = client.post("/v1/moe/buffers", json=LAYER)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    sizes = receive_buffer_rows(**LAYER)
    assert body["deepep_worst_case_bytes"] == sizes.deepep_worst_case_bytes
    assert body["moonep_padded_bytes"] == sizes.moonep_padded_bytes
    assert body["deepep_worst_case_rows"] == 8192 * 8 * 64
    assert body["moonep_rows"] == 8192 * 8
    assert body["ratio"] == sizes.deepep_worst_case_bytes / sizes.moonep_padded_bytes
    assert body["deepep_fits"] is None and body["moonep_fits"] is None


def test_a_budget_separates_the_buffer_that_fits(client: httpx.Client) -> None:
    body = client.post("/v1/moe/buffers", json={**LAYER, "budget_bytes": 8 * 2**30}).json()
    # 8192 x 8 x 64 rows of 7168 BF16 elements is 56 GiB; MoonEP's is under 1 GiB.
    assert body["deepep_fits"] is False and body["moonep_fits"] is True


def test_invalid_sizes_are_problems(client: httpx.Client) -> None:
    answer = client.post("/v1/moe/buffers", json={**LAYER, "top_k": 0})
    assert answer.status_code == 422 and answer.json()["code"] == "invalid-request"
