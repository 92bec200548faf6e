"""A client generated from the OpenAPI document by openapi-python-client: it passes
`mypy --strict`, and the worked examples round-trip through its typed models and the
service (request in, response and problem bodies out) without losing a field."""

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from api_schemas.plan import PlanResponse
from api_schemas.problems import ProblemDetail
from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE, PLAN_REQUEST_EXAMPLE
from service.app import create_app
from service.settings import Settings
from tests.service.service_testkit import ScriptedPlanner, serve_in_process

pytest.importorskip("openapi_python_client", reason="needs the test extra "
                    "(pip install -e '.[test]'), which installs openapi-python-client")
pytest.importorskip("mypy", reason="needs the test extra, which installs mypy")

TEMPLATE_DIR = Path(__file__).parent / "openapi_client_template"
PACKAGE = "atlas_client"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The client package generated offline from the app's own OpenAPI document."""
    root = tmp_path_factory.mktemp("generated")
    document = create_app(Settings(database_url="sqlite://")).openapi()
    (root / "openapi.json").write_text(json.dumps(document), encoding="utf-8")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run([str(bin_dir / "openapi-python-client"), "generate", "--path",
                    str(root / "openapi.json"), "--meta", "none", "--output-path",
                    str(root / PACKAGE), "--custom-template-path", str(TEMPLATE_DIR)],
                   check=True, cwd=root, env=env, capture_output=True, timeout=300)
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_generated_client_passes_mypy_strict(generated: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir",
                             str(generated / ".mypy_cache"), PACKAGE],
                            check=False, cwd=generated, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-4000:]


def test_one_model_per_enum_and_typed_exports(generated: Path) -> None:
    models = {path.stem for path in (generated / PACKAGE / "models").glob("*.py")}
    assert {"problem_code", "zero_stage", "plan_exports", "megatron_export",
            "torchtitan_export", "deep_speed_export", "cost_estimate"} <= models
    assert not [m for m in models if m.endswith("_code") and m != "problem_code"]


def _generated_client(http: httpx.Client) -> Any:
    client = _module("client").Client(base_url="http://testserver")
    return client.set_httpx_client(http)


def test_worked_evaluate_example_round_trips(generated: Path, client: httpx.Client) -> None:
    body = _module("models").EvaluateRequest.from_dict(EVALUATE_REQUEST_EXAMPLE)
    assert body.to_dict() == EVALUATE_REQUEST_EXAMPLE
    evaluate = _module("api.estimates.evaluate_configuration_v1_evaluate_post")
    answer = evaluate.sync_detailed(client=_generated_client(client), body=body)
    assert answer.status_code == 200
    served = PlanResponse.model_validate_json(answer.content)
    assert PlanResponse.model_validate(answer.parsed.to_dict()) == served
    assert answer.parsed.exports.megatron is not None
    assert answer.parsed.exports.megatron.args == served.exports.megatron.args  # type: ignore[union-attr]


def test_worked_plan_example_and_its_problem_round_trip(generated: Path,
                                                        sqlite_settings: Settings) -> None:
    body = _module("models").PlanRequest.from_dict(PLAN_REQUEST_EXAMPLE)
    assert body.to_dict() == PLAN_REQUEST_EXAMPLE
    create = _module("api.plans.create_plan_v1_plans_post")
    with serve_in_process(create_app(sqlite_settings, planner=ScriptedPlanner())) as http:
        answer = create.sync_detailed(client=_generated_client(http), body=body)
    assert answer.status_code == 201
    assert PlanResponse.model_validate(answer.parsed.to_dict()) == \
        PlanResponse.model_validate_json(answer.content)
    # A different request (an identical one would be answered from the store).
    other = _module("models").PlanRequest.from_dict({**PLAN_REQUEST_EXAMPLE,
                                                     "objective": "min_gpus"})
    with serve_in_process(create_app(sqlite_settings,
                                     planner=ScriptedPlanner(infeasible=True))) as http:
        refused = create.sync_detailed(client=_generated_client(http), body=other)
    assert refused.status_code == 422
    problem = refused.parsed
    assert problem.code.value == "no-feasible-plan" and problem.plan_id
    assert problem.explanation.summary
    assert ProblemDetail.model_validate(problem.to_dict()) == \
        ProblemDetail.model_validate_json(refused.content)
