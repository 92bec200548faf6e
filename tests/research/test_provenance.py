"""The provenance section of research/CALIBRATION.md is generated and current, no fit uses a
validation-only row, the validator's headline counts validation-only rows only, and a
constant fitted on fewer than three rows says so and widens the ranges that depend on it."""

import sys
from pathlib import Path

import pytest

from models.evidence.error_bands import THIN_FITS, ErrorRow, published_band

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "research"))
import provenance  # noqa: E402
import validate_published as vp  # noqa: E402


def test_the_committed_section_is_the_generated_one() -> None:
    assert provenance.committed() == provenance.render(), (
        "rerun: python research/provenance.py --write")


def test_no_validation_only_row_is_used_by_any_fit() -> None:
    roles = provenance.row_roles()
    for fit in provenance.fits():
        for rid in fit.rows:
            assert roles.get(rid, "fitting") == "fitting", (fit.constant, rid)
    # The fit registry and the validator name the same fitted rows.
    assert {r for f in provenance.fits() for r in f.rows} == set(vp.FITTED)
    assert not set(vp.PRESET_DEFINING) & set(vp.FITTED)


def test_the_headline_counts_validation_only_rows_only() -> None:
    fitted, preset = vp.A100_CALIBRATION[0], next(iter(vp.PRESET_DEFINING))
    held = "megatron2021-t1-3.6b"
    assert provenance.row_roles()[held] == "validation-only"
    lines = vp.headline({fitted: (100.0, 150.0, "TF/s/GPU"), preset: (100.0, 50.0, "TF/s/GPU"),
                         held: (100.0, 110.0, "TF/s/GPU")})
    overall = next(line for line in lines if line.startswith("overall"))
    assert "n=  1" in overall and "10.0%" in overall


def test_a_constant_fitted_on_fewer_than_three_rows_says_so_and_widens_its_bands() -> None:
    thin = [f for f in provenance.fits() if f.num_rows < provenance.MIN_FIT_ROWS]
    moe = {"models.core.moe.host_issue.MOE_HOST_ISSUE_S",
           "models.core.moe.host_issue.MOE_GRAPHABLE_HOST_S"}
    assert {f.constant for f in thin} >= moe
    for fit in thin:
        assert "fewer than three" in provenance.documentation(fit), fit.constant
    # Every thin fit a band regime can name is widened, with its fewest rows.
    counts = {f.constant: f.num_rows for f in thin}
    assert THIN_FITS[(None, True)][1] == min(counts[c] for c in moe)
    assert THIN_FITS[("hopper", None)][1] == min(
        n for c, n in counts.items() if "'hopper'" in c)
    assert THIN_FITS[("blackwell", None)][1] == min(
        n for c, n in counts.items() if "'blackwell'" in c)


def _row(rid: str, error: float, family: str) -> ErrorRow:
    return ErrorRow(id=rid, source_id="paper", source="Title", gpu=f"{family}-gpu",
                    family=family, moe=False, num_gpus=64, held_out=True, error=error)


def test_a_thin_fit_widens_its_family_band_and_leaves_the_others() -> None:
    rows = ([_row(f"h{i}", e, "hopper") for i, e in enumerate((-0.01, 0.0, 0.01, 0.02, 0.03))]
            + [_row(f"a{i}", e, "ampere") for i, e in enumerate((-0.2, -0.1, 0.0, 0.1, 0.2))])
    hopper = published_band("h100-sxm5-80gb", moe=False, num_gpus=64, rows=rows)
    ampere = published_band("a100-sxm4-80gb", moe=False, num_gpus=64, rows=rows)
    # Ampere's eta_max rests on three rows: its own five rows give its band (P10, P90).
    assert (ampere.error_low, ampere.error_high) == pytest.approx((-0.16, 0.16))
    # Hopper's rests on fewer: the envelope with all ten dense rows (P10 -0.11, P90 +0.11).
    assert hopper.error_low == pytest.approx(-0.11) and hopper.error_high == pytest.approx(0.11)
    assert "fewer than three" in hopper.note and hopper.num_rows == 10
