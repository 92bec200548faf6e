"""POST /v1/run/estimate, /v1/frontier and /v1/sensitivity over HTTP."""

from typing import Any

import httpx

from api_schemas.run_level import FrontierResponse, RunEstimateResponse, SensitivityResponse
from service.routes.run_level import (
    FRONTIER_EXAMPLES,
    RUN_ESTIMATE_EXAMPLES,
    SENSITIVITY_EXAMPLES,
)


def _example(examples: dict[str, dict[str, Any]]) -> dict[str, Any]:
    value: dict[str, Any] = next(iter(examples.values()))["value"]
    return {**value, "solver": {"time_limit_s": 2, "num_workers": 1}}


def test_run_estimate_example_answers(client: httpx.Client) -> None:
    response = client.post("/v1/run/estimate", json=_example(RUN_ESTIMATE_EXAMPLES))
    assert response.status_code == 200
    run = RunEstimateResponse.model_validate(response.json())
    assert run.cost is not None and run.num_steps * run.tokens_per_step >= run.token_budget


def test_frontier_example_answers(client: httpx.Client) -> None:
    body = {**_example(FRONTIER_EXAMPLES), "num_nodes_options": [1, 2]}
    response = client.post("/v1/frontier", json=body)
    assert response.status_code == 200
    result = FrontierResponse.model_validate(response.json())
    assert [p.num_gpus for p in result.points] == [8, 16] and result.pareto_num_gpus


def test_sensitivity_example_answers(client: httpx.Client) -> None:
    body = {**_example(SENSITIVITY_EXAMPLES), "factors": ["network_bandwidth"]}
    response = client.post("/v1/sensitivity", json=body)
    assert response.status_code == 200
    result = SensitivityResponse.model_validate(response.json())
    assert [p.delta for p in result.points] == [-0.2, 0.2]


def test_run_estimate_without_a_plan_is_a_problem(client: httpx.Client) -> None:
    body = {**_example(RUN_ESTIMATE_EXAMPLES), "model": {"preset": "llama-3.1-405b"}}
    response = client.post("/v1/run/estimate", json=body)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "no-feasible-plan"


def test_frontier_sizes_are_bounded(client: httpx.Client) -> None:
    body = {**_example(FRONTIER_EXAMPLES), "num_nodes_options": [10**7]}
    response = client.post("/v1/frontier", json=body)
    assert response.status_code == 422
    too_many = {**_example(FRONTIER_EXAMPLES), "num_nodes_options": list(range(1, 40))}
    assert client.post("/v1/frontier", json=too_many).json()["code"] == "invalid-request"
