"""POST /v1/plans and POST /v1/evaluate with the library's real planner and evaluator."""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from service_testkit import serve_in_process
from small_plan import small_plan

from api_schemas.plan import PlanResponse
from service.app import create_app
from service.settings import Settings

SMALL = small_plan(time_limit_s=60, top_k=2)
"""Proved optimal in well under a second on an idle host; the time limit is generous so that
a loaded host does not end the search before any plan (a 503) or before its runners-up."""
TOO_BIG = {**SMALL, "model": {"preset": "llama-3.1-405b"},
           "training": {"global_batch_size": 64, "sequence_length": 8192}}
EVALUATE = {"model": {"preset": "llama-3.1-70b"},
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
            "training": {"global_batch_size": 512, "sequence_length": 8192},
            "parallel": {"tp": 8, "pp": 4, "dp": 2, "schedule": "1f1b", "zero_stage": 1,
                         "sequence_parallel": True, "recompute": "selective"}}


@pytest.fixture
def real(sqlite_settings: Settings) -> Iterator[httpx.Client]:
    with serve_in_process(create_app(sqlite_settings)) as client:
        yield client


def test_a_real_plan_is_stored_and_read_back(real: httpx.Client) -> None:
    created = real.post("/v1/plans", json=SMALL)
    assert created.status_code == 201, created.text
    plan = PlanResponse.model_validate(created.json())
    assert plan.status in ("optimal", "feasible")
    assert plan.parallel is not None and plan.world_size == 8
    assert plan.memory is not None and plan.memory.fits
    assert plan.throughput is not None and 0 < plan.throughput.mfu < 1
    # The plan and each runner-up carry a range backed by held-out published H100 rows.
    band = plan.predicted_range
    assert band is not None and band.basis == "published" and band.num_rows >= 5
    assert plan.time is not None and band.step_time_s_low is not None
    assert band.step_time_s_high is not None and band.mfu_low is not None
    assert band.step_time_s_low < plan.time.step_time_s < band.step_time_s_high
    assert band.regime.startswith("hopper dense") and band.sources and band.row_ids
    assert sum(source.rows for source in band.sources) == band.num_rows
    fitting = [alt for alt in plan.alternatives if alt.step_time_s is not None]
    assert fitting and all(alt.predicted_range is not None
                           and alt.predicted_range.step_time_s_low is not None
                           for alt in fitting)
    assert real.get(created.headers["location"]).json() == created.json()
    again = real.post("/v1/plans", json=SMALL)
    assert again.status_code == 200 and again.json()["id"] == plan.id
    listed = real.get("/v1/plans", params={"model": "llama-3.1-8b"}).json()
    assert [item["id"] for item in listed["items"]] == [plan.id]


def _generous_relaxation_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give every relaxation search 20 s (still never past the request's deadline)."""
    from solver import relax

    monkeypatch.setattr(relax, "NODE_SEARCH_TIME_LIMIT_S", 20.0)
    monkeypatch.setattr(relax._Clock.budget, "__defaults__", (20.0,))


def test_a_real_infeasible_plan(real: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # Relaxations are searched until the request's deadline, each for a bounded time; both
    # are generous here so that what is checked does not depend on the machine's speed.
    _generous_relaxation_budgets(monkeypatch)
    response = real.post("/v1/plans", json=TOO_BIG)
    assert response.status_code == 422
    problem: dict[str, Any] = response.json()
    assert problem["code"] == "no-feasible-plan"
    assert problem["explanation"]["relaxations"], problem
    stored = real.get(f"/v1/plans/{problem['instance']}").json()
    assert stored["status"] == "infeasible"
    assert stored["explanation"] == problem["explanation"]
    assert real.get("/v1/plans", params={"status": "infeasible"}).json()["total"] == 1


def test_evaluate_scores_a_configuration(real: httpx.Client) -> None:
    response = real.post("/v1/evaluate", json=EVALUATE)
    assert response.status_code == 200
    result = PlanResponse.model_validate(response.json())
    assert result.status == "feasible" and result.memory is not None and result.memory.fits
    assert result.time is not None and result.time.step_time_s > 0
    assert result.bottleneck
    band = result.predicted_range
    assert band is not None and band.regime == "hopper dense, 9 to 256 GPUs"
    assert band.tokens_per_s_low is not None and band.tokens_per_s_high is not None
    assert result.throughput is not None
    assert band.tokens_per_s_low < result.throughput.tokens_per_s < band.tokens_per_s_high
    mi355x = {**EVALUATE, "cluster": {**EVALUATE["cluster"], "gpu": "mi355x"}}
    unbacked = real.post("/v1/evaluate", json=mi355x).json()["predicted_range"]
    assert unbacked["basis"] == "none" and unbacked["step_time_s_low"] is None
    assert "no published rows back this GPU" in unbacked["text"]
    mi300x = {**EVALUATE, "cluster": {**EVALUATE["cluster"], "gpu": "mi300x"}}
    carried = real.post("/v1/evaluate", json=mi300x).json()["predicted_range"]
    assert carried["basis"] == "transferred" and carried["step_time_s_low"] is not None
    ledger = real.post("/v1/ledger/memory", json=EVALUATE).json()
    assert ledger["peak_bytes"] == result.memory.peak_bytes


def test_evaluate_names_a_broken_mesh_rule(real: httpx.Client) -> None:
    body = {**EVALUATE, "parallel": {**EVALUATE["parallel"], "dp": 3}}
    response = real.post("/v1/evaluate", json=body)
    assert response.status_code == 422
    assert response.json()["code"] == "invalid-spec"
    assert response.json()["errors"][0]["loc"] == ["body", "parallel", "dp"]


REMOTE = {"model": {"preset": "llama-3.1-70b"},
          "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
          "training": {"global_batch_size": 64, "sequence_length": 16384},
          "constraints": {"tp": 8, "pp": 8, "vpp": 2, "schedule": "interleaved_1f1b",
                          "allow_offload": False, "framework": "any",
                          "allow_remote_offload": True},
          "solver": {"time_limit_s": 60, "top_k": 1, "num_workers": 1}}
"""Stage 0 of interleaved 1F1B is over the capacity at 16K tokens; remote offload to the
last stage beats recomputing a layer there."""


def test_a_plan_that_leans_on_remote_offload_says_so_over_http(real: httpx.Client) -> None:
    created = real.post("/v1/plans", json=REMOTE)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["parallel"]["remote_activation_offload"] is True
    assert body["time"]["overheads_s"]["remote activation offload"] > 0
    notes = body["explanation"]["notes"]
    assert any(n.startswith("remote activation offload chosen by the search") for n in notes)
    refused = real.post("/v1/plans", json={**REMOTE, "constraints": {
        **REMOTE["constraints"], "allow_remote_offload": False}})
    assert refused.status_code == 201, refused.text
    assert refused.json()["parallel"]["remote_activation_offload"] is False
