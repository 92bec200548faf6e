"""The tie break of the robust choice (`solver/robust_choice.py`) on hand-built scored plans:
within the pairwise band the plan with more memory margin is shown and the fastest is
reported beside it; beyond the band the faster plan stays; margins within the ledger's
resolution fall to a plan with a subset of the mechanisms or more frameworks."""

import dataclasses

import pytest

from api_schemas import ClusterInput, ModelPreset, TrainingSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.requests import Objective
from api_schemas.units import GIB
from models.catalog.resolve import resolve_cluster, resolve_model
from models.core.memory import memory_ledger
from models.core.step_time import estimate_step
from models.evidence.pairwise_band import pairwise_band
from solver.candidate_eval import ScoredPlan
from solver.robust_choice import MARGIN_RESOLUTION_FRAC, MAX_TIED_LISTED, pick, simpler, traits
from solver.space import MeshCandidate

SPEC = resolve_model(ModelPreset(preset="llama-3.1-8b")).spec
CLUSTER = resolve_cluster(ClusterInput(gpu="h100-sxm5-80gb", num_nodes=1))
TRAINING = TrainingSpec(global_batch_size=64, sequence_length=4096)
CAPACITY = 70 * GIB


def _plan(parallel: ParallelConfig, *, step_time_s: float, margin_bytes: int) -> ScoredPlan:
    """A real ledger and estimate of `parallel`, with the step time and the capacity set so
    the plan keeps `margin_bytes` free."""
    ledger = memory_ledger(SPEC, TRAINING, parallel, CLUSTER)
    estimate = estimate_step(SPEC, TRAINING, parallel, CLUSTER)
    ledger = dataclasses.replace(ledger, capacity_bytes=ledger.peak_bytes + margin_bytes)
    estimate = dataclasses.replace(estimate, step_time_s=step_time_s)
    return ScoredPlan(candidate=MeshCandidate.of(parallel, estimate.num_micro_batches),
                      parallel=parallel, estimate=estimate, ledger=ledger)


FAST = ParallelConfig(tp=2, dp=4, zero_stage=1)
ROOMY = ParallelConfig(tp=4, dp=2, zero_stage=1)
PLAIN = ParallelConfig(dp=8, zero_stage=1)


def _pick(optimum: ScoredPlan, *others: ScoredPlan) -> tuple[ScoredPlan, object]:
    chosen = pick(optimum, list(others), SPEC, TRAINING, CLUSTER, objective=Objective.THROUGHPUT)
    return chosen.shown, chosen.report


def test_within_the_band_the_plan_with_more_margin_is_shown() -> None:
    band = pairwise_band().frac
    fast = _plan(FAST, step_time_s=10.0, margin_bytes=2 * GIB)
    roomy = _plan(ROOMY, step_time_s=10.0 * (1 + band / 2), margin_bytes=20 * GIB)
    shown, report = _pick(fast, roomy)
    assert shown is roomy
    assert report.picked == "margin" and report.indistinguishable
    assert report.within_pairwise_band == 1
    assert report.pairwise_band_frac == pytest.approx(band)
    # The fastest plan stays visible beside it, with its figures.
    assert report.optimum_parallel == FAST and report.optimum_step_time_s == 10.0
    assert report.delta_frac == pytest.approx(band / 2)
    assert [t.shown for t in report.tied] == [False, True]
    assert report.tied[1].memory_margin_bytes == 20 * GIB
    assert "tie broken toward memory margin" in report.text and "20.0 GiB" in report.text


def test_a_faster_plan_beyond_the_band_stays() -> None:
    band = pairwise_band().frac
    fast = _plan(FAST, step_time_s=10.0, margin_bytes=2 * GIB)
    roomy = _plan(ROOMY, step_time_s=10.0 * (1 + band) * 1.01, margin_bytes=40 * GIB)
    shown, report = _pick(fast, roomy)
    assert shown is fast
    assert report.picked == "optimum" and report.optimum_parallel is None
    assert report.within_pairwise_band == 0 and not report.indistinguishable


def test_equal_margins_go_to_fewer_mechanisms_and_the_fastest_of_equals_stays() -> None:
    band = pairwise_band().frac
    slack = int(MARGIN_RESOLUTION_FRAC * CAPACITY / 4)
    fast = _plan(FAST, step_time_s=10.0, margin_bytes=CAPACITY // 4)
    plain = _plan(PLAIN, step_time_s=10.0 * (1 + band / 3), margin_bytes=CAPACITY // 4 + slack)
    # Data parallelism alone drops tensor parallelism and adds nothing.
    assert traits(SPEC, TRAINING, plain).features < traits(SPEC, TRAINING, fast).features
    shown, report = _pick(fast, plain)
    assert shown is plain and report.picked == "margin"
    assert "mechanisms" in report.text
    # The same two with equal mechanisms: the faster keeps the tie.
    roomy = _plan(ROOMY, step_time_s=10.0 * (1 + band / 3), margin_bytes=CAPACITY // 4 + slack)
    assert traits(SPEC, TRAINING, roomy).features == traits(SPEC, TRAINING, fast).features
    shown, report = _pick(fast, roomy)
    assert shown is fast and report.picked == "optimum" and report.indistinguishable
    assert "none with more memory margin" in report.text


def test_fewer_mechanisms_by_count_alone_do_not_win() -> None:
    """ZeRO-3 with tensor parallelism against ZeRO-1 without: two mechanisms fewer, but one
    of them new, on as many frameworks: not simpler, so the faster plan stays."""
    band = pairwise_band().frac
    sharded = _plan(ParallelConfig(tp=2, dp=4, zero_stage=3), step_time_s=10.0,
                    margin_bytes=CAPACITY // 4)
    plain = _plan(PLAIN, step_time_s=10.0 * (1 + band / 3), margin_bytes=CAPACITY // 4)
    a, b = traits(SPEC, TRAINING, plain), traits(SPEC, TRAINING, sharded)
    assert a.mechanisms < b.mechanisms and a.frameworks == b.frameworks
    assert not simpler(a, b)
    shown, report = _pick(sharded, plain)
    assert shown is sharded and report.picked == "optimum" and report.within_pairwise_band == 1


def test_a_plan_more_frameworks_run_is_more_common() -> None:
    """Tensor parallelism with sequence parallelism against a two-stage pipeline: one
    released framework runs the first here, two the second; with equal margins the second
    is shown although slower."""
    band = pairwise_band().frac
    sp = _plan(ParallelConfig(tp=2, dp=4, zero_stage=1, sequence_parallel=True),
               step_time_s=10.0, margin_bytes=CAPACITY // 4)
    piped = _plan(ParallelConfig(pp=2, dp=4, zero_stage=1), step_time_s=10.0 * (1 + band / 2),
                  margin_bytes=CAPACITY // 4)
    a, b = traits(SPEC, TRAINING, piped), traits(SPEC, TRAINING, sp)
    assert a.frameworks > b.frameworks and simpler(a, b)
    shown, report = _pick(sp, piped)
    assert shown is piped and report.picked == "margin"
    assert "run by 2 released frameworks, against 4 run by 1" in report.text
    assert report.text.startswith("tie broken toward more common mechanisms")


def test_the_shown_plan_is_listed_among_many_ties() -> None:
    """More ties than the answer lists: the plan shown is among those listed, all counted."""
    band = pairwise_band().frac
    fast = _plan(FAST, step_time_s=10.0, margin_bytes=GIB)
    others = [_plan(ParallelConfig(tp=tp, pp=pp, dp=8 // (tp * pp), zero_stage=1),
                    step_time_s=10.0 * (1 + band * (i + 1) / 20), margin_bytes=GIB)
              for i, (tp, pp) in enumerate([(1, 1), (1, 2), (1, 4), (1, 8), (2, 2), (2, 4),
                                            (4, 2), (8, 1)])]
    roomy = _plan(ROOMY, step_time_s=10.0 * (1 + band / 2), margin_bytes=30 * GIB)
    shown, report = _pick(fast, *others, roomy)
    assert shown is roomy and report.within_pairwise_band == 9
    assert len(report.tied) == MAX_TIED_LISTED and report.tied[-1].shown


def test_least_memory_gets_no_tie_break() -> None:
    fast = _plan(FAST, step_time_s=10.0, margin_bytes=2 * GIB)
    roomy = _plan(ROOMY, step_time_s=10.1, margin_bytes=40 * GIB)
    chosen = pick(fast, [roomy], SPEC, TRAINING, CLUSTER, objective=Objective.MIN_MEMORY)
    assert chosen.shown is fast and chosen.report.pairwise_band_frac is None
