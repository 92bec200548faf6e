"""GET /metrics: Prometheus text that prometheus_client's own parser reads, with counters
and latency histograms by route template and status that move with each answer, problem
codes, store failures and the solver pool's occupancy."""

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from serving import free_port

from service.app import create_app
from service.cli.serve import metrics_folder
from service.metrics import (
    CLIENT_GONE,
    LATENCY_BUCKETS_S,
    MULTIPROCESS_DIR_ENV,
    UNROUTED,
    MetricsMiddleware,
    ServiceMetrics,
)
from service.settings import Settings
from tests.service.service_testkit import ScriptedPlanner, plan_body, serve_in_process

REFUSED_URL = "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=1"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: httpx.Client) -> Samples:
    """Every sample of GET /metrics, by name and labels, parsed by prometheus_client."""
    page = client.get("/metrics")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/plain; version=")
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(page.text)
            for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_counters_and_histograms_move_with_answers(client: httpx.Client,
                                                   sqlite_settings: Settings) -> None:
    before = scrape(client)
    created = client.post("/v1/plans", json=plan_body())
    assert created.status_code == 201
    plan_id = created.json()["id"]
    assert client.get(f"/v1/plans/{plan_id}").status_code == 200
    assert client.get(f"/v1/plans/{plan_id}").status_code == 200
    assert client.get("/v1/plans/" + "f" * 32).status_code == 404
    assert client.get("/no/such/path").status_code == 404
    assert client.get("/lab/assets/lab.css").status_code == 200
    after = scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    read = {"method": "GET", "route": "/v1/plans/{plan_id}"}
    assert moved("atlas_http_requests_total", **read, status="200") == 2
    assert moved("atlas_http_requests_total", **read, status="404") == 1
    assert moved("atlas_http_requests_total", method="POST", route="/v1/plans",
                 status="201") == 1
    assert moved("atlas_http_requests_total", method="GET", route=UNROUTED,
                 status="404") == 1
    assert moved("atlas_http_request_duration_seconds_count", **read) == 3
    assert moved("atlas_http_request_duration_seconds_sum", **read) > 0
    assert moved("atlas_http_request_duration_seconds_bucket", **read, le="+Inf") == 3
    assert value(after, "atlas_http_request_duration_seconds_bucket", **read,
                 le=str(LATENCY_BUCKETS_S[-1])) <= value(
                     after, "atlas_http_request_duration_seconds_count", **read)
    assert moved("atlas_http_requests_total", method="GET", route="/lab/assets/{path}",
                 status="200") == 1
    assert moved("atlas_problems_total", code="plan-not-found") == 1
    # The previous scrape is counted too, under its own route.
    assert value(after, "atlas_http_requests_total", method="GET", route="/metrics",
                 status="200") >= 1
    assert value(after, "atlas_solver_capacity") == \
        sqlite_settings.solver_threads + sqlite_settings.solver_queue
    assert value(after, "atlas_solver_searches_running") == 0
    assert value(after, "atlas_solver_searches_queued") == 0
    assert value(after, "atlas_store_capacity") > 0


def test_refusals_before_routing_are_counted(sqlite_settings: Settings) -> None:
    settings = sqlite_settings.model_copy(update={"max_body_bytes": 100})
    with serve_in_process(create_app(settings, planner=ScriptedPlanner())) as client:
        refused = client.post("/v1/plans", content=b"{" + b" " * 200 + b"}",
                              headers={"Content-Type": "application/json"})
        assert refused.status_code == 413
        samples = scrape(client)
    assert value(samples, "atlas_http_requests_total", method="POST", route=UNROUTED,
                 status="413") == 1
    assert value(samples, "atlas_problems_total", code="payload-too-large") == 1


def test_store_failures_are_counted() -> None:
    settings = Settings(database_url=REFUSED_URL, store_timeout_s=5)
    with serve_in_process(create_app(settings, planner=ScriptedPlanner())) as client:
        unread = client.get("/v1/plans/" + "f" * 32)
        unsearched = client.post("/v1/plans", json=plan_body())  # the look-up fails first
        samples = scrape(client)
    for answer in (unread, unsearched):
        assert answer.status_code == 503 and answer.json()["code"] == "store-unavailable"
    assert value(samples, "atlas_store_failures_total", outcome="unavailable") == 2
    assert value(samples, "atlas_problems_total", code="store-unavailable") == 2
    assert value(samples, "atlas_http_requests_total", method="GET",
                 route="/v1/plans/{plan_id}", status="503") == 1


def test_plans_answered_unstored_are_counted() -> None:
    """A search that ends while the store is down is answered 200 with X-Plan-Stored: false
    (`service/routes/plans.py`); the middleware counts it from that header."""
    async def answer_unstored(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"x-plan-stored", b"false")]})
        await send({"type": "http.response.body", "body": b"{}"})

    samples = _run_bare(answer_unstored)
    assert value(samples, "atlas_store_failures_total", outcome="plan_not_stored") == 1
    assert value(samples, "atlas_http_requests_total", method="POST", route=UNROUTED,
                 status="200") == 1


def test_metrics_stay_out_of_the_api_document(client: httpx.Client) -> None:
    document: dict[str, Any] = client.get("/openapi.json").json()
    assert "/metrics" not in document["paths"]


def test_a_search_in_progress_shows_as_running(sqlite_settings: Settings) -> None:
    held = ScriptedPlanner(gate=threading.Event())
    with serve_in_process(create_app(sqlite_settings, planner=held)) as client:
        with ThreadPoolExecutor(max_workers=1) as waiter:
            posted = waiter.submit(client.post, "/v1/plans", json=plan_body())
            assert held.started.wait(timeout=30)
            during = scrape(client)
            assert held.gate is not None
            held.gate.set()
            assert posted.result(timeout=60).status_code == 201
        after = scrape(client)
    assert value(during, "atlas_solver_searches_running") == 1
    assert value(during, "atlas_solver_searches_queued") == 0
    assert value(after, "atlas_solver_searches_running") == 0


def _scrape_url(base: str) -> Samples:
    """One scrape on a fresh connection (which worker answers is the kernel's choice)."""
    with httpx.Client(base_url=base, timeout=30) as fresh:
        return scrape(fresh)


@pytest.mark.slow
def test_two_workers_are_summed_in_every_scrape(tmp_path: Path) -> None:
    """`serve --workers 2`: each worker's series go to the multiprocess folder `serve` sets,
    and a scrape, whichever worker answers it, sums both: the capacity is twice one
    worker's, and requests spread over fresh connections all count."""
    port = free_port()
    root = Path(__file__).resolve().parents[2]
    env = {key: value for key, value in os.environ.items() if key != MULTIPROCESS_DIR_ENV}
    env.update(PYTHONPATH=str(root), ATLAS_SOLVER_THREADS="2", ATLAS_SOLVER_QUEUE="3")
    server = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--workers", "2",
         "--sqlite-path", str(tmp_path / "plans.db"), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:  # both workers up: each adds its capacity of 2 + 3
            try:
                if value(_scrape_url(base), "atlas_solver_capacity") == 10:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "two workers did not start"
            time.sleep(0.3)
        before = _scrape_url(base)
        for _ in range(12):
            with httpx.Client(base_url=base, timeout=30) as fresh:
                assert fresh.get("/healthz").status_code == 200
        scrapes = [_scrape_url(base) for _ in range(6)]
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
    healthz = {"method": "GET", "route": "/healthz", "status": "200"}
    for after in scrapes:
        assert value(after, "atlas_solver_capacity") == 10
        assert value(after, "atlas_http_requests_total", **healthz) - \
            value(before, "atlas_http_requests_total", **healthz) == 12


def test_the_metrics_folder_of_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Set, then removed, through monkeypatch: its undo then restores the variable as it was
    # before the test, although `metrics_folder(2)` sets it in the environment directly.
    monkeypatch.setenv(MULTIPROCESS_DIR_ENV, str(tmp_path / "unused"))
    monkeypatch.delenv(MULTIPROCESS_DIR_ENV)
    assert metrics_folder(1) is None and MULTIPROCESS_DIR_ENV not in os.environ
    fresh = metrics_folder(2)
    assert fresh is not None and os.environ[MULTIPROCESS_DIR_ENV] == fresh
    assert Path(fresh).is_dir() and not any(Path(fresh).iterdir())
    Path(fresh).rmdir()
    named = tmp_path / "metrics"
    named.mkdir()
    (named / "counter_123.db").write_bytes(b"stale")
    (named / "keep.txt").write_text("not a series")
    monkeypatch.setenv(MULTIPROCESS_DIR_ENV, str(named))
    assert metrics_folder(1) == str(named)
    assert sorted(p.name for p in named.iterdir()) == ["keep.txt"]


def _run_bare(app: Any) -> Samples:
    """One POST /v1/plans through the metrics middleware around `app`; the samples after."""
    metrics = ServiceMetrics(FastAPI())

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        pass

    scope = {"type": "http", "method": "POST", "path": "/v1/plans", "root_path": ""}
    try:
        asyncio.run(MetricsMiddleware(app, metrics=metrics)(scope, receive, send))
    except RuntimeError:
        pass
    text = generate_latest(metrics.registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_client_gone_and_a_crash_are_labelled_apart() -> None:
    async def gone(scope: Any, receive: Any, send: Any) -> None:
        return  # the client disconnected: the handling was cancelled, nothing was sent

    async def crash(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("bug")

    labels = {"method": "POST", "route": UNROUTED}
    assert value(_run_bare(gone), "atlas_http_requests_total", **labels,
                 status=str(CLIENT_GONE)) == 1
    assert value(_run_bare(crash), "atlas_http_requests_total", **labels, status="500") == 1
