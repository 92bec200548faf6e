"""POST /v1/run/estimate, /v1/frontier and /v1/sensitivity over HTTP: with the real
planner (the library's answer, served), and with the scripted one (problems, bounds)."""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from service_testkit import LLAMA_70B_RUN, ScriptedPlanner, serve_in_process

from api_schemas.run_level import (
    FrontierRequest,
    FrontierResponse,
    RunEstimateRequest,
    RunEstimateResponse,
    SensitivityResponse,
)
from service.app import create_app
from service.routes.run_level import (
    FRONTIER_EXAMPLES,
    RUN_ESTIMATE_EXAMPLES,
    SENSITIVITY_EXAMPLES,
)
from service.settings import Settings
from solver.run_level import estimate_run, frontier


def _example(examples: dict[str, dict[str, Any]]) -> dict[str, Any]:
    # The searches prove their answers in well under a second on an idle host; the limit
    # (split between a request's searches) is generous so that a loaded host does not cut
    # one short, which would make the served answer differ from the local one.
    value: dict[str, Any] = next(iter(examples.values()))["value"]
    return {**value, "solver": {"time_limit_s": 60, "num_workers": 1}}


@pytest.fixture
def real(sqlite_settings: Settings) -> Iterator[httpx.Client]:
    with serve_in_process(create_app(sqlite_settings)) as http:
        yield http


def test_run_estimate_is_the_library_answer(real: httpx.Client) -> None:
    body = _example(RUN_ESTIMATE_EXAMPLES)
    response = real.post("/v1/run/estimate", json=body)
    assert response.status_code == 200
    served = RunEstimateResponse.model_validate(response.json())
    local = estimate_run(RunEstimateRequest.model_validate(body))
    assert served.num_steps == local.num_steps and served.cost is not None
    assert served.step_time_s == local.step_time_s
    band = served.plan.predicted_range
    assert band is not None and band.step_time_s_low is not None
    assert served.train_days_low is not None and served.train_days_high is not None
    assert served.train_days_low < served.train_days < served.train_days_high
    assert served.train_days_low == pytest.approx(
        served.num_steps * band.step_time_s_low / 86400.0)
    assert served.cost_low is not None and served.cost_high is not None


def test_frontier_is_the_library_answer(real: httpx.Client) -> None:
    body = {**_example(FRONTIER_EXAMPLES), "num_nodes_options": [1, 2]}
    response = real.post("/v1/frontier", json=body)
    assert response.status_code == 200
    served = FrontierResponse.model_validate(response.json())
    local = frontier(FrontierRequest.model_validate(body))
    assert [p.num_gpus for p in served.points] == [8, 16]
    assert served.pareto_num_gpus == local.pareto_num_gpus
    # Each point's range is its plan's: the 8-GPU and the 16-GPU regimes differ.
    regimes = [p.predicted_range.regime for p in served.points
               if p.predicted_range is not None and p.step_time_s is not None]
    assert regimes and all(r.endswith(("up to 8 GPUs", "9 to 256 GPUs")) for r in regimes)


def test_sensitivity_runs_with_the_service_planner(client: httpx.Client) -> None:
    body = {**_example(SENSITIVITY_EXAMPLES), "factors": ["network_bandwidth"]}
    response = client.post("/v1/sensitivity", json=body)
    assert response.status_code == 200
    result = SensitivityResponse.model_validate(response.json())
    assert [p.delta for p in result.points] == [-0.2, 0.2]


def test_run_estimate_without_a_plan_is_a_problem(sqlite_settings: Settings) -> None:
    app = create_app(sqlite_settings, planner=ScriptedPlanner(infeasible=True))
    with serve_in_process(app) as http:
        response = http.post("/v1/run/estimate", json=_example(RUN_ESTIMATE_EXAMPLES))
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "no-feasible-plan"


def test_infeasible_frontier_points_are_answers(sqlite_settings: Settings) -> None:
    app = create_app(sqlite_settings, planner=ScriptedPlanner(infeasible=True))
    with serve_in_process(app) as http:
        response = http.post("/v1/frontier", json=_example(FRONTIER_EXAMPLES))
    assert response.status_code == 200
    result = FrontierResponse.model_validate(response.json())
    assert {p.status for p in result.points} == {"infeasible"}
    assert result.pareto_num_gpus == []


def test_frontier_sizes_are_bounded(client: httpx.Client) -> None:
    body = {**_example(FRONTIER_EXAMPLES), "num_nodes_options": [10**7]}
    response = client.post("/v1/frontier", json=body)
    assert response.status_code == 422
    too_many = {**_example(FRONTIER_EXAMPLES), "num_nodes_options": list(range(1, 40))}
    assert client.post("/v1/frontier", json=too_many).json()["code"] == "invalid-request"


def test_run_estimate_draws_goodput_against_the_checkpoint_interval(
        real: httpx.Client) -> None:
    # The evaluated configuration (Llama 3.1 70B on 1,024 H100s), no search.
    answer = RunEstimateResponse.model_validate(
        real.post("/v1/run/estimate", json=LLAMA_70B_RUN).json())
    reliability = answer.reliability
    curve = reliability.goodput_by_interval
    assert len(curve) == 41
    # Daly's optimum is the curve's best point (within the grid's spacing).
    best = max(curve, key=lambda p: p.goodput)
    assert best.interval_s == pytest.approx(reliability.daly_interval_s, rel=0.13)
    assert best.goodput == pytest.approx(reliability.goodput, rel=1e-3)
    assert curve[0].goodput < best.goodput and curve[-1].goodput < best.goodput
    picture = real.post("/v1/run/estimate?format=svg", json=LLAMA_70B_RUN)
    assert picture.status_code == 200
    assert picture.headers["content-type"].startswith("image/svg+xml")
    svg = picture.text
    assert svg.count('class="point"') == 41
    assert 'data-mark="daly"' in svg and 'data-mark="young"' in svg
    assert "deterministic model, not a measurement" in svg


@pytest.mark.parametrize("path", ["/v1/run/estimate", "/v1/run/estimate.svg"])
def test_a_checkpoint_interval_of_zero_is_refused(client: httpx.Client, path: str) -> None:
    """Found by schema fuzzing: an interval of 0 s between saves (with failures) passed
    validation and answered 500 from Daly's wall-time formula, which divides by it."""
    body = {**_example(RUN_ESTIMATE_EXAMPLES),
            "reliability": {"failures_per_gpu_hour": 2e-5, "checkpoint_interval_s": 0.0}}
    answer = client.post(path, json=body)
    assert answer.status_code == 422 and answer.json()["code"] == "invalid-request"
    assert answer.json()["errors"][0]["loc"] == ["body", "reliability", "checkpoint_interval_s"]
