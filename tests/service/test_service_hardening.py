"""Requests refused early and by schema: unreachable throughput targets (with the bound),
empty allowed-value lists, time limits under the minimum, non-finite or absurd physical
values; and the CORS policy of ATLAS_CORS_ORIGINS with a browser preflight."""

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from service_testkit import ScriptedPlanner, plan_body

from api_schemas._base import first_non_finite, reject_non_finite
from api_schemas.requests import ClusterInput, ModelPreset
from models.catalog.resolve import resolve_cluster, resolve_model
from models.errors import InvalidSpecError
from service import limits
from service.persistence.storable import first_unstorable
from service.settings import Settings
from solver.throughput_bound import peak_tokens_per_s


def _raw_post(client: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST with Python's JSON writer, which sends Infinity and NaN as bare tokens."""
    return client.post(path, content=json.dumps(body),
                       headers={"Content-Type": "application/json"})


def _locs(response: httpx.Response) -> list[list[Any]]:
    return [error["loc"] for error in response.json()["errors"]]


def test_an_unreachable_target_is_refused_at_once_with_its_bound(
        client: httpx.Client, planner: ScriptedPlanner) -> None:
    cluster = {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8}
    spec = resolve_model(ModelPreset(preset="llama-3.1-70b")).spec
    bound = peak_tokens_per_s(spec, resolve_cluster(ClusterInput.model_validate(cluster)),
                              sequence_length=8192, gpus=64)
    body = plan_body(objective="min_gpus", constraints={"target_tokens_per_s": bound * 1.01})
    response = client.post("/v1/plans", json=body)
    assert response.status_code == 422 and response.json()["code"] == "invalid-request"
    assert _locs(response) == [["body", "constraints", "target_tokens_per_s"]]
    assert f"{bound:.6g}" in response.json()["detail"]
    assert planner.calls == []
    within = plan_body(objective="min_gpus", constraints={"target_tokens_per_s": bound * 0.5})
    assert client.post("/v1/plans", json=within).status_code == 201


@pytest.mark.parametrize(("path", "body", "loc"), [
    ("/v1/plans", plan_body(constraints={"tp": []}), ["body", "constraints", "tp"]),
    ("/v1/plans", plan_body(constraints={"schedule": []}),
     ["body", "constraints", "schedule"]),
    ("/v1/plans", plan_body(solver={"time_limit_s": 0}), ["body", "solver", "time_limit_s"]),
    ("/v1/plans", plan_body(solver={"time_limit_s": 0.01}),
     ["body", "solver", "time_limit_s"]),
    ("/v1/plans", plan_body(constraints={"target_tokens_per_s": float("inf")}),
     ["body", "constraints", "target_tokens_per_s"]),
    ("/v1/plans", plan_body(model={"hf_config": {"rope_theta": float("inf")}}),
     ["body", "model", "ModelFromHf", "hf_config"]),
    ("/v1/plans", plan_body(cluster={"gpu": "h100-sxm5-80gb", "num_nodes": 1,
                                     "peak_flop_per_s": {"bf16": 1e308}}),
     ["body", "cluster", "peak_flop_per_s", "bf16"]),
    ("/v1/pipeline/optimize", {"schedule": "1f1b", "num_stages": 2, "num_micro_batches": 4,
                               "memory_limit": 2, "time_limit_s": 0}, ["body", "time_limit_s"]),
    ("/v1/pipeline/simulate", {"schedule": "1f1b", "num_stages": 2, "num_micro_batches": 4,
                               "durations": {"F": 1e-320}}, ["body", "durations", "F"]),
    ("/v1/pipeline/simulate", {"schedule": "1f1b", "num_stages": 2, "num_micro_batches": 4,
                               "durations": {"F": float("nan")}}, ["body", "durations", "F"]),
    ("/v1/collectives/estimate", {"collective": "all_reduce", "num_ranks": 8,
                                  "message_bytes": 2**20, "bandwidth_bytes_per_s": 1e300,
                                  "latency_s": 1e-5}, ["body", "bandwidth_bytes_per_s"]),
])
def test_impossible_or_unphysical_values_are_refused_naming_the_field(
        client: httpx.Client, planner: ScriptedPlanner, path: str, body: dict[str, Any],
        loc: list[Any]) -> None:
    response = _raw_post(client, path, body)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid-request"
    assert any(found[:len(loc)] == loc for found in _locs(response)), _locs(response)
    assert planner.calls == []


PREFLIGHT = {"Origin": "https://tools.example", "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "content-type"}


def test_cross_origin_calls_are_refused_by_default(client: httpx.Client) -> None:
    preflight = client.options("/v1/evaluate", headers=PREFLIGHT)
    assert preflight.status_code == 405
    assert "access-control-allow-origin" not in preflight.headers
    plain = client.get("/healthz", headers={"Origin": "https://tools.example"})
    assert "access-control-allow-origin" not in plain.headers


def test_origins_in_the_setting_may_call_from_a_browser(
        make_client: Callable[..., Any], sqlite_settings: Settings) -> None:
    settings = sqlite_settings.model_copy(
        update={"cors_origins": "https://tools.example, https://other.example"})
    with make_client(settings=settings, planner=ScriptedPlanner()) as client:
        preflight = client.options("/v1/evaluate", headers=PREFLIGHT)
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://tools.example"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        created = client.post("/v1/plans", json=plan_body(),
                              headers={"Origin": "https://tools.example"})
        assert created.headers["access-control-allow-origin"] == "https://tools.example"
        assert "Location" in created.headers["access-control-expose-headers"]
        stranger = client.options("/v1/evaluate",
                                  headers={**PREFLIGHT, "Origin": "https://evil.example"})
        assert stranger.status_code == 400
        assert "access-control-allow-origin" not in stranger.headers


def test_a_timeline_over_its_bound_is_refused_and_the_summary_still_served(
        client: httpx.Client) -> None:
    body = {"schedule": "interleaved_1f1b", "num_stages": 32, "num_micro_batches": 128,
            "num_chunks": 2}
    refused = client.post("/v1/pipeline/simulate", json=body)
    assert refused.status_code == 422
    assert _locs(refused) == [["body", "include_timeline"]]
    assert "ATLAS_MAX_TIMELINE_OPS" in refused.json()["detail"]
    summary = client.post("/v1/pipeline/simulate", json={**body, "include_timeline": False})
    assert summary.status_code == 200 and summary.json()["timeline"] == []


class _Figures(BaseModel):
    step_times_s: list[float]
    per_stage: dict[str, list[float]]


def test_every_non_finite_number_is_named_by_one_path_format() -> None:
    """Request values, answers and stored values name a number inside a list the same
    way: dotted, the index as a number."""
    with pytest.raises(ValueError, match=r"tp\.1 is nan: numbers must be finite"):
        reject_non_finite({"tp": [1, float("nan")]})
    figures = _Figures(step_times_s=[1.0], per_stage={"0": [2.0, float("inf")]})
    with pytest.raises(InvalidSpecError, match=r"\(result\.per_stage\.0\.1 is inf\)"):
        limits.require_finite(figures)
    assert first_unstorable({"forbid": {"tp": [1.0, float("-inf")]}}, "constraints") == (
        "constraints.forbid.tp.1", "is -inf, but stored numbers must be finite; give a "
        "finite value")
    found = first_non_finite([[0.0], {"a": (1.0, float("inf"))}])
    assert found == ("1.a.1", float("inf"))


def test_a_nan_in_forbid_is_refused_naming_its_place(client: httpx.Client) -> None:
    body = plan_body(constraints={"forbid": {"pp": [2, float("nan")]}})
    response = _raw_post(client, "/v1/plans", body)
    assert response.status_code == 422, response.text
    assert "pp.1 is nan" in response.text
