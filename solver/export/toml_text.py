"""A small TOML writer for the configs the exporters produce.

Owns: rendering ordered tables of `key = value  # comment` lines (booleans, integers, floats,
strings, string lists and lists of string lists) as TOML 1.0 that `tomllib` reads back.
Must not: know any framework's keys. The standard library reads TOML but does not write it,
and these shapes are few enough not to warrant a dependency.
"""

import json
from dataclasses import dataclass

Value = bool | int | float | str | list[str] | list[list[str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One `key = value` line and its optional trailing comment."""

    key: str
    value: Value
    comment: str = ""


def render_toml(*, header: list[str], sections: dict[str, list[Entry]]) -> str:
    """TOML text: comment header, then one table per section in order."""
    assert not any("\n" in line for line in header), "a TOML comment is one line"
    lines = [f"# {line}" for line in header]
    for name, entries in sections.items():
        lines += ["", f"[{name}]"]
        for entry in entries:
            value = _toml_value(entry.value)
            assert "\n" not in entry.comment, "a TOML comment is one line"
            comment = f"  # {entry.comment}" if entry.comment else ""
            if "\n" in value:
                if comment:
                    lines.append(comment.strip())
                lines.append(f"{entry.key} = {value}")
            else:
                lines.append(f"{entry.key} = {value}{comment}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if any(isinstance(item, list) for item in value):
        rows = [f"  {_toml_value(item)}," for item in value]
        return "[\n" + "\n".join(rows) + "\n]"
    return "[" + ", ".join(_toml_string(str(item)) for item in value) + "]"


def _toml_string(text: str) -> str:
    """A TOML basic string. JSON's escapes are TOML's too (\\b \\t \\n \\f \\r \\" \\\\
    \\uXXXX); non-ASCII text stays literal so no surrogate pair is written, and DEL, which
    JSON leaves raw but TOML forbids, is escaped."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


__all__ = ["Entry", "Value", "render_toml"]
