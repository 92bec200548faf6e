"""Planner solve time on published-scale problems (a benchmark, not a test).

Run: .venv/bin/python benchmarks/bench_planner.py [--repeats 3] [--time-limit 10]
     [--busy 2] [--open] [--save runs.json] [--compare runs.json]

For each problem: median, min and max wall time of `solver.plan` over the repeats, the
median CPU time of this process during the call (steadier than wall time on a shared
machine; CP-SAT's worker threads count in it), the
largest wall time against the time limit (`over` when an answer came later than the limit
plus `LIMIT_SLACK_S`), the worst status over the repeats (a first call in a fresh
process that stops at the limit shows, even when the later calls prove optimality) with
that call's proven gap, candidates and evaluations, and the chosen plan. `--busy N` runs
the problems beside N processes that keep a core busy each (a loaded machine). `--save`
writes the figures to a JSON file; `--compare` prints a saved run's median and status
beside this one's and whether the chosen plan and its step time are the same. `--open`
adds each problem again with every optional mechanism the search may choose allowed
(`OPEN_CONSTRAINTS`: framework 'any', FP8 activation storage, activation offload, Pipeline
ZeRO-2 host gradient shards, remote activation offload), labelled "+ open".

To measure another release for `--compare`, run this script from that release's checkout
with `PYTHONPATH` set to that checkout: the virtual environment's editable install
otherwise imports this checkout's packages whatever the working directory.
"""

import argparse
import json
import multiprocessing
import statistics
import time
from pathlib import Path
from typing import Any

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    PlanRequest,
    PlanStatus,
    SolverLimits,
    TrainingSpec,
)
from solver import plan
from solver.explain import describe_parallel

PROBLEMS = [
    ("Llama 3.1 405B, 16,384 H100", "llama-3.1-405b", "h100-sxm5-80gb", 2048,
     TrainingSpec(global_batch_size=2048, sequence_length=8192)),
    ("DeepSeek-V3, 2,048 H800", "deepseek-v3", "h800-sxm5-80gb", 256,
     TrainingSpec(global_batch_size=15360, sequence_length=4096, compute_dtype="fp8",
                  optimizer="adamw", optimizer_state_dtype="bf16",
                  moe_keep_expert_outputs=False)),
    ("GPT 1T, 3,072 A100", "gpt-1008b", "a100-sxm4-80gb", 384,
     TrainingSpec(global_batch_size=3072, sequence_length=2048)),
    ("Llama 3.1 70B, 64 H100", "llama-3.1-70b", "h100-sxm5-80gb", 8,
     TrainingSpec(global_batch_size=512, sequence_length=8192)),
]

OPEN_CONSTRAINTS = Constraints(framework="any", allow_fp8_activations=True, allow_offload=True,
                               allow_gradient_host_shards=True, allow_remote_offload=True)
"""Every optional mechanism the search may choose, allowed (`--open`)."""

LIMIT_SLACK_S = 0.5
"""How far past the time limit an answer may come (start-up of the call aside)."""
STATUS_ORDER = (PlanStatus.OPTIMAL, PlanStatus.FEASIBLE, PlanStatus.INFEASIBLE,
                PlanStatus.UNKNOWN)
"""Statuses from best to worst: the table reports the worst of a problem's repeats."""


def problem_requests(*, with_open: bool, time_limit_s: float) -> list[tuple[str, PlanRequest]]:
    """Each benchmark problem as a labelled plan request, then (`with_open`) each again with
    `OPEN_CONSTRAINTS`, labelled "+ open"."""
    cases = [(label, model, gpu, nodes, training, Constraints())
             for label, model, gpu, nodes, training in PROBLEMS]
    if with_open:
        cases += [(f"{label} + open", model, gpu, nodes, training, OPEN_CONSTRAINTS)
                  for label, model, gpu, nodes, training in PROBLEMS]
    return [(label, PlanRequest(model=ModelPreset(preset=model),
                                cluster=ClusterInput(gpu=gpu, num_nodes=nodes),
                                training=training, constraints=constraints,
                                solver=SolverLimits(time_limit_s=time_limit_s, top_k=3)))
            for label, model, gpu, nodes, training, constraints in cases]


def _spin(stop: Any) -> None:
    """Keep one core busy until `stop` is set (a background load)."""
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x = (x * 31 + 7) % 1_000_003


def _run(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    print(f"{'problem':37s} {'median s':>9s} {'min s':>7s} {'max s':>7s} {'cpu s':>6s} "
          f"{'limit':>6s} "
          f"{'status':>9s} {'gap':>6s} {'cands':>6s} {'evals':>6s}  plan")
    figures: dict[str, dict[str, Any]] = {}
    for label, request in problem_requests(with_open=args.open, time_limit_s=args.time_limit):
        times, cpu, responses = [], [], []
        for _ in range(args.repeats):
            started, used = time.perf_counter(), time.process_time()
            responses.append(plan(request))
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - used)
        response = max(responses, key=lambda r: STATUS_ORDER.index(r.status))
        assert response.solver is not None
        gap = response.solver.gap
        layout = describe_parallel(response.parallel) if response.parallel else "-"
        step = f", {response.time.step_time_s:.2f} s/step, MFU {response.throughput.mfu:.1%}" \
            if response.time and response.throughput else ""
        over = max(times) > args.time_limit + LIMIT_SLACK_S
        limit = "over" if over else "ok"
        print(f"{label:37s} {statistics.median(times):9.2f} {min(times):7.2f} {max(times):7.2f} "
              f"{statistics.median(cpu):6.2f} {limit:>6s} {response.status.value:>9s} "
              f"{(f'{100 * gap:.1f}%' if gap is not None else '-'):>6s} "
              f"{response.solver.candidates:6d} {response.solver.evaluated:6d}  {layout}{step}")
        figures[label] = {
            "median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "cpu_s": statistics.median(cpu),
            "time_limit_s": args.time_limit, "over_limit": over,
            "status": response.status.value, "gap": gap,
            "evaluated": response.solver.evaluated, "candidates": response.solver.candidates,
            "parallel": response.parallel.model_dump(mode="json") if response.parallel else None,
            "step_time_s": response.time.step_time_s if response.time else None,
        }
    return figures


def _compare(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> None:
    print(f"\n{'problem':37s} {'before s':>9s} {'cpu s':>6s} {'status':>9s} {'after s':>9s} "
          f"{'cpu s':>6s} {'status':>9s} {'cpu speed-up':>12s}  same plan and step time")
    for label, now in after.items():
        then = before.get(label)
        if then is None:
            print(f"{label:37s} {'-':>9s}")
            continue
        # Fields a newer ParallelConfig adds (at their defaults) are not a change of plan.
        before_plan, after_plan = then["parallel"] or {}, now["parallel"] or {}
        shared = before_plan.keys() & after_plan.keys()
        same = ((then["parallel"] is None) == (now["parallel"] is None)
                and all(before_plan[k] == after_plan[k] for k in shared)
                and then["step_time_s"] == now["step_time_s"])
        print(f"{label:37s} {then['median_s']:9.2f} {then['cpu_s']:6.2f} {then['status']:>9s} "
              f"{now['median_s']:9.2f} {now['cpu_s']:6.2f} {now['status']:>9s} "
              f"{then['cpu_s'] / now['cpu_s']:11.1f}x  {'yes' if same else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--busy", type=int, default=0,
                        help="background processes keeping a core busy each")
    parser.add_argument("--open", action="store_true",
                        help="also run each problem with every optional mechanism allowed")
    parser.add_argument("--save", type=Path, help="write the figures to this JSON file")
    parser.add_argument("--compare", type=Path, help="a JSON file written by --save")
    args = parser.parse_args()
    stop = multiprocessing.Event()
    load = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
            for _ in range(args.busy)]
    for process in load:
        process.start()
    try:
        if args.busy:
            print(f"with {args.busy} busy background processes")
        figures = _run(args)
    finally:
        stop.set()
        for process in load:
            process.join(timeout=5)
    if args.save:
        args.save.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    if args.compare:
        _compare(json.loads(args.compare.read_text()), figures)


if __name__ == "__main__":
    main()
