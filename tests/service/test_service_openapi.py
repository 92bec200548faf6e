"""The OpenAPI document: browsable docs, examples on every request body, a description on
every field and parameter, problem+json for every documented error."""

from typing import Any

import httpx
import pytest


@pytest.fixture
def openapi(client: httpx.Client) -> dict[str, Any]:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def _operations(openapi: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in openapi["paths"].items()
            for method, op in item.items()]


def test_docs_are_browsable(client: httpx.Client) -> None:
    page = client.get("/docs")
    assert page.status_code == 200 and "swagger-ui" in page.text.lower()


def test_every_request_body_has_a_realistic_example(openapi: dict[str, Any]) -> None:
    bodies = [(path, op["requestBody"]) for path, _, op in _operations(openapi)
              if "requestBody" in op]
    assert {path for path, _ in bodies} >= {"/v1/ledger/memory", "/v1/models/from-hf"}
    for path, body in bodies:
        examples = body["content"]["application/json"]["examples"]
        assert examples, path
        for example in examples.values():
            assert example["summary"] and example["value"], path


def _described(schema: dict[str, Any], components: dict[str, Any]) -> bool:
    if "description" in schema:
        return True
    ref = schema.get("$ref")
    return ref is not None and "description" in components[ref.rsplit("/", 1)[-1]]


def test_every_field_and_parameter_is_described(openapi: dict[str, Any]) -> None:
    components = openapi["components"]["schemas"]
    missing = [f"{name}.{prop}" for name, schema in components.items()
               for prop, sub in schema.get("properties", {}).items()
               if not _described(sub, components)]
    assert missing == []
    for path, method, op in _operations(openapi):
        for parameter in op.get("parameters", []):
            assert parameter.get("description"), (path, method, parameter["name"])


def test_errors_are_documented_as_problem_json(openapi: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in openapi["components"]["schemas"]
    assert "ProblemDetail" in openapi["components"]["schemas"]
    for path, method, op in _operations(openapi):
        assert "500" in op["responses"], (path, method)
        for status, response in op["responses"].items():
            if int(status) >= 400 and "content" in response and path != "/healthz":
                assert list(response["content"]) == ["application/problem+json"], (path, status)
        if "requestBody" in op:
            assert {"413", "422"} <= set(op["responses"]), (path, method)


def test_plans_document_location_and_retry_after(openapi: dict[str, Any]) -> None:
    post = openapi["paths"]["/v1/plans"]["post"]["responses"]
    assert "Location" in post["201"]["headers"] and "Location" in post["200"]["headers"]
    assert "Retry-After" in post["503"]["headers"]
