"""BLOOM's batch ramp-up row (global batch 16: one micro-batch of 2 per replica through 12
pipeline stages) scored as published: DeepSpeed's `TrainSchedule` runs 1F1B with fewer
micro-batches than stages, and so does the cost model."""

from typing import Any

import pytest

from api_schemas.parallel import PipelineSchedule
from models.core.frameworks import FEW_MICRO_BATCHES, plan_features, runs_on
from models.core.rank_states import micro_batch_count
from research import validate_published as vp

RAMP_UP = "bloom-176b-gbs16-rampup"
LAUNCH = "bloom-176b-gbs192-launch"


def _row(row_id: str) -> dict[str, Any]:
    return next(r for r in vp.DATA["runs"] if r["id"] == row_id)


def test_the_ramp_up_row_runs_one_micro_batch_through_twelve_stages() -> None:
    row = _row(RAMP_UP)
    spec, config = vp.model_of(row), vp.as_published_config(row)
    assert spec is not None and config is not None
    parallel, training = config
    assert (parallel.pp, parallel.schedule, micro_batch_count(training, parallel)) == (
        12, PipelineSchedule.ONE_F_ONE_B, 1)
    assert FEW_MICRO_BATCHES in plan_features(spec, training, parallel)
    assert "torchtitan" not in {fit.framework for fit in runs_on(spec, training, parallel)}


def test_the_ramp_up_row_is_scored_and_its_gap_is_a_per_step_time() -> None:
    """+8.7% (8.74 predicted against 8.04 TF/s/GPU printed). The time the model misses,
    1.2 s of the printed 15.23 s step, is what it misses at the launch's 24 micro-batches
    too (1.2 s, the launch row's step scaled by its TF/s ratio): a cost per step, not one of
    the m < p pipeline, whose bubble is the closed form's. (On the printed line rate of
    Jean Zay's links, 6.25 GB/s per GPU, instead of the 2.53 its team measured NCCL at:
    +46.4%, 4.8 and 4.9 s.)"""
    observed, predicted, unit = vp.predict(_row(RAMP_UP), vp.AS_PUBLISHED_PROTOCOL) or (
        0.0, 0.0, "")
    assert unit == "TF/s/GPU" and observed == 8.04
    assert 100 * (predicted / observed - 1) == pytest.approx(8.7, abs=0.3)
    ramp = vp.as_published_estimate(_row(RAMP_UP))
    launch = vp.as_published_estimate(_row(LAUNCH))
    assert ramp is not None and launch is not None and ramp.num_micro_batches == 1
    missed = _row(RAMP_UP)["measured"]["iteration_time_s"] - ramp.step_time_s
    printed, modelled, _ = vp.predict(_row(LAUNCH), vp.AS_PUBLISHED_PROTOCOL) or (1.0, 1.0, "")
    missed_at_launch = launch.step_time_s * (modelled / printed - 1)
    assert missed == pytest.approx(1.2, abs=0.1)
    assert missed_at_launch == pytest.approx(missed, abs=0.3)
