"""POST /v1/pipeline/simulate, /v1/pipeline/optimize and /v1/moe/placement over HTTP."""

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from service_testkit import post_answers_as

import service.routes.moe as moe_routes
import service.routes.pipeline as pipeline_routes
from api_schemas.moe import MoePlacementRequest
from api_schemas.pipeline import PipelineOptimizeRequest, PipelineSimulateRequest
from models.core.pipeline.requests import simulate_request
from service.routes.moe import PLACEMENT_EXAMPLES
from service.routes.pipeline import OPTIMIZE_EXAMPLES, SIMULATE_EXAMPLES
from service.settings import Settings
from solver.placement.api import plan_placement


@pytest.mark.parametrize("name", sorted(SIMULATE_EXAMPLES))
def test_simulate_examples_answer_as_the_library_does(client: httpx.Client, name: str) -> None:
    post_answers_as(client, "/v1/pipeline/simulate", SIMULATE_EXAMPLES[name]["value"],
                    simulate_request, PipelineSimulateRequest)


def test_zb_h1_bubble_over_http(client: httpx.Client) -> None:
    # ZB-H1 with F = B = W = 1 on p = 4 ranks and m = 8: makespan 3m + (p - 1) = 27.
    result = client.post("/v1/pipeline/simulate",
                         json=SIMULATE_EXAMPLES["zb-h1-4x8"]["value"]).json()
    assert result["makespan"] == pytest.approx(27.0)
    assert result["bubble_fraction"] == pytest.approx(3 / 27)
    assert len(result["timeline"]) == 3 * 4 * 8


@pytest.mark.parametrize(("change", "field", "setting"), [
    ({"num_stages": 100_000}, "num_stages", "ATLAS_MAX_PIPELINE_STAGES"),
    ({"num_micro_batches": 100_000}, "num_micro_batches", "ATLAS_MAX_MICRO_BATCHES"),
    ({"num_stages": 512, "num_micro_batches": 8192}, "num_chunks", "ATLAS_MAX_PIPELINE_OPS"),
])
def test_simulate_bounds(client: httpx.Client, change: dict[str, Any], field: str,
                         setting: str) -> None:
    body = {**SIMULATE_EXAMPLES["zb-h1-4x8"]["value"], **change}
    response = client.post("/v1/pipeline/simulate", json=body)
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["body", field]
    assert setting in response.json()["detail"]


def test_simulate_domain_errors_are_invalid_spec(client: httpx.Client) -> None:
    body = {**SIMULATE_EXAMPLES["zb-h1-4x8"]["value"], "num_micro_batches": 2}
    response = client.post("/v1/pipeline/simulate", json=body)
    assert response.status_code == 422 and response.json()["code"] == "invalid-spec"


def test_optimize_proves_or_bounds(client: httpx.Client) -> None:
    body = {**OPTIMIZE_EXAMPLES["zb-h1-memory-10"]["value"], "time_limit_s": 1}
    response = client.post("/v1/pipeline/optimize", json=body)
    assert response.status_code == 200
    result = response.json()
    assert result["status"] in ("optimal", "feasible")
    assert result["lower_bound"] <= result["makespan"] + 1e-9
    assert result["makespan"] <= result["baseline_makespan"] + 1e-9
    assert max(result["peak_in_flight"]) <= body["memory_limit"]


def test_optimize_time_limit_is_clamped(make_client: Callable[..., Any],
                                        sqlite_settings: Settings,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[PipelineOptimizeRequest] = []
    real = pipeline_routes.optimize_request

    def spy(request: PipelineOptimizeRequest) -> Any:
        seen.append(request)
        return real(request)

    monkeypatch.setattr(pipeline_routes, "optimize_request", spy)
    settings = sqlite_settings.model_copy(update={"max_time_limit_s": 0.4,
                                                  "default_time_limit_s": 0.2})
    body = {**OPTIMIZE_EXAMPLES["zb-h1-memory-10"]["value"]}
    with make_client(settings=settings) as client:
        assert client.post("/v1/pipeline/optimize",
                           json={**body, "time_limit_s": 600}).status_code == 200
        del body["time_limit_s"]
        assert client.post("/v1/pipeline/optimize", json=body).status_code == 200
    assert [request.time_limit_s for request in seen] == [0.4, 0.2]


def test_optimize_infeasible_memory_limit(client: httpx.Client) -> None:
    body = {**OPTIMIZE_EXAMPLES["zb-h1-memory-10"]["value"], "memory_limit": 0.2}
    response = client.post("/v1/pipeline/optimize", json=body)
    assert response.status_code == 422
    problem = response.json()
    assert problem["code"] == "no-feasible-plan"
    assert problem["diagnostics"] == {"needed_chunks": 1, "allowed_chunks": 0}
    assert problem["instance"] == "/v1/pipeline/optimize"


@pytest.mark.parametrize("name", sorted(x for x in PLACEMENT_EXAMPLES
                                         if "tokens" in PLACEMENT_EXAMPLES[x]["value"]))
def test_placement_balances_every_rank(client: httpx.Client, name: str) -> None:
    body = PLACEMENT_EXAMPLES[name]["value"]
    response = client.post("/v1/moe/placement", json=body)
    assert response.status_code == 200
    result = response.json()
    assert result["rank_loads"] == [16, 16, 16, 16]
    assert result["bound_holds"]
    assert result["num_redundant_experts"] == sum(result["lower_bound_per_rank"]) == 3
    expected = plan_placement(MoePlacementRequest.model_validate(body))
    assert result["num_redundant_experts"] == expected.num_redundant_experts
    if body.get("planner") != "exact":  # CP-SAT may pick another optimum: compare objectives
        assert result["redundant_experts"] == expected.model_dump(mode="json")[
            "redundant_experts"]


def test_placement_of_all_layers_in_one_call_equals_each_layer_alone(
        client: httpx.Client) -> None:
    body = PLACEMENT_EXAMPLES["all-layers"]["value"]
    response = client.post("/v1/moe/placement", json=body)
    assert response.status_code == 200
    result = response.json()
    assert len(result["layers"]) == len(body["layers"]) == 2
    assert result["wall_time_s"] > 0
    volatile = {"wall_time_s"}
    for layer, tokens in zip(result["layers"], body["layers"], strict=True):
        alone = {k: v for k, v in body.items() if k != "layers"} | {"tokens": tokens}
        single = client.post("/v1/moe/placement", json=alone).json()
        assert {k: v for k, v in layer.items() if k not in volatile} == \
            {k: v for k, v in single.items() if k not in volatile}
        assert layer["rank_loads"] == [16, 16, 16, 16] and layer["bound_holds"]


@pytest.mark.parametrize(("change", "message"), [
    ({"tokens": [[16, 0, 0, 0, 0, 0, 0, 0]]}, "not both"),
    ({"planner": "exact"}, "exact planner takes one layer"),
    ({"layers": [[[16, 0, 0, 0, 0, 0, 0, 0]], [[8, 8, 0, 0, 0, 0, 0, 0]] * 2]},
     "layers[1] has 2 rows"),
])
def test_placement_layers_are_checked(client: httpx.Client, change: dict[str, object],
                                      message: str) -> None:
    body = PLACEMENT_EXAMPLES["all-layers"]["value"] | change
    response = client.post("/v1/moe/placement", json=body)
    assert response.status_code == 422
    assert message in response.text


def test_placement_layers_name_the_bad_layer(client: httpx.Client) -> None:
    layers = PLACEMENT_EXAMPLES["all-layers"]["value"]["layers"]
    bad = [layers[0], [[*layers[1][0][:-1], layers[1][0][-1] + 1], *layers[1][1:]]]
    response = client.post("/v1/moe/placement", json={"num_experts": 8, "top_k": 2,
                                                       "layers": bad})
    assert response.status_code == 422
    assert "row 1 of layers[1] sums to 16 but row 0 sums to 17" in response.text


def test_placement_reports_the_expert_gemm_makespan_apart(client: httpx.Client) -> None:
    body = {"num_experts": 8, "top_k": 2, "gpu": "h100-sxm5-80gb", "hidden_size": 4096,
            "expert_ffn_hidden_size": 14336,
            "tokens": [[30, 1, 1, 0, 0, 0, 0, 0], [28, 2, 1, 1, 0, 0, 0, 0],
                       [31, 0, 0, 1, 0, 0, 0, 0], [29, 1, 1, 1, 0, 0, 0, 0]]}
    result = client.post("/v1/moe/placement", json=body).json()
    assert result["rank_load_imbalance"] == 1.0
    assert result["expert_gemm_makespan_s"] == max(result["rank_expert_gemm_s"])
    assert result["expert_gemm_imbalance"] > 1.0


@pytest.mark.parametrize(("body", "code", "field"), [
    ({"num_experts": 3, "top_k": 1, "tokens": [[1, 2, 3], [3, 2, 1]]}, "invalid-spec",
     ["body", "tokens"]),
    ({"num_experts": 2, "top_k": 1, "tokens": [[2**50, 0], [0, 2**50]]}, "invalid-request",
     ["body", "tokens"]),
    ({"num_experts": 128, "top_k": 2, "planner": "exact", "tokens": [[1] * 128] * 64},
     "invalid-request", ["body", "tokens"]),
])
def test_placement_errors(client: httpx.Client, body: dict[str, Any], code: str,
                          field: list[str]) -> None:
    response = client.post("/v1/moe/placement", json=body)
    assert response.status_code == 422
    assert response.json()["code"] == code
    assert response.json()["errors"][0]["loc"] == field


def _routing(seed: int) -> list[list[int]]:
    """A skewed [8, 32] routing (top-2 of 64 tokens per rank) whose placement shares experts."""
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(32, 0.3), size=8)
    return [rng.multinomial(128, p).tolist() for p in probs]


@pytest.mark.parametrize("listing", ["shared", "none"])
def test_placement_lists_only_the_routes_asked_for(client: httpx.Client, listing: str) -> None:
    """`routes: shared` keeps exactly the routes of experts computed off their home rank,
    `none` keeps none; everything else equals the full answer, for one layer and for all."""
    tokens = _routing(1)
    full = client.post("/v1/moe/placement",
                       json={"num_experts": 32, "top_k": 2, "tokens": tokens}).json()
    part = client.post("/v1/moe/placement", json={"num_experts": 32, "top_k": 2,
                                                  "tokens": tokens, "routes": listing}).json()
    home = [e // 4 for e in range(32)]
    shared = {x["expert"] for x in full["routes"] if x["destination"] != home[x["expert"]]}
    assert shared and full["routes_listed"] == "all" and part["routes_listed"] == listing
    expected = [x for x in full["routes"] if x["expert"] in shared] if listing == "shared" else []
    assert sorted(map(tuple, map(dict.values, part["routes"]))) == sorted(
        map(tuple, map(dict.values, expected)))
    assert len(part["routes"]) < len(full["routes"])
    volatile = {"routes", "routes_listed", "wall_time_s"}
    assert {k: v for k, v in part.items() if k not in volatile} == {
        k: v for k, v in full.items() if k not in volatile}
    layers = client.post("/v1/moe/placement", json={
        "num_experts": 32, "top_k": 2, "layers": [tokens, _routing(2)], "routes": listing,
    }).json()["layers"]
    assert layers[0]["routes"] == part["routes"]
    assert all(x["routes_listed"] == listing for x in layers)


def test_placement_picture_needs_every_route(client: httpx.Client) -> None:
    response = client.post("/v1/moe/placement?format=svg", json={
        "num_experts": 32, "top_k": 2, "tokens": _routing(1), "routes": "shared"})
    assert response.status_code == 422
    assert response.json()["code"] == "invalid-spec"
    assert "every route" in response.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/moe/placement", "/v1/moe/placement.svg"])
def test_placement_body_is_parsed_off_the_event_loop(client: httpx.Client,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     path: str) -> None:
    """A placement body (up to megabytes of counts) is parsed and validated on a worker
    thread, never on the event loop, and its faults are still answered 422 naming the
    field."""
    where: list[str] = []
    parse = moe_routes.parse_body

    def spy(model: Any, body: bytes) -> Any:
        try:
            asyncio.get_running_loop()
            where.append("event loop")
        except RuntimeError:
            where.append("worker thread")
        return parse(model, body)

    monkeypatch.setattr(moe_routes, "parse_body", spy)
    body = PLACEMENT_EXAMPLES["4-ranks-8-experts"]["value"]
    assert client.post(path, json=body).status_code == 200
    wrong = client.post(path, json={**body, "top_k": "two"})
    assert wrong.status_code == 422 and wrong.json()["code"] == "invalid-request"
    assert wrong.json()["errors"][0]["loc"] == ["body", "top_k"]
    broken = client.post(path, content=b'{"num_experts": 8,',
                         headers={"content-type": "application/json"})
    assert broken.status_code == 422 and broken.json()["code"] == "invalid-request"
    assert where == ["worker thread"] * 3


@pytest.mark.parametrize("path", ["/v1/moe/placement", "/v1/moe/placement.svg"])
def test_a_layer_without_rows_is_refused(client: httpx.Client, path: str) -> None:
    """Found by schema fuzzing: `layers: [[]]` passed validation and failed the bounds
    check with a 500 (the largest count of no counts)."""
    answer = client.post(path, json={"num_experts": 8, "top_k": 2, "layers": [[]]})
    assert answer.status_code == 422 and answer.json()["code"] == "invalid-request"
    assert answer.json()["errors"][0]["loc"] == ["body", "layers", 0]
