"""End to end: the README's serve command runs the real server on a free port with SQLite in
a temporary directory; requests go over real HTTP; the server is stopped and started again
on the same store."""

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

from api_schemas.plan import MemoryReport
from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE, EvaluateRequest
from solver import memory_report

ATLAS_PLANNER = Path(sys.executable).parent / "atlas-planner"
STARTUP_TIMEOUT_S = 30.0


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
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            assert process.poll() is None, log_path.read_text(encoding="utf-8")
            try:
                if httpx.get(f"{base_url}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not start:\n" + log_path.read_text(
                encoding="utf-8")
            time.sleep(0.1)
        yield base_url
    finally:
        process.terminate()
        process.wait(timeout=15)


@pytest.mark.slow
def test_served_over_http_and_restarted(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'plans.db'}"
    log_path = tmp_path / "server.log"
    with running_server(database_url, log_path) as base_url:
        health = httpx.get(f"{base_url}/healthz").json()
        assert health == {"status": "ok", "database": "ok", "database_backend": "sqlite",
                          "version": "0.1.0"}
        response = httpx.post(f"{base_url}/v1/ledger/memory", json=EVALUATE_REQUEST_EXAMPLE,
                              timeout=30.0)
        assert response.status_code == 200
        expected = memory_report(EvaluateRequest.model_validate(EVALUATE_REQUEST_EXAMPLE))
        assert MemoryReport.model_validate(response.json()) == expected
        assert response.headers["x-request-id"]
        missing = httpx.get(f"{base_url}/v1/plans/{'0' * 32}")
        assert missing.headers["content-type"] == "application/problem+json"
    assert (tmp_path / "plans.db").exists()
    with running_server(database_url, log_path) as base_url:
        assert httpx.get(f"{base_url}/healthz").json()["database"] == "ok"
