"""Duplicated code, counted by a test (target: duplicated blocks of six or more lines of the
same shape, below 80 pairs).

Scope: every Python file below api_schemas/, models/, solver/, service/, calibration/,
research/, benchmarks/ and tests/ (this file included).

The clone finder here reads each file as a list of lines (tokenize, stdlib only). It passes
over blank lines, comments, docstrings (a statement that is only a string), lines of lone
punctuation (`)`, `],`, `}):` ...), and every line of an import statement or of an `__all__`
export list (a module's names in and out, nothing to merge; when this rule came in it removed
6 pairs, each an export list or a schema's last fields beside one); white space is folded.
A line's *shape* is its tokens with every name (not a keyword), string (f-strings apart) and
number replaced by a placeholder, so two lines of the same shape differ at most by names and
values; two identical lines have the same shape too. A *run* is six consecutive kept lines.

Two places share a run when their lines have the same shapes, with two exceptions.
- A run made mostly (more than half) of thin lines, at most four tokens of names, values and
  `:`/`=`/`,`/`.` (`name: type`, `a = b`, `"key": "value",`), must be identical: renamed
  thin lines are a list of fields, not a repeated piece of logic.
- A run made only of *declarations* (class headers with their decorators, and annotated
  assignments directly in a class body: the fields of a dataclass, pydantic model or table)
  counts only where the names are the same (strings and numbers may differ; a declaration's
  lines of strings only, its description's continuation, pass over). The wire schemas are
  many records whose fields read alike, `name: type = Field(description=...)`; two records
  with other field names are different records, while the same fields declared twice are a
  copy to share (a base model or an `Annotated` type). When this rule came in, the count was
  173 pairs without it, 94 with it.

A run standing in more than `TOO_COMMON` places is too common to count (a folder-wide idiom),
and two places of one file whose runs overlap are one repeated line, not a copy. Two places
that share a run make their two files (or one file with itself) a *pair*; every run the same
two files share belongs to that one pair, so a pair is one thing to look at and merge.

`DUPLICATE_PAIRS_AT_MOST` pins today's count and only falls: a change that removes
duplication lowers it, a change that adds some fails here, and the failure lists the pairs
with their lines. The target is fewer than 80 pairs.
"""

import ast
import io
import keyword
import tokenize
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
SCOPE = ("api_schemas", "models", "solver", "service", "calibration", "research",
         "benchmarks", "tests")
RUN_LINES = 6
TOO_COMMON = 8
DUPLICATE_PAIRS_AT_MOST = 62

_PUNCTUATION = {"(", ")", "[", "]", "{", "}", ",", ":", ";"}
_PROSE = {"S", "F"}
_THIN = {"N", "S", "F", "0", ",", ":", "=", "."}
_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
            tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}
# Python 3.12 splits an f-string into pieces; each piece below stands for one string.
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


class Line(NamedTuple):
    """One kept line of a file: its number, its tokens, its shape and whether it declares."""

    number: int
    text: str
    shape: str
    named: str
    """Its tokens with strings and numbers as placeholders, names kept."""
    declarative: bool
    """Part of an annotated assignment in a class body (a field declaration)."""


def _thin(line: Line) -> bool:
    """A short line of names and values only (`name: type`, `a = b`, `"key": "value",`)."""
    parts = line.shape.split()
    return len(parts) <= 4 and all(part in _THIN for part in parts)


def _declared_lines(source: str) -> set[int]:
    """The line numbers of class statements' headers (decorators included) and of the
    annotated assignments directly in a class body."""
    found: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            first = min([node.lineno] + [each.lineno for each in node.decorator_list])
            found.update(range(first, node.body[0].lineno))
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign):
                    end = statement.end_lineno or statement.lineno
                    found.update(range(statement.lineno, end + 1))
    return found


def _placeholder(token: tokenize.TokenInfo) -> str:
    if token.type == tokenize.NAME:
        return token.string if keyword.iskeyword(token.string) else "N"
    if token.type == tokenize.NUMBER:
        return "0"
    if token.type == tokenize.STRING:
        return "F" if "f" in token.string.split(token.string[-1])[0].lower() else "S"
    return token.string


def kept_lines(source: str) -> list[Line]:
    """The lines of `source` that count, each with its shape (see the module docstring)."""
    shapes: dict[int, list[str]] = defaultdict(list)
    texts: dict[int, list[str]] = defaultdict(list)
    named: dict[int, list[str]] = defaultdict(list)
    statement: list[tokenize.TokenInfo] = []
    fstring_depth = 0

    def close_statement() -> None:
        first = statement[0] if statement else None
        is_interface = first is not None and first.type == tokenize.NAME and first.string in (
            "import", "from", "__all__")
        is_docstring = len(statement) == 1 and statement[0].type == tokenize.STRING
        if first is not None and not is_interface and not is_docstring:
            for token in statement:
                shapes[token.start[0]].append(_placeholder(token))
                texts[token.start[0]].append(token.string)
                named[token.start[0]].append(
                    token.string if token.type == tokenize.NAME else _placeholder(token))
        statement.clear()

    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if _FSTRING_START is not None and token.type == _FSTRING_START:
            if fstring_depth == 0:
                statement.append(token._replace(type=tokenize.STRING))
            fstring_depth += 1
            continue
        if fstring_depth:
            fstring_depth -= token.type == _FSTRING_END
            continue
        if token.type == tokenize.NEWLINE:
            close_statement()
        elif token.type not in _SKIPPED:
            statement.append(token)
    close_statement()
    declared = _declared_lines(source)
    return [Line(number, " ".join(texts[number]), " ".join(tokens), " ".join(named[number]),
                 number in declared)
            for number, tokens in sorted(shapes.items())
            if not all(token in _PUNCTUATION or (number in declared and token in _PROSE)
                       for token in tokens)]


class Pair(NamedTuple):
    """Two files (or one file twice) and the runs they share, as (start, start) indices."""

    first: str
    second: str
    runs: list[tuple[int, int]]


def _run_key(run: list[Line]) -> tuple[str, ...]:
    """A run's shapes; its names where it only declares fields; its texts where most of its
    lines are thin (those must be identical)."""
    if all(line.declarative for line in run):
        return ("declares",) + tuple(line.named for line in run)
    if 2 * sum(_thin(line) for line in run) > len(run):
        return ("=",) + tuple(line.text for line in run)
    return tuple(line.shape for line in run)


def find_pairs(files: dict[str, list[Line]]) -> list[Pair]:
    """Every pair of files sharing a run of `RUN_LINES` same-shape lines, most shared first."""
    places: dict[tuple[str, ...], list[tuple[str, int]]] = defaultdict(list)
    for name, lines in files.items():
        for start in range(len(lines) - RUN_LINES + 1):
            places[_run_key(lines[start:start + RUN_LINES])].append((name, start))
    shared: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for where in places.values():
        if not 2 <= len(where) <= TOO_COMMON:
            continue
        for index, (name_a, start_a) in enumerate(where):
            for name_b, start_b in where[index + 1:]:
                if name_a == name_b and start_b - start_a < RUN_LINES:
                    continue  # overlapping windows of one file: a repeated line, not a copy
                shared[(name_a, name_b)].append((start_a, start_b))
    pairs = [Pair(a, b, sorted(runs)) for (a, b), runs in shared.items()]
    return sorted(pairs, key=lambda pair: (-len(pair.runs), pair.first, pair.second))


def _merged(pair: Pair, files: dict[str, list[Line]]) -> Iterable[str]:
    """The pair's runs, overlapping and adjacent windows merged, as `a:10-24 ~ b:40-54`."""
    merged: list[list[int]] = []
    for start_a, start_b in pair.runs:
        last = merged[-1] if merged else None
        if last and start_a - last[0] == start_b - last[1] and start_a <= last[2] + 1:
            last[2] = start_a + RUN_LINES - 1
        else:
            merged.append([start_a, start_b, start_a + RUN_LINES - 1])
    lines_a, lines_b = files[pair.first], files[pair.second]
    for start_a, start_b, end_a in merged:
        end_b = start_b + end_a - start_a
        yield (f"{pair.first}:{lines_a[start_a].number}-{lines_a[end_a].number} ~ "
               f"{pair.second}:{lines_b[start_b].number}-{lines_b[end_b].number}")


def project_files() -> dict[str, list[Line]]:
    """The kept lines of every Python file in `SCOPE`, by path relative to the root."""
    files: dict[str, list[Line]] = {}
    for package in SCOPE:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                files[path.relative_to(ROOT).as_posix()] = kept_lines(
                    path.read_text(encoding="utf-8"))
    return files


def test_duplicated_blocks_stay_under_the_pinned_count() -> None:
    files = project_files()
    pairs = find_pairs(files)
    listing = "\n".join(f"{pair.first} ~ {pair.second}: " + "; ".join(_merged(pair, files))
                        for pair in pairs)
    assert len(pairs) <= DUPLICATE_PAIRS_AT_MOST, (
        f"{len(pairs)} pairs of files share runs of {RUN_LINES} same-shape lines "
        f"(at most {DUPLICATE_PAIRS_AT_MOST}); merge one of them:\n{listing}")


_PLANTED_A = '''\
import os
from pathlib import (
    Path,
)


def total(rows):
    # a comment the finder passes over
    kept = []
    for row in rows:
        if row.weight > 2:
            kept.append(row.value * 3)
    return sum(kept)


__all__ = [
    "total",
]
'''

_PLANTED_B = '''\
import sys


def weighted(items):
    picked = []

    for item in items:
        if item.size > 7:  # another comment
            picked.append(item.cost * 11)
    return sum(picked)
'''


def test_finder_pairs_a_planted_same_shape_block() -> None:
    files = {"a.py": kept_lines(_PLANTED_A), "b.py": kept_lines(_PLANTED_B)}
    assert [line.number for line in files["a.py"]] == [7, 9, 10, 11, 12, 13]
    assert [line.number for line in files["b.py"]] == [4, 5, 7, 8, 9, 10]
    pairs = find_pairs(files)
    assert [(pair.first, pair.second) for pair in pairs] == [("a.py", "b.py")]
    assert list(_merged(pairs[0], files)) == ["a.py:7-13 ~ b.py:4-10"]


def test_finder_ignores_a_block_of_another_shape_and_too_common_runs() -> None:
    other = _PLANTED_B.replace("item.size > 7", "item.size > 7 and item.open")
    assert find_pairs({"a.py": kept_lines(_PLANTED_A), "b.py": kept_lines(other)}) == []
    crowd = {f"m{index}.py": kept_lines(_PLANTED_A) for index in range(TOO_COMMON + 1)}
    assert find_pairs(crowd) == []
    assert len(find_pairs(dict(list(crowd.items())[:TOO_COMMON]))) == 28


def test_finder_pairs_renamed_thin_lines_only_when_identical() -> None:
    fields = "@dataclass(frozen=True)\nclass Row:\n" + "".join(
        f"    {name}: int\n" for name in "abcdef")
    renamed = fields.replace("Row", "Column").replace("a:", "g:").replace("b:", "h:")
    assert find_pairs({"a.py": kept_lines(fields), "b.py": kept_lines(renamed)}) == []
    assert len(find_pairs({"a.py": kept_lines(fields), "b.py": kept_lines(fields)})) == 1


def test_finder_pairs_declared_fields_only_under_the_same_names() -> None:
    described = "class Row(Base):\n" + "".join(
        f"    {name}: int = Field(ge=0, description='the {name}')\n" for name in "abcdef")
    renamed = described.replace("a:", "g:").replace("b:", "h:")
    assert find_pairs({"a.py": kept_lines(described), "b.py": kept_lines(renamed)}) == []
    reworded = described.replace("the ", "other ").replace("ge=0", "ge=1")
    assert len(find_pairs({"a.py": kept_lines(described), "b.py": kept_lines(reworded)})) == 1
    as_code = described.replace("class Row(Base):", "def row():").replace(": int", "")
    as_code_renamed = as_code.replace("a =", "g =").replace("b =", "h =")
    assert len(find_pairs({"a.py": kept_lines(as_code), "b.py": kept_lines(as_code_renamed)})) == 1


def test_finder_pairs_one_file_with_itself_only_where_runs_do_not_overlap() -> None:
    line = "total = scale(rows[0], weight=2) + offset\n"
    assert find_pairs({"a.py": kept_lines(line * (RUN_LINES + 1))}) == []
    pairs = find_pairs({"a.py": kept_lines(line * 2 * RUN_LINES)})
    assert [(pair.first, pair.second) for pair in pairs] == [("a.py", "a.py")]
