"""A narrower framework's search went on from a wide search its time limit cut
(`solver.resume.continue_narrower`) finds what a search of its own, seeded with the same
incumbent, finds: the same best objective value, also where the limit fell in the wide
search's listing (it lists the rest from there). The anytime guard takes it instead of
listing the narrower space again; a search that listed nothing is not continued."""

import math
from types import SimpleNamespace
from typing import Any

import pytest

from api_schemas import ClusterInput, Constraints, ModelPreset, Objective, SolverLimits
from api_schemas.plan import PlanStatus
from api_schemas.training import TrainingSpec
from models.catalog.resolve import resolve_cluster, resolve_model
from solver import anytime, planner
from solver.anytime import SEED_FRAMEWORK
from solver.planner import SearchResult, objective_value, search
from solver.resume import continue_narrower, resume
from solver.targets import admits_mesh

LIMITS = SolverLimits(time_limit_s=120)
"""Unused where a call passes `deadline=math.inf`: the searches run to their proof."""

MODEL, GPU, NODES = "llama-3.1-70b", "h100-sxm5-80gb", 8
TRAINING = TrainingSpec(global_batch_size=512, sequence_length=8192)
"""The planner benchmark's Llama 3.1 70B problem on 64 H100: the released frameworks' space
and Megatron-LM's differ (FSDP and its offloads, torchtitan's schedules)."""

NARROW = Constraints(framework=SEED_FRAMEWORK)


def _problem() -> tuple[Any, Any]:
    spec = resolve_model(ModelPreset(preset=MODEL)).spec
    return spec, resolve_cluster(ClusterInput(gpu=GPU, num_nodes=NODES))


def _cut_after(monkeypatch: pytest.MonkeyPatch, tightenings: int, *,
               owner: Any = planner.tightening, name: str = "tighten") -> None:
    """Cut the next search after `tightenings` calls of `owner.name` (bound tightenings, or
    with `planner.admits_mesh` candidates listed), whatever the host: the search's clock
    reads no real time, 0 until then and a time past any deadline after."""
    done = {"count": 0}
    called = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        done["count"] += 1
        return called(*args, **kwargs)

    def clock() -> float:
        return 1e9 if done["count"] >= tightenings else 0.0

    monkeypatch.setattr(owner, name, counted)
    monkeypatch.setattr(planner, "time", SimpleNamespace(perf_counter=clock))


def _cut_wide(monkeypatch: pytest.MonkeyPatch, tightenings: int, **counted: Any
              ) -> SearchResult:
    spec, cluster = _problem()
    with monkeypatch.context() as patched:
        _cut_after(patched, tightenings, **counted)
        return search(spec, TRAINING, cluster, constraints=Constraints(),
                      objective=Objective.THROUGHPUT, limits=LIMITS, deadline=1e8)


@pytest.mark.parametrize("tightenings", [40, 450])
def test_going_on_from_a_cut_search_finds_what_a_search_of_its_own_finds(
        monkeypatch: pytest.MonkeyPatch, tightenings: int) -> None:
    """With no plan yet (40) and with an incumbent the narrower space beats (450; of the
    620 tightenings of the whole search, the first plan comes after 430)."""
    cut = _cut_wide(monkeypatch, tightenings)
    assert cut.status in (PlanStatus.FEASIBLE, PlanStatus.UNKNOWN)
    assert cut.continuation is not None
    assert (cut.best is None) == (tightenings == 40)
    spec, cluster = _problem()
    fresh = search(spec, TRAINING, cluster, constraints=NARROW, objective=Objective.THROUGHPUT,
                   limits=LIMITS, deadline=math.inf, seed=cut.best)
    continued = continue_narrower(cut, NARROW, deadline=math.inf)
    assert continued is not None and continued.best is not None and fresh.best is not None
    assert objective_value(continued.best, Objective.THROUGHPUT) == pytest.approx(
        objective_value(fresh.best, Objective.THROUGHPUT), rel=1e-12)
    # What it found beats the cut search's incumbent and is a plan of the narrower space.
    assert continued.best is not cut.best
    assert fresh.continuation is not None
    narrow = fresh.continuation.problem
    assert admits_mesh(narrow.spec, narrow.training, continued.best.candidate, narrow.targets)
    # It lists nothing: every candidate it evaluated was queued by the cut search.
    queued = {entry[3] for entry in cut.continuation.queue.heap}
    assert {plan.candidate for plan in continued.ranked if plan is not cut.best} <= queued


def test_a_search_cut_in_its_listing_goes_on_from_where_the_listing_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The wide search stops after 300 of its 1,148 candidates (the narrower optimum is the
    876th); the narrower one lists the rest, from there, and finds that optimum."""
    cut = _cut_wide(monkeypatch, 300, owner=planner, name="admits_mesh")
    assert cut.continuation is not None and cut.best is None
    listing = cut.continuation.queue.listing
    assert listing is not None and listing.meshes is not None and listing.index == 300
    spec, cluster = _problem()
    fresh = search(spec, TRAINING, cluster, constraints=NARROW, objective=Objective.THROUGHPUT,
                   limits=LIMITS, deadline=math.inf)
    assert fresh.best is not None
    assert list(listing.meshes).index(fresh.best.candidate) > listing.index
    continued = continue_narrower(cut, NARROW, deadline=math.inf)
    assert continued is not None and continued.best is not None
    assert continued.status == PlanStatus.OPTIMAL
    assert objective_value(continued.best, Objective.THROUGHPUT) == pytest.approx(
        objective_value(fresh.best, Objective.THROUGHPUT), rel=1e-12)


def test_a_search_cut_in_its_listing_or_proven_optimal_is_not_continued() -> None:
    spec, cluster = _problem()
    # A deadline already past: nothing is listed, so nothing can be gone on from.
    listing_cut = search(spec, TRAINING, cluster, constraints=Constraints(),
                         objective=Objective.THROUGHPUT, limits=LIMITS, deadline=0.0)
    assert listing_cut.continuation is None
    assert continue_narrower(listing_cut, NARROW, deadline=math.inf) is None
    whole = search(spec, TRAINING, cluster, constraints=Constraints(),
                   objective=Objective.THROUGHPUT, limits=LIMITS, deadline=math.inf)
    assert whole.status == PlanStatus.OPTIMAL
    assert continue_narrower(whole, NARROW, deadline=math.inf) is None


def test_a_cut_search_is_not_resumed_for_the_common_plan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The common-plan search goes on only from a finished search (`resume`)."""
    cut = _cut_wide(monkeypatch, 450)
    assert cut.continuation is not None and cut.status == PlanStatus.FEASIBLE
    assert resume(cut, Constraints(), deadline=math.inf) is None


def test_the_anytime_guard_goes_on_from_the_wide_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wide search cut after its listing is followed by the narrower one gone on from it:
    the narrower space is not searched (listed) on its own."""
    spec, cluster = _problem()
    searched: list[str | None] = []

    def recorded(*args: Any, **kwargs: Any) -> SearchResult:
        searched.append(kwargs["constraints"].framework)
        return search(*args, **kwargs)

    monkeypatch.setattr(anytime, "search", recorded)
    _cut_after(monkeypatch, 450)
    seeded = anytime.seeded_search(spec, TRAINING, cluster, constraints=Constraints(),
                                   objective=Objective.THROUGHPUT, limits=LIMITS,
                                   progress=None, deadline=1e8)
    assert searched == [None]
    assert seeded.framework == SEED_FRAMEWORK and seeded.seed is not None
    assert seeded.result.status == PlanStatus.FEASIBLE
