"""POST /v1/moe/placement on the real HTTP service: answer time and size by route listing.

Run: .venv/bin/python benchmarks/bench_placement_api.py [--repeats 5] [--layers 58]

Starts `atlas-planner serve` (SQLite in a temporary directory, as `bench_service_load.py`
does) and sends, at E=256, R=64, K=8 with uniform routing (S=4096 tokens per rank), one
layer as `tokens` and all MoE layers of DeepSeek-V3 as `layers`, once per route listing
(`routes`: all, shared, none). Prints the median wall time from send to full body, the
answer's bytes and routes, and the median of the planner's own `wall_time_s` per layer over
the repeats (it includes turning the JSON lists into arrays): what the listing, not the
planning, costs. A `layers` body over the service's body limit
(`ATLAS_MAX_BODY_BYTES`, 4 MiB by default) is sent with that limit raised for the run.
"""

import argparse
import json
import statistics
import time

import httpx
import numpy as np
from bench_service_load import running_server

from models.core.moe import RoutingSkew, SkewKind, routing_counts

E, R, K, S = 256, 64, 8, 4096
MOE_LAYERS = 58
"""DeepSeek-V3's MoE layers (arXiv:2412.19437 Sec. 4.2)."""
LISTINGS = ("all", "shared", "none")


def _layer(batch: int) -> list[list[int]]:
    counts = routing_counts(RoutingSkew(kind=SkewKind.UNIFORM), num_experts=E, num_ranks=R,
                            top_k=K, tokens_per_rank=S, seed=2024, batch=batch)
    rows: list[list[int]] = counts.tolist()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=MOE_LAYERS)
    args = parser.parse_args()
    layers = [_layer(b % 3) for b in range(args.layers)]
    bodies = {"one layer": {"tokens": layers[0]}, f"{args.layers} layers": {"layers": layers}}
    with running_server(1, settings={"ATLAS_MAX_BODY_BYTES": str(64 << 20)}) as (_, base_url):
        print(f"{'request':<12}{'routes':>8}{'median s':>10}{'MB':>8}{'routes':>10}"
              f"{'planner ms/layer':>18}")
        with httpx.Client(base_url=base_url, timeout=600) as client:
            for name, part in bodies.items():
                for listing in LISTINGS:
                    body = json.dumps({"num_experts": E, "top_k": K, "routes": listing}
                                      | part)
                    times, planner_s = [], []
                    for _ in range(args.repeats):
                        started = time.perf_counter()
                        answer = client.post("/v1/moe/placement", content=body,
                                             headers={"content-type": "application/json"})
                        times.append(time.perf_counter() - started)
                        answer.raise_for_status()
                        result = answer.json()
                        placed = result.get("layers", [result])
                        planner_s += [x["wall_time_s"] for x in placed]
                    routes = sum(len(x["routes"]) for x in placed)
                    planner_ms = float(np.median(planner_s)) * 1e3
                    print(f"{name:<12}{listing:>8}{statistics.median(times):>10.3f}"
                          f"{len(answer.content) / 1e6:>8.2f}{routes:>10,}"
                          f"{planner_ms:>18.3f}")


if __name__ == "__main__":
    main()
