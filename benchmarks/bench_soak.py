"""Soak: mixed load on the real HTTP service for a while; RSS over time, p50/p99 latency per
endpoint, and every status seen.

Run: .venv/bin/python benchmarks/bench_soak.py [--minutes 10] [--clients 8]
                                              [--database-url URL] [--workers 1]

Starts `atlas-planner serve` on a free loopback port (SQLite in a temporary directory unless
--database-url is given), then `--clients` threads each send requests back to back for
`--minutes`, drawing from a fixed mix: health checks, evaluations, memory ledgers,
collective estimates, pipeline simulations (summary), stored-plan reads and listings, plan
requests answered from the store, and a new small search about every 20th request. The
server's resident memory (its whole process group) is sampled every `--sample` seconds.
Prints per endpoint: count, p50, p99 (ms) and statuses; then RSS at start, end and peak,
and the growth rate over the second half of the run (MiB/min). Stops by itself.
"""

import argparse
import os
import random
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
from bench_service_load import ATLAS_PLANNER, free_port, stop_process_group

from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE


def small_plan(seed: int) -> dict[str, Any]:
    """Llama 3.1 8B on 8 H100s with a 1 s limit; the seed makes it a distinct request."""
    return {"model": {"preset": "llama-3.1-8b"},
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
            "training": {"global_batch_size": 64, "sequence_length": 4096},
            "solver": {"time_limit_s": 1, "top_k": 1, "num_workers": 1, "random_seed": seed}}


SIMULATE = {"schedule": "interleaved_1f1b", "num_stages": 8, "num_micro_batches": 32,
            "num_chunks": 2, "include_timeline": False}
COLLECTIVE = {"collective": "all_reduce", "num_ranks": 64, "message_bytes": 2**28,
              "bandwidth_bytes_per_s": 50e9, "latency_s": 1e-5}


def group_rss_mib(pid: int) -> float:
    """Resident memory of a process and every process of its group (the workers), MiB."""
    total_kib = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != pid:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total_kib / 1024


class Soak:
    """The load: client threads, their latencies and statuses, and the RSS samples."""

    def __init__(self, base_url: str, seconds: float) -> None:
        self.base_url = base_url
        self.deadline = time.monotonic() + seconds
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.statuses: dict[str, Counter[int]] = defaultdict(Counter)
        self.plan_ids: list[str] = []
        self.lock = threading.Lock()
        self.seed = 1_000

    def _pick(self, rng: random.Random) -> tuple[str, str, str, Any]:
        """(label, method, path, body) of the next request."""
        roll = rng.random()
        if roll < 0.05:
            with self.lock:
                self.seed += 1
                seed = self.seed
            return "POST /v1/plans (new)", "POST", "/v1/plans", small_plan(seed)
        if roll < 0.15:
            return "POST /v1/plans (stored)", "POST", "/v1/plans", small_plan(rng.randrange(3))
        if roll < 0.30:
            return "POST /v1/evaluate", "POST", "/v1/evaluate", EVALUATE_REQUEST_EXAMPLE
        if roll < 0.40:
            return "POST /v1/ledger/memory", "POST", "/v1/ledger/memory", EVALUATE_REQUEST_EXAMPLE
        if roll < 0.50:
            return ("POST /v1/collectives/estimate", "POST", "/v1/collectives/estimate",
                    COLLECTIVE)
        if roll < 0.60:
            return "POST /v1/pipeline/simulate", "POST", "/v1/pipeline/simulate", SIMULATE
        if roll < 0.75:
            with self.lock:
                plan_id = rng.choice(self.plan_ids) if self.plan_ids else "0" * 32
            return "GET /v1/plans/{id}", "GET", f"/v1/plans/{plan_id}", None
        if roll < 0.90:
            return "GET /v1/plans", "GET", f"/v1/plans?limit=20&offset={rng.randrange(5)}", None
        return "GET /healthz", "GET", "/healthz", None

    def client(self, index: int) -> None:
        rng = random.Random(index)
        with httpx.Client(base_url=self.base_url, timeout=120) as http:
            while time.monotonic() < self.deadline:
                label, method, path, body = self._pick(rng)
                start = time.monotonic()
                try:
                    response = http.request(method, path, json=body)
                    status = response.status_code
                except httpx.TransportError:
                    status = 0
                took = time.monotonic() - start
                with self.lock:
                    self.latencies[label].append(took)
                    self.statuses[label][status] += 1
                    if status == 201:
                        self.plan_ids.append(response.json()["id"])


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _slope_mib_per_min(samples: list[tuple[float, float]]) -> float:
    half = samples[len(samples) // 2:]
    if len(half) < 2:
        return 0.0
    times = [t / 60 for t, _ in half]
    rss = [r for _, r in half]
    mean_t, mean_r = statistics.fmean(times), statistics.fmean(rss)
    var = sum((t - mean_t) ** 2 for t in times)
    return sum((t - mean_t) * (r - mean_r) for t, r in zip(times, rss, strict=True)) / var


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--sample", type=float, default=10.0, help="RSS sample period (s)")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = args.database_url or f"sqlite:///{Path(scratch) / 'plans.db'}"
        port = free_port()
        env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
        log = (Path(scratch) / "server.log").open("wb")
        server = subprocess.Popen(
            [str(ATLAS_PLANNER), "serve", "--host", "127.0.0.1", "--port", str(port),
             "--database-url", url, "--workers", str(args.workers), "--log-level", "warning"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        base_url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(1800):
                try:
                    if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            soak = Soak(base_url, args.minutes * 60)
            samples = [(0.0, group_rss_mib(server.pid))]
            threads = [threading.Thread(target=soak.client, args=(i,))
                       for i in range(args.clients)]
            start = time.monotonic()
            for thread in threads:
                thread.start()
            while any(thread.is_alive() for thread in threads):
                time.sleep(min(args.sample, max(0.1, soak.deadline - time.monotonic())))
                samples.append((time.monotonic() - start, group_rss_mib(server.pid)))
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - start
        finally:
            stop_process_group(server, wait_s=30)
            log.close()
    total = sum(len(v) for v in soak.latencies.values())
    print(f"soak: {elapsed / 60:.1f} min, {args.clients} clients, {args.workers} worker(s), "
          f"{'PostgreSQL' if args.database_url else 'SQLite'}, {total} requests, "
          f"{os.cpu_count()} CPUs")
    print(f"{'endpoint':<32} {'count':>6} {'p50 ms':>8} {'p99 ms':>8}  statuses")
    for label in sorted(soak.latencies):
        values = soak.latencies[label]
        statuses = ", ".join(f"{code}: {n}" for code, n in sorted(soak.statuses[label].items()))
        print(f"{label:<32} {len(values):>6} {1000 * _percentile(values, 0.5):>8.1f} "
              f"{1000 * _percentile(values, 0.99):>8.1f}  {statuses}")
    rss = [r for _, r in samples]
    print(f"RSS MiB: start {rss[0]:.1f}, end {rss[-1]:.1f}, peak {max(rss):.1f}; growth over "
          f"the second half {_slope_mib_per_min(samples):+.2f} MiB/min")


if __name__ == "__main__":
    main()
