"""The Megatron-LM 2021 Table 1 figures that docs/accuracy.md quotes are the ones the model
gives today (`solver.published.score_published_run`, what
`benchmarks/bench_megatron_table1.py` prints), so the page cannot drift from the code."""

import re
import statistics
from pathlib import Path

import pytest

from models.evidence.published import PublishedRun, published_runs
from solver.published import score_published_run

PAGE = Path(__file__).resolve().parents[2] / "docs" / "accuracy.md"
ROW = re.compile(r"^(megatron2021-gpt-\S+)\s+(calibration|held out)\s+(\d+)\s+([\d.]+)\s+"
                 r"([+-][\d.]+)%$", re.MULTILINE)
SUMMARY = re.compile(r"held-out rows: n=(\d+), median \|error\| ([\d.]+)%, "
                     r"max \|error\| ([\d.]+)%")


def _quoted() -> dict[str, tuple[str, float, float, float]]:
    text = PAGE.read_text()
    return {m[1]: (m[2], float(m[3]), float(m[4]), float(m[5])) for m in ROW.finditer(text)}


def test_every_table_1_row_is_quoted_once() -> None:
    ids = {r.id for r in published_runs() if r.id.startswith("megatron2021")}
    assert set(_quoted()) == ids


@pytest.mark.parametrize("run", [r for r in published_runs() if r.id.startswith("megatron2021")],
                         ids=lambda r: r.id)
def test_a_quoted_prediction_is_the_models(run: PublishedRun) -> None:
    _, printed, predicted, error = _quoted()[run.id]
    estimate = score_published_run(run)
    assert estimate is not None and run.printed_tflops_per_gpu == printed
    model = estimate.hardware_tflops_per_gpu_full_attention
    assert round(model, 1) == pytest.approx(predicted, abs=0.051)
    assert 100 * (model / printed - 1) == pytest.approx(error, abs=0.051)


def test_the_held_out_summary_is_the_rows() -> None:
    quoted = _quoted()
    held = [abs(error) for role, _, _, error in quoted.values() if role == "held out"]
    found = SUMMARY.search(PAGE.read_text())
    assert found is not None
    assert int(found[1]) == len(held)
    assert float(found[2]) == pytest.approx(statistics.median(held), abs=0.051)
    assert float(found[3]) == pytest.approx(max(held), abs=0.051)
