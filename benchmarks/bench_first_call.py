"""First calls: each problem planned once in a fresh interpreter, as a command line runs it.

Run: .venv/bin/python benchmarks/bench_first_call.py [--time-limit 10] [--only deepseek-v3]

`bench_planner.py` repeats each problem in one process, so its medians are warm: the
schedules' programs, the simulator's recorded orders and the memos are already filled. A
user's `atlas-planner plan` starts cold every time. This script starts a new interpreter
per problem and reports the wall time of `solver.plan` in it, not counting imports, with
its status, proven gap, exact evaluations, the step time of the plan it shows and that of
the best plan it found (`robust_choice.optimum_step_time_s`; the robust choice may show a
plan without an experimental mechanism instead): twelve catalog models at 4k and 32k
tokens on H100 clusters sized for them, each with no constraint but the default time
limit. `unknown` means the limit ran out before any plan was evaluated.
"""

import argparse
import json
import subprocess
import sys
import time

PROBLEMS = [
    # (preset, GPU, nodes, global batch in sequences)
    ("llama-3.1-8b", "h100-sxm5-80gb", 2, 64),
    ("llama-3.1-70b", "h100-sxm5-80gb", 8, 256),
    ("llama-3.1-405b", "h100-sxm5-80gb", 64, 1024),
    ("deepseek-v3", "h100-sxm5-80gb", 32, 1024),
    ("qwen3-235b-a22b", "h100-sxm5-80gb", 16, 512),
    ("qwen3-30b-a3b", "h100-sxm5-80gb", 4, 256),
    ("mixtral-8x22b", "h100-sxm5-80gb", 8, 256),
    ("gemma-3-27b-it", "h100-sxm5-80gb", 4, 128),
    ("gpt-oss-20b", "h100-sxm5-80gb", 2, 64),
    ("kimi-k2-instruct", "h100-sxm5-80gb", 64, 1024),
    ("llama-4-scout-17b-16e", "h100-sxm5-80gb", 4, 64),
    ("kimi-linear-48b-a3b-instruct", "h100-sxm5-80gb", 4, 64),
]
SEQUENCE_LENGTHS = (4096, 32768)


def _one(preset: str, gpu: str, nodes: int, batch: int, seq: int, limit_s: float) -> None:
    """Plan one problem in this interpreter and print its figures as one JSON line."""
    from api_schemas import (
        ClusterInput,
        Constraints,
        ModelPreset,
        PlanRequest,
        SolverLimits,
        TrainingSpec,
    )
    from solver import plan

    request = PlanRequest(model=ModelPreset(preset=preset),
                          cluster=ClusterInput(gpu=gpu, num_nodes=nodes),
                          training=TrainingSpec(global_batch_size=batch, sequence_length=seq),
                          constraints=Constraints(), solver=SolverLimits(time_limit_s=limit_s))
    started = time.perf_counter()
    response = plan(request)
    wall_s = time.perf_counter() - started
    solver = response.solver
    print(json.dumps({"wall_s": wall_s, "status": response.status.value,
                      "gap": solver.gap if solver else None,
                      "evaluated": solver.evaluated if solver else None,
                      "candidates": solver.candidates if solver else None,
                      "step_s": response.time.step_time_s if response.time else None,
                      "best_s": (response.robust_choice.optimum_step_time_s
                                 if response.robust_choice else None)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--only", help="run only the presets whose name contains this")
    parser.add_argument("--one", nargs=5, metavar=("PRESET", "GPU", "NODES", "BATCH", "SEQ"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        preset, gpu, nodes, batch, seq = args.one
        _one(preset, gpu, int(nodes), int(batch), int(seq), args.time_limit)
        return
    print(f"{'model':30s} {'tokens':>6s} {'nodes':>5s} {'wall s':>7s} {'status':>9s} "
          f"{'gap':>6s} {'evals':>6s} {'cands':>7s} {'step s':>8s} {'best s':>8s}")
    for preset, gpu, nodes, batch in PROBLEMS:
        if args.only and args.only not in preset:
            continue
        for seq in SEQUENCE_LENGTHS:
            command = [sys.executable, __file__, "--time-limit", str(args.time_limit),
                       "--one", preset, gpu, str(nodes), str(batch), str(seq)]
            done = subprocess.run(command, capture_output=True, text=True, check=False,
                                  timeout=args.time_limit * 6 + 60)
            lines = done.stdout.strip().splitlines()
            if done.returncode or not lines:
                print(f"{preset:30s} {seq:6d} {nodes:5d}  failed: "
                      f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}")
                continue
            row = json.loads(lines[-1])
            gap = f"{100 * row['gap']:.1f}%" if row["gap"] is not None else "-"
            step, best = (f"{row[key]:8.3f}" if row.get(key) is not None else f"{'-':>8s}"
                          for key in ("step_s", "best_s"))
            print(f"{preset:30s} {seq:6d} {nodes:5d} {row['wall_s']:7.2f} "
                  f"{row['status']:>9s} {gap:>6s} {row['evaluated'] or 0:6d} "
                  f"{row['candidates'] or 0:7d} {step} {best}", flush=True)


if __name__ == "__main__":
    main()
