"""Requests with degenerate but finite numbers against a real server whose address space is
capped at 4 GB: each is refused (4xx naming the field) or answered within bounds, promptly,
and the server stays alive.

The frontier request below (Llama 3.1 70B, one byte of GPU memory, every bandwidth 1 B/s,
a stored calibration profile) once made the fewest-node relaxation list every whole-node
count up to ~1e11 nodes: 24 GB without a cap, a 500 (MemoryError) under it.
"""

import time
from pathlib import Path
from typing import Any

import httpx
from faultkit import LOAD_TOLERANT_ENV, hang_guard, running_server

from service.routes.calibration import RUNS_EXAMPLE

pytestmark = hang_guard

ADDRESS_SPACE_CAP_BYTES = 4_000_000 * 1024
"""`ulimit -v 4000000`: the cap the fault was reported under."""
ANSWER_BOUND_S = 60.0

_ONE_BYTE_PER_S = {key: 1 for key in (
    "hbm_bandwidth_bytes_per_s", "intra_node_bandwidth_bytes_per_s",
    "inter_node_bandwidth_bytes_per_s", "pcie_bandwidth_bytes_per_s",
    "host_memory_bandwidth_bytes_per_s")}


def degenerate_frontier(gpu_memory_bytes: int) -> dict[str, Any]:
    """The reported request, with the GPU memory to give."""
    return {"model": {"preset": "llama-3.1-70b"},
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 4, "profile": "our-h100",
                        "gpu_memory_bytes": gpu_memory_bytes, "memory_headroom_frac": 0.0,
                        **_ONE_BYTE_PER_S},
            "training": {"global_batch_size": 64, "sequence_length": 4096},
            "solver": {"time_limit_s": 20},
            "num_nodes_options": [4, 8, 16]}


SIBLINGS: list[tuple[str, dict[str, Any]]] = [
    ("/v1/frontier", {
        "model": {"preset": "llama-3.1-8b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 16, "profile": "our-h100",
                    "intra_node_bandwidth_bytes_per_s": 1, "pcie_bandwidth_bytes_per_s": 1000.0,
                    "host_memory_bandwidth_bytes_per_s": 1, "gpu_memory_bytes": 2**34,
                    "host_memory_bytes": 2**62, "memory_headroom_frac": 0},
        "training": {"global_batch_size": 2**20, "sequence_length": 4096},
        "solver": {"time_limit_s": 3}, "objective": "min_memory",
        "num_nodes_options": [1, 8192, 4]}),
    ("/v1/run/estimate", {
        "model": {"preset": "llama-3.1-8b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "profile": "our-h100",
                    "hbm_bandwidth_bytes_per_s": 1000.0, "intra_node_bandwidth_bytes_per_s": 1,
                    "inter_node_bandwidth_bytes_per_s": 1, "pcie_bandwidth_bytes_per_s": 1,
                    "host_memory_bandwidth_bytes_per_s": 1000.0},
        "training": {"global_batch_size": 2**20, "sequence_length": 2**22},
        "solver": {"time_limit_s": 3}, "token_budget": 10**18}),
]
"""Requests that answered 500 (MemoryError in a generated pipeline schedule) under the cap."""


def _post(base_url: str, path: str, body: dict[str, Any]) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    answer = httpx.post(f"{base_url}{path}", json=body, timeout=ANSWER_BOUND_S * 2)
    return answer, time.monotonic() - start


def test_degenerate_frontier_is_refused_or_bounded_under_an_address_space_cap(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plans.db'}"
    with running_server(url, tmp_path / "server.log", env=LOAD_TOLERANT_ENV,
                        address_space_bytes=ADDRESS_SPACE_CAP_BYTES) as server:
        stored = httpx.post(f"{server.base_url}/v1/calibration/runs", json=RUNS_EXAMPLE,
                            timeout=120)
        assert stored.status_code == 201, stored.text

        # As reported: one byte of GPU memory is below any plan's floor, refused by name.
        refused, took = _post(server.base_url, "/v1/frontier", degenerate_frontier(1))
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"][0]["loc"] == ["body", "cluster", "gpu_memory_bytes"]
        assert took < ANSWER_BOUND_S

        # Just above the floor, with 1 B/s links: every size searched, none has a plan, and
        # the relaxations stay within the cap (the answer names what was tried).
        bounded, took = _post(server.base_url, "/v1/frontier",
                              degenerate_frontier(600 * 2**20))
        assert bounded.status_code == 200, bounded.text
        points = bounded.json()["points"]
        assert [p["num_gpus"] for p in points] == [32, 64, 128]
        assert all(p["status"] == "infeasible" and "no plan" in p["summary"]
                   for p in points)
        assert took < ANSWER_BOUND_S

        # Siblings found by exploring degenerate numbers on every run-level endpoint: a
        # global batch of 2**20 sequences let the search try pipelines with ~1e6
        # micro-batches, whose schedules it generated op by op (MemoryError, 500).
        for path, body in SIBLINGS:
            answer, took = _post(server.base_url, path, body)
            assert answer.status_code < 500, (path, answer.text[:300])
            assert took < ANSWER_BOUND_S * 2, (path, took)

        assert server.process.poll() is None
        assert httpx.get(f"{server.base_url}/healthz", timeout=5).status_code == 200
        assert "MemoryError" not in server.log()
