"""POST /v1/collectives/estimate over HTTP."""

import httpx
import pytest
from service_testkit import post_answers_as

from api_schemas.collectives import CollectiveEstimateRequest
from models.core.collectives.report import estimate_collective
from service.routes.collectives import COLLECTIVE_EXAMPLES


@pytest.mark.parametrize("name", sorted(COLLECTIVE_EXAMPLES))
def test_examples_answer_as_the_library_does(client: httpx.Client, name: str) -> None:
    answer = post_answers_as(client, "/v1/collectives/estimate", COLLECTIVE_EXAMPLES[name]["value"],
                             estimate_collective, CollectiveEstimateRequest)
    # Ring all-reduce: each rank sends 2 (n-1)/n of the message.
    assert answer["bytes_sent_per_rank"] == 2 * 31 * 268435456 // 32


def test_group_size_bound(client: httpx.Client) -> None:
    body = {"collective": "all_gather", "num_ranks": 10**6, "message_bytes": 1024,
            "bandwidth_bytes_per_s": 50e9, "latency_s": 1e-5}
    response = client.post("/v1/collectives/estimate", json=body)
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["body", "num_ranks"]
    assert "ATLAS_MAX_WORLD_SIZE" in response.json()["detail"]


@pytest.mark.parametrize(("field", "value", "words"), [
    # A latency that would overflow the answer; a bandwidth below one byte per second.
    ("latency_s", 1e308, "1000000"),
    ("bandwidth_bytes_per_s", 5e-324, "greater than or equal to 1"),
])
def test_values_out_of_range_are_refused(client: httpx.Client, field: str, value: float,
                                         words: str) -> None:
    body = {"collective": "all_reduce", "num_ranks": 8, "message_bytes": 2**28,
            "bandwidth_bytes_per_s": 50e9, "latency_s": 1e-5, field: value}
    response = client.post("/v1/collectives/estimate", json=body)
    assert response.status_code == 422
    assert response.json()["code"] == "invalid-request"
    assert response.json()["errors"][0]["loc"] == ["body", field]
    assert words in response.json()["errors"][0]["msg"]


def test_links_must_be_given_one_way(client: httpx.Client) -> None:
    body = {"collective": "all_reduce", "num_ranks": 8, "message_bytes": 2**28}
    response = client.post("/v1/collectives/estimate", json=body)
    assert response.status_code == 422
    assert response.json()["code"] == "invalid-request"
    assert "bandwidth_bytes_per_s" in response.json()["detail"]


@pytest.mark.parametrize(("overlap", "window", "hidden_share"), [
    ({}, None, 0.0), ({"overlap_frac": 0.9}, None, 0.9), ({"overlap_frac": 1.0}, 1e-4, None)])
def test_time_splits_into_hidden_and_exposed(client: httpx.Client, overlap: dict[str, float],
                                             window: float | None,
                                             hidden_share: float | None) -> None:
    body = {"collective": "all_reduce", "num_ranks": 32, "message_bytes": 268435456,
            "bandwidth_bytes_per_s": 50e9, "latency_s": 1e-5, **overlap}
    if window is not None:
        body["overlap_window_s"] = window
    result = client.post("/v1/collectives/estimate", json=body).json()
    assert result["hidden_s"] + result["exposed_s"] == pytest.approx(result["time_s"])
    if hidden_share is None:  # bounded by the compute it hides behind
        assert result["hidden_s"] == pytest.approx(window)
    else:
        assert result["hidden_s"] == pytest.approx(hidden_share * result["time_s"])
