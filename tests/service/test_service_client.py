"""The Python client: typed answers per endpoint and `ApiProblemError` for every error."""

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from service_testkit import ScriptedPlanner, plan_body

from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE, PlanRequest
from service.client import ApiProblemError, AtlasClient
from service.routes.catalog import FROM_HF_EXAMPLE
from service.routes.collectives import COLLECTIVE_EXAMPLES
from service.routes.mesh import MESH_EXAMPLES
from service.routes.moe import PLACEMENT_EXAMPLES
from service.routes.pipeline import OPTIMIZE_EXAMPLES, SIMULATE_EXAMPLES
from service.settings import Settings


@pytest.fixture
def atlas(client: httpx.Client) -> AtlasClient:
    return AtlasClient(http=client)


def test_plans_round_trip(atlas: AtlasClient) -> None:
    plan = atlas.plan(PlanRequest.model_validate(plan_body()))
    assert plan.id is not None
    assert atlas.get_plan(plan.id) == plan
    assert atlas.plan(plan_body()) == plan
    listing = atlas.list_plans(model="llama-3.1-70b", status="optimal")
    assert [item.id for item in listing.items] == [plan.id]


def test_every_read_endpoint(atlas: AtlasClient) -> None:
    assert atlas.health().status == "ok"
    assert atlas.catalog_gpus().gpus
    assert any(entry.id == "deepseek-v3" for entry in atlas.catalog_models().models)
    hf = atlas.model_from_hf(FROM_HF_EXAMPLE["config"], name="llama-3.1-8b")
    assert hf.spec.name == "llama-3.1-8b"
    assert len(atlas.memory(EVALUATE_REQUEST_EXAMPLE).stages) == 16
    evaluation = atlas.evaluate(EVALUATE_REQUEST_EXAMPLE)
    assert evaluation.memory is not None and evaluation.time is not None
    collective = atlas.estimate_collective(COLLECTIVE_EXAMPLES["explicit-links"]["value"])
    assert collective.num_ranks == 32
    assert atlas.mesh(MESH_EXAMPLES["moe-32-gpus"]["value"]).world_size == 32
    simulated = atlas.simulate_pipeline(SIMULATE_EXAMPLES["zb-h1-4x8"]["value"])
    assert simulated.makespan == pytest.approx(27.0)
    optimized = atlas.optimize_pipeline({**OPTIMIZE_EXAMPLES["zb-h1-memory-10"]["value"],
                                         "time_limit_s": 0.5})
    assert optimized.lower_bound <= optimized.makespan + 1e-9
    placed = atlas.moe_placement(PLACEMENT_EXAMPLES["4-ranks-8-experts"]["value"])
    assert placed.rank_loads == [16, 16, 16, 16]
    layers = atlas.moe_placement_layers(PLACEMENT_EXAMPLES["all-layers"]["value"])
    assert layers.layers[0].redundant_experts == placed.redundant_experts
    assert len(layers.layers) == 2


def test_problems_become_typed_errors(atlas: AtlasClient) -> None:
    with pytest.raises(ApiProblemError) as raised:
        atlas.get_plan("f" * 32)
    assert raised.value.code == "plan-not-found" and raised.value.status == 404
    with pytest.raises(ApiProblemError) as raised:
        atlas.memory({**EVALUATE_REQUEST_EXAMPLE, "parallel": {"tp": -1}})
    assert raised.value.problem.errors is not None
    assert raised.value.problem.errors[0].loc == ["body", "parallel", "tp"]


def test_infeasible_plan_error_points_at_the_stored_plan(make_client: Callable[..., Any]) -> None:
    with make_client(planner=ScriptedPlanner(infeasible=True)) as http:
        atlas = AtlasClient(http=http)
        with pytest.raises(ApiProblemError) as raised:
            atlas.plan(plan_body())
        assert raised.value.code == "no-feasible-plan"
        stored = atlas.get_plan(str(raised.value.problem.instance))
        assert stored.status == "infeasible"


def test_overloaded_carries_retry_after(make_client: Callable[..., Any],
                                        sqlite_settings: Settings) -> None:
    gate = threading.Event()
    held = ScriptedPlanner(gate=gate)
    settings = sqlite_settings.model_copy(update={"solver_threads": 1, "solver_queue": 0,
                                                  "retry_after_s": 7})
    with make_client(settings=settings, planner=held) as http:
        atlas = AtlasClient(http=http)
        worker = threading.Thread(target=lambda: atlas.plan(plan_body()))
        worker.start()
        assert held.started.wait(timeout=60)
        with pytest.raises(ApiProblemError) as raised:
            atlas.plan(plan_body(constraints={"tp": 2}))
        gate.set()
        worker.join(timeout=60)
    assert raised.value.code == "overloaded" and raised.value.retry_after_s == 7


def test_foreign_error_bodies_are_still_typed() -> None:
    def gateway(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>bad gateway</html>",
                              headers={"content-type": "text/html"})

    http = httpx.Client(transport=httpx.MockTransport(gateway), base_url="http://proxy")
    with pytest.raises(ApiProblemError) as raised:
        AtlasClient(http=http).health()
    assert raised.value.status == 502 and raised.value.code == "internal"
    assert "bad gateway" in raised.value.problem.detail
