"""Property-based API test: schemathesis generates requests from the OpenAPI document and
checks that no response is a server error or breaks the documented schema, status codes,
media types or headers. Bounded to 10 cases per operation and phase by default.

Every endpoint runs the real library except POST /v1/plans, whose search is replaced by the
scripted planner: the real one spends seconds per case whatever its time limit, which would
take this run past its budget (it is exercised over HTTP in test_service_plans_real.py and
the end-to-end test)."""

import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from service_testkit import ScriptedPlanner

from service.app import create_app
from service.settings import Settings

CASES_PER_OPERATION = int(os.environ.get("ATLAS_SCHEMATHESIS_EXAMPLES", "10"))
"""Hypothesis examples per operation and generation phase (15 operations), enough for every
operation's phases to run while keeping the default suite short; set
ATLAS_SCHEMATHESIS_EXAMPLES (e.g. 100) for a deeper run."""

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance]


def _app() -> Any:
    # In-memory SQLite (one shared connection): nothing is written to disk. Searches are
    # capped small so a few hundred cases stay within the test budget.
    config = Settings(database_url="sqlite://", default_time_limit_s=0.1,
                      max_time_limit_s=0.1, solver_threads=2, max_optimize_ops=1_500,
                      max_pipeline_ops=60_000, max_exact_placement_cells=256)
    return create_app(config, planner=ScriptedPlanner())


schema = schemathesis.openapi.from_asgi("/openapi.json", _app())


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=CASES_PER_OPERATION, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: Any) -> None:
    case.call_and_validate(checks=CHECKS)
