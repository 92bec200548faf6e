"""A search nobody waits for stops: after its 503 solver-time-limit, and when its client
disconnects before the answer.

The plan tests use a planner that runs for a minute unless its thread's cancellation token
is set (it checks the token the way the solver does between candidates), so they fail if
the service does not cancel. The schedule-optimizer test runs the real optimizer on an input
that computes for well over a minute past its 503 when nothing stops it.
"""

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from service_testkit import plan_body, serve_in_process, serve_over_http

from api_schemas.plan import PlanResponse
from api_schemas.requests import PlanRequest
from service.app import create_app
from service.settings import Settings
from solver import cancel

STOP_BOUND_S = 5.0
"""Longest a search may run on once nobody waits for it (a loaded 2-CPU host)."""


@dataclass
class CooperativePlanner:
    """Runs up to `run_s` seconds, checking its thread's token every 10 ms."""

    run_s: float = 60.0
    started: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    outcome: list[BaseException | None] = field(default_factory=list)
    ended_at: float = 0.0

    def __call__(self, request: PlanRequest, *,
                 progress: Callable[[str], None] | None = None) -> PlanResponse:
        self.started.set()
        try:
            deadline = time.monotonic() + self.run_s
            while time.monotonic() < deadline:
                cancel.check()
                time.sleep(0.01)
            self.outcome.append(None)
            raise AssertionError("the search was never cancelled")
        except cancel.Cancelled as error:
            self.outcome.append(error)
            raise
        finally:
            self.ended_at = time.perf_counter()
            self.ended.set()


def test_a_search_past_its_limit_stops_after_the_503(sqlite_settings: Settings) -> None:
    settings = sqlite_settings.model_copy(update={"time_limit_grace_s": 0.0})
    planner = CooperativePlanner()
    with serve_in_process(create_app(settings, planner=planner)) as client:
        response = client.post("/v1/plans", json=plan_body(solver={"time_limit_s": 0.5}))
        answered = time.perf_counter()
        assert response.status_code == 503, response.text
        assert response.json()["code"] == "solver-time-limit"
        assert "stopped and nothing of it is kept" in response.json()["detail"]
        assert planner.ended.wait(timeout=STOP_BOUND_S), "the search ran on after its 503"
        assert isinstance(planner.outcome[0], cancel.Cancelled)
        assert planner.ended_at - answered < STOP_BOUND_S
        assert client.get("/v1/plans").json()["total"] == 0  # nothing stored
        again = client.post("/v1/plans", json=plan_body(solver={"time_limit_s": 0.5}))
        assert again.status_code == 503  # a new search, not joined to the stopped one


def _post_and_hang_up(base_url: str, body: dict[str, Any], *,
                      when: threading.Event) -> None:
    """POST `body` to /v1/plans, then close the connection once `when` is set."""
    host, port = base_url.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/plans HTTP/1.1\r\nHost: " + host.encode() + b"\r\n"
                     b"Content-Type: application/json\r\nContent-Length: "
                     + str(len(payload)).encode() + b"\r\n\r\n" + payload)
        when.wait(timeout=30)


@pytest.mark.slow
def test_a_search_whose_client_hung_up_stops(sqlite_settings: Settings) -> None:
    planner = CooperativePlanner()
    with serve_over_http(create_app(sqlite_settings, planner=planner)) as base_url:
        hung_up = threading.Thread(
            target=_post_and_hang_up, args=(base_url, plan_body(solver={"time_limit_s": 30})),
            kwargs={"when": planner.started})
        hung_up.start()
        assert planner.started.wait(timeout=30), "the search never started"
        hung_up.join()
        closed = time.perf_counter()
        assert planner.ended.wait(timeout=STOP_BOUND_S), \
            "the search ran on after its client hung up"
        assert isinstance(planner.outcome[0], cancel.Cancelled)
        print(f"client gone: the search stopped {planner.ended_at - closed:.2f} s later")
        listed = httpx.get(f"{base_url}/v1/plans", timeout=30).json()
        assert listed["total"] == 0


@pytest.mark.slow
def test_the_schedule_optimizer_stops_after_its_503(sqlite_settings: Settings) -> None:
    settings = sqlite_settings.model_copy(update={"time_limit_grace_s": 0.0})
    app = create_app(settings)
    body = {"schedule": "zb_h1", "num_stages": 8, "num_micro_batches": 4000,
            "durations": {"F": 0.021, "B": 0.025, "W": 0.017}, "memory_limit": 3,
            "time_limit_s": 1.0, "include_timeline": False}
    with serve_in_process(app) as client:
        response = client.post("/v1/pipeline/optimize", json=body)
        answered = time.perf_counter()
        assert response.status_code == 503, response.text
        detail = response.json()["detail"]
        assert "stopped and nothing of it is kept" in detail
        assert "stored" not in detail
        pool = app.state.context.pool
        while pool.admitted and time.perf_counter() - answered < 60:
            time.sleep(0.05)
        took = time.perf_counter() - answered
        print(f"schedule optimizer: its thread stopped {took:.2f} s after the 503")
        assert pool.admitted == 0
        assert took < STOP_BOUND_S, f"the optimizer computed {took:.2f} s past its 503"
