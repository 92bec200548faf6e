"""Best published MFU per GPU and format, and the note a plan above it carries."""

import json
from pathlib import Path

import pytest

from api_schemas import DType
from models.mfu_records import RECORDS, MfuRecord, best_published_mfu, mfu_above_record

RUNS = {r["id"]: r for r in json.loads(
    (Path(__file__).parents[2] / "research" / "data" / "published_runs.json").read_text())["runs"]}


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.run)
def test_each_record_is_a_published_row_with_that_mfu(record: MfuRecord) -> None:
    row = RUNS[record.run]
    assert row["hardware"]["gpu"] == record.gpu
    measured = row["measured"]
    peak = {DType.BF16: {"a100-sxm4-80gb": 312, "h100-sxm5-80gb": 989},
            DType.FP8: {"h100-sxm5-80gb": 1979, "b200-sxm-180gb": 4500}}[record.dtype][record.gpu]
    mfu = measured["mfu"] or measured["tflops_per_gpu"] / peak
    assert mfu == pytest.approx(record.mfu, abs=0.005)


def test_a_plan_above_the_record_says_so_and_names_it() -> None:
    assert best_published_mfu("h100-sxm5-80gb", DType.FP16) is best_published_mfu(
        "h100-sxm5-80gb", DType.BF16)
    note = mfu_above_record("h100-sxm5-80gb", DType.BF16, 0.60)
    assert note is not None and "53.5%" in note and "Nemotron-4 340B" in note
    assert mfu_above_record("h100-sxm5-80gb", DType.BF16, 0.50) is None
    assert mfu_above_record("mi300x", DType.BF16, 0.99) is None
