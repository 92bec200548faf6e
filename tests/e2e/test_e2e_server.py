"""End to end: the README's serve command runs the real server on a free port with SQLite in
a temporary directory; a plan is posted over real HTTP and read back; the server is stopped,
started again on the same store, and the plan read back identical."""

import sys
from pathlib import Path

import httpx
import pytest

from api_schemas.plan import MemoryReport, PlanResponse
from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE, EvaluateRequest
from solver import memory_report

# The subprocess server of the fault tests (the README's serve command on a free port).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from faultkit import LOAD_TOLERANT_ENV, hang_guard, running_server  # noqa: E402
from small_plan import small_plan  # noqa: E402

pytestmark = hang_guard


PLAN = small_plan(time_limit_s=60, top_k=2)
"""Proved optimal in well under a second on an idle host; the limit is generous so that a
loaded host does not end the search before any plan (a 503)."""


@pytest.mark.slow
def test_served_over_http_and_restarted(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'plans.db'}"
    log_path = tmp_path / "server.log"
    with running_server(database_url, log_path, env=LOAD_TOLERANT_ENV) as server:
        base_url = server.base_url
        health = httpx.get(f"{base_url}/healthz").json()
        assert health == {"status": "ok", "database": "ok", "database_backend": "sqlite",
                          "version": "0.1.0"}
        created = httpx.post(f"{base_url}/v1/plans", json=PLAN, timeout=60.0)
        assert created.status_code == 201, created.text
        location = created.headers["location"]
        assert created.headers["x-request-id"]
        before = httpx.get(f"{base_url}{location}")
        assert before.json() == created.json()
        assert PlanResponse.model_validate(before.json()).status in ("optimal", "feasible")
        memory = httpx.post(f"{base_url}/v1/ledger/memory", json=EVALUATE_REQUEST_EXAMPLE,
                            timeout=30.0)
        expected = memory_report(EvaluateRequest.model_validate(EVALUATE_REQUEST_EXAMPLE))
        assert MemoryReport.model_validate(memory.json()) == expected
        missing = httpx.get(f"{base_url}/v1/plans/{'0' * 32}")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"
    assert (tmp_path / "plans.db").exists()
    with running_server(database_url, log_path, env=LOAD_TOLERANT_ENV) as server:
        base_url = server.base_url
        after = httpx.get(f"{base_url}{location}")
        assert after.status_code == 200
        assert after.content == before.content
        again = httpx.post(f"{base_url}/v1/plans", json=PLAN, timeout=60.0)
        assert again.status_code == 200 and again.json()["id"] == created.json()["id"]
