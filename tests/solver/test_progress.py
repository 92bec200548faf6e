"""Search progress reports: nothing asked of a search nobody watches, throttled reports,
the gap, and a real search's reports in order with its final one last."""

import math

import pytest

from api_schemas.requests import PlanRequest
from solver import progress
from solver.api import plan
from solver.progress import MIN_INTERVAL_S, SearchProgress, listening, reporter


def test_no_listener_no_reporter() -> None:
    assert progress.current() is None
    assert reporter(objective="throughput") is None


def test_listener_is_per_block_and_restored() -> None:
    outer: list[SearchProgress] = []
    inner: list[SearchProgress] = []
    with listening(outer.append):
        with listening(inner.append):
            assert progress.current() is not None
            watch = reporter(objective="throughput")
            assert watch is not None
            watch.report(candidates=1, evaluated=0, incumbent=None, bound=None)
        assert progress.current() is not None
    assert progress.current() is None
    assert len(inner) == 1 and outer == []


def test_reports_are_throttled_unless_new_incumbent_or_final() -> None:
    seen: list[SearchProgress] = []
    with listening(seen.append):
        watch = reporter(objective="throughput")
    assert watch is not None
    watch.report(candidates=10, evaluated=1, incumbent=None, bound=1.0)
    watch.report(candidates=10, evaluated=2, incumbent=None, bound=1.0)  # too soon: dropped
    watch.report(candidates=10, evaluated=3, incumbent=2.0, bound=1.5)  # new incumbent
    watch.report(candidates=10, evaluated=4, incumbent=2.0, bound=1.6)  # too soon: dropped
    watch.report(candidates=10, evaluated=5, incumbent=2.0, bound=2.5, final=True)
    assert [r.evaluated for r in seen] == [1, 3, 5]
    assert seen[1].gap == pytest.approx(0.25)
    assert seen[2].bound == 2.0 and seen[2].gap == 0.0 and seen[2].final  # bound <= incumbent
    assert seen[0].gap is None and seen[0].incumbent is None
    assert MIN_INTERVAL_S > 0


def test_infinite_bound_is_reported_as_unknown() -> None:
    seen: list[SearchProgress] = []
    with listening(seen.append):
        watch = reporter(objective="throughput")
    assert watch is not None
    watch.report(candidates=3, evaluated=0, incumbent=None, bound=math.inf)
    assert seen[0].bound is None and seen[0].gap is None


def test_a_real_search_reports_in_order() -> None:
    request = PlanRequest.model_validate({
        "model": {"preset": "llama-3.1-8b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 64, "sequence_length": 4096},
        "solver": {"time_limit_s": 30}})
    seen: list[SearchProgress] = []
    with listening(seen.append):
        response = plan(request)
    assert seen, "the search reported nothing"
    assert [r.final for r in seen] == [False] * (len(seen) - 1) + [True]
    assert all(a.elapsed_s <= b.elapsed_s for a, b in zip(seen, seen[1:], strict=False))
    assert all(a.evaluated <= b.evaluated for a, b in zip(seen, seen[1:], strict=False))
    last = seen[-1]
    assert response.solver is not None
    assert last.evaluated == response.solver.evaluated
    assert last.candidates == response.solver.candidates
    assert last.incumbent is not None and last.gap == 0.0  # proven optimal
    assert all(r.bound is None or r.incumbent is None or r.bound <= r.incumbent for r in seen)
