"""Cooperative cancellation: a search whose token is set stops within a bound.

Each computation below would run far past the bound if nothing checked its token (a CP-SAT
run with a 60 s limit, a plan search with a 60 s limit that runs to its limit, a schedule
optimisation whose model takes seconds to build); the tests cancel it once it is under way
and time how long its thread takes to stop.
"""

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from api_schemas.pipeline import PipelineOptimizeRequest
from api_schemas.requests import PlanRequest
from solver import cancel, cpsat
from solver.api import plan
from solver.schedule.requests import optimize_request

STOP_BOUND_S = 5.0
"""Longest a cancelled computation may keep its thread (generous for a loaded 2-CPU host;
the uncancelled runs take 60 s or more)."""


def _run_and_cancel(work: Callable[[], Any], *, started: threading.Event,
                    after_s: float) -> tuple[BaseException | None, float]:
    """Run `work` under a token in a thread, cancel it `after_s` after `started` is set;
    return what it raised and how long after the cancel its thread ended."""
    token = cancel.CancelToken()
    outcome: list[BaseException | None] = []

    def target() -> None:
        with cancel.active(token):
            try:
                work()
                outcome.append(None)
            except BaseException as error:  # noqa: BLE001 (the test inspects it)
                outcome.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    assert started.wait(timeout=120), "the computation never got under way"
    time.sleep(after_s)
    assert thread.is_alive(), "the computation ended before it was cancelled"
    cancelled_at = time.perf_counter()
    token.cancel("test")
    thread.join(timeout=120)
    took = time.perf_counter() - cancelled_at
    assert not thread.is_alive()
    print(f"{getattr(work, '__doc__', None) or 'work'}: stopped {took:.2f} s after the cancel")
    return outcome[0], took


def _job_shop(jobs: int, machines: int) -> cpsat.CpModel:
    """A job shop with pseudo-random durations and routes: CP-SAT finds schedules at once
    but does not prove the optimum within a minute."""
    model = cpsat.CpModel()
    horizon = jobs * machines * 20
    ends = []
    per_machine: dict[int, list[Any]] = {m: [] for m in range(machines)}
    for j in range(jobs):
        previous = None
        for k in range(machines):
            machine = (j * 7 + k * 3) % machines
            duration = 1 + (j * 37 + k * 11) % 19
            start = model.new_int_var(0, horizon, f"s{j}_{k}")
            end = model.new_int_var(0, horizon, f"e{j}_{k}")
            per_machine[machine].append(model.new_interval_var(start, duration, end,
                                                                f"i{j}_{k}"))
            if previous is not None:
                model.add(start >= previous)
            previous = end
        ends.append(previous)
    for intervals in per_machine.values():
        model.add_no_overlap(intervals)
    makespan = model.new_int_var(0, horizon, "makespan")
    model.add_max_equality(makespan, ends)
    model.minimize(makespan)
    return model


def test_a_token_set_once_runs_its_callbacks_once() -> None:
    token = cancel.CancelToken()
    calls: list[str] = []
    with token.stopping(lambda: calls.append("a")):
        token.cancel("first")
        token.cancel("second")
    with token.stopping(lambda: calls.append("late")):
        pass
    assert calls == ["a", "late"]  # a callback registered after the cancel runs at once
    assert token.reason == "first"
    with cancel.active(token), pytest.raises(cancel.Cancelled, match="first"):
        cancel.check()
    cancel.check()  # no token outside the block


def test_a_cp_sat_run_stops_when_its_token_is_set() -> None:
    model = _job_shop(jobs=30, machines=15)
    config = cpsat.SolverConfig(max_time_s=60.0, num_workers=1)
    started = threading.Event()

    def work() -> None:
        """CP-SAT, 60 s limit"""
        started.set()
        cpsat.solve(model, config)

    error, took = _run_and_cancel(work, started=started, after_s=1.0)
    assert isinstance(error, cancel.Cancelled)
    assert took < STOP_BOUND_S, f"CP-SAT ran {took:.2f} s past its cancellation"


@pytest.mark.slow
def test_a_plan_search_stops_between_candidates() -> None:
    request = PlanRequest.model_validate({
        "model": {"preset": "llama-3.1-405b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 64, "gpus_per_node": 8},
        "training": {"global_batch_size": 1024, "sequence_length": 8192},
        "objective": "cost_per_token", "constraints": {"gpu_hour_price": 2.0},
        "solver": {"time_limit_s": 60}})
    started = threading.Event()

    def work() -> None:
        """plan search, 60 s limit"""
        plan(request, progress=lambda _message: started.set())

    error, took = _run_and_cancel(work, started=started, after_s=1.0)
    assert isinstance(error, cancel.Cancelled), error
    assert took < STOP_BOUND_S, f"the search ran {took:.2f} s past its cancellation"


@pytest.mark.slow
@pytest.mark.parametrize("after_s", [0.5, 4.0])
def test_the_schedule_optimizer_stops_between_steps(after_s: float) -> None:
    # 2,000 micro-batches on 8 ranks: seconds of set-up, then a windowed CP-SAT model
    # that takes seconds to build; cancelled early and in the middle.
    request = PipelineOptimizeRequest.model_validate({
        "schedule": "zb_h1", "num_stages": 8, "num_micro_batches": 2000,
        "durations": {"F": 0.021, "B": 0.025, "W": 0.017}, "memory_limit": 3,
        "time_limit_s": 60})
    started = threading.Event()

    def work() -> None:
        """schedule optimizer, 60 s limit"""
        started.set()
        optimize_request(request)

    error, took = _run_and_cancel(work, started=started, after_s=after_s)
    assert isinstance(error, cancel.Cancelled), error
    assert took < STOP_BOUND_S, f"the optimizer ran {took:.2f} s past its cancellation"
