"""The cyclic garbage collector is off while a search runs and back to its state after."""

import gc
import threading
from typing import Any

import pytest

from solver.collector import collector_paused


def test_the_collector_is_off_inside_and_restored_after_nested_and_concurrent_pauses() -> None:
    assert gc.isenabled()
    entered, leave = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            entered.set()
            leave.wait(5)

    worker = threading.Thread(target=other)
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
        worker.start()
        entered.wait(5)
    # The other thread still searches: the collector stays off until it leaves too.
    assert not gc.isenabled()
    leave.set()
    worker.join(5)
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_caller_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_comes_back_when_the_body_raises() -> None:
    with pytest.raises(ValueError, match="search failed"), collector_paused():
        assert not gc.isenabled()
        raise ValueError("search failed")
    assert gc.isenabled()


def test_a_plan_runs_with_the_collector_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from api_schemas import ClusterInput, ModelPreset, PlanRequest, SolverLimits, TrainingSpec
    from solver import anytime, api, planner

    seen: list[bool] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return planner.search(*args, **kwargs)

    # A wide target's search runs through `solver.anytime` (one search when it completes).
    monkeypatch.setattr(anytime, "search", spy)
    api.plan(PlanRequest(model=ModelPreset(preset="llama-3.1-8b"),
                         cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=1),
                         training=TrainingSpec(global_batch_size=64, sequence_length=4096),
                         solver=SolverLimits(time_limit_s=10)))
    assert seen == [False] and gc.isenabled()


def test_overlapping_searches_still_collect_once_the_pause_runs_long(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from solver import collector

    # The collector's own clock and collect are replaced (not the process's): the pause's
    # length is read from a counter the test advances.
    collected: list[int] = []
    monkeypatch.setattr(collector, "collect",
                        lambda generation=2: collected.append(generation) or 0)
    clock = [100.0]
    monkeypatch.setattr(collector, "monotonic", lambda: clock[0])
    with collector_paused():
        with collector_paused():  # another search, begun while the first runs
            clock[0] += collector.LONGEST_PAUSE_S / 2
        assert collected == []  # within the longest pause: nothing yet
        with collector_paused():
            clock[0] += collector.LONGEST_PAUSE_S
        assert collected == [2] and not gc.isenabled()  # overdue: a full collection
    assert collected == [2, collector.YOUNG_GENERATIONS] and gc.isenabled()
