"""Predicted ranges: percentiles of held-out step-time errors, the regime fallback, the
profile path and the packaged table of published rows."""

import json
import statistics
from pathlib import Path

import pytest

from api_schemas.hardware import KernelCalibration
from models.catalog.presets import cluster_preset
from models.evidence.error_bands import (
    MIN_ROWS,
    TRANSFERRED_FAMILIES,
    ErrorRow,
    cluster_band,
    expected_coverage,
    percentile,
    predicted_range,
    profile_band,
    published_band,
    published_rows,
    scale_regime,
)

PUBLISHED = json.loads((Path(__file__).resolve().parents[2] / "research" / "data"
                        / "published_runs.json").read_text())


def row(rid: str, error: float, *, family: str = "hopper", moe: bool = False,
        num_gpus: int = 64, held_out: bool = True, source_id: str = "paper-a") -> ErrorRow:
    return ErrorRow(id=rid, source_id=source_id, source=f"Title of {source_id}",
                    gpu=f"{family}-gpu", family=family, moe=moe, num_gpus=num_gpus,
                    held_out=held_out, error=error)


FIVE = [row("r1", 0.3), row("r2", -0.1), row("r3", 0.0, source_id="paper-b"), row("r4", 0.2),
        row("r5", 0.1)]
"""Five held-out Hopper dense rows on 64 GPUs: sorted -0.1, 0.0, 0.1, 0.2, 0.3."""


def test_percentile_is_hyndman_fan_definition_7_by_hand() -> None:
    # n = 5: P10 at h = 0.4 -> -0.1 + 0.4 x 0.1; P90 at h = 3.6 -> 0.2 + 0.6 x 0.1.
    errors = [r.error for r in FIVE]
    assert percentile(errors, 10) == pytest.approx(-0.06)
    assert percentile(errors, 90) == pytest.approx(0.26)
    assert percentile(errors, 50) == pytest.approx(0.1)
    assert percentile(errors, 0) == -0.1 and percentile(errors, 100) == 0.3
    # The standard library's inclusive deciles are the same definition.
    deciles = statistics.quantiles(errors, n=10, method="inclusive")
    assert (deciles[0], deciles[-1]) == pytest.approx((-0.06, 0.26))
    with pytest.raises(ValueError):
        percentile([], 10)


def test_band_of_a_regime_with_enough_rows() -> None:
    band = published_band("h100-sxm5-80gb", moe=False, num_gpus=128, rows=FIVE)
    assert band.basis == "published" and not band.fallback
    assert (band.error_low, band.error_high) == pytest.approx((-0.06, 0.26))
    assert band.regime == band.regime_used == "hopper dense, 9 to 256 GPUs"
    assert band.num_rows == 5 and set(band.row_ids) == {"r1", "r2", "r3", "r4", "r5"}
    assert band.sources == (("paper-a", "Title of paper-a", 4),
                            ("paper-b", "Title of paper-b", 1))

    rng = predicted_range(band, step_time_s=10.0, tokens_per_s=1000.0, mfu=0.95)
    assert (rng.step_time_s_low, rng.step_time_s_high) == pytest.approx((9.4, 12.6))
    assert (rng.tokens_per_s_low, rng.tokens_per_s_high) == pytest.approx(
        (1000 / 1.26, 1000 / 0.94))
    assert rng.mfu_low == pytest.approx(0.95 / 1.26)
    assert rng.mfu_high == 1.0  # 0.95 / 0.94 would pass the peak
    assert rng.num_rows == 5 and rng.basis == "published"
    # Five rows: F(X_(k)) has mean k / 6; P10 and P90 sit at k = 1.4 and 4.6.
    assert rng.expected_coverage == pytest.approx((4.6 - 1.4) / 6) == expected_coverage(5)
    assert expected_coverage(1) == 0.0 and expected_coverage(10**6) == pytest.approx(0.8, rel=1e-5)
    assert "about 53% of new runs" in rng.text
    assert "step 9.40-12.6 s" in rng.text and "paper-a 4, paper-b 1" in rng.text


def test_calibration_rows_never_back_a_band() -> None:
    fitted = [*FIVE, row("fit", 5.0, held_out=False)]
    band = published_band("h100-sxm5-80gb", moe=False, num_gpus=64, rows=fitted)
    assert (band.error_low, band.error_high) == pytest.approx((-0.06, 0.26))
    assert "fit" not in band.row_ids


def test_regime_falls_back_to_every_scale_then_every_family() -> None:
    # Four rows at 9-256 GPUs are too few; with two more at 1024 GPUs the family's dense
    # rows at every scale are used.
    rows = [*FIVE[:4], row("big1", 0.5, num_gpus=1024), row("big2", 0.6, num_gpus=2048)]
    band = published_band("h100-sxm5-80gb", moe=False, num_gpus=64, rows=rows)
    assert band.fallback and band.regime_used == "hopper dense, every scale"
    assert band.num_rows == 6
    assert band.error_high == pytest.approx(percentile([0.3, -0.1, 0.0, 0.2, 0.5, 0.6], 90))

    # A Blackwell dense plan: its family has published rows (two calibration rows, MoE
    # rows held out) but no held-out dense row: every family's dense rows, never MoE ones.
    rows = [*FIVE, row("b-fit", 0.05, family="blackwell", held_out=False),
            *[row(f"b-moe{i}", 1.0 + i, family="blackwell", moe=True) for i in range(5)]]
    band = published_band("b200-sxm-180gb", moe=False, num_gpus=64, rows=rows)
    assert band.regime_used == "every GPU family, dense" and band.num_rows == 5
    assert (band.error_low, band.error_high) == pytest.approx((-0.06, 0.26))
    assert "1 more calibrated its constants" in band.note
    moe = published_band("b200-sxm-180gb", moe=True, num_gpus=64, rows=rows)
    assert moe.regime_used == "blackwell MoE, 9 to 256 GPUs"
    assert moe.error_low == pytest.approx(percentile([1.0, 2.0, 3.0, 4.0, 5.0], 10))

    # Too few rows of the kind anywhere: no range, the count said.
    few = published_band("h100-sxm5-80gb", moe=True, num_gpus=64,
                         rows=[*FIVE, row("m1", 0.4, moe=True)])
    assert few.basis == "none" and few.error_low is None and few.num_rows == 1
    assert predicted_range(few, step_time_s=1.0).step_time_s_low is None


def test_a_gpu_without_published_rows_or_a_transfer_gets_no_band() -> None:
    band = published_band("mi355x", moe=False, num_gpus=64, rows=FIVE)
    assert band.basis == "none" and band.error_low is None
    rng = predicted_range(band, step_time_s=3.0, tokens_per_s=1.0, mfu=0.4)
    assert rng.step_time_s_low is None and rng.tokens_per_s_high is None
    assert "no published rows back this GPU" in rng.text


def test_a_transferred_family_gets_its_source_band_widened_by_the_transfer_checks() -> None:
    # CDNA3 levels are Hopper's carried over: Hopper's -6%..+26% on FIVE, composed with the
    # checks' worst errors (+2.4% and +23.9%: none negative, so the low end stays).
    _, checks = TRANSFERRED_FAMILIES["cdna3"]
    worst = max(c.error for c in checks)
    assert worst == pytest.approx(1.40 / 1.13 - 1.0)
    band = published_band("mi300x", moe=False, num_gpus=64, rows=FIVE)
    assert band.basis == "transferred" and band.fallback
    assert band.error_low == pytest.approx(-0.06)
    assert band.error_high == pytest.approx(1.26 * (1.0 + worst) - 1.0)
    assert band.regime == "cdna3 dense, 9 to 256 GPUs"
    assert band.regime_used == "hopper dense, 9 to 256 GPUs, widened for cdna3"
    assert {c.id for c in checks} <= set(band.row_ids)
    rng = predicted_range(band, step_time_s=3.0, tokens_per_s=1.0, mfu=0.4)
    assert rng.step_time_s_high == pytest.approx(3.0 * (1.0 + band.error_high))
    assert "widened by the transfer's held-out checks" in rng.text
    # Without a source band there is none to widen.
    assert published_band("mi300x", moe=True, num_gpus=64, rows=FIVE).basis == "none"


def test_the_primus_check_is_the_current_models_error_on_that_run() -> None:
    from held_out_runs import PRIMUS_LLAMA_8B_MI300X, PRIMUS_STEP_S

    from solver import evaluate

    response = evaluate(PRIMUS_LLAMA_8B_MI300X)
    assert response.time is not None
    (primus,) = [c for c in TRANSFERRED_FAMILIES["cdna3"][1] if c.id.startswith("primus")]
    assert PRIMUS_STEP_S / response.time.step_time_s - 1.0 == pytest.approx(primus.error,
                                                                            abs=0.005)


def test_profile_path_uses_the_leave_one_out_errors() -> None:
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    errors = (0.3, -0.1, 0.0, 0.2, 0.1)
    profiled = cluster.model_copy(update={"calibration": KernelCalibration(
        gemm_efficiency_scale=0.9, step_overhead_s=0.1, profile="our-h100", version=3,
        leave_one_out_errors=errors)})
    band = cluster_band(profiled, moe=False, num_gpus=8)
    assert band.basis == "profile" and band.num_rows == 5
    assert (band.error_low, band.error_high) == pytest.approx((-0.06, 0.26))
    assert band.sources[0][0] == "profile 'our-h100' v3"
    assert profile_band((0.1, 0.2, 0.3), label="x", regime="r").basis == "none"

    # Constants without their errors: the published rows measure another model.
    bare = cluster.model_copy(update={"calibration": KernelCalibration(
        gemm_efficiency_scale=0.9)})
    assert cluster_band(bare, moe=False, num_gpus=8).basis == "none"
    # The identity calibration is the published model.
    identity = cluster.model_copy(update={"calibration": KernelCalibration()})
    assert cluster_band(identity, moe=False, num_gpus=8).basis == "published"
    with pytest.raises(ValueError, match="above -1"):
        KernelCalibration(leave_one_out_errors=(-1.0, 0.1, 0.2, 0.3))


def test_packaged_table_backs_the_documented_bands() -> None:
    rows = published_rows()
    ids = {r["id"] for r in PUBLISHED["runs"]}
    assert {r.id for r in rows} <= ids
    held = [r for r in rows if r.held_out]
    assert len(held) >= 70
    h100 = published_band("h100-sxm5-80gb", moe=False, num_gpus=64)
    assert h100.basis == "published" and not h100.fallback and h100.num_rows >= MIN_ROWS
    assert h100.error_low is not None and h100.error_high is not None
    assert h100.error_low < 0 < h100.error_high
    b200 = published_band("b200-sxm-180gb", moe=False, num_gpus=64)
    assert b200.fallback and b200.regime_used == "every GPU family, dense"
    assert published_band("mi300x", moe=False, num_gpus=64).basis == "transferred"
    assert published_band("mi355x", moe=False, num_gpus=64).basis == "none"
    assert scale_regime(8) == "up to 8 GPUs" and scale_regime(257) == "over 256 GPUs"
