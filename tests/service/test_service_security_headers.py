"""Security headers on every answer: nosniff, no framing, no referrer, and a
Content-Security-Policy (the lab's and ReDoc's own, this origin only for Swagger UI,
nothing loadable for everything else)."""

import httpx
import pytest

from service.app import create_app
from service.security_headers import API_POLICY, HTML_POLICY
from service.settings import Settings
from tests.service.service_testkit import serve_in_process

ALWAYS = {"x-content-type-options": "nosniff", "x-frame-options": "DENY",
          "referrer-policy": "no-referrer"}


def _assert_always(response: httpx.Response) -> None:
    for name, value in ALWAYS.items():
        assert response.headers.get(name) == value, (response.request.url, name)
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


@pytest.mark.parametrize("path", ["/healthz", "/v1/catalog/gpus", "/openapi.json",
                                  "/v1/plans/" + "f" * 32, "/problems/internal",
                                  "/lab/assets/lab.js", "/no-such-route"])
def test_api_answers_and_problems(client: httpx.Client, path: str) -> None:
    response = client.get(path)
    _assert_always(response)
    assert response.headers["content-security-policy"] == API_POLICY


def test_refusals_before_routing_carry_them_too(sqlite_settings: Settings) -> None:
    settings = sqlite_settings.model_copy(update={"max_body_bytes": 100})
    with serve_in_process(create_app(settings)) as client:
        refused = client.post("/v1/plans", content=b"{" + b" " * 200 + b"}",
                              headers={"Content-Type": "application/json"})
    assert refused.status_code == 413
    _assert_always(refused)


def test_svg_answers_load_nothing(client: httpx.Client) -> None:
    body = {"schedule": "1f1b", "num_stages": 2, "num_micro_batches": 4,
            "durations": {"F": 1.0, "B": 2.0}}
    picture = client.post("/v1/pipeline/simulate?format=svg", json=body)
    assert picture.status_code == 200 and picture.headers["content-type"].startswith(
        "image/svg+xml")
    _assert_always(picture)
    assert picture.headers["content-security-policy"] == API_POLICY


def test_the_lab_keeps_its_policy_and_the_docs_stay_on_this_origin(
        client: httpx.Client) -> None:
    lab = client.get("/lab")
    _assert_always(lab)
    policy = lab.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "style-src 'self';" in policy
    assert "unsafe-inline" not in policy
    swagger = client.get("/docs")
    _assert_always(swagger)
    assert swagger.headers["content-security-policy"] == HTML_POLICY
    redoc = client.get("/redoc")
    _assert_always(redoc)
    assert redoc.headers["content-security-policy"].startswith("default-src 'self';")
