"""Published records per GPU family, format and kind, and the plausibility note a plan
carries."""

import json
from pathlib import Path

import pytest

from api_schemas import DType
from models.catalog.presets import gpu_preset
from models.evidence.mfu_records import (
    RECORDS,
    PlanFigures,
    PublishedRecord,
    closest_record,
    plausibility_note,
    records_for,
)

RUNS = {r["id"]: r for r in json.loads(
    (Path(__file__).parents[2] / "research" / "data" / "published_runs.json").read_text())["runs"]}


@pytest.mark.parametrize("record", [r for r in RECORDS if r.run is not None],
                         ids=lambda r: r.run)
def test_each_record_is_a_published_row_with_its_figures(record: PublishedRecord) -> None:
    assert record.run is not None
    row = RUNS[record.run]
    assert row["hardware"]["gpu"] == record.gpu
    assert row["hardware"]["num_gpus"] == record.num_gpus
    measured = row["measured"]
    if record.mfu is not None:
        peak = gpu_preset(record.gpu).dense_peak_flop_per_s[record.dtype] / 1e12
        mfu = measured["mfu"] or measured["tflops_per_gpu"] / peak
        assert mfu == pytest.approx(record.mfu, abs=0.005)
    if record.tokens_per_s_per_gpu is not None:
        printed = (measured["tokens_per_s_per_gpu"]
                   or row.get("derived", {}).get("tokens_per_s_per_gpu"))
        assert printed == pytest.approx(record.tokens_per_s_per_gpu, rel=0.001)


def test_a_record_outside_the_run_data_names_its_file_and_prints_its_figure() -> None:
    (readme,) = [r for r in RECORDS if r.run is None]
    # Megatron-Core MoE README: Mixtral 8x7B BF16 at 468 TFLOP/s per H100 (MCore v0.9).
    assert "moe/README.md" in readme.source and "468 TFLOP/s" in readme.source
    assert readme.mfu == pytest.approx(468 / 989.4)
    assert readme.mfu == pytest.approx(0.473, abs=0.001)


def test_the_deepseek_record_is_the_papers_gpu_hours_per_trillion_tokens() -> None:
    # DeepSeek-V3 Sec. 1 prints 180K H800 GPU-hours per trillion tokens: 1,543 tokens/s/GPU.
    record = next(r for r in RECORDS if r.run == "deepseek-v3-pretrain")
    assert record.tokens_per_s_per_gpu == pytest.approx(1543.2, abs=0.1)


def test_records_are_kept_apart_by_family_format_and_kind() -> None:
    assert {r.run for r in records_for("a100-sxm4-80gb", DType.BF16, moe=True)} == {
        "skywork-moe-1536gpu"}
    assert records_for("h200-sxm-141gb", DType.FP16, moe=False) == records_for(
        "h100-sxm5-80gb", DType.BF16, moe=False)
    assert all(r.moe for r in records_for("h800-sxm5-80gb", DType.FP8, moe=True))
    assert records_for("mi300x", DType.BF16, moe=False) == ()
    assert records_for("b200-sxm-180gb", DType.BF16, moe=False) == ()


def test_the_same_models_best_record_is_the_ceiling_on_any_gpu_of_the_same_peak() -> None:
    # Llama 3 8B FP8 on Hopper: Megatron-LM on 8 H100 (13,812 tokens/s, 40.4% MFU) is the
    # ceiling for an H200 plan too (same dense peak), not torchtitan's slower H200 run.
    best = closest_record("h200-sxm-141gb", DType.FP8, moe=False, preset="llama-3.1-8b",
                          num_gpus=8)
    assert best is not None and best.run == "megatron-llama-fp8-8b"
    args = {"gpu_id": "h200-sxm-141gb", "gpu_name": "NVIDIA H200", "dtype": DType.FP8,
            "moe": False, "preset": "llama-3.1-8b", "num_gpus": 8,
            "mfu_full_attention": 0.40, "band_high": 0.05}
    same_peak = _note(**args, tokens_per_s_per_gpu=15000.0, peak_flop_per_s=1978.9e12)
    assert "tokens/s per GPU by 9%" in same_peak
    # On another peak tokens/s are not compared, only MFU.
    other_peak = _note(**args, tokens_per_s_per_gpu=15000.0, peak_flop_per_s=2500e12)
    assert other_peak.startswith("plausibility:") and "MFU within" in other_peak


def test_the_closest_record_prefers_the_same_model_then_the_same_gpu_then_the_scale() -> None:
    same_model = closest_record("h800-sxm5-80gb", DType.FP8, moe=True, preset="deepseek-v3",
                                num_gpus=2048)
    assert same_model is not None and same_model.run == "deepseek-v3-pretrain"
    by_scale = closest_record("h100-sxm5-80gb", DType.FP8, moe=True, preset="mixtral-8x7b",
                              num_gpus=16)
    assert by_scale is not None and by_scale.run == "bridge-26.04.01-dgx-h100-qwen3-30b-a3b-16gpu"
    # Two 64-GPU Hopper BF16 MoE records at the same distance: the higher MFU is taken.
    tie = closest_record("h100-sxm5-80gb", DType.BF16, moe=True, preset="qwen3-30b-a3b",
                         num_gpus=64)
    assert tie is not None and tie.model == "Mixtral 8x7B"


def _note(**overrides: object) -> str:
    args: dict[str, object] = {
        "gpu_id": "a100-sxm4-80gb", "gpu_name": "NVIDIA A100 SXM4 80GB", "dtype": DType.BF16,
        "moe": True, "preset": "mixtral-8x7b", "num_gpus": 64, "mfu_full_attention": 0.66,
        "tokens_per_s_per_gpu": 2482.0, "band_high": 0.15, "peak_flop_per_s": 312e12}
    args.update(overrides)
    return plausibility_note(PlanFigures(**args))  # type: ignore[arg-type]


def test_a_plan_above_its_record_by_more_than_the_band_is_warned_and_the_record_named() -> None:
    note = _note()
    assert note.startswith("plausibility warning")
    assert "Skywork-MoE 146B" in note and "38.0%" in note and "+15%" in note
    # 0.40 / 1.15 = 0.348 < 0.38: inside the band, no warning, the record still named.
    inside = _note(mfu_full_attention=0.40)
    assert inside.startswith("plausibility:") and "Skywork-MoE" in inside
    # Without a band any excess warns.
    assert _note(mfu_full_attention=0.40, band_high=None).startswith("plausibility warning")


def test_tokens_per_gpu_are_compared_for_the_same_model_only() -> None:
    args = {"gpu_id": "h800-sxm5-80gb", "gpu_name": "NVIDIA H800", "dtype": DType.FP8,
            "num_gpus": 2048, "mfu_full_attention": 0.30, "band_high": 0.10,
            "peak_flop_per_s": 1978.9e12}
    above = _note(**args, preset="deepseek-v3", tokens_per_s_per_gpu=1800.0)
    assert "plausibility warning" in above and "tokens/s per GPU by 17%" in above
    within = _note(**args, preset="deepseek-v3", tokens_per_s_per_gpu=1600.0)
    assert within.startswith("plausibility:") and "tokens/s per GPU within" in within


def test_a_family_without_a_record_says_so_and_never_calls_itself_conservative() -> None:
    note = _note(gpu_id="mi300x", gpu_name="AMD Instinct MI300X", moe=True, band_high=None)
    assert "no published record for AMD Instinct MI300X (cdna3 BF16 MoE)" in note
    assert "conservative" not in note
    cdna4 = _note(gpu_id="mi355x", gpu_name="AMD Instinct MI355X", moe=False, band_high=None)
    assert "no published record for AMD Instinct MI355X (cdna4 BF16 dense)" in cdna4
