"""A client generated from the OpenAPI document by openapi-python-client: it has a named
function for every operation (the SVG pictures included, returning `str`), it and a small
program reading a plan's step time, memory and exports pass `mypy --strict` with no casts,
that program runs against the service, and the worked examples round-trip through its typed
models and the service (request in, response and problem bodies out) without losing a
field."""

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
from small_plan import small_plan

from api_schemas.plan import PlanResponse
from api_schemas.problems import ProblemDetail
from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE, PLAN_REQUEST_EXAMPLE
from api_schemas.rl_seesaw import RL_SEESAW_EXAMPLE
from service.app import create_app
from service.settings import Settings
from tests.service.service_testkit import (
    LLAMA_70B_RUN,
    SMALL_MESH,
    ScriptedPlanner,
    load_tolerant_settings,
    serve_in_process,
)

pytest.importorskip("openapi_python_client", reason="needs the test extra "
                    "(pip install -e '.[test]'), which installs openapi-python-client")
pytest.importorskip("mypy", reason="needs the test extra, which installs mypy")

TEMPLATE_DIR = Path(__file__).parent / "openapi_client_template"
CONFIG = Path(__file__).parent / "openapi_client_config.yaml"
USAGE = Path(__file__).parent / "openapi_client_usage" / "plan_facts.py"
PACKAGE = "atlas_client"
SMALL_PLAN = small_plan()

SVG_POSTS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "ledger_memory_svg": ("estimates", "EvaluateRequest", EVALUATE_REQUEST_EXAMPLE),
    "mesh_svg": ("estimates", "MeshRequest", SMALL_MESH),
    "moe_placement_svg": ("moe", "MoePlacementRequest", {
        "num_experts": 4, "top_k": 2, "tokens": [[3, 1, 2, 2], [1, 3, 2, 2]]}),
    "pipeline_simulate_svg": ("pipeline", "PipelineSimulateRequest", {
        "schedule": "zb_h1", "num_stages": 4, "num_micro_batches": 8,
        "durations": {"F": 1.0, "B": 1.0, "W": 1.0}}),
    "rl_seesaw_svg": ("lab", "RlSeesawRequest", RL_SEESAW_EXAMPLE),
    "run_estimate_svg": ("run", "RunEstimateRequest", LLAMA_70B_RUN),
}
"""The picture operations of POST routes: tag, request model and a body for each."""


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The client package generated offline from the app's own OpenAPI document, with the
    generator's output in `generator.log` and the usage program beside it."""
    root = tmp_path_factory.mktemp("generated")
    document = create_app(Settings(database_url="sqlite://")).openapi()
    (root / "openapi.json").write_text(json.dumps(document), encoding="utf-8")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = subprocess.run([str(bin_dir / "openapi-python-client"), "generate", "--path",
                          str(root / "openapi.json"), "--meta", "none", "--output-path",
                          str(root / PACKAGE), "--custom-template-path", str(TEMPLATE_DIR),
                          "--config", str(CONFIG)],
                         check=True, cwd=root, env=env, capture_output=True, text=True,
                         timeout=300)
    (root / "generator.log").write_text(run.stdout + run.stderr, encoding="utf-8")
    (root / USAGE.name).write_text(USAGE.read_text(encoding="utf-8"), encoding="utf-8")
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules
                     if m in (PACKAGE, USAGE.stem) or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


@pytest.mark.slow
def test_generated_client_and_a_program_on_it_pass_mypy_strict(generated: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir",
                             str(generated / ".mypy_cache"), PACKAGE, USAGE.name],
                            check=False, cwd=generated, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-4000:]
    assert "cast(" not in USAGE.read_text(encoding="utf-8")


def test_every_operation_has_a_named_function(generated: Path) -> None:
    log = (generated / "generator.log").read_text(encoding="utf-8")
    assert "WARNING parsing" not in log and "Cannot parse" not in log, log[-4000:]
    document = json.loads((generated / "openapi.json").read_text(encoding="utf-8"))
    operations = [(op["tags"][0], op["operationId"]) for item in document["paths"].values()
                  for op in item.values()]
    assert len(operations) >= 33
    for tag, operation in operations:
        module = _module(f"api.{tag}.{operation}")
        assert callable(module.sync_detailed), operation
    pictures = [(tag, operation) for tag, operation in operations
                if operation.endswith("_svg")]
    assert {operation for _, operation in pictures} == {*SVG_POSTS, "plan_timeline_svg",
                                                        "plan_memory_svg"}
    for tag, picture in pictures:
        sync = _module(f"api.{tag}.{picture}").sync
        assert "str" in str(sync.__annotations__["return"]), picture


@pytest.mark.parametrize("operation", sorted(SVG_POSTS))
def test_picture_operations_return_the_svg_as_str(generated: Path, client: httpx.Client,
                                                  operation: str) -> None:
    """Each picture a POST draws has its own operation, whose `sync` returns the SVG
    document as `str` (the JSON operation of the same path returns its model)."""
    tag, model, body = SVG_POSTS[operation]
    module = _module(f"api.{tag}.{operation}")
    request = getattr(_module("models"), model).from_dict(body)
    picture = module.sync(client=_generated_client(client), body=request)
    assert isinstance(picture, str), picture
    assert picture.lstrip().startswith("<?xml") and "<svg" in picture


def test_the_program_reads_a_real_plan(generated: Path,
                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    usage = importlib.import_module(USAGE.stem)
    body = _module("models").PlanRequest.from_dict(SMALL_PLAN)
    directory = tmp_path_factory.mktemp("usage")
    settings = load_tolerant_settings(f"sqlite:///{directory / 'plans.db'}", solver_threads=1,
                                      solver_queue=2)
    with serve_in_process(create_app(settings)) as http:
        facts = usage.plan_facts(_generated_client(http), body)
        served = PlanResponse.model_validate(http.get(f"/v1/plans/{facts.plan_id}").json())
    assert served.time is not None and served.memory is not None
    assert facts.step_time_s == served.time.step_time_s
    assert facts.peak_bytes == served.memory.peak_bytes
    assert facts.capacity_bytes == served.memory.capacity_bytes
    assert served.exports.megatron is not None
    assert facts.megatron_args == served.exports.megatron.args and facts.megatron_args
    assert facts.timeline_svg.lstrip().startswith("<?xml") and "<svg" in facts.timeline_svg
    assert "<svg" in facts.memory_svg


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
    evaluate = _module("api.estimates.evaluate_configuration")
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
    create = _module("api.plans.create_plan")
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
