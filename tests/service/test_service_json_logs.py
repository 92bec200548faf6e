"""JSON logs from the real server (`atlas-planner serve` in a subprocess): every line it
writes, its own, the app's, the solver threads' and the access log, is one JSON object, and
every line written for a request carries that request's id."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving import free_port
from small_plan import small_plan

from service.logging_json import REQUEST_ID, JsonFormatter

SMALL_PLAN = small_plan()
KEYS = {"time", "level", "logger", "message", "request_id"}


def _serve_and_log(tmp_path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Start the server, send the requests, stop it; its log lines parsed, and its raw
    output lines."""
    port = free_port()
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    server = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port),
         "--sqlite-path", str(tmp_path / "plans.db")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            deadline = time.monotonic() + 90
            while True:
                try:
                    if client.get("/healthz", headers={"X-Request-ID": "obs-health"}) \
                            .status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
            created = client.post("/v1/plans", json=SMALL_PLAN,
                                  headers={"X-Request-ID": "obs-plan"})
            assert created.status_code == 201, created.text
            assert created.headers["X-Request-ID"] == "obs-plan"
            missing = client.get("/v1/plans/" + "f" * 32, headers={"X-Request-ID": "obs-404"})
            assert missing.status_code == 404
            generated = client.get("/healthz")
            assert len(generated.headers["X-Request-ID"]) == 32
    finally:
        server.send_signal(signal.SIGINT)
        output, _ = server.communicate(timeout=60)
    raw = [line for line in output.splitlines() if line.strip()]
    return [json.loads(line) for line in raw], raw


@pytest.mark.slow
def test_every_line_is_json_with_its_request_id(tmp_path: Path) -> None:
    lines, raw = _serve_and_log(tmp_path)
    assert len(lines) == len(raw) >= 6
    for line in lines:
        assert isinstance(line, dict) and KEYS <= set(line), line
    by_id: dict[str | None, list[dict[str, Any]]] = {}
    for line in lines:
        by_id.setdefault(line["request_id"], []).append(line)

    # Start-up and shutdown lines belong to no request.
    assert any("Uvicorn running" in line["message"] for line in by_id[None])
    assert any(line["logger"] == "service.app" and "ready" in line["message"]
               for line in by_id[None])
    assert all(line["logger"] != "uvicorn.access" for line in by_id[None])

    # Access lines, one per request, carry its id and its fields.
    access = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert {(line["request_id"], line["method"], line["path"], line["status"])
            for line in access} >= {("obs-plan", "POST", "/v1/plans", 201),
                                    ("obs-404", "GET", "/v1/plans/" + "f" * 32, 404)}
    generated = [line for line in access if line["request_id"] not in
                 ("obs-health", "obs-plan", "obs-404")]
    assert len(generated) == 1 and len(generated[0]["request_id"]) == 32

    # The search's progress lines, written on a solver thread, carry the plan request's id.
    searched = [line for line in by_id["obs-plan"] if line["logger"] == "service.planning"]
    assert searched and all("plan " in line["message"] for line in searched)


def test_a_record_with_a_traceback_stays_one_line() -> None:
    formatter = JsonFormatter()
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        record = logging.LogRecord("service.problems", logging.ERROR, __file__, 1,
                                   "unhandled error on %s", ("GET /x",), sys.exc_info())
    token = REQUEST_ID.set("obs-unit")
    try:
        text = formatter.format(record)
    finally:
        REQUEST_ID.reset(token)
    assert "\n" not in text
    line = json.loads(text)
    assert line["request_id"] == "obs-unit" and line["level"] == "ERROR"
    assert line["message"] == "unhandled error on GET /x"
    assert "ValueError: bad\nvalue" in line["exception"]
    assert json.loads(formatter.format(logging.LogRecord(
        "service", logging.INFO, __file__, 1, "outside", (), None)))["request_id"] is None
