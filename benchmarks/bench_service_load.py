"""Load on the real HTTP service: requests/s and p50/p99 latency at 8 and 64 clients.

Run: .venv/bin/python benchmarks/bench_service_load.py [--requests 400] [--workers 1]

Starts `atlas-planner serve` on a free port with SQLite in a temporary directory, then, for
each scenario and concurrency, keeps that many requests in flight until the count is sent.
Scenarios: POST /v1/ledger/memory (Llama 3.1 405B on 16,384 H100s, 16 stages); and, when the
service has POST /v1/plans, small plan requests (Llama 3.1 8B on 32 H100s, 2 s limit), each
distinct (every request is a new search) and then repeated (answered from the store).
Prints one table row per scenario and concurrency; latency counts from send to full body;
503 answers (the solver pool and its queue full) are counted under `statuses`.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE

# The server helpers of the tests (tests/serving.py), for the benchmarks that import them here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from serving import free_port, stop_process_group  # noqa: E402, F401

ATLAS_PLANNER = Path(sys.executable).parent / "atlas-planner"
CONCURRENCY = (8, 64)


def small_plan(seed: int) -> dict[str, Any]:
    """A small plan request: Llama 3.1 8B on 4 nodes of 8 H100s, 2 s search limit.

    The CP-SAT seed is part of the request, so distinct seeds are distinct requests (new
    searches of the same size) and a repeated seed is answered from the store.
    """
    return {
        "model": {"preset": "llama-3.1-8b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 4, "gpus_per_node": 8},
        "training": {"global_batch_size": 256, "sequence_length": 4096},
        "solver": {"time_limit_s": 2, "top_k": 3, "num_workers": 1, "random_seed": seed},
    }


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                    path: str, body: bytes) -> int:
    """One HTTP/1.1 keep-alive POST; returns the status (the body is read and dropped)."""
    writer.write(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: bench\r\n"
                 b"Content-Type: application/json\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in lines
                  if line.lower().startswith(b"content-length:"))
    await reader.readexactly(length)
    return int(lines[0].split()[1])


async def _drive(base_url: str, *, path: str, body_of: Callable[[int], dict[str, Any]],
                 total: int, concurrency: int) -> tuple[float, list[float], dict[int, int]]:
    """Keep `concurrency` connections busy until `total` requests are answered.

    A minimal HTTP/1.1 client on asyncio streams: httpx's connection pool, not the
    service, becomes the bottleneck at 64 concurrent connections on a small machine.
    """
    host, port = base_url.removeprefix("http://").split(":")
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    counter = iter(range(total))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for index in counter:
                body = json.dumps(body_of(index)).encode()
                start = time.perf_counter()
                status = await _exchange(reader, writer, path=path, body=body)
                latencies.append(time.perf_counter() - start)
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            writer.close()

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - began, latencies, statuses


def _row(body_of: Callable[[int, int], dict[str, Any]],
         row: int) -> Callable[[int], dict[str, Any]]:
    return lambda index: body_of(index, row)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def start_server(directory: Path, workers: int, *,
                  settings: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """`atlas-planner serve` on a free port with SQLite in `directory` and `settings` in its
    environment: the process and its base URL, once /healthz answers."""
    port = free_port()
    command = [str(ATLAS_PLANNER), "serve", "--port", str(port), "--workers", str(workers),
               "--database-url", f"sqlite:///{directory / 'plans.db'}", "--log-level",
               "warning"]
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | settings
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return process, base_url
        except httpx.TransportError:
            time.sleep(0.1)
    process.terminate()
    raise SystemExit("the server did not start")


@contextmanager
def running_server(workers: int, *, settings: dict[str, str]
                   ) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`start_server` with SQLite in a temporary directory; the server stops on leaving."""
    with tempfile.TemporaryDirectory() as directory:
        process, base_url = start_server(Path(directory), workers, settings=settings)
        try:
            yield process, base_url
        finally:
            process.terminate()
            process.wait(timeout=30)


def main() -> None:
    """Run every scenario and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="requests per row")
    parser.add_argument("--plan-requests", type=int, default=64, help="plan requests per row")
    parser.add_argument("--workers", type=int, default=1, help="server processes")
    parser.add_argument("--solver-threads", type=int, help="ATLAS_SOLVER_THREADS")
    parser.add_argument("--solver-queue", type=int, help="ATLAS_SOLVER_QUEUE")
    args = parser.parse_args()
    settings = {name: str(value) for name, value in (
        ("ATLAS_SOLVER_THREADS", args.solver_threads), ("ATLAS_SOLVER_QUEUE", args.solver_queue))
        if value is not None}
    with running_server(args.workers, settings=settings) as (_process, base_url):
        paths = httpx.get(f"{base_url}/openapi.json").json()["paths"]
        # (name, path, body of request i in row r, requests per row)
        scenarios: list[tuple[str, str, Callable[[int, int], dict[str, Any]], int]] = [
            ("ledger/memory 405B", "/v1/ledger/memory",
             lambda _i, _r: EVALUATE_REQUEST_EXAMPLE, args.requests)]
        if "/v1/plans" in paths:
            scenarios.append(("plans, each distinct", "/v1/plans",
                              lambda i, r: small_plan(1 + r * 100_000 + i),
                              args.plan_requests))
            scenarios.append(("plans, repeated", "/v1/plans",
                              lambda _i, _r: small_plan(0), args.requests))
        header = (f"{'scenario':<24} {'clients':>7} {'requests':>8} {'req/s':>8} "
                  f"{'p50 ms':>8} {'p99 ms':>8}  statuses")
        described = ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
        sys.stdout.write(f"server: {args.workers} worker process(es), SQLite, "
                         f"{os.cpu_count()} CPUs, {described}\n{header}\n")
        for name, path, body_of, total in scenarios:
            for concurrency in CONCURRENCY:
                elapsed, lat, statuses = asyncio.run(_drive(
                    base_url, path=path, total=total, concurrency=concurrency,
                    body_of=_row(body_of, concurrency)))
                sys.stdout.write(
                    f"{name:<24} {concurrency:>7} {total:>8} {total / elapsed:>8.1f} "
                    f"{statistics.median(lat) * 1e3:>8.1f} "
                    f"{_percentile(lat, 0.99) * 1e3:>8.1f}  {dict(sorted(statuses.items()))}\n")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
