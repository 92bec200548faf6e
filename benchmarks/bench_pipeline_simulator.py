"""Speed of the pipeline simulator: generation, compilation, full simulation, makespan only.

Target: p=64, m=512, v=4 interleaved 1F1B simulated (generate + simulate with all metrics)
in under one second. Run: .venv/bin/python benchmarks/bench_pipeline_simulator.py
"""

import time
from collections.abc import Callable

from api_schemas.parallel import PipelineSchedule as S
from models.core.pipeline import (
    CompiledProgram,
    OpDurations,
    PipelineProgram,
    compile_program,
    generate_program,
    simulate,
    simulate_makespan,
)

CASES = [
    (S.INTERLEAVED_1F1B, 64, 512, 4),
    (S.ONE_F_ONE_B, 64, 512, 1),
    (S.ZB_H1, 64, 512, 1),
    (S.ZB_H2, 64, 512, 1),
    (S.ZBV, 64, 512, 2),
    (S.DUALPIPE, 64, 512, 1),
    (S.DUALPIPEV, 64, 512, 2),
    (S.INTERLEAVED_1F1B, 8, 64, 2),
]
REPEATS = 3


def _best_of(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def _first_makespan_s(program: PipelineProgram, durations: OpDurations) -> float:
    """Best-of-`REPEATS` time of the first makespan of a freshly compiled program (the
    compilation itself not counted)."""
    best = float("inf")
    for _ in range(REPEATS):
        compiled = compile_program(program)
        started = time.perf_counter()
        simulate_makespan(compiled, durations)
        best = min(best, time.perf_counter() - started)
    return best


def _row(schedule: S, p: int, m: int, v: int) -> str:
    """Time every phase of one case (best of `REPEATS`)."""
    durations = OpDurations.uniform(forward_s=1.0 / v, backward_input_s=1.0 / v,
                                    backward_weight_s=1.0 / v)

    def gen() -> PipelineProgram:
        return generate_program(schedule, num_stages=p, num_micro_batches=m, num_chunks=v)

    program = gen()
    compiled = compile_program(program)
    t_gen = _best_of(gen)
    t_compile = _best_of(lambda: compile_program(program))
    t_sim = _best_of(lambda: simulate(program, durations))
    t_total = _best_of(lambda: simulate(gen(), durations))
    t_first = _first_makespan_s(program, durations)
    makespan = simulate_makespan(compiled, durations)
    t_fast = _best_replay_s(compiled, v, 0.0)
    t_late = _best_replay_s(compiled, v, REPLAY_LATENCY_S)
    return (f"{schedule:<18}{p:>4}{m:>5}{v:>3}{program.num_ops:>9}"
            f"{t_gen:>9.3f}s{t_compile:>8.3f}s{t_sim:>9.3f}s{t_total:>8.3f}s{t_first:>9.3f}s"
            f"{t_fast:>9.3f}s{t_late:>9.3f}s"
            f"{makespan:>11.2f}")


REPLAY_LATENCY_S = 1e-3
"""The P2P latency of the `replay+lat` column (seconds)."""


def _best_replay_s(compiled: CompiledProgram, v: int, latency_s: float) -> float:
    """Best-of-`REPEATS` time of a later makespan of a compiled program (its order
    recorded): each repeat with durations of its own, so that none is answered from the
    program's makespan memo."""
    best = float("inf")
    for repeat in range(REPEATS):
        scale = (1.0 + (repeat + 1) * 1e-3) / v
        durations = OpDurations.uniform(forward_s=scale, backward_input_s=scale,
                                        backward_weight_s=scale)
        started = time.perf_counter()
        simulate_makespan(compiled, durations, p2p_latency_s=latency_s)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    """Print one row per case: op count and the best-of-3 wall time of each phase."""
    header = (f"{'schedule':<18}{'p':>4}{'m':>5}{'v':>3}{'ops':>9}{'generate':>10}"
              f"{'compile':>9}{'simulate':>10}{'gen+sim':>9}{'first':>10}{'replay':>10}"
              f"{'replay+lat':>11}{'makespan':>11}")
    print(header)
    print("-" * len(header))
    for case in CASES:
        print(_row(*case))
    print("\ngen+sim = generate + simulate with timeline, bubbles and activation peaks; "
          "first = makespan only on a compiled program's first run (event loop, or waves "
          "from WAVE_MIN_RANKS ranks; order recorded); replay = makespan only, later runs "
          "(the recorded order), each with new durations; replay+lat = the same with a P2P "
          f"latency of {REPLAY_LATENCY_S} s")


if __name__ == "__main__":
    main()
