"""Would a process pool over exact candidate evaluations pay? (a benchmark, not a test)

Run: .venv/bin/python benchmarks/bench_eval_share.py [--repeats 2] [--open]

For each problem of `bench_planner.py`, one `solver.plan` call after another in one process
(the first is a cold call), it reports the call's wall time, the time spent inside
`evaluate_candidate` (every exact evaluation: memory probes, stage times, the pipeline
simulation) and how many calls, and what shipping those calls to another process would
cost at the least: the bytes and the seconds of pickling each call's arguments (the model,
training and cluster specs, the candidate and the search's memo). Alongside, the wall time
of starting a worker process that imports the planner.

A pool of W workers saves at most (evaluation seconds) x (1 - 1/W), and only if the
evaluations could run side by side. They do not today: each one's step cutoff is the best
plan found so far, so a batch evaluated at once prunes less than the same candidates in
turn. The `best 2-way` column is that ceiling for W = 2 less the lean pickling; the worker
start comes on top of it once per process.

The `lean` columns pickle only what a worker holding the specs and its own memo would still
need per call (the candidate and the options); its memo would start cold in every worker.

The figures show whether the problems are large enough to pay for it.
The patch of `solver.targets.evaluate_candidate` below wraps the function in a timer and
pickles its arguments; the time limit is raised (`EVAL_SHARE_LIMIT_S`) so that the pickling
cannot cut a search short, and the pickling is subtracted from the wall time printed. Exact
evaluations outside `solver.targets` (the CP-SAT refinement of the chosen plan's policies)
are not counted.
"""

import argparse
import pickle
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import solver.targets as targets
from solver import plan

sys.path.insert(0, str(Path(__file__).parent))
from bench_planner import problem_requests  # noqa: E402

EVAL_SHARE_LIMIT_S = 120.0
"""The search's time limit here: long enough that the pickling done inside the search never
brings its deadline forward (with `bench_planner.py`'s 10 s a first DeepSeek-V3 call ran
out of time and stopped at a feasible plan); the status column shows each search finished
as in `bench_planner.py`."""


@dataclass
class EvalTally:
    """Exact evaluations of one `plan` call."""

    seconds: float = 0.0
    calls: int = 0
    pickle_bytes: list[int] = field(default_factory=list)
    pickle_s: float = 0.0
    lean_bytes: list[int] = field(default_factory=list)
    """Pickled size of the candidate and the keyword arguments without the memo (a worker
    that received the specs once and kept its own memo would need only these)."""
    lean_s: float = 0.0


@contextmanager
def tallied() -> Iterator[EvalTally]:
    """Time every `evaluate_candidate` call the search makes, and pickle its arguments."""
    tally = EvalTally()
    original = targets.evaluate_candidate

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = original(*args, **kwargs)
        tally.seconds += time.perf_counter() - started
        tally.calls += 1
        started = time.perf_counter()
        tally.pickle_bytes.append(len(pickle.dumps((args, kwargs))))
        tally.pickle_s += time.perf_counter() - started
        started = time.perf_counter()
        lean = {k: v for k, v in kwargs.items() if k != "memo"}
        tally.lean_bytes.append(len(pickle.dumps((args[3:], lean))))
        tally.lean_s += time.perf_counter() - started
        return result

    targets.evaluate_candidate = timed  # type: ignore[assignment]
    try:
        yield tally
    finally:
        targets.evaluate_candidate = original


def worker_start_s() -> float:
    """Wall seconds to start a Python process that imports the planner's evaluation."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import solver.targets"], check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--open", action="store_true",
                        help="also run each problem with every optional mechanism allowed")
    args = parser.parse_args()
    starts = [worker_start_s() for _ in range(3)]
    print(f"worker start (a process importing the planner): median "
          f"{statistics.median(starts):.2f} s of {', '.join(f'{s:.2f}' for s in starts)}")
    print(f"{'problem':34s} {'call':>4s} {'wall s':>7s} {'eval s':>7s} {'share':>6s} "
          f"{'evals':>6s} {'status':>8s} {'args kB':>8s} {'pickle s':>9s} {'lean kB':>8s} "
          f"{'lean s':>7s} "
          f"{'best 2-way s':>13s}")
    for label, request in problem_requests(with_open=args.open,
                                           time_limit_s=EVAL_SHARE_LIMIT_S):
        for call in range(args.repeats):
            with tallied() as tally:
                started = time.perf_counter()
                response = plan(request)
                wall = time.perf_counter() - started - tally.pickle_s - tally.lean_s
            kilobytes = statistics.median(tally.pickle_bytes) / 1e3 if tally.pickle_bytes else 0
            lean_kb = statistics.median(tally.lean_bytes) / 1e3 if tally.lean_bytes else 0
            saving = tally.seconds / 2 - tally.lean_s
            print(f"{label[:34]:34s} {call + 1:4d} {wall:7.2f} {tally.seconds:7.2f} "
                  f"{tally.seconds / wall:6.0%} {tally.calls:6d} {response.status.value:>8s} "
                  f"{kilobytes:8.0f} "
                  f"{tally.pickle_s:9.2f} {lean_kb:8.1f} {tally.lean_s:7.3f} {saving:13.2f}")
    print("\ncall 1 is the first call of the problem in this process (cold caches); wall s =")
    print("the call less the benchmark's own pickling; eval s =")
    print("wall time inside evaluate_candidate; share = eval s / wall s; args kB = median")
    print("pickled size of one evaluation's arguments; pickle s = pickling all of them;")
    print("lean kB, lean s = the same for the candidate and options alone (no specs, no memo:")
    print("a worker holding the specs and its own memo); best 2-way s = eval s / 2 - lean s,")
    print("the most two workers could save if the")
    print("evaluations were independent (they are not: each prunes with the best plan so far),")
    print("before the worker start above.")


if __name__ == "__main__":
    main()
