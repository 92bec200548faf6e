"""Resident memory of the real service across large searches: does it return near its
start-up value once they are done?

Run: .venv/bin/python benchmarks/bench_search_memory.py [--searches 8] [--time-limit 20]

Starts `atlas-planner serve` (SQLite in a temporary directory, as `bench_service_load.py`
does), reads its RSS once healthy and after one small warm-up plan, then sends `--searches`
distinct large plan requests one after the other (Kimi K2 on 4,096 to 65,536 H100s,
DeepSeek-V3 and Llama 3.1 405B on 8,192 to 16,384, different batches so that none is
answered from the store) and prints the RSS after each, the peak, and the RSS 2 s after
the last (the search caches are released when the solver pool falls idle).
"""

import argparse
import time
from pathlib import Path
from typing import Any

import httpx
from bench_service_load import running_server

SEARCHES: list[tuple[str, int, int]] = [
    ("kimi-k2-instruct", 8192, 4096), ("kimi-k2-instruct", 4096, 2048),
    ("deepseek-v3", 2048, 4096), ("llama-3.1-405b", 1024, 2048),
    ("kimi-k2-instruct", 2048, 8192), ("deepseek-v3", 1024, 2048),
    ("llama-3.1-405b", 2048, 4096), ("kimi-k2-instruct", 1024, 2048),
]
"""(model preset, nodes of 8 H100s, global batch): large searches, each distinct."""


def rss_mib(pid: int) -> float:
    """Resident set size of a process in MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def body(model: str, nodes: int, batch: int, time_limit_s: float) -> dict[str, Any]:
    return {"model": {"preset": model},
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": nodes},
            "training": {"global_batch_size": batch, "sequence_length": 4096},
            "solver": {"time_limit_s": time_limit_s, "top_k": 3}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=len(SEARCHES))
    parser.add_argument("--time-limit", type=float, default=20.0)
    args = parser.parse_args()
    settings = {"ATLAS_MAX_TIME_LIMIT_S": str(args.time_limit),
                "ATLAS_TIME_LIMIT_GRACE_S": "120", "ATLAS_STORE_TIMEOUT_S": "30"}
    with running_server(1, settings=settings) as (process, base_url):
        with httpx.Client(base_url=base_url, timeout=600) as client:
            start = rss_mib(process.pid)
            client.post("/v1/plans", json=body("llama-3.1-8b", 1, 64, 5.0))
            time.sleep(2)
            warm = rss_mib(process.pid)
            print(f"RSS at start-up {start:.0f} MiB, after a small plan {warm:.0f} MiB")
            peak = warm
            for index in range(args.searches):
                model, nodes, batch = SEARCHES[index % len(SEARCHES)]
                began = time.perf_counter()
                answer = client.post("/v1/plans",
                                     json=body(model, nodes, batch, args.time_limit))
                took = time.perf_counter() - began
                now = rss_mib(process.pid)
                peak = max(peak, now)
                print(f"{index + 1}: {model} on {nodes * 8} GPUs, batch {batch}: "
                      f"{answer.status_code} in {took:.1f} s, RSS {now:.0f} MiB")
            time.sleep(2)
            end = rss_mib(process.pid)
            print(f"peak {peak:.0f} MiB; 2 s after the last search {end:.0f} MiB "
                  f"({end - start:+.0f} MiB from start-up)")


if __name__ == "__main__":
    main()
