"""A large MoE placement against the real server: it runs in the solver pool (admitted or
refused with 503 and Retry-After), its answer is serialised there and bounded in size, and
/healthz keeps answering meanwhile.

The request is DeepSeek-V3's shape: 58 MoE layers x 64 ranks x 256 experts, top-8, with
every route listed (a ~56 MB answer). Before, the layers were planned on an unadmitted
thread and checked and serialised on the event loop: /healthz waited up to 4.75 s on this
host (18.9 s reported), and four copies all ran.
"""

import functools
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from faultkit import LOAD_TOLERANT_ENV, hang_guard, running_server

pytestmark = [hang_guard, pytest.mark.slow]

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_placement_api import E, K, _layer  # noqa: E402

MOE_LAYERS = 58
HEALTH_BOUND_S = 2.0
"""Slowest /healthz answer allowed while placements run. The goal is 1 s (measured: 0.31 s
with four copies, 0.39 s with one, on a 2-core host); 2 s leaves room for a loaded CI host
and still fails the 4.75 s (one copy) and 3.25 s (four) measured before."""


@functools.cache
def _batch(batch: int) -> list[list[int]]:
    """One batch's routing counts (seconds to draw; the bodies repeat three batches)."""
    return _layer(batch)


def _body(layers: int, *, routes: str = "all", batch_offset: int = 0) -> bytes:
    matrices = [_batch((b + batch_offset) % 3) for b in range(layers)]
    return json.dumps({"num_experts": E, "top_k": K, "routes": routes,
                       "layers": matrices}).encode()


class _HealthWatch:
    """Polls /healthz every 0.1 s in a thread; records the slowest answer and any non-200."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.slowest_s = 0.0
        self.answers = 0
        self.failures: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                start = time.monotonic()
                status = client.get(f"{self.base_url}/healthz").status_code
                self.slowest_s = max(self.slowest_s, time.monotonic() - start)
                self.answers += 1
                if status != 200:
                    self.failures.append(status)
                self._stop.wait(0.1)

    def __enter__(self) -> "_HealthWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def _pool_busy(base_url: str) -> bool:
    """Whether the server's solver pool admits a computation now (GET /metrics)."""
    page = httpx.get(f"{base_url}/metrics", timeout=60).text
    return any(line.startswith("atlas_solver_searches_running ")
               and float(line.split()[1]) >= 1 for line in page.splitlines())


def _post(base_url: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{base_url}/v1/moe/placement", content=body, timeout=600,
                      headers={"content-type": "application/json"})


def test_a_58_layer_placement_leaves_healthz_answering_and_is_admitted_or_refused(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plans.db'}"
    env = {**LOAD_TOLERANT_ENV, "ATLAS_MAX_BODY_BYTES": str(64 << 20),
           "ATLAS_SOLVER_THREADS": "1", "ATLAS_SOLVER_QUEUE": "0"}
    body = _body(MOE_LAYERS)
    with running_server(url, tmp_path / "server.log", env=env) as server:
        with _HealthWatch(server.base_url) as health, ThreadPoolExecutor(4) as pool:
            first = pool.submit(_post, server.base_url, body)
            # A different placement while the first holds the only thread: refused at once.
            # The server's own gauge says when the first holds it (its body takes a while
            # to arrive and be read on a loaded host).
            deadline = time.monotonic() + 300
            while not first.done() and not _pool_busy(server.base_url):
                assert time.monotonic() < deadline, "the first placement never started"
                time.sleep(0.05)
            other = _post(server.base_url, _body(2, batch_offset=1))
            # Whether the first still held the thread when the other was answered: on a
            # badly loaded host the first can finish before the other's request is read.
            held_throughout = not first.done()
            copies = [pool.submit(_post, server.base_url, body) for _ in range(3)]
            answers = [first.result(), *(copy.result() for copy in copies)]
        if held_throughout:
            assert other.status_code == 503, other.text[:300]
            assert other.json()["code"] == "overloaded" and other.headers["Retry-After"]
        else:
            assert other.status_code == 200, other.text[:300]
        # Four copies at once: each is admitted or refused with 503 and Retry-After (a copy
        # arriving while the first body is served is refused before its body is read, as
        # large-bodies-busy; one admitted past that gate finds the pool full, overloaded).
        for answer in answers:
            assert answer.status_code in (200, 503), answer.text[:300]
            if answer.status_code == 503:
                assert answer.headers["Retry-After"]
                assert answer.json()["code"] in ("large-bodies-busy", "overloaded")
        assert any(answer.status_code == 503 for answer in answers[1:])
        assert answers[0].status_code == 200
        placed = answers[0].json()["layers"]
        assert len(placed) == MOE_LAYERS and all(layer["routes"] for layer in placed)
        assert health.answers > 10 and not health.failures
        assert health.slowest_s < HEALTH_BOUND_S, health.slowest_s
        print(f"58-layer placement: {len(answers[0].content) / 1e6:.1f} MB; /healthz "
              f"slowest {health.slowest_s:.2f} s over {health.answers} answers")


def test_an_answer_over_the_size_bound_is_refused_naming_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plans.db'}"
    env = {**LOAD_TOLERANT_ENV, "ATLAS_MAX_ANSWER_BYTES": str(2**20)}
    with running_server(url, tmp_path / "server.log", env=env) as server:
        refused = _post(server.base_url, _body(4))
        assert refused.status_code == 422, refused.text[:300]
        problem = refused.json()
        assert problem["code"] == "invalid-request"
        assert "ATLAS_MAX_ANSWER_BYTES" in problem["detail"]
        assert problem["errors"][0]["loc"] == ["body", "routes"]
        # Without the routes the same layers fit.
        shared = _post(server.base_url, _body(4, routes="shared"))
        assert shared.status_code == 200 and len(shared.json()["layers"]) == 4
        assert httpx.get(f"{server.base_url}/healthz", timeout=5).status_code == 200


LARGEST_TIMELINE = {"schedule": "zb_h1", "num_stages": 16, "num_micro_batches": 416,
                    "durations": {"F": 1.0, "B": 1.0, "W": 1.0}, "include_timeline": True}
"""3 x 16 x 416 = 19,968 ops: the largest timeline the default bound (20,000 ops) allows."""


def test_healthz_answers_within_a_second_while_the_largest_timeline_is_drawn(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plans.db'}"
    with running_server(url, tmp_path / "server.log", env=LOAD_TOLERANT_ENV) as server:
        with _HealthWatch(server.base_url) as health:
            answers = {fmt: httpx.post(f"{server.base_url}/v1/pipeline/simulate",
                                       params={"format": fmt}, json=LARGEST_TIMELINE,
                                       timeout=300)
                       for fmt in ("json", "svg", "trace")}
        for fmt, answer in answers.items():
            assert answer.status_code == 200, (fmt, answer.text[:300])
        assert b"<svg" in answers["svg"].content[:200] and len(answers["svg"].content) > 5e6
        assert len(answers["json"].json()["timeline"]) == 19_968
        assert health.answers > 5 and not health.failures
        assert health.slowest_s < 1.0, health.slowest_s
        print(f"largest timeline: /healthz slowest {health.slowest_s:.2f} s over "
              f"{health.answers} answers")
