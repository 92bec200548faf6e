"""Every problem code: status, media type and members of the problem+json body."""

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from service_testkit import ScriptedPlanner, plan_body

import service.routes.estimates as estimates_routes
from api_schemas.problems import ProblemDetail
from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE
from service.problems import PROBLEM_STATUS, PROBLEM_TITLES
from service.settings import Settings

PROBLEM_JSON = "application/problem+json"


def check_problem(response: httpx.Response, code: str, *,
                  status: int | None = None) -> dict[str, Any]:
    """Assert the RFC 9457 shape of a problem response and return its body."""
    expected = status if status is not None else PROBLEM_STATUS[code]  # type: ignore[index]
    assert response.status_code == expected, response.text
    assert response.headers["content-type"] == PROBLEM_JSON
    body: dict[str, Any] = response.json()
    ProblemDetail.model_validate(body)
    assert body["code"] == code
    assert body["type"] == f"/problems/{code}"
    assert body["title"] == PROBLEM_TITLES[code]  # type: ignore[index]
    assert body["status"] == expected
    assert body["detail"]
    assert "Traceback" not in response.text
    return body


def test_invalid_request_lists_field_paths(client: httpx.Client) -> None:
    bad = {**EVALUATE_REQUEST_EXAMPLE,
           "parallel": {**EVALUATE_REQUEST_EXAMPLE["parallel"], "tp": 0}}
    body = check_problem(client.post("/v1/ledger/memory", json=bad), "invalid-request")
    assert body["errors"][0]["loc"] == ["body", "parallel", "tp"]
    assert "got 0" in body["errors"][0]["msg"]
    assert "body.parallel.tp" in body["detail"]
    assert body["instance"] == "/v1/ledger/memory"


def test_invalid_request_for_malformed_json(client: httpx.Client) -> None:
    response = client.post("/v1/ledger/memory", content=b"{not json",
                           headers={"content-type": "application/json"})
    body = check_problem(response, "invalid-request")
    assert body["errors"][0]["type"] == "json_invalid"


def test_invalid_spec_names_the_value_and_the_fix(client: httpx.Client) -> None:
    bad = {**EVALUATE_REQUEST_EXAMPLE, "model": {"preset": "gpt-5"}}
    body = check_problem(client.post("/v1/ledger/memory", json=bad), "invalid-spec")
    assert "gpt-5" in body["detail"] and "llama-3.1-405b" in body["detail"]
    assert body["errors"][0]["loc"] == ["body", "model", "preset"]


def test_an_attention_kernel_unmeasured_on_the_gpu_is_an_invalid_spec(
        client: httpx.Client) -> None:
    """`training.attention_kernel` names a 2022 kernel measured on A100 and H100 only: on a
    B200 the evaluation answers 422 naming the field, on an H100 it scores the plan."""
    training = {**EVALUATE_REQUEST_EXAMPLE["training"],
                "attention_kernel": "triton_flash_attention"}
    b200 = {**EVALUATE_REQUEST_EXAMPLE, "training": training,
            "cluster": {**EVALUATE_REQUEST_EXAMPLE["cluster"], "gpu": "b200-sxm-180gb"}}
    body = check_problem(client.post("/v1/evaluate", json=b200), "invalid-spec")
    assert "triton_flash_attention" in body["detail"] and "blackwell" in body["detail"]
    assert body["errors"][0]["loc"] == ["body", "training", "attention_kernel"]
    h100 = {**EVALUATE_REQUEST_EXAMPLE, "training": training}
    assert client.post("/v1/evaluate", json=h100).status_code == 200


def test_no_feasible_plan_is_stored_and_points_at_it(
        make_client: Callable[..., Any]) -> None:
    with make_client(planner=ScriptedPlanner(infeasible=True)) as client:
        response = client.post("/v1/plans", json=plan_body())
        body = check_problem(response, "no-feasible-plan")
        plan_id = body["instance"]
        assert body["plan_id"] == plan_id
        assert response.headers["location"] == f"/v1/plans/{plan_id}"
        assert body["diagnostics"]["binding"] == "memory"
        assert "95.1 GiB" in body["explanation"]["summary"]
        stored = client.get(f"/v1/plans/{plan_id}")
        assert stored.status_code == 200
        assert stored.json()["status"] == "infeasible"
        again = client.post("/v1/plans", json=plan_body())
        assert check_problem(again, "no-feasible-plan")["instance"] == plan_id


def test_solver_time_limit_has_retry_after(make_client: Callable[..., Any],
                                           sqlite_settings: Settings) -> None:
    settings = sqlite_settings.model_copy(update={"time_limit_grace_s": 0.0})
    slow = ScriptedPlanner(sleep_s=1.0)
    with make_client(settings=settings, planner=slow) as client:
        response = client.post("/v1/plans", json=plan_body(solver={"time_limit_s": 0.2}))
        body = check_problem(response, "solver-time-limit")
        assert body["time_limit_s"] == pytest.approx(0.2)
        assert int(response.headers["retry-after"]) >= 1


def test_no_plan_within_the_time_limit_is_a_retryable_timeout_not_stored(
        make_client: Callable[..., Any]) -> None:
    planner = ScriptedPlanner(out_of_time=True)
    with make_client(planner=planner) as client:
        for attempt in (1, 2):
            response = client.post("/v1/plans", json=plan_body())
            body = check_problem(response, "solver-time-limit")
            assert "time_limit_s" in body["detail"]
            assert int(response.headers["retry-after"]) >= 1
            assert len(planner.calls) == attempt  # not answered from the store
        assert client.get("/v1/plans").json()["total"] == 0


def test_plan_not_found(client: httpx.Client) -> None:
    body = check_problem(client.get("/v1/plans/0123456789abcdef0123456789abcdef"),
                         "plan-not-found")
    assert "0123456789abcdef0123456789abcdef" in body["detail"]


def test_payload_too_large_by_content_length(make_client: Callable[..., Any],
                                             sqlite_settings: Settings) -> None:
    settings = sqlite_settings.model_copy(update={"max_body_bytes": 2048})
    with make_client(settings=settings) as client:
        response = client.post("/v1/ledger/memory", content=b"x" * 4096,
                               headers={"content-type": "application/json"})
        body = check_problem(response, "payload-too-large")
        assert "2048" in body["detail"]


def test_payload_too_large_when_streamed(make_client: Callable[..., Any],
                                         sqlite_settings: Settings) -> None:
    settings = sqlite_settings.model_copy(update={"max_body_bytes": 2048})

    def chunks() -> Any:
        for _ in range(8):
            yield b" " * 1024

    with make_client(settings=settings) as client:
        response = client.post("/v1/ledger/memory", content=chunks(),
                               headers={"content-type": "application/json"})
        assert "content-length" not in response.request.headers
        check_problem(response, "payload-too-large")


def test_overloaded_has_retry_after(make_client: Callable[..., Any],
                                    sqlite_settings: Settings) -> None:
    settings = sqlite_settings.model_copy(update={"solver_threads": 1, "solver_queue": 0})
    gate = threading.Event()
    held = ScriptedPlanner(gate=gate)
    with make_client(settings=settings, planner=held) as client:
        results: list[httpx.Response] = []
        first = threading.Thread(target=lambda: results.append(
            client.post("/v1/plans", json=plan_body())))
        first.start()
        assert held.started.wait(timeout=60)
        other = plan_body(constraints={"tp": 4})
        body = check_problem(client.post("/v1/plans", json=other), "overloaded")
        assert "1 solver threads" in body["detail"]
        gate.set()
        first.join(timeout=60)
        assert results[0].status_code == 201
        assert client.post("/v1/plans", json=other).status_code == 201


def test_internal_error_hides_the_exception(client: httpx.Client,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_request: object) -> None:
        raise RuntimeError("secret internals /etc/passwd")

    monkeypatch.setattr(estimates_routes, "memory_report", broken)
    response = client.post("/v1/ledger/memory", json=EVALUATE_REQUEST_EXAMPLE,
                           headers={"x-request-id": "req-42"})
    body = check_problem(response, "internal")
    assert body["request_id"] == "req-42"
    assert response.headers["x-request-id"] == "req-42"
    assert "secret" not in response.text and "RuntimeError" not in response.text


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/no-such-endpoint", 404), ("DELETE", "/v1/ledger/memory", 405)])
def test_routing_errors_are_problems(client: httpx.Client, method: str, path: str,
                                     status: int) -> None:
    check_problem(client.request(method, path), "invalid-request", status=status)


@pytest.mark.parametrize("code", sorted(PROBLEM_STATUS))
def test_problem_types_resolve(client: httpx.Client, code: str) -> None:
    response = client.get(f"/problems/{code}")
    assert response.status_code == 200
    assert response.json()["status"] == PROBLEM_STATUS[code]  # type: ignore[index]


@pytest.mark.parametrize(("body", "kind", "words"), [
    (b'{"model": ' + b"1" * 5000 + b"}", "json_integer_too_long", "digits"),
    (b"[" * 5000 + b"]" * 5000, "json_too_deep", "nested too deeply"),
    (b'{"model": "\xff"}', "body_not_utf8", "not UTF-8"),
])
def test_unparsable_bodies_say_why(client: httpx.Client, body: bytes, kind: str,
                                   words: str) -> None:
    response = client.post("/v1/evaluate", content=body,
                           headers={"Content-Type": "application/json"})
    problem = check_problem(response, "invalid-request")
    assert words in problem["detail"]
    assert problem["errors"] == [{"loc": ["body"], "msg": problem["errors"][0]["msg"],
                                  "type": kind}]
