"""POST /v1/plans, GET /v1/plans/{id}, GET /v1/plans: storage, answers from the store,
in-flight de-duplication, time-limit clamping and bounds."""

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from service_testkit import ScriptedPlanner, plan_body, serve_in_process

from api_schemas.plan import PlanResponse
from api_schemas.requests import PlanRequest
from service.app import create_app
from service.planning import normalise_plan_request, request_hash
from service.settings import Settings


def test_create_read_and_answer_again_from_the_store(client: httpx.Client,
                                                     planner: ScriptedPlanner) -> None:
    created = client.post("/v1/plans", json=plan_body())
    assert created.status_code == 201
    plan = PlanResponse.model_validate(created.json())
    assert plan.id is not None and plan.created_at is not None
    assert created.headers["location"] == f"/v1/plans/{plan.id}"
    assert client.get(created.headers["location"]).json() == created.json()
    again = client.post("/v1/plans", json=plan_body(parallel={"tp": 2}))
    assert again.status_code == 200
    assert again.json() == created.json()
    assert len(planner.calls) == 1
    assert planner.calls[0].parallel is None


def test_different_limits_are_different_requests(client: httpx.Client,
                                                 planner: ScriptedPlanner) -> None:
    first = client.post("/v1/plans", json=plan_body(solver={"time_limit_s": 5}))
    second = client.post("/v1/plans", json=plan_body(solver={"time_limit_s": 6}))
    assert first.json()["id"] != second.json()["id"]
    assert len(planner.calls) == 2


def test_time_limit_defaults_and_caps(make_client: Callable[..., Any],
                                      sqlite_settings: Settings) -> None:
    settings = sqlite_settings.model_copy(update={"default_time_limit_s": 3.0,
                                                  "max_time_limit_s": 7.0,
                                                  "max_search_workers": 2})
    planner = ScriptedPlanner()
    with make_client(settings=settings, planner=planner) as client:
        body = plan_body()
        del body["solver"]
        assert client.post("/v1/plans", json=body).status_code == 201
        capped = plan_body(solver={"time_limit_s": 600, "num_workers": 32})
        assert client.post("/v1/plans", json=capped).status_code == 201
        assert client.post("/v1/plans", json=plan_body(solver={"time_limit_s": 7})
                           ).status_code == 200
    assert [c.solver.time_limit_s for c in planner.calls] == [3.0, 7.0]
    assert planner.calls[1].solver.num_workers == 2


def test_identical_concurrent_requests_are_solved_once(sqlite_settings: Settings) -> None:
    gate = threading.Event()
    planner = ScriptedPlanner(gate=gate)
    app = create_app(sqlite_settings, planner=planner)
    key = request_hash(normalise_plan_request(PlanRequest.model_validate(plan_body()),
                                              sqlite_settings))
    with serve_in_process(app) as client:
        responses: list[httpx.Response] = []
        threads = [threading.Thread(target=lambda: responses.append(
            client.post("/v1/plans", json=plan_body()))) for _ in range(4)]
        for thread in threads:
            thread.start()
        assert planner.started.wait(timeout=60)
        # Held until all four wait for the one search in flight, however slow the host.
        pool = app.state.context.pool
        for _ in range(6000):  # a hang guard of about a minute, not a speed check
            if pool.waiting(key) >= 4:
                break
            time.sleep(0.01)
        assert pool.waiting(key) >= 4, f"{pool.waiting(key)} of 4 joined the search"
        gate.set()
        for thread in threads:
            thread.join(timeout=60)
    assert len(planner.calls) == 1
    assert len({r.json()["id"] for r in responses}) == 1
    assert [r.status_code for r in responses] == [201] * 4


def test_listing_filters_and_pages(client: httpx.Client) -> None:
    for tp in (1, 2, 4):
        assert client.post("/v1/plans", json=plan_body(constraints={"tp": tp})).status_code == 201
    mi300 = plan_body(cluster={"gpu": "mi300x", "num_nodes": 2, "gpus_per_node": 8})
    assert client.post("/v1/plans", json=mi300).status_code == 201
    everything = client.get("/v1/plans").json()
    assert everything["total"] == 4 and everything["next_offset"] is None
    first = client.get("/v1/plans", params={"limit": 3}).json()
    assert len(first["items"]) == 3 and first["next_offset"] == 3
    rest = client.get("/v1/plans", params={"limit": 3, "offset": 3}).json()
    assert len(rest["items"]) == 1 and rest["next_offset"] is None
    ids = [item["id"] for item in first["items"] + rest["items"]]
    assert ids == [item["id"] for item in everything["items"]]
    on_amd = client.get("/v1/plans", params={"gpu": "mi300x"}).json()
    assert [item["gpu"] for item in on_amd["items"]] == ["mi300x"]
    by_model = client.get("/v1/plans", params={"model": "llama-3.1-70b", "status": "optimal"})
    assert by_model.json()["total"] == 4
    assert client.get("/v1/plans", params={"status": "infeasible"}).json()["total"] == 0
    summary = everything["items"][-1]
    assert summary["parallel"]["tp"] == 1 and summary["summary"].startswith("tp=1")


@pytest.mark.parametrize(("params", "field"), [
    ({"limit": 0}, "limit"), ({"limit": 1000}, "limit"), ({"offset": -1}, "offset"),
    ({"status": "great"}, "status")])
def test_listing_rejects_bad_queries(client: httpx.Client, params: dict[str, Any],
                                     field: str) -> None:
    response = client.get("/v1/plans", params=params)
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["query", field]


@pytest.mark.parametrize(("change", "field", "setting"), [
    ({"cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 100_000}}, ["cluster", "num_nodes"],
     "ATLAS_MAX_WORLD_SIZE"),
    ({"training": {"global_batch_size": 512, "sequence_length": 2**23}},
     ["training", "sequence_length"], "ATLAS_MAX_SEQUENCE_LENGTH"),
    ({"model": {"hf_config": {"model_type": "llama", "num_hidden_layers": 5000}}},
     ["model", "hf_config", "num_hidden_layers"], "ATLAS_MAX_LAYERS"),
])
def test_plan_bounds_name_field_and_setting(client: httpx.Client, planner: ScriptedPlanner,
                                            change: dict[str, Any], field: list[str],
                                            setting: str) -> None:
    response = client.post("/v1/plans", json=plan_body(**change))
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "invalid-request"
    assert body["errors"][0]["loc"] == ["body", *field]
    assert setting in body["detail"]
    assert planner.calls == []


def test_plan_request_validation(client: httpx.Client) -> None:
    response = client.post("/v1/plans", json=plan_body(objective="cost_per_token"))
    assert response.status_code == 422
    assert "gpu_hour_price" in response.json()["detail"]
