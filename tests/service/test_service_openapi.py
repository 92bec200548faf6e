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


def test_operation_ids_are_named_after_their_handlers(openapi: dict[str, Any]) -> None:
    ids = [op["operationId"] for _, _, op in _operations(openapi)]
    assert len(ids) == len(set(ids))
    assert all(name.isidentifier() and "_v1_" not in name for name in ids), ids
    by_route = {(path, method): op["operationId"] for path, method, op in _operations(openapi)}
    assert by_route[("/v1/plans", "post")] == "create_plan"
    assert by_route[("/v1/plans/{plan_id}", "get")] == "read_plan"
    assert by_route[("/v1/plans/{plan_id}/timeline.svg", "get")] == "plan_timeline_svg"
    assert by_route[("/v1/evaluate", "post")] == "evaluate_configuration"
    assert by_route[("/v1/pipeline/simulate.svg", "post")] == "pipeline_simulate_svg"
    assert by_route[("/v1/mesh.svg", "post")] == "mesh_svg"


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[-1]} if "$ref" in node else set()
        return found.union(*(_refs(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(item) for item in node))
    return set()


def _closure(names: set[str], components: dict[str, Any]) -> set[str]:
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(_refs(components[name]) - seen)
    return seen


def test_fields_every_answer_holds_are_required(openapi: dict[str, Any]) -> None:
    """Answers are serialised whole (defaults and nulls included), so every property of a
    model that only answers carries is required; trace events (free-form Trace Event
    objects) and problems (optional members absent) are the documented exceptions."""
    components = openapi["components"]["schemas"]
    answered: set[str] = set()
    for _, _, op in _operations(openapi):
        for status, response in op["responses"].items():
            if status.startswith("2"):
                answered |= _refs(response)
    requested = _closure({name for _, _, op in _operations(openapi)
                          for name in _refs(op.get("requestBody", {}))}, components)
    answer_only = _closure(answered, components) - requested - {"TraceDocument", "TraceEvent"}
    assert {"PlanResponse", "ParallelConfig-Output", "PlanList", "MemoryReport"} <= answer_only
    for name in sorted(answer_only):
        component = components[name]
        missing = set(component.get("properties", {})) - set(component.get("required", []))
        assert not missing, (name, sorted(missing))
    plan = components["PlanResponse"]
    assert set(plan["required"]) == set(plan["properties"]) and len(plan["required"]) >= 21
    assert components["ParallelConfig-Output"]["title"] == "ParallelConfigOutput"


def test_svg_answers_are_strings_of_image_svg(openapi: dict[str, Any]) -> None:
    pictures = [(path, op) for path, method, op in _operations(openapi)
                if "image/svg+xml" in op["responses"].get("200", {}).get("content", {})]
    assert {path for path, _ in pictures} >= {
        "/v1/plans/{plan_id}/timeline.svg", "/v1/plans/{plan_id}/memory.svg", "/v1/mesh",
        "/v1/mesh.svg", "/v1/ledger/memory.svg", "/v1/moe/placement.svg",
        "/v1/pipeline/simulate.svg", "/v1/lab/rl-seesaw.svg", "/v1/run/estimate.svg"}
    for path, op in pictures:
        assert op["responses"]["200"]["content"]["image/svg+xml"]["schema"]["type"] == \
            "string", path
