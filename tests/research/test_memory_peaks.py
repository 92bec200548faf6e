"""The ledger against every measured peak in the published-runs data (research table).

Loads `research/validate_memory.py` (a script, not a package) and checks the acceptance
bounds of its table: no measured peak under-counted by more than 5%, median within 15%.
"""

import importlib.util
import statistics
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "research" / "validate_memory.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("validate_memory", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_measured_peak_is_predicted_within_the_bounds() -> None:
    script = _script()
    rows = script.peak_rows()
    assert len(rows) == 48  # Zero Bubble Table 4: 4 models x 4 schedules x 3 batch sizes
    ratios = [row.ratio for row in rows]
    assert min(ratios) >= script.WORST_RATIO_FLOOR
    assert statistics.median(ratios) <= script.MEDIAN_RATIO_CEILING


def test_the_zero_bubble_1f1b_peak_of_the_1_5b_model_is_reproduced() -> None:
    # Table 4 prints 30 GB for 1F1B on the 1.5B model (8 A100, micro-batch 6).
    script = _script()
    row = next(r for r in script.peak_rows() if r.run_id == "zerobubble-t4-1.5b-1f1b-m24")
    assert row.measured_bytes == 30 * 2**30
    assert 0.95 <= row.ratio <= 1.05


def test_the_written_table_matches_the_script() -> None:
    script = _script()
    assert script.OUT.read_text() == script.table(script.peak_rows())
