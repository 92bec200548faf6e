"""`solver.time_limit_s` bounds the whole of `plan`: search, refinement, runners-up and
relaxations start no work past the request's deadline, and a CP-SAT subproblem is never
given more time than is left. The clock is injected (each solver module's `time` is replaced
by a fake one that moves only when the test says work was done), so the checks hold on any
machine, loaded or not."""

import types
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    PlanRequest,
    PlanResponse,
    PlanStatus,
    SolverLimits,
    TrainingSpec,
)
from solver import (
    anytime,
    api,
    candidate_eval,
    cpsat,
    nearest_nodes,
    planner,
    relax,
    space,
    targets,
    tightening,
)

TIMED_MODULES = (api, planner, candidate_eval, targets, space, relax, cpsat, anytime,
                 nearest_nodes)
EVALUATION_S = 0.05
"""Fake seconds one exact candidate evaluation takes."""
CPSAT_SHARE = 0.6
"""Share of its time limit a CP-SAT subproblem uses on the fake clock (it stops early)."""
START = 1000.0


@dataclass
class FakeClock:
    """A `time.perf_counter` that moves only when work is booked, and a log of what started
    when (with the time limit it was given, for CP-SAT)."""

    now: float = START
    started: list[tuple[str, float, float]] = field(default_factory=list)

    def perf_counter(self) -> float:
        return self.now

    def book(self, what: str, seconds: float, limit_s: float = 0.0) -> None:
        self.started.append((what, self.now, limit_s))
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    fake = FakeClock()
    for module in TIMED_MODULES:
        monkeypatch.setattr(module, "time", types.SimpleNamespace(perf_counter=fake.perf_counter))

    def timed_evaluation(name: str, real: object) -> object:
        def run(*args: object, **kwargs: object) -> object:
            fake.book(name, EVALUATION_S)
            return real(*args, **kwargs)  # type: ignore[operator]
        return run

    monkeypatch.setattr(planner, "evaluate_for_targets",
                        timed_evaluation("evaluation", planner.evaluate_for_targets))
    monkeypatch.setattr(api, "evaluate_for_targets",
                        timed_evaluation("runner-up", api.evaluate_for_targets))
    real_solve = cpsat.solve

    def timed_solve(model: cpsat.CpModel, config: cpsat.SolverConfig) -> cpsat.SolveOutcome:
        fake.book("cp-sat", CPSAT_SHARE * config.max_time_s, config.max_time_s)
        return real_solve(model, config)

    monkeypatch.setattr(cpsat, "solve", timed_solve)
    yield fake


def _request(time_limit_s: float) -> PlanRequest:
    # Llama 3.1 70B on 8 nodes with PP4 pinned: a small search whose plan is refined by the
    # per-stage CP-SAT model, once per layer split (even, and lighter end ranks).
    return PlanRequest(model=ModelPreset(preset="llama-3.1-70b"),
                       cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=8),
                       training=TrainingSpec(global_batch_size=256, sequence_length=8192),
                       constraints=Constraints(pp=4, tp=8, framework="any"),
                       solver=SolverLimits(time_limit_s=time_limit_s, top_k=3, num_workers=1))


def test_cp_sat_refinements_share_the_time_left_and_none_runs_past_the_limit(
        clock: FakeClock) -> None:
    limit = 3.0  # the search takes about 1.5 s of it on the fake clock
    response = api.plan(_request(limit))
    deadline = START + limit
    solves = [(at, given) for what, at, given in clock.started if what == "cp-sat"]
    assert len(solves) == 2, clock.started  # both layer splits were refined
    for at, given in solves:
        assert at < deadline
        assert at + given <= deadline + 1e-9, (at - START, given)
    assert response.status == PlanStatus.OPTIMAL


def test_no_work_starts_past_the_limit_and_the_answer_keeps_the_best_plan(
        clock: FakeClock) -> None:
    # So short a limit that the search is cut: every evaluation, refinement and runner-up
    # starts before the deadline, and the answer is the best plan so far with its gap.
    limit = 3 * EVALUATION_S
    response = api.plan(_request(limit))
    deadline = START + limit
    assert clock.started
    assert all(at < deadline for _, at, _ in clock.started), clock.started
    assert clock.now <= deadline + EVALUATION_S + 1e-9
    assert response.status in (PlanStatus.FEASIBLE, PlanStatus.OPTIMAL)
    assert response.solver is not None
    if response.status == PlanStatus.FEASIBLE:
        assert response.solver.gap is None or response.solver.gap >= 0


def test_relaxations_of_an_infeasible_request_stop_at_the_limit(clock: FakeClock) -> None:
    # Llama 3.1 405B cannot fit on one node: the answer's relaxation searches (more nodes,
    # a shorter sequence) share what is left of the limit and start nothing after it.
    limit = 2.0
    request = PlanRequest(model=ModelPreset(preset="llama-3.1-405b"),
                          cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=1),
                          training=TrainingSpec(global_batch_size=64, sequence_length=8192),
                          solver=SolverLimits(time_limit_s=limit, top_k=3, num_workers=1))
    response = api.plan(request)
    deadline = START + limit
    assert response.status == PlanStatus.INFEASIBLE
    assert len(clock.started) > 1
    assert all(at < deadline for _, at, _ in clock.started), clock.started
    assert clock.now <= deadline + EVALUATION_S + 1e-9


TIGHTEN_S = 0.05
"""Fake seconds one tightening of a candidate's bound takes."""
QUEUE_S = 0.01
"""Fake seconds queuing one listed candidate takes (its table bounds)."""


def _one_search_diving_at(share: float, clock: FakeClock, monkeypatch: pytest.MonkeyPatch,
                          module: object, name: str, seconds: float, limit: float
                          ) -> tuple[PlanResponse, list[float], list[float]]:
    """Plan `_request(limit)` with `module.name` booking `seconds` of fake time per call and
    the dive from `share` of the limit, as one search: no narrower seeding search before it
    (`solver.anytime`, whose own dive comes at half its share of the limit). Returns the
    answer, when each such call and each evaluation started."""
    real = getattr(module, name)

    def timed(*args: object) -> None:
        clock.book(name, seconds)
        real(*args)

    monkeypatch.setattr(module, name, timed)
    monkeypatch.setattr(planner, "NO_PLAN_DIVE_SHARE", share)
    monkeypatch.setattr(anytime, "is_wide", lambda framework: False)
    response = api.plan(_request(limit))
    return (response, [at for what, at, _ in clock.started if what == name],
            [at for what, at, _ in clock.started if what == "evaluation"])


@pytest.mark.parametrize("dive_share", [planner.NO_PLAN_DIVE_SHARE, 1.0])
def test_a_search_without_a_plan_at_half_its_limit_evaluates_at_once(
        clock: FakeClock, monkeypatch: pytest.MonkeyPatch, dive_share: float) -> None:
    # Tightening bounds costs fake time here, and the limit is shorter than the tightenings
    # ahead of the first evaluation (at least seven): past half the limit the search
    # evaluates candidates in table-bound order and answers with a plan and its gap; never
    # diving (share 1), it has evaluated nothing when the limit falls.
    limit = 0.3
    response, tightenings, evaluations = _one_search_diving_at(
        dive_share, clock, monkeypatch, tightening, "tighten", TIGHTEN_S, limit)
    assert tightenings and tightenings[0] < START + limit / 2
    if dive_share < 1.0:
        assert evaluations and min(evaluations) >= START + limit * dive_share - 1e-9
        assert response.status in (PlanStatus.FEASIBLE, PlanStatus.OPTIMAL)
        assert response.parallel is not None
    else:
        assert not evaluations
        assert response.status == PlanStatus.UNKNOWN


@pytest.mark.parametrize("dive_share", [planner.NO_PLAN_DIVE_SHARE, 1.0])
def test_a_listing_that_outlasts_the_limit_still_answers_with_a_plan(
        clock: FakeClock, monkeypatch: pytest.MonkeyPatch, dive_share: float) -> None:
    # Queuing costs fake time here and the request lists 96 candidates, so the limit falls
    # in the listing. Past half the limit the head of the queue so far is evaluated, and the
    # listing goes on once a plan is known: the answer is that plan, with no proven bound
    # (the rest was never listed). Never diving (share 1), nothing is evaluated and the
    # answer has no plan.
    limit = 0.6
    searched_until = api._search_deadline(_request(limit), START + limit)
    response, queued, evaluations = _one_search_diving_at(
        dive_share, clock, monkeypatch, planner, "_push", QUEUE_S, limit)
    assert response.solver is not None
    assert len(queued) < 96
    if dive_share < 1.0:
        first = min(evaluations)
        assert START + (searched_until - START) * dive_share - 1e-9 <= first < max(queued)
        assert response.status == PlanStatus.FEASIBLE
        assert response.parallel is not None and response.solver.gap is None
        assert response.solver.unexamined == 0
    else:
        assert not evaluations
        assert response.status == PlanStatus.UNKNOWN
        assert response.solver.unexamined == 96
