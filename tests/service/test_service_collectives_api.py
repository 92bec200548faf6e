"""POST /v1/collectives/estimate over HTTP."""

import httpx
import pytest

from api_schemas.collectives import CollectiveEstimateRequest
from models.core.collectives.report import estimate_collective
from service.routes.collectives import COLLECTIVE_EXAMPLES


@pytest.mark.parametrize("name", sorted(COLLECTIVE_EXAMPLES))
def test_examples_answer_as_the_library_does(client: httpx.Client, name: str) -> None:
    body = COLLECTIVE_EXAMPLES[name]["value"]
    response = client.post("/v1/collectives/estimate", json=body)
    assert response.status_code == 200
    expected = estimate_collective(CollectiveEstimateRequest.model_validate(body))
    assert response.json() == expected.model_dump(mode="json")
    # Ring all-reduce: each rank sends 2 (n-1)/n of the message.
    assert response.json()["bytes_sent_per_rank"] == 2 * 31 * 268435456 // 32


def test_group_size_bound(client: httpx.Client) -> None:
    body = {"collective": "all_gather", "num_ranks": 10**6, "message_bytes": 1024,
            "bandwidth_bytes_per_s": 50e9, "latency_s": 1e-5}
    response = client.post("/v1/collectives/estimate", json=body)
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["body", "num_ranks"]
    assert "ATLAS_MAX_WORLD_SIZE" in response.json()["detail"]


def test_latencies_that_would_overflow_the_answer_are_refused_by_range(
        client: httpx.Client) -> None:
    body = {"collective": "all_reduce", "num_ranks": 8, "message_bytes": 2**28,
            "bandwidth_bytes_per_s": 50e9, "latency_s": 1e308}
    response = client.post("/v1/collectives/estimate", json=body)
    assert response.status_code == 422
    assert response.json()["code"] == "invalid-request"
    assert response.json()["errors"][0]["loc"] == ["body", "latency_s"]
    assert "1000000" in response.json()["errors"][0]["msg"]


def test_bandwidth_below_one_byte_per_second_is_refused(client: httpx.Client) -> None:
    body = {"collective": "all_reduce", "num_ranks": 8, "message_bytes": 2**28,
            "bandwidth_bytes_per_s": 5e-324, "latency_s": 1e-5}
    response = client.post("/v1/collectives/estimate", json=body)
    assert response.status_code == 422
    assert response.json()["code"] == "invalid-request"
    assert response.json()["errors"][0]["loc"] == ["body", "bandwidth_bytes_per_s"]


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
