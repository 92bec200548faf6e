"""Planner work counted, not timed: a speed record that a busy machine cannot blur.

Run: .venv/bin/python benchmarks/bench_work.py [--baseline benchmarks/work_baseline.json]
     [--baseline benchmarks/work_release.json] [--save FILE] [--only LABEL ...]
     [--instructions]

Seconds on a shared machine swing by +-20% from minute to minute, so a change that costs
10% cannot be seen in them. This benchmark counts instead, for each problem of
`bench_planner.py` (and the open search over every mechanism for GPT 1T), in a fresh
process so no cache of an earlier problem helps:

- `python_calls`: Python function calls made by `solver.plan` (profiler 'call' events);
- `builtin_calls`: calls into C functions and methods from Python ('c_call' events);
- `evaluated` and `candidates`: the search's exact evaluations and enumerated candidates;
- the answer: status, step time and layout, so a count that falls because the search
  stopped early is seen as a different answer rather than a speed-up.

With `--instructions`, each problem's count also has the CPU instructions of the call
(`instructions`): where valgrind is installed, the problem runs twice more in a fresh
interpreter under callgrind, once building its request and once building and planning it,
and the difference is the call's instructions (the imports the call makes included). Python
calls miss work that moves between Python and numpy (a loop over ops turned into a few
array operations per wave of ops makes more Python calls and runs fewer instructions); the
instruction count sees it, at about fifty times the CPU time of the call, so it is opt-in.
It is steadier than seconds but not exact: two runs of the Llama 3.1 70B call counted 3.89 G
and 3.99 G instructions (2.5% apart) with the same Python calls, so read changes of a few
percent as noise.

The counts are deterministic for a search that finishes (the same request gives the same
counts on any machine with the same Python and package versions). `--baseline` prints each
count beside a saved baseline's, with the change in percent, and names every count that
grew by more than `REGRESSION_SHARE` as a regression; the exit status stays 0 (a benchmark
reports, it does not gate). `--save` writes this run as a baseline. `--baseline` may be
given more than once, each compared in turn: `.ci/run` compares with
`benchmarks/work_baseline.json` (the release of commit d36a2f8, which the speed target is
set against; the search space has grown since, so some counts stay above it) and with
`benchmarks/work_release.json` (the latest release's counts), where a regression is this
change's own.
"""

import argparse
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REGRESSION_SHARE = 0.05
"""A count that grows by more than this share of its baseline is named a regression."""

OPEN_LABEL = "GPT 1T, 3,072 A100 + open"
"""The open search (every optional mechanism allowed) the counts include."""

COUNTS = ("python_calls", "builtin_calls", "evaluated", "candidates")


def _requests(time_limit_s: float) -> dict[str, Any]:
    from bench_planner import problem_requests

    requests = dict(problem_requests(with_open=True, time_limit_s=time_limit_s))
    return {label: request for label, request in requests.items()
            if not label.endswith("+ open") or label == OPEN_LABEL}


def _count_one(label: str, time_limit_s: float, queue: Any) -> None:
    """In a fresh process: plan one problem under a call counter and put its figures."""
    from solver import plan
    from solver.explain import describe_parallel

    request = _requests(time_limit_s)[label]
    counts = {"call": 0, "c_call": 0}

    def profiler(_frame: Any, event: str, _arg: Any) -> None:
        if event in counts:
            counts[event] += 1

    started = time.process_time()
    sys.setprofile(profiler)
    try:
        response = plan(request)
    finally:
        sys.setprofile(None)
    cpu_s = time.process_time() - started
    assert response.solver is not None
    queue.put({
        "python_calls": counts["call"], "builtin_calls": counts["c_call"],
        "evaluated": response.solver.evaluated, "candidates": response.solver.candidates,
        "status": response.status.value,
        "step_time_s": response.time.step_time_s if response.time else None,
        "layout": describe_parallel(response.parallel) if response.parallel else None,
        "profiled_cpu_s": cpu_s,
    })


def count(label: str, time_limit_s: float) -> dict[str, Any]:
    """The counts of one problem, measured in a fresh process."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_count_one, args=(label, time_limit_s, queue))
    process.start()
    figures: dict[str, Any] = queue.get()
    process.join()
    return figures


CHILD_FLAG = "--instructions-child"
"""The hidden mode `instructions` runs under callgrind: `setup` builds the request, `plan`
builds and plans it."""


def _child(mode: str, label: str, time_limit_s: float) -> None:
    from solver import plan

    request = _requests(time_limit_s)[label]
    if mode == "plan":
        plan(request)


def _collected(mode: str, label: str, time_limit_s: float) -> int:
    """Instructions of this script's child `mode` under callgrind (valgrind's own count)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict orders in every run
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         __file__, CHILD_FLAG, mode, label, str(time_limit_s)],
        capture_output=True, text=True, env=env, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count for {label} ({mode})")
    return int(found.group(1))


def instructions(label: str, time_limit_s: float) -> int | None:
    """CPU instructions of planning one problem in a fresh interpreter (the imports the call
    makes included): callgrind's count of building and planning the request less that of
    building it alone. None where valgrind is not installed."""
    if shutil.which("valgrind") is None:
        return None
    return _collected("plan", label, time_limit_s) - _collected("setup", label, time_limit_s)


def compare(baseline: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]) -> list[str]:
    """Lines of the comparison, and the regressions named at the end."""
    lines, regressions = [], []
    for label, figures in now.items():
        then = baseline.get(label)
        if then is None:
            lines.append(f"{label}: no baseline")
            continue
        same = (then["status"], then["layout"], then["step_time_s"]) == (
            figures["status"], figures["layout"], figures["step_time_s"])
        lines.append(f"{label}: {'same answer' if same else 'DIFFERENT answer'} "
                     f"({figures['status']}, {figures['layout']})")
        for key in (*COUNTS, "instructions"):
            if then.get(key) is None or figures.get(key) is None:
                continue  # instructions are counted only with --instructions
            change = figures[key] / then[key] - 1.0 if then[key] else 0.0
            lines.append(f"  {key:14s} {then[key]:>12,d} -> {figures[key]:>12,d} "
                         f"{100 * change:+7.1f}%")
            if change > REGRESSION_SHARE:
                regressions.append(f"{label}: {key} +{100 * change:.1f}%")
    lines.append("regressions: " + ("; ".join(regressions) if regressions else "none"))
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [CHILD_FLAG]:
        _child(argv[1], argv[2], float(argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, action="append", default=[],
                        help="a saved run to compare with (may be repeated)")
    parser.add_argument("--save", type=Path, default=None)
    parser.add_argument("--only", nargs="*", default=None, help="problem labels to count")
    parser.add_argument("--time-limit", type=float, default=60.0,
                        help="each search's time limit (long enough to finish: the counts "
                        "of a search cut by its limit depend on the machine's speed)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each call's CPU instructions under callgrind "
                        "(valgrind; about fifty times the call's CPU time)")
    args = parser.parse_args(argv)
    labels = [label for label in _requests(args.time_limit)
              if args.only is None or label in args.only]
    now = {}
    print(f"{'problem':37s} {'python calls':>13s} {'builtin calls':>14s} {'evals':>6s} "
          f"{'cands':>6s} {'status':>8s}")
    for label in labels:
        figures = count(label, args.time_limit)
        if args.instructions:
            figures["instructions"] = instructions(label, args.time_limit)
        now[label] = figures
        counted = figures.get("instructions")
        print(f"{label:37s} {figures['python_calls']:13,d} {figures['builtin_calls']:14,d} "
              f"{figures['evaluated']:6d} {figures['candidates']:6d} {figures['status']:>8s}"
              + ("" if counted is None else f" {counted:,d} instructions"))
    for baseline in args.baseline:
        if baseline.exists():
            print(f"\nagainst {baseline}:")
            print("\n".join(compare(json.loads(baseline.read_text()), now)))
    if args.save is not None:
        args.save.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
