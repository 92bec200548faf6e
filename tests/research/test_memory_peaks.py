"""The ledger against every measured peak in the published-runs data (research table).

Loads `research/validate_memory.py` (a script, not a package) and checks the acceptance
bounds of its table: no measured peak under-counted by more than 5%, median within 15%.
"""

import importlib.util
import statistics
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "research" / "validate_memory.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("validate_memory", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torchtitan_row_within_5_percent(script: ModuleType, run_id: str,
                                     printed_gib: float) -> dict[str, Any]:
    """The torchtitan run `run_id`, whose printed peak is `printed_gib` GiB, after checking
    the ledger lands within 5% of it."""
    row: dict[str, Any] = next(r for r in script.DATA["runs"] if r["id"] == run_id)
    peak = script.torchtitan_row(row)
    assert peak.measured_bytes == int(printed_gib * 2**30)
    assert 0.95 <= peak.ratio <= 1.05
    return row


def test_the_table_holds_every_measured_peak_of_the_data() -> None:
    # Zero Bubble Table 4: 4 models x 4 schedules x 3 batch sizes; its ZB-V version's Table 6
    # (3 models x 4 schedules x 3), Table 11 (4 models x 2 schedules x 3) and Table 12's m = p
    # cells (3 models x 2 schedules); torchtitan: Tables 1-6 of the Dec 2024 note (18 rows)
    # and the two H200 rows of the Jun 2025 note.
    rows = _script().peak_rows()
    assert len(rows) == 134
    assert sum(r.run_id.startswith("zerobubble-t4-") for r in rows) == 48
    assert sum(r.run_id.startswith("zerobubble-t6-") for r in rows) == 36
    assert sum(r.run_id.startswith("zerobubble-t11-") for r in rows) == 24
    assert sum(r.run_id.startswith("zerobubble-t12-") for r in rows) == 6
    assert sum(r.run_id.startswith("torchtitan") for r in rows) == 20
    assert len({r.run_id for r in rows}) == len(rows)


def test_the_memory_only_data_is_a_well_formed_transcription() -> None:
    data = _script().MEASURED
    sources = {source["id"] for source in data["sources"]}
    for run in data["runs"]:
        assert run["source_id"] in sources, run["id"]
        par = run["parallel"]
        assert par["global_batch_size"] == par["micro_batch_size"] * par["num_micro_batches"]
        assert par["num_micro_batches"] >= par["pp"], run["id"]
        assert run["hardware"]["num_gpus"] == par["pp"], run["id"]
        assert run["measured_as_printed"].startswith("peak memory ")


def test_every_measured_peak_is_predicted_within_the_bounds() -> None:
    script = _script()
    ratios = [row.ratio for row in script.peak_rows()]
    assert min(ratios) >= script.WORST_RATIO_FLOOR
    assert statistics.median(ratios) <= script.MEDIAN_RATIO_CEILING


def test_the_zero_bubble_peaks_are_within_the_bounds() -> None:
    script = _script()
    ratios = [r.ratio for r in script.peak_rows() if r.run_id.startswith("zerobubble")]
    assert min(ratios) >= script.WORST_RATIO_FLOOR
    assert statistics.median(ratios) <= script.MEDIAN_RATIO_CEILING


def test_torchtitan_pipelined_405b_peaks_need_the_deferred_gradient_sync() -> None:
    # Table 5 prints 82.5 GiB for 1F1B (PP8 x TP8 x FSDP8, local batch 32): torch
    # pipelining keeps the stage's unsharded fp32 gradients until the last backward.
    script = _script()
    _torchtitan_row_within_5_percent(script, "torchtitan-t5-405b-512gpu-1f1b", 82.5)
    ratios = [r.ratio for r in script.peak_rows() if r.run_id.startswith("torchtitan-t6")]
    assert min(ratios) >= 0.95


def test_torchtitan_long_context_peaks_count_the_unfused_loss_backward() -> None:
    # Table 2 (8B, FSDP x CP, 32K tokens per GPU, full checkpointing) prints about 84 GiB;
    # without the unfused cross entropy's backward tensors (and the FSDP root unit kept
    # gathered) the ledger says about 50 GiB.
    script = _script()
    ratios = [r.ratio for r in script.peak_rows() if r.run_id.startswith("torchtitan-t2")]
    assert len(ratios) == 4
    assert min(ratios) >= script.WORST_RATIO_FLOOR


def test_torchtitan_h200_float8_peaks_count_the_compiled_loss() -> None:
    # The Jun 2025 H200 note (torchtitan e7c0cae, --training.compile) prints 47.96 GiB on 32
    # GPUs: the compiled loss holds no fp32 logits-sized working set. Read with the Dec 2024
    # commit's eager loss instead, the ledger says about 1.34x.
    script = _script()
    row = _torchtitan_row_within_5_percent(script, "torchtitan-h200-8b-32gpu-float8", 47.96)
    eager = dict(row, location="llama3_h100_202412, " + row["location"])
    assert script.torchtitan_row(eager).ratio > 1.25


def test_torchtitan_unfused_loss_peaks_count_the_freed_logits_block() -> None:
    # Table 4 prints 71.9 GiB for the 70B FSDP32 x TP8 row and Table 3 67.0 GiB for the eager
    # 8B FSDP row on 128 GPUs: the reserved peak at the loss backward keeps the 16-bit
    # logits' freed block (3.9 GiB on both: 131,072 tokens x 16,032 vocabulary rows, or
    # 16,384 x 128,256), which the fp32 backward tensors cannot reuse.
    script = _script()
    rows = {r.run_id: r for r in script.peak_rows()}
    for run_id in ("torchtitan-t4-70b-256gpu-2d", "torchtitan-t3-8b-128gpu-fsdp",
                   "torchtitan-t1-8b-8gpu-fsdp"):
        assert 0.95 <= rows[run_id].ratio <= 1.05, run_id
    assert rows["torchtitan-t4-70b-256gpu-2d"].measured_bytes == int(71.9 * 2**30)


def test_the_zero_bubble_1f1b_peak_of_the_1_5b_model_is_reproduced() -> None:
    # Table 4 prints 30 GB for 1F1B on the 1.5B model (8 A100, micro-batch 6).
    script = _script()
    row = next(r for r in script.peak_rows() if r.run_id == "zerobubble-t4-1.5b-1f1b-m24")
    assert row.measured_bytes == 30 * 2**30
    assert 0.95 <= row.ratio <= 1.05


def test_the_zero_bubble_v_schedule_peak_of_the_28b_model_is_reproduced() -> None:
    # Table 6 (ZB-V version of the paper) prints 71 GB for ZB-V on the 28.3B model (32 A100,
    # micro-batch 2, 96 micro-batches): two one-layer chunks per rank in a V.
    script = _script()
    row = next(r for r in script.peak_rows() if r.run_id == "zerobubble-t6-28.3b-zb-v-b2-m96")
    assert row.measured_bytes == 71 * 2**30
    assert 0.95 <= row.ratio <= 1.05
    table6 = [r.ratio for r in script.peak_rows() if r.run_id.startswith("zerobubble-t6-")]
    assert min(table6) >= script.WORST_RATIO_FLOOR


def test_the_written_table_matches_the_script() -> None:
    script = _script()
    assert script.OUT.read_text() == script.table(script.peak_rows())


def test_the_default_margin_covers_the_worst_measured_peak() -> None:
    """The request's default safety margin is 1 - the ledger's lowest predicted / measured
    peak, rounded up at the fourth decimal: a plan within usable x (1 - margin) fits the
    usable memory even when its real peak is as far above the prediction as the worst row."""
    import math

    from api_schemas.requests import DEFAULT_MEMORY_MARGIN_FRAC
    from models.evidence.memory_margin import (
        MEASURED_PEAKS,
        WORST_PREDICTED_OVER_MEASURED,
        WORST_ROW,
    )

    rows = _script().peak_rows()
    worst = min(rows, key=lambda r: r.ratio)
    assert len(rows) == MEASURED_PEAKS and worst.run_id == WORST_ROW
    assert round(worst.ratio, 4) == WORST_PREDICTED_OVER_MEASURED
    assert DEFAULT_MEMORY_MARGIN_FRAC == math.ceil((1 - worst.ratio) * 1e4) / 1e4
    assert (1 - DEFAULT_MEMORY_MARGIN_FRAC) <= worst.ratio  # the worst row still fits
