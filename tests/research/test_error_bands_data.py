"""The packaged error table (models/data/published_errors.json) is what
research/error_bands.py generates now: every published row predicted by the current cost
model, with the split of research/validate_published.py. A change to the cost model or the
published rows without `python research/error_bands.py --write` fails here."""

import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "research"))
import error_bands  # noqa: E402 - the research folder is not a package
import validate_published  # noqa: E402

from models.evidence.error_bands import DATA_PATH  # noqa: E402


def test_committed_table_is_current() -> None:
    committed = json.loads(DATA_PATH.read_text(encoding="utf-8"))
    fresh = error_bands.table()
    problems = error_bands.stale_rows(fresh, committed)
    assert not problems, ("models/data/published_errors.json is stale; run "
                          "`python research/error_bands.py --write`:\n" + "\n".join(problems))
    # The split is validate_published's: fitted rows are never held out.
    for row in committed["rows"]:
        assert (row["split"] == "calibration") == (row["id"] in validate_published.FITTED)

    # The check can fail: a moved error, a lost row and a changed split are each caught.
    moved = copy.deepcopy(committed)
    moved["rows"][0]["step_time_error"] += 0.01
    moved["rows"][1]["split"] = "calibration" if moved["rows"][1]["split"] == "held_out" \
        else "held_out"
    del moved["rows"][2]
    found = error_bands.stale_rows(fresh, moved)
    assert len(found) == 3
