"""End to end: the README's serve command runs the real server on a free port with SQLite in
a temporary directory; a plan is posted over real HTTP and read back; the server is stopped,
started again on the same store, and the plan read back identical."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from api_schemas.plan import MemoryReport, PlanResponse
from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE, EvaluateRequest
from solver import memory_report

ATLAS_PLANNER = Path(sys.executable).parent / "atlas-planner"
LOAD_TOLERANT_ENV = {"ATLAS_STORE_TIMEOUT_S": "30", "ATLAS_TIME_LIMIT_GRACE_S": "60"}
"""Generous store wait and search grace (1 s and 10 s by default): this test is about
serving and restarting, and a loaded host would otherwise answer a (documented) 503."""
HANG_GUARD_S = 600.0
"""How long the server may neither answer nor exit before the test calls it hung: a guard
against waiting forever, not a speed check (benchmarks/bench_startup.py measures start-up)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def running_server(database_url: str, log_path: Path) -> Iterator[str]:
    """`atlas-planner serve` as a subprocess; yields its base URL; stops it afterwards."""
    port = free_port()
    command = [str(ATLAS_PLANNER), "serve", "--host", "127.0.0.1", "--port", str(port),
               "--database-url", database_url, "--log-level", "warning"]
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update(LOAD_TOLERANT_ENV)
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while True:
            assert process.poll() is None, log_path.read_text(encoding="utf-8")
            try:
                if httpx.get(f"{base_url}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server neither answered nor exited (hung):\n" \
                + log_path.read_text(encoding="utf-8")
            time.sleep(0.1)
        yield base_url
    finally:
        process.terminate()
        process.wait(timeout=15)


PLAN = {"model": {"preset": "llama-3.1-8b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 64, "sequence_length": 4096},
        "solver": {"time_limit_s": 60, "top_k": 2, "num_workers": 1}}
"""Proved optimal in well under a second on an idle host; the limit is generous so that a
loaded host does not end the search before any plan (a 503)."""


@pytest.mark.slow
def test_served_over_http_and_restarted(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'plans.db'}"
    log_path = tmp_path / "server.log"
    with running_server(database_url, log_path) as base_url:
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
    with running_server(database_url, log_path) as base_url:
        after = httpx.get(f"{base_url}{location}")
        assert after.status_code == 200
        assert after.content == before.content
        again = httpx.post(f"{base_url}/v1/plans", json=PLAN, timeout=60.0)
        assert again.status_code == 200 and again.json()["id"] == created.json()["id"]
