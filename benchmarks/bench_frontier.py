"""CPU time of a GPU-count frontier against one plan (a benchmark, not a test).

Run: .venv/bin/python benchmarks/bench_frontier.py [--nodes 1-100] [--repeats 3]
     [--share 6] [--calls] [--sizes] [--first N]

The target: a frontier over 100 cluster sizes of one model costs less than 10 times the CPU
of one plan (Llama 3.1 70B on H100). The problem is `bench_planner.py`'s Llama
3.1 70B recipe (global batch 512 sequences of 8,192 tokens, default constraints) on H100
SXM5 nodes of 8 GPUs. One plan is 8 nodes (64 GPUs), timed after a first call in the same
process (imports and per-process caches warm) as the median process CPU time of
`--repeats` calls. The sweep is every node count of `--nodes` (default 1-100 nodes, 8-800
GPUs), run through `solver.run_level.frontier` in requests of at most
`api_schemas.run_level.MAX_FRONTIER_SIZES` sizes, each size with a `--share`-second share
of its request's time limit (6 s: every search of this problem ends by proof long before,
so the figures are the searches' own work, not the clock). The ratio is the sweep's CPU
over one plan's. `--calls` counts Python-level function calls (cProfile, load-independent)
of one plan and of the sweep in a second pass; `--sizes` prints each size's CPU time,
status and step time. `--first N` measures one size as the sweep meets it instead: the
sizes below N are swept first, then N nodes are planned twice, and the CPU of the first and
the second plan is printed with the share of the first spent generating, compiling and
simulating pipeline programs (`models.core.step_time.makespan._simulated`, timed around
each call). Process CPU time counts CP-SAT's worker threads, and the machine's
load average is printed before and after: on a shared machine CPU time is steadier than
wall time, but not immune to a busy host.

Latest figures (the release after 5bb0c81, 2-core host, load average about 1.0, run just
after 5bb0c81 on the same host): one plan 0.405 s CPU (0.446 s), the sweep of 1-100 nodes
55.86 s CPU (69.02 s), 137.8 x one plan (154.7 x); 90 sizes optimal and 10 infeasible in
both. The release after ed80c01, on a quicker day's host (load average about 1.0): one plan
0.232 s CPU after a first call of 0.542 s; the sweep of 1-100 nodes 37.62 s CPU, 162 x one
plan (d3bbe3c run just before: 37.72 s, 141 x of its 0.268 s one plan, the host's swing);
90 sizes optimal and 10 infeasible in both. The release after af966d4 on another day's host:
35.30 s, 159 x one plan of 0.222 s (af966d4: 36.14 s, 161 x).
`docs/speed.md` keeps the history. An earlier release's figures, each size searched on its
own as `frontier` does (2-core shared host, load average 3.0 before and 1.7 after,
`--sizes --calls`): one plan 1.23 s CPU on the first call, 0.65 s
after it; the sweep of 1-100 nodes 88.0 s CPU, 136 x one plan (the release before, run just
before it on the same host: 80.4 s, 127 x); 90 sizes optimal, 10 infeasible (the odd node
counts past 80 admit no mesh, since data parallelism must divide the 512 sequences and the
pipeline may not exceed the 80 layers). CPU time moves with the host's load by more than
the change: three more sweeps, each in a fresh process beside or in turn with one of the
release before (load average 3-4.8), took 81.7-92.8 s against its 91.5-110.8 s. Python
calls (load-independent): one warm plan 1.36 M; the sweep's first pass 111.8 M (116.9 M the
release before), its third pass in one process (`--calls`, after the sweep and `--sizes`)
84.7 M (113.6 M). `--sizes`, each size again after the sweep: 0.26-2.2 s a size, the odd
node counts from 21 to 39 0.95-2.2 s each: tensor and data parallelism take powers of two
here (64 heads, 512 sequences), so the odd part of the GPU count goes to the pipeline, whose
schedules of 21-39 stages (or twice that) are generated and simulated op by op.

What the sizes share: the layer parts and stage times are kept under the cluster without its
node count (`models.core.search_memo.node_free_cluster`), which none of them reads; but this
throughput sweep prices at each size only configurations of that size's GPU count, which
the keys hold, so it shares none of them between sizes (the fewest-GPUs and cost-per-token
objectives price every smaller count: a cost-per-token frontier of 2-6 nodes timed 3,858
stages instead of 12,268, with the same answers). The pipeline programs are shared: a size
whose schedule shapes a smaller size simulated replays the op order recorded then (event
loop runs of the first pass 1,234 -> 874 for 1,234 compilations; the 256 compiled programs
kept are let go long before a larger size comes back to their shapes, so a second pass
costs about what the first did). The acceptance (under 10 x) is not met: a size's work is
its own search of its own configurations (bounds, evaluations, simulations of shapes no
other size has, its common-plan search and its answer's re-timing), while the plan it is
compared with is a warm repeat that finds all of it kept.
"""

import argparse
import cProfile
import os
import pstats
import statistics
import time
from collections import Counter
from collections.abc import Callable

from api_schemas import ClusterInput, ModelPreset, PlanRequest, SolverLimits, TrainingSpec
from api_schemas.run_level import MAX_FRONTIER_SIZES, FrontierPoint, FrontierRequest
from models.core.step_time import makespan as makespan_module
from solver import plan
from solver.run_level import frontier

MODEL, GPU, NODES = "llama-3.1-70b", "h100-sxm5-80gb", 8
TRAINING = TrainingSpec(global_batch_size=512, sequence_length=8192)


def request(num_nodes: int, time_limit_s: float) -> PlanRequest:
    """The benchmark's plan request on `num_nodes` nodes."""
    return PlanRequest(model=ModelPreset(preset=MODEL),
                       cluster=ClusterInput(gpu=GPU, num_nodes=num_nodes), training=TRAINING,
                       solver=SolverLimits(time_limit_s=time_limit_s))


def node_counts(text: str) -> list[int]:
    """'1-100' or '1,2,4' or a mix ('1-4,8') as a list of node counts."""
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out += list(range(int(low), int(high or low) + 1))
    return out


def sweep(nodes: list[int], share_s: float) -> list[FrontierPoint]:
    """Every size of `nodes` through `frontier`, in requests of at most the API's sizes."""
    points: list[FrontierPoint] = []
    for start in range(0, len(nodes), MAX_FRONTIER_SIZES):
        chunk = nodes[start:start + MAX_FRONTIER_SIZES]
        base = request(NODES, min(600.0, share_s * len(chunk)))
        points += frontier(FrontierRequest(**dict(base), num_nodes_options=chunk)).points
    return points


def cpu_of(call: Callable[[], object]) -> float:
    """Process CPU seconds of one call."""
    used = time.process_time()
    call()
    return time.process_time() - used


def calls_of(call: Callable[[], object]) -> int:
    """Python-level function calls of one call (cProfile)."""
    profile = cProfile.Profile()
    profile.runcall(call)
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


def print_sizes(nodes: list[int], share_s: float) -> None:
    """Each size alone (one request per size): its CPU time, status and step time."""
    for n in nodes:
        used = time.process_time()
        point = sweep([n], share_s)[0]
        cpu = time.process_time() - used
        step = "-" if point.step_time_s is None else f"{point.step_time_s:.3f} s"
        print(f"  {n:4d} nodes {cpu:7.3f} s CPU {point.status.value:>10s} step {step}")


def first_plan_split(num_nodes: int, share_s: float) -> None:
    """`--first`: the sizes below `num_nodes` swept, then `num_nodes` planned twice; the CPU
    of each plan and the first plan's CPU inside the pipeline simulation."""
    sweep(list(range(1, num_nodes)), share_s)
    spent = [0.0]
    simulated = makespan_module._simulated

    def timed(*args: object) -> float:
        started = time.process_time()
        try:
            return simulated(*args)  # type: ignore[arg-type]
        finally:
            spent[0] += time.process_time() - started

    one = request(num_nodes, 600.0)
    makespan_module._simulated = timed  # type: ignore[assignment]
    try:
        first = cpu_of(lambda: plan(one))
    finally:
        makespan_module._simulated = simulated
    again = cpu_of(lambda: plan(one))
    print(f"{num_nodes} nodes after the sizes below it: first plan {first:.3f} s CPU, "
          f"{spent[0]:.3f} s of it in pipeline programs ({100 * spent[0] / first:.0f}%); "
          f"the same plan again {again:.3f} s CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1-100", help="node counts, e.g. 1-100 or 1,2,4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--share", type=float, default=6.0, help="seconds of limit per size")
    parser.add_argument("--calls", action="store_true", help="count Python calls too")
    parser.add_argument("--sizes", action="store_true", help="print every size")
    parser.add_argument("--first", type=int, help="time one size as the sweep meets it")
    args = parser.parse_args()
    nodes = node_counts(args.nodes)
    print(f"load average before: {os.getloadavg()}")
    if args.first:
        first_plan_split(args.first, args.share)
        print(f"load average after: {os.getloadavg()}")
        return
    one = request(NODES, 600.0)
    first = cpu_of(lambda: plan(one))
    single = statistics.median(cpu_of(lambda: plan(one)) for _ in range(args.repeats))
    print(f"one plan ({MODEL}, {NODES * 8} x {GPU}): first call {first:.3f} s CPU, "
          f"median of {args.repeats} after it {single:.3f} s CPU")
    plan_calls = calls_of(lambda: plan(one)) if args.calls else 0
    points: list[FrontierPoint] = []
    total = cpu_of(lambda: points.extend(sweep(nodes, args.share)))
    print(f"sweep of {len(nodes)} sizes ({min(nodes)}-{max(nodes)} nodes): {total:.2f} s CPU, "
          f"{total / single:.1f} x one plan")
    print("statuses:", dict(Counter(p.status.value for p in points)))
    if args.sizes:
        print_sizes(nodes, args.share)
    if args.calls:
        sweep_calls = calls_of(lambda: sweep(nodes, args.share))
        print(f"Python calls: one plan {plan_calls:,}, sweep {sweep_calls:,} "
              f"({sweep_calls / plan_calls:.1f} x)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
