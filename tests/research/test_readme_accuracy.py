"""The README's accuracy table is the validator's "as published" headline today
(`research/validate_published.py`: every row as printed, validation-only rows counted), so
the figures it states cannot drift from the model."""

import re
from pathlib import Path

import pytest

from research import validate_published as vp

README = Path(__file__).resolve().parents[2] / "README.md"
TABLE_ROW = re.compile(r"^\| ((?:overall|family|source)[^|]*?) \| (\d+) \| ([\d.]+)% \| "
                       r"([\d.]+)% \|$", re.MULTILINE)
HEADLINE = re.compile(r"^(\S.*?)\s+n=\s*(\d+) median \|error\|\s+([\d.]+)%\s+max\s+([\d.]+)%$")


@pytest.fixture(scope="module")
def headline() -> dict[str, tuple[int, float, float]]:
    rows = [r for r in vp.DATA["runs"] if not r["id"].startswith(vp.SKIP_SOURCES)]
    predictions = {}
    for row in rows:
        out = vp.predict(row, vp.AS_PUBLISHED_PROTOCOL)
        if out is not None:
            predictions[row["id"]] = out
    out: dict[str, tuple[int, float, float]] = {}
    for line in vp.headline(predictions):
        found = HEADLINE.match(line)
        assert found is not None, line
        out[found[1]] = (int(found[2]), float(found[3]), float(found[4]))
    return out


def test_every_quoted_figure_is_the_validators(
        headline: dict[str, tuple[int, float, float]]) -> None:
    quoted = TABLE_ROW.findall(README.read_text())
    assert quoted
    for label, n, median, largest in quoted:
        key = label.split(" (")[0]
        assert key in headline, label
        assert headline[key] == (int(n), pytest.approx(float(median), abs=0.051),
                                 pytest.approx(float(largest), abs=0.051)), label


def test_every_family_and_source_of_three_rows_or_more_is_quoted(
        headline: dict[str, tuple[int, float, float]]) -> None:
    quoted = {label.split(" (")[0] for label, *_ in TABLE_ROW.findall(README.read_text())}
    expected = {k for k, (n, _, _) in headline.items()
                if k == "overall" or (k.startswith(("family ", "source ")) and n >= 3)}
    assert quoted == expected
