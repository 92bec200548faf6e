"""What both stores can keep: text without NUL or lone surrogates, JSON without NaN or
infinities.

Owns: finding the first value of a request (or any JSON-like value) that SQLite would keep
but PostgreSQL would refuse (NUL in text, a UTF-16 surrogate that is not valid UTF-8, a
non-finite number in a JSON column), and refusing it as `invalid-request` naming its field,
before any session sees it. Must not: touch the database or change values.
"""

import math
import re

from api_schemas._base import field_path
from service.problems import LimitExceededError

_UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")
"""NUL (PostgreSQL text cannot hold it) and lone surrogates (not encodable as UTF-8)."""


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored as text on every backend, or None if it can."""
    found = _UNSTORABLE_TEXT.search(value)
    if found is None:
        return None
    char = found.group()
    what = "a NUL character (\\u0000)" if char == "\x00" else (
        f"a lone UTF-16 surrogate (\\u{ord(char):04x})")
    return (f"contains {what} at position {found.start()}, which the plan store cannot keep; "
            "remove it")


def first_unstorable(value: object, path: str = "") -> tuple[str, str] | None:
    """The first (field path, reason) of `value` that a store would refuse, or None.

    Walks dicts (keys and values), lists and tuples; paths are those of
    `api_schemas._base.field_path` ("constraints.forbid.tp.0").
    """
    if isinstance(value, str):
        reason = text_problem(value)
        return (path, reason) if reason is not None else None
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return (path, f"is {value}, but stored numbers must be finite; give a finite value")
    if isinstance(value, dict):
        for key, item in value.items():
            where = field_path(path, str(key))
            if isinstance(key, str):
                reason = text_problem(key)
                if reason is not None:
                    return (where, f"key {reason}")
            found = first_unstorable(item, where)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = first_unstorable(item, field_path(path, index))
            if found is not None:
                return found
    return None


def check_storable(value: object, *, field: str) -> None:
    """Refuse `value` (found at `field` of the body) if a store could not keep it.

    Raises:
        LimitExceededError: `invalid-request` naming the offending field.
    """
    found = first_unstorable(value, field)
    if found is not None:
        where, reason = found
        raise LimitExceededError(f"{where or 'body'}: {reason}", field=where or None)


__all__ = ["check_storable", "first_unstorable", "text_problem"]
