"""Hopper's step-level BF16 eta_max and the Megatron-LM README's stated TP overlap.

The README introduces its weak-scaling table with "DP/TP/PP communication overlap enabled"
(`published_runs.json`, source `megatron_readme`); one of its rows calibrates Hopper's BF16
eta_max. With the overlap passed, the refit on the calibration rows is 0.61
(research/CALIBRATION.md Sec. 2, "The Megatron-LM README's stated TP overlap")."""

import math
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "research"))
import validate_published  # noqa: E402 - the research folder is not a package

from api_schemas import DType  # noqa: E402
from models.catalog import kernels  # noqa: E402

BY_ID = {row["id"]: row for row in validate_published.DATA["runs"]}
SOURCES = {source["id"]: source for source in validate_published.DATA["sources"]}
README_ROWS = [i for i in BY_ID if i.startswith("megatron-readme-")]
PREDICTED_CALIBRATION = ("megatron-readme-314b", "llama3-t4-405b-16384gpu-seq8192")


def test_the_readme_states_the_overlap_and_its_rows_carry_it() -> None:
    assert "DP/TP/PP communication overlap enabled" in \
        SOURCES["megatron_readme"]["verification_note"]
    assert len(README_ROWS) == 9
    for row_id in README_ROWS:
        assert BY_ID[row_id]["source_id"] == "megatron_readme"
        assert validate_published.tp_overlapped(row_id)
    # Rows whose source prints no overlap keep the exposed default.
    for row_id in ("nemotron4-15b-t2-dp96", "nemotron4-340b-t2-6144gpu",
                   "megatron-llama-fp8-8b"):
        assert not validate_published.tp_overlapped(row_id)


def test_the_coded_eta_is_the_refit_value() -> None:
    assert kernels.PROFILES["hopper"].gemm_peak_frac[DType.BF16] == 0.61
    assert kernels.PROFILES["hopper"].gemm_peak_frac[DType.FP16] == 0.61


def _mean_log_error(bf16: float) -> tuple[float, dict[str, float]]:
    saved = kernels.PROFILES["hopper"]
    try:
        validate_published.set_family("hopper", bf16, saved.gemm_peak_frac[DType.FP8])
        errors = {}
        for row_id in PREDICTED_CALIBRATION:
            out = validate_published.predict(BY_ID[row_id])
            assert out is not None
            errors[row_id] = validate_published._error(*out)
    finally:
        kernels.PROFILES["hopper"] = saved
        validate_published.clear_step_time_cache()
    return statistics.mean(abs(math.log(1 + e)) for e in errors.values()), errors


@pytest.mark.slow
def test_with_the_overlap_passed_the_calibration_rows_agree_at_061() -> None:
    """At 0.61 (the wait for the slowest GPU booked) both predicted calibration rows are within
    3.5% (314B +0.3%, Llama 3 -3.2%), and their mean |log error| is below that at 0.60, 0.62,
    the 0.58 fitted before that wait and the former 0.66."""
    score, errors = _mean_log_error(0.61)
    assert all(abs(e) < 0.035 for e in errors.values()), errors
    for other in (0.58, 0.60, 0.62, 0.66):
        assert _mean_log_error(other)[0] > score
    assert _mean_log_error(0.66)[0] > 1.5 * score
